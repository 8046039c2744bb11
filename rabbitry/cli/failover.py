"""`rabbitry failover server|client start` and `rabbitry failover status`.

Each `start` runs one supervised process (the RCS or an RCC) in the foreground until SIGINT or
SIGTERM, under a one_for_one supervisor that restarts it after a crash, and prints one line
`READY ...` once it runs. Every option can also come from a YAML file (`--config-file`), as
Beetle's configuration does; options on the command line win.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from rabbitry.cli import HelpFormatter, add_log_level, configure_logging

DEFAULT_BUS = "amqp://guest:guest@127.0.0.1:5672/%2F"  # Beetle's system queue is AMQP
DEFAULT_HTTP = "127.0.0.1:9650"  # Beetle's Go configuration server port

SERVER_EPILOG = """\
example:
  rabbitry failover server start --redis-servers 127.0.0.1:6379,127.0.0.1:6380 \\
      --client-ids rcc-1,rcc-2 --bus redis://127.0.0.1:6379/0 --master-file ./rcs-master

config file (--config-file), the same names with underscores:
  redis_servers: [127.0.0.1:6379, 127.0.0.1:6380]
  client_ids: [rcc-1, rcc-2]
  bus: amqp://guest:guest@127.0.0.1:5672/%2F
  master_retries: 3
  master_retry_interval: 1.0

exit codes: 0 stopped by a signal, 1 failed, 2 bad usage or config"""

CLIENT_EPILOG = """\
example:
  rabbitry failover client start --client-id rcc-1 --master-file /etc/rabbitry/redis-master \\
      --bus redis://127.0.0.1:6379/0

exit codes: 0 stopped by a signal, 1 failed, 2 bad usage or config"""


def _role_start(
    sub: Any, role: str, role_help: str, *, start_help: str, description: str, epilog: str
) -> argparse.ArgumentParser:
    """`failover <role>` (usage when given alone) and its `start`, with the options every
    role takes; the caller adds the role's own options to the parser returned."""
    parser = sub.add_parser(role, help=role_help)
    role_sub = parser.add_subparsers(dest=f"{role}_command", metavar="COMMAND")
    parser.set_defaults(handler=lambda args: _usage(parser), help_parser=parser)
    start = role_sub.add_parser(
        "start",
        help=start_help,
        description=description,
        epilog=epilog,
        formatter_class=HelpFormatter,
    )
    _common(start)
    return start


def register(commands: Any) -> None:
    """Add `failover` to the `rabbitry` command's subparsers."""
    group = commands.add_parser(
        "failover",
        help="Beetle-style Redis failover: the configuration server and clients",
        description="Run the Redis configuration server (RCS) or a client (RCC), or show the "
        "server's status. See docs/failover.md.",
        formatter_class=HelpFormatter,
    )
    sub = group.add_subparsers(dest="failover_command", metavar="COMMAND")
    group.set_defaults(handler=lambda args: _usage(group), help_parser=group)

    start = _role_start(
        sub,
        "server",
        "the configuration server (RCS)",
        start_help="run the RCS in the foreground",
        description="Watch the Redis master; when it is down, and every client agrees, "
        "promote the best replica and tell every client.",
        epilog=SERVER_EPILOG,
    )
    start.add_argument("--redis-servers", help="the set's servers: host:port,host:port (>= 2)")
    start.add_argument("--client-ids", help="every RCC id: rcc-1,rcc-2 (empty: switch at once)")
    start.add_argument("--master-retries", type=int, help="failed checks before a switch (3)")
    start.add_argument(
        "--master-retry-interval", type=float, help="seconds between checks of the master (1)"
    )
    start.add_argument("--client-timeout", type=float, help="seconds to wait for answers (2)")
    start.add_argument("--master-file", help="where the RCS records the master (optional)")
    start.add_argument("--http", help=f"status page address (default {DEFAULT_HTTP}; '' none)")
    start.add_argument(
        "--http-token-file",
        help="a file (mode 0600) holding the token that POST /initiate_master_switch must "
        "send as `Authorization: Bearer TOKEN`; without it the page cannot switch",
    )
    start.set_defaults(handler=server_start, help_parser=start)

    cstart = _role_start(
        sub,
        "client",
        "a configuration client (RCC)",
        start_help="run an RCC in the foreground",
        description="Keep this host's master file in line with the RCS, and take part in its "
        "switches.",
        epilog=CLIENT_EPILOG,
    )
    cstart.add_argument("--client-id", help="this client's id, one of the RCS's --client-ids")
    cstart.add_argument("--master-file", help="the master file FailoverRedis reads on this host")
    cstart.add_argument(
        "--multi-set",
        action="store_true",
        default=None,
        help="the master file is shared by several failover sets: keep one system/host:port "
        "line per set",
    )
    cstart.set_defaults(handler=client_start, help_parser=cstart)

    status = sub.add_parser(
        "status",
        help="print the RCS's status",
        description="Read the RCS's status page (GET /.json) and print it.",
        formatter_class=HelpFormatter,
    )
    status.add_argument(
        "--http",
        default=DEFAULT_HTTP,
        help="the RCS's status page address ([https://]host:port; https:// when the RCS has tls)",
    )
    status.add_argument(
        "--cacert", metavar="FILE", help="the CA file to check an HTTPS status page with"
    )
    status.add_argument("--json", action="store_true", help="print the JSON object")
    status.set_defaults(handler=status_command, help_parser=status)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config-file", help="YAML file with any of these options")
    parser.add_argument(
        "--bus", help=f"the system queue's bus URL (default {DEFAULT_BUS.replace('%', '%%')})"
    )
    parser.add_argument("--system", help="the failover set's name (default: system)")
    parser.add_argument("--exchange", help="bus namespace (default: rabbitry)")
    add_log_level(parser)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


class _Usage(Exception):
    pass


def _options(args: argparse.Namespace, names: tuple[str, ...]) -> dict[str, Any]:
    """The options from --config-file, overridden by those given on the command line."""
    options: dict[str, Any] = {}
    if args.config_file:
        try:
            data = yaml.safe_load(Path(args.config_file).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise _Usage(f"--config-file {args.config_file}: {exc}") from None
        if not isinstance(data, dict):
            raise _Usage(f"--config-file {args.config_file}: expected a mapping of options")
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise _Usage(
                f"--config-file {args.config_file}: unknown option(s) {', '.join(unknown)}; "
                f"known: {', '.join(names)}"
            )
        options.update(data)
    for name in names:
        value = getattr(args, name, None)
        if value is not None:
            options[name] = value
    return options


_TYPES: dict[str, type] = {
    "master_retries": int,
    "master_retry_interval": float,
    "client_timeout": float,
}


def _typed(options: dict[str, Any]) -> dict[str, Any]:
    """Config-file values checked as the command line's are (argparse's type=...)."""
    for key, kind in _TYPES.items():
        if key in options:
            value = options[key]
            ok = isinstance(value, kind) or (kind is float and isinstance(value, int))
            if isinstance(value, bool) or not ok:
                raise _Usage(
                    f"{key}: expected {'an integer' if kind is int else 'a number'}, got {value!r}"
                )
    for key in ("bus", "system", "exchange", "client_id", "master_file", "http"):
        if key in options and not isinstance(options[key], str):
            raise _Usage(f"{key}: expected a string, got {options[key]!r}")
    if "bus" in options:
        from monitors.bus.urls import parse_bus_url

        parse_bus_url(options["bus"])  # ValueError names the URL and the accepted forms
    http = options.get("http")
    if http:
        _host, sep, port = http.rpartition(":")
        if not sep or not port.isdigit() or int(port) > 65535:
            raise _Usage(f"--http: expected host:port (port 0 for any), got {http!r}")
    return options


def _token_file(path: Any) -> str | None:
    """The status page's switch token, from a file only its owner can read."""
    if path is None:
        return None
    import stat
    from pathlib import Path

    file = Path(str(path))
    try:
        mode = stat.S_IMODE(file.stat().st_mode)
        token = file.read_text().strip()
    except OSError as exc:
        raise _Usage(f"--http-token-file: cannot read {file}: {exc.strerror or exc}") from None
    if mode & 0o077:
        raise _Usage(f"--http-token-file: {file} has mode {mode:04o}; run `chmod 600 {file}`")
    if len(token) < 16:
        raise _Usage(f"--http-token-file: {file} holds fewer than 16 characters")
    return token


def _list(value: Any, what: str) -> list[str]:
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return value
    raise _Usage(f"{what}: expected a comma-separated list or a YAML list, got {value!r}")


SERVER_OPTIONS = (
    "bus",
    "system",
    "exchange",
    "redis_servers",
    "client_ids",
    "master_retries",
    "master_retry_interval",
    "client_timeout",
    "master_file",
    "http",
    "http_token_file",
)
CLIENT_OPTIONS = ("bus", "system", "exchange", "client_id", "master_file", "multi_set")


def server_start(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    from failover import ConfigurationServer

    try:
        o = _typed(_options(args, SERVER_OPTIONS))
        if "redis_servers" not in o:
            raise _Usage("--redis-servers is required (host:port,host:port)")
        core: dict[str, Any] = {
            k: o[k] for k in ("master_retries", "master_retry_interval", "client_timeout") if k in o
        }
        spec = (
            ConfigurationServer,
            (
                o.get("bus", DEFAULT_BUS),
                o.get("system", "system"),
                _list(o["redis_servers"], "--redis-servers"),
                _list(o.get("client_ids", ""), "--client-ids"),
            ),
            {
                "master_file": o.get("master_file"),
                "http": o.get("http", DEFAULT_HTTP) or None,
                "http_token": _token_file(o.get("http_token_file")),
                "exchange": o.get("exchange", "rabbitry"),
                **core,
            },
        )
        # the core checks the configuration as the process is built: do it here first
        ConfigurationServer(*spec[1], **{**spec[2], "http": None})
    except (_Usage, ValueError) as exc:
        print(f"rabbitry failover server start: {exc}", file=sys.stderr)
        return 2
    return _run(spec, "rabbitry failover server start", _server_ready)


def _server_ready(ref: Any) -> str:
    address = ref.proxy().http_address().get(timeout=10)
    return f"READY rcs http={address[0]}:{address[1]}" if address else "READY rcs http=-"


def client_start(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    from failover import ConfigurationClient

    try:
        o = _typed(_options(args, CLIENT_OPTIONS))
        for key, flag in (("client_id", "--client-id"), ("master_file", "--master-file")):
            if key not in o:
                raise _Usage(f"{flag} is required")
        spec = (
            ConfigurationClient,
            (
                o.get("bus", DEFAULT_BUS),
                o.get("system", "system"),
                o["client_id"],
                o["master_file"],
            ),
            {"exchange": o.get("exchange", "rabbitry"), "multi_set": bool(o.get("multi_set"))},
        )
        ConfigurationClient(*spec[1], **spec[2])
    except (_Usage, ValueError) as exc:
        print(f"rabbitry failover client start: {exc}", file=sys.stderr)
        return 2
    return _run(spec, "rabbitry failover client start", lambda ref: f"READY rcc {o['client_id']}")


def _run(spec: tuple[Any, tuple, dict], name: str, ready: Any) -> int:
    """Run the process under a one_for_one supervisor until a signal."""
    from supervisors import ChildSpec, StartChildError, Supervisor, SupFlags

    stop = threading.Event()

    def on_signal(_signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        root = Supervisor.start(
            SupFlags("one_for_one", intensity=5, period=30.0),
            [ChildSpec("failover", spec, shutdown=10.0)],
            name=name,
        )
    except StartChildError as exc:
        print(f"{name}: failed to start: {exc}", file=sys.stderr)
        return 1
    child = root.proxy().which_children().get(timeout=10)[0].ref
    print(ready(child), flush=True)
    while not stop.wait(0.5):
        if not root.is_alive():
            print(f"{name}: its supervisor gave up", file=sys.stderr)
            return 1
    root.stop()
    return 0


def status_command(args: argparse.Namespace) -> int:
    address = args.http
    https = address.startswith("https://") or (args.cacert and "://" not in address)
    address = address.split("://", 1)[-1].rstrip("/")
    url = f"{'https' if https else 'http'}://{address}/.json"
    context = None
    if https:
        from monitors.tls import https_client_context

        context = https_client_context(args.cacert)
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as response:
            status = json.loads(response.read())
    except (OSError, urllib.error.URLError, ValueError) as exc:
        print(
            f"rabbitry failover status: cannot read {url}: {exc} (is the RCS running with "
            f"--http {args.http}?)",
            file=sys.stderr,
        )
        return 1
    if args.json:
        print(json.dumps(status, indent=2, sort_keys=True))
    else:
        from failover.http_status import format_text

        print(format_text(status), end="")
    return 0
