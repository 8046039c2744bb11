"""`rabbitry cluster status|join|leave|forget|ui`: talk to a running node's control API."""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
import time
from pathlib import Path
from typing import Any

from rabbitry.cli import HelpFormatter
from rabbitry.control import STATUS_KEYS, ControlClient, ControlError

CLUSTER_EPILOG = """\
examples:
  rabbitry cluster status --control 127.0.0.1:7101 --cookie-file ./cookie
  rabbitry cluster status --control 127.0.0.1:7101 --cookie-file ./cookie --json
  rabbitry cluster join b@127.0.0.1 127.0.0.1:7002 --control 127.0.0.1:7101 --cookie-file ./cookie
  rabbitry cluster forget c@127.0.0.1 --control 127.0.0.1:7101 --cookie-file ./cookie
  rabbitry cluster ui --control 127.0.0.1:7101 --cookie-file ./cookie

  rabbitry cluster status --control https://node1.example:7101 --cacert ./tls/ca.pem

--control is the node's `control:` address; the token is derived from the cluster cookie, so
--cookie-file must name the node's cookie file (mode 0600). Without it, $RABBITRY_COOKIE_FILE
is used, else ./cookie. A node with `tls:` serves HTTPS: give --cacert (the cluster's CA file,
the nodes' `tls.cafile`; default $RABBITRY_CACERT), which implies https://."""


def register(commands: Any) -> None:
    """Add `cluster status|join|leave|forget` to the `rabbitry` command's subparsers."""
    cluster = commands.add_parser(
        "cluster",
        help="show or change a running node's cluster (status, join, leave, forget)",
        description="Ask a running node, through its control API, for its cluster status or "
        "to change the cluster's membership. Membership changes are persisted in the node's "
        "cluster_nodes.config and win over the config file from then on.",
        epilog=CLUSTER_EPILOG,
        formatter_class=HelpFormatter,
    )
    cluster.set_defaults(help_parser=cluster)
    sub = cluster.add_subparsers(title="cluster commands", metavar="COMMAND")

    status = sub.add_parser(
        "status",
        help="print the node name, all, disc and running nodes (core members), partitions, "
        "paused, alarms and the ephemeral members that are up",
        formatter_class=HelpFormatter,
    )
    _add_target(status)
    status.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object with the keys " + ", ".join(STATUS_KEYS),
    )
    status.set_defaults(handler=status_command, help_parser=status)

    join = sub.add_parser(
        "join",
        help="join the cluster of NODE, reached at ADDRESS (an ephemeral node attaches to "
        "it instead: it never becomes a member)",
        formatter_class=HelpFormatter,
    )
    join.add_argument("node", help="a member of the cluster to join, such as b@127.0.0.1")
    join.add_argument("address", help="how this node reaches it, host:port of its dist listener")
    _add_target(join)
    join.set_defaults(handler=lambda a: _action(a, lambda c: c.join(a.node, a.address)))

    leave = sub.add_parser(
        "leave",
        help="leave the cluster (the node becomes a cluster of one)",
        formatter_class=HelpFormatter,
    )
    _add_target(leave)
    leave.set_defaults(handler=lambda a: _action(a, lambda c: c.leave()))

    forget = sub.add_parser(
        "forget",
        help="remove NODE (which must be down) from the membership",
        formatter_class=HelpFormatter,
    )
    forget.add_argument("node", help="the member to forget, such as c@127.0.0.1")
    _add_target(forget)
    forget.set_defaults(handler=lambda a: _action(a, lambda c: c.forget(a.node)))

    ui = sub.add_parser(
        "ui",
        help="print a one-time login URL for the node's management page (and open a browser)",
        description="Ask the node for a one-time login token and print the URL of its "
        "management page (/ui/) with it, as Jupyter does. The link works once, within --ttl "
        "seconds; the browser then keeps a session cookie and the address bar shows no "
        "secret. A browser is opened where there is a display, unless --no-browser.",
        epilog="example:\n  rabbitry cluster ui --control 127.0.0.1:7101 --cookie-file ./cookie"
        "\n\nThe page is described in docs/ui.md.",
        formatter_class=HelpFormatter,
    )
    _add_target(ui)
    ui.add_argument(
        "--ttl", type=float, default=60.0, help="seconds the login link stays valid (at most 600)"
    )
    ui.add_argument("--no-browser", action="store_true", help="only print the URL")
    ui.set_defaults(handler=ui_command, help_parser=ui)


def _add_target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--control",
        required=True,
        metavar="[https://]HOST:PORT",
        help="the node's control API address (https:// for a node with `tls:`)",
    )
    parser.add_argument(
        "--cacert",
        metavar="FILE",
        help="the cluster's CA file, to check the node's certificate over HTTPS; "
        "default: $RABBITRY_CACERT",
    )
    parser.add_argument(
        "--cookie-file",
        metavar="FILE",
        help="the cluster cookie file (mode 0600); default: $RABBITRY_COOKIE_FILE, else ./cookie",
    )
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the node")
    parser.set_defaults(help_parser=parser)


def _client(args: argparse.Namespace) -> ControlClient:
    scheme, sep, address = args.control.partition("://")
    if not sep:
        scheme, address = "", args.control
    host, sep, port = address.rstrip("/").rpartition(":")
    if scheme not in ("", "http", "https") or not sep or not port.isdigit():
        raise _UsageError(
            f"--control must be [https://]HOST:PORT, such as 127.0.0.1:7101; got {args.control!r}"
        )
    cacert = args.cacert or os.environ.get("RABBITRY_CACERT") or None
    if scheme == "http" and args.cacert:
        raise _UsageError("--cacert is for HTTPS; drop it, or write https:// in --control")
    if cacert is not None and not os.access(cacert, os.R_OK):
        raise _UsageError(f"cannot read the CA file {cacert} (--cacert)")
    https = scheme == "https" or (scheme == "" and cacert is not None)
    path = Path(args.cookie_file or os.environ.get("RABBITRY_COOKIE_FILE") or "cookie")
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
        cookie = path.read_text().strip().encode()
    except OSError as exc:
        raise _UsageError(f"cannot read the cookie file {path}: {exc.strerror or exc}") from None
    if mode & 0o077:
        raise _UsageError(
            f"the cookie file {path} has mode {mode:04o}; anyone who can read it can control "
            f"the cluster: run `chmod 600 {path}`"
        )
    if not cookie:
        raise _UsageError(f"the cookie file {path} is empty")
    return ControlClient(
        host.strip("[]"),
        int(port),
        cookie,
        timeout=args.timeout,
        cafile=cacert if https else None,
        https=https,
    )


class _UsageError(Exception):
    pass


def status_command(args: argparse.Namespace) -> int:
    try:
        client = _client(args)
        status = client.status()
    except _UsageError as exc:
        print(f"rabbitry cluster status: {exc}", file=sys.stderr)
        return 2
    except ControlError as exc:
        print(f"rabbitry cluster status: {exc}", file=sys.stderr)
        return 1
    if args.json:  # exactly the keys of DESIGN.md; the gossip state is GET /gossip
        print(json.dumps({key: status.get(key) for key in STATUS_KEYS}))
        return 0
    print(format_status(status))
    try:
        modes = client.partition_modes()
    except ControlError:
        modes = {}  # a node older than GET /cluster/modes, or an ephemeral one: nothing to say
    if modes.get("differ"):
        print(format_modes(modes["modes"]))
    try:
        app = client.app()
    except ControlError as exc:
        if exc.status != 404:  # 404: a node older than GET /app
            print(f"  application    unavailable: {exc}")
    else:
        print(format_app(app))
    try:
        gossip = client.gossip()
    except ControlError as exc:
        if exc.status != 409:  # 409: no bus configured, nothing to show
            print(f"  gossip         unavailable: {exc}")
    else:
        print(format_gossip(gossip))
    try:
        store = client.mnesia_status()
    except ControlError as exc:
        if exc.status != 409:  # 409: no `mnesia:` configured
            print(f"  mnesia         unavailable: {exc}")
    else:
        print(format_mnesia(store))
    return 0


def format_modes(modes: dict[str, Any]) -> str:
    """The warning of `rabbitry cluster status` when core members run different partition
    handling (as RabbitMQ warns of a differing net_ticktime)."""
    lines = ["  WARNING        core members run different partition_handling; they must agree:"]
    lines += [f"    {node:<20} {json.dumps(mode)}" for node, mode in sorted(modes.items())]
    return "\n".join(lines)


def format_mnesia(store: dict[str, Any]) -> str:
    """The store lines of `rabbitry cluster status`: running db nodes, each table's copies."""
    lines = [f"  running db     {', '.join(store.get('running_db_nodes') or []) or '-'}"]
    for name, table in sorted((store.get("tables") or {}).items()):
        active = set(table.get("active") or [])
        copies = [n if n in active else f"{n} (inactive)" for n in table.get("all") or []]
        lines.append(f"  table {name:<8} {', '.join(copies) or '-'}")
    return "\n".join(lines)


def format_app(app: dict[str, Any]) -> str:
    """The application line of `rabbitry cluster status`: its state, and why it last failed
    to start while it is not running (a node that is up but not running says why)."""
    line = f"  application    {app.get('state')}"
    error = app.get("last_error")
    if error and app.get("state") != "running":
        when = time.strftime("%H:%M:%S", time.localtime(error.get("at", 0)))
        line += f"\n  last error     {error.get('error')} (at {when})"
    return line


def format_gossip(gossip: dict[str, Any]) -> str:
    """The gossip lines of `rabbitry cluster status`: alive workers and the clock."""
    alive = ", ".join(gossip.get("alive") or []) or "-"
    bus = "connected" if gossip.get("connected") else "DISCONNECTED"
    return "\n".join(
        [
            f"  gossip bus     {bus}",
            f"  alive workers  {alive}",
            f"  clock          {gossip.get('clock')}",
            f"  revoked ids    {gossip.get('revoked')}",
        ]
    )


def format_status(status: dict[str, Any]) -> str:
    """The status as a small table a person reads at a glance."""

    def nodes(key: str) -> str:
        return ", ".join(status.get(key) or []) or "-"

    partitions = status.get("partitions") or {}
    alarms = status.get("alarms") or {}
    lines = [
        f"Cluster status of node {status.get('node')}",
        f"  all nodes      {nodes('all')}",
        f"  disc nodes     {nodes('disc')}",
        f"  running nodes  {nodes('running')}",
        f"  ephemeral      {nodes('ephemeral')}",
        f"  paused         {'yes' if status.get('paused') else 'no'}",
    ]
    if isinstance(partitions, dict) and partitions:
        lines.append("  partitions")
        for node, seen_down in sorted(partitions.items()):
            lines.append(f"    {node} saw down: {', '.join(seen_down) or '-'}")
    elif partitions:
        lines.append(f"  partitions     {', '.join(map(str, partitions))}")
    else:
        lines.append("  partitions     none")
    active = (
        {node: list(res) for node, res in alarms.items() if res} if isinstance(alarms, dict) else {}
    )
    if active:
        lines.append("  alarms")
        for node, resources in sorted(active.items()):
            lines.append(f"    {node}: {', '.join(resources)}")
    else:
        lines.append("  alarms         none")
    return "\n".join(lines)


def _action(args: argparse.Namespace, call: Any) -> int:
    name = f"rabbitry cluster {args.help_parser.prog.split()[-1]}"
    try:
        result = call(_client(args))
    except _UsageError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
    except ControlError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2) if not isinstance(result, str) else result)
    return 0


def ui_command(args: argparse.Namespace) -> int:
    """`rabbitry cluster ui`: print (and open) a one-time login URL for the page."""
    try:
        client = _client(args)
        login = client.request("POST", "/ui/token", {"ttl": args.ttl})
    except _UsageError as exc:
        print(f"rabbitry cluster ui: {exc}", file=sys.stderr)
        return 2
    except ControlError as exc:
        if exc.status == 404:
            print("rabbitry cluster ui: this node has no management page", file=sys.stderr)
        else:
            print(f"rabbitry cluster ui: {exc}", file=sys.stderr)
        return 1
    url = client.url + login["path"]
    print(
        f"Open this URL to log in to the management page (it works once, within "
        f"{login['expires_in']:g} s):\n  {url}",
        flush=True,
    )
    if not args.no_browser and _has_display():
        import webbrowser

        try:
            webbrowser.open(url)
        except webbrowser.Error as exc:  # none found: the printed URL is enough
            print(f"(no browser opened: {exc})", file=sys.stderr)
    return 0


def _has_display() -> bool:
    """A browser can open here: a desktop session (X11, Wayland), macOS or Windows."""
    if sys.platform == "darwin" or sys.platform.startswith("win"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
