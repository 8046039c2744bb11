"""The `rabbitry` command: assembles the subcommands and runs the one asked for.

Each group of subcommands lives in its own module (`rabbitry.cli.tree` for `rabbitry tree ...`)
with a `register(commands)` function that adds its parser to the `commands` subparsers and sets
`handler` (a function taking the parsed args and returning an exit code) on each leaf parser.
To add a group, write such a module and list it in COMMAND_MODULES.

Exit codes: 0 success, 1 failure at run time, 2 bad usage or bad config file, 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from typing import Any

COMMAND_MODULES: tuple[str, ...] = (
    "rabbitry.cli.tree",
    "rabbitry.cli.node",
    "rabbitry.cli.cluster",
    "rabbitry.cli.faultproxy",
    "rabbitry.cli.failover",
    "rabbitry.cli.pipeline",
    "rabbitry.cli.demo",
    "rabbitry.cli.tls",
    "rabbitry.cli.swarm",
)

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMAT = "%(asctime)s.%(msecs)03d %(levelname)-7s %(name)s: %(message)s"
LOG_DATEFMT = "%H:%M:%S"
REPORT_LOGGER = "supervisors.report"

DESCRIPTION = """\
rabbitry: Erlang/OTP-style supervision trees of Python actors and OS processes, declared in
YAML or TOML files, and cluster nodes that watch each other as RabbitMQ's do."""

EPILOG = """\
examples:
  rabbitry tree check examples/hello-tree.yaml   validate a tree file and print the tree
  rabbitry tree run examples/hello-tree.yaml     run a tree in the foreground until Ctrl-C
  rabbitry tree --help                           the tree commands
  rabbitry tree run --help                       the options of one command
  rabbitry node start --config examples/cluster/a.yaml   run a cluster node
  rabbitry cluster status --config examples/cluster/a.yaml   ask a running node
  rabbitry tls gen --out ./tls a@127.0.0.1 b@127.0.0.1   certificates for TLS between nodes

exit codes: 0 ok, 1 failed while running, 2 bad usage or bad config file, 130 interrupted"""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the line breaks of descriptions and epilogs (for the examples) and shows defaults."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (
            "%(default)" not in text
            and action.default not in (None, False, argparse.SUPPRESS)
            and action.option_strings
        ):
            text += " (default: %(default)s)"
        return text


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("rabbitry")
    except Exception:  # not installed: running from a checkout
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """The full `rabbitry` parser with every registered command group."""
    parser = argparse.ArgumentParser(
        prog="rabbitry", description=DESCRIPTION, epilog=EPILOG, formatter_class=HelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    parser.set_defaults(handler=None, help_parser=parser)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `rabbitry` with `argv` (default: sys.argv[1:]) and return the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors
        return _exit_code(exc.code)
    if args.handler is None:  # a command group without its subcommand, or nothing at all
        args.help_parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        print("rabbitry: interrupted", file=sys.stderr)
        return 130


def _exit_code(code: Any) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


# --------------------------------------------------------------------- shared by commands


def add_log_level(parser: argparse.ArgumentParser, default: str = "info") -> None:
    """Add `--log-level` to a command that logs."""
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default=default,
        type=str.lower,
        metavar="LEVEL",
        help=f"least important messages shown: {', '.join(LOG_LEVELS)}",
    )


class LogFormatter(logging.Formatter):
    """One line per record: time, level, logger, message.

    Supervisor reports (logger "supervisors.report", the report dict in `record.report`) are
    shown as `report <event> key=value ...`, in the manner of SASL's reports, so a crash, a
    restart or a supervisor giving up stands out from ordinary log lines.
    """

    def __init__(self) -> None:
        super().__init__(LOG_FORMAT, LOG_DATEFMT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        report = getattr(record, "report", None)
        if record.name == REPORT_LOGGER and isinstance(report, dict):
            saved = record.name
            record.name = "report"
            try:
                return super().formatMessage(record)
            finally:
                record.name = saved
        return super().formatMessage(record)


def configure_logging(level: str) -> None:
    """Send every log record at `level` or above to stderr in the readable format."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # pykka narrates every actor start and stop at DEBUG; keep that for --log-level debug only.
    logging.getLogger("pykka").setLevel(logging.DEBUG if level == "debug" else logging.WARNING)
