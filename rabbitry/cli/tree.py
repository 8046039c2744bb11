"""`rabbitry tree check FILE` and `rabbitry tree run FILE`: supervision-tree files.

check: load the file (importing every `start:` target), print the tree, exit 0; or print what is
wrong, naming the file and the key, and exit 2.

run: start the tree and keep it running in the foreground, logging to stderr, until SIGINT or
SIGTERM; then stop the root supervisor (children stop in reverse start order) and exit 0. If the
root fails to start, or ends by itself (it gave up after too many restarts), exit 1. A second
SIGINT/SIGTERM while stopping exits at once without waiting.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

from rabbitry.cli import HelpFormatter, add_log_level, configure_logging
from supervisors import ChildSpec, OsProcess, exit_reason
from supervisors.osprocess import default_name, run_dir
from supervisors.reasons import format_reason
from supervisors.tree import TreeConfigError, TreeSpec, format_tree, load_tree, start_tree

log = logging.getLogger("rabbitry.tree")

POLL_INTERVAL = 0.2
"""How often `tree run` checks that the root supervisor is still alive, in seconds."""

TREE_EPILOG = """\
examples:
  rabbitry tree check examples/hello-tree.yaml
  rabbitry tree run examples/hello-tree.yaml --log-level debug
  rabbitry tree run app-tree.toml --app-dir src     # start: targets live in ./src

The file format is described in docs/tree-files.md."""

CHECK_EPILOG = """\
examples:
  rabbitry tree check examples/hello-tree.yaml
  rabbitry tree check examples/os-tree.yaml

exit codes: 0 the file is valid, 2 it is not (the reason is printed on stderr), e.g.
  app-tree.yaml: supervisor.children[2].restart: expected one of permanent, transient,
  temporary; got 'sometimes' (line 14)"""

RUN_EPILOG = """\
examples:
  rabbitry tree run examples/hello-tree.yaml
  rabbitry tree run examples/os-tree.yaml --log-level debug

Ctrl-C (SIGINT) or SIGTERM stops the tree: children stop in reverse start order, each within
its shutdown time. A second signal exits at once.

exit codes: 0 stopped by a signal, 1 the root failed to start or ended by itself (for example
it exceeded its restart intensity), 2 bad file"""


class _ForcedExit(BaseException):
    """A second stop signal arrived while the tree was stopping."""


def register(commands: Any) -> None:
    """Add `tree check` and `tree run` to the `rabbitry` command's subparsers."""
    tree = commands.add_parser(
        "tree",
        help="check or run a supervision-tree file (YAML or TOML)",
        description="Check or run a supervision tree declared in a YAML or TOML file.",
        epilog=TREE_EPILOG,
        formatter_class=HelpFormatter,
    )
    tree.set_defaults(help_parser=tree)
    sub = tree.add_subparsers(title="tree commands", metavar="COMMAND")

    check = sub.add_parser(
        "check",
        help="validate a tree file and print the tree",
        description="Load a tree file and check everything `tree run` would, short of "
        "starting the children: every start: target is imported and its args and kwargs "
        "checked against its __init__, every command: program is looked up on PATH, and "
        "every cwd must exist. Then print the tree. Nothing is started.",
        epilog=CHECK_EPILOG,
        formatter_class=HelpFormatter,
    )
    _add_common(check)
    check.set_defaults(handler=check_command, help_parser=check)

    run = sub.add_parser(
        "run",
        help="run a tree in the foreground until Ctrl-C",
        description="Start the tree's root supervisor and keep it running, logging to stderr "
        "(including the supervisors' crash and restart reports), until SIGINT or SIGTERM.",
        epilog=RUN_EPILOG,
        formatter_class=HelpFormatter,
    )
    _add_common(run)
    add_log_level(run)
    run.set_defaults(handler=run_command, help_parser=run)


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="the tree file (.yaml, .yml or .toml)")
    parser.add_argument(
        "--app-dir",
        metavar="DIR",
        default=".",
        help="directory put first on the Python path, so start: targets can be imported from it",
    )


def _use_app_dir(app_dir: str) -> None:
    path = os.path.abspath(app_dir)
    if path not in sys.path:
        sys.path.insert(0, path)


def _load(args: argparse.Namespace) -> TreeSpec | None:
    _use_app_dir(args.app_dir)
    try:
        return load_tree(args.file, check_files=True)
    except TreeConfigError as exc:
        print(exc, file=sys.stderr)
        return None


def check_command(args: argparse.Namespace) -> int:
    """`rabbitry tree check FILE`."""
    spec = _load(args)
    if spec is None:
        return 2
    print(format_tree(spec))
    supervisors, workers = _count(spec.children)
    nested = _plural(supervisors, "nested supervisor")
    print(f"\n{args.file}: ok (1 root supervisor, {nested}, {_plural(workers, 'worker')})")
    return 0


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _count(children: list[ChildSpec]) -> tuple[int, int]:
    supervisors = workers = 0
    for spec in children:
        if spec.type == "supervisor":
            supervisors += 1
        else:
            workers += 1
        args: tuple[Any, ...] = spec.start[1] if isinstance(spec.start, tuple) else ()
        if len(args) == 2 and isinstance(args[1], list):
            nested = _count(args[1])
            supervisors += nested[0]
            workers += nested[1]
    return supervisors, workers


def run_command(args: argparse.Namespace) -> int:
    """`rabbitry tree run FILE`."""
    configure_logging(args.log_level)
    spec = _load(args)
    if spec is None:
        return 2
    return _Foreground(spec, args.file).run()


class _Foreground:
    """Runs one tree until a stop signal, or until its root ends by itself."""

    def __init__(self, spec: TreeSpec, file: str) -> None:
        self.spec = spec
        self.file = file
        self.stop = threading.Event()
        self.signal_name: str | None = None

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.stop.is_set():
            raise _ForcedExit(name)
        self.signal_name = name
        self.stop.set()

    def run(self) -> int:
        previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, self._on_signal)
        try:
            return self._run()
        except _ForcedExit as exc:
            log.error("%s received again: exiting without waiting for the tree to stop", exc)
            return 1
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _run(self) -> int:
        tree_id = self.spec.id
        log.info("starting tree %r from %s", tree_id, self.file)
        try:
            ref = start_tree(self.spec)
        except Exception as exc:
            print(
                f"rabbitry tree run: {self.file}: the root supervisor {tree_id!r} failed to "
                f"start: {format_reason(exc)}",
                file=sys.stderr,
            )
            return 1
        if ref is None:
            print(
                f"rabbitry tree run: the root supervisor {tree_id!r} declined to start",
                file=sys.stderr,
            )
            return 1
        try:
            running = [str(info.id) for info in ref.proxy().which_children().get()]
        except Exception:  # it has already given up; the loop below says so
            pass
        else:
            log.info(
                "tree %r started with children %s; press Ctrl-C to stop",
                tree_id,
                ", ".join(running) or "(none)",
            )
        for child_path, log_file in os_log_files(self.spec.children):
            log.info("%s: its output (stdout and stderr) goes to %s", child_path, log_file)
        while not self.stop.is_set():
            if ref.actor_stopped.wait(POLL_INTERVAL) and not self.stop.is_set():
                reason = format_reason(exit_reason(ref))
                print(
                    f"rabbitry tree run: {self.file}: the root supervisor {tree_id!r} ended "
                    f"(reason: {reason}); see the reports above",
                    file=sys.stderr,
                )
                return 1
        log.info(
            "%s received: stopping tree %r (children stop in reverse start order)",
            self.signal_name,
            tree_id,
        )
        # Not a blocking stop(): a second signal may be delivered to any thread, and a main
        # thread blocked on a lock without a timeout would never run its handler (a stop
        # that hangs could then not be cut short). A timed wait wakes it to run the handler.
        ref.stop(block=False)
        while not ref.actor_stopped.wait(POLL_INTERVAL):
            pass
        log.info("tree %r stopped", tree_id)
        return 0


def os_log_files(children: list[ChildSpec], prefix: str = "") -> list[tuple[str, str]]:
    """(child path, log file) of every OS command child, nested ones too: `tree run` says
    where their output goes, since it is not on the terminal."""
    found = []
    for spec in children:
        path = f"{prefix}{spec.id}"
        start = spec.start
        if not isinstance(start, tuple) or len(start) != 3:
            continue
        cls, args, kwargs = start
        if isinstance(cls, type) and issubclass(cls, OsProcess):
            log_file = kwargs.get("log_file")
            if log_file is None:
                name = kwargs.get("name") or default_name(args[0])
                log_file = os.path.join(kwargs.get("run_dir") or run_dir(), f"{name}.log")
            found.append((path, os.path.abspath(log_file)))
        elif len(args) == 2 and isinstance(args[1], list):  # a nested supervisor
            found += os_log_files(args[1], f"{path}.")
    return found
