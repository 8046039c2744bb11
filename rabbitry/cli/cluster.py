"""`rabbitry cluster status|join|leave|forget|singletons|ui`: talk to a running node's control
API."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from rabbitry.cli import HelpFormatter
from rabbitry.cli_target import TargetError, add_target_arguments, client_from_args
from rabbitry.control import STATUS_KEYS, ControlClient, ControlError

CLUSTER_EPILOG = """\
examples:
  rabbitry cluster status --config examples/cluster/a.yaml
  rabbitry cluster ui --config examples/cluster/a.yaml
  rabbitry cluster status --control 127.0.0.1:7101 --cookie-file ./cookie
  rabbitry cluster status --control 127.0.0.1:7101 --cookie-file ./cookie --json
  rabbitry cluster join b@127.0.0.1 127.0.0.1:7002 --control 127.0.0.1:7101 --cookie-file ./cookie
  rabbitry cluster forget c@127.0.0.1 --control 127.0.0.1:7101 --cookie-file ./cookie
  rabbitry cluster ui --control 127.0.0.1:7101 --cookie-file ./cookie

  rabbitry cluster status --control https://node1.example:7101 --cacert ./tls/ca.pem

--config NODE.yaml reads the control address (`control:`), the cookie (`cookie_file:` or
`cookie:`) and the CA (`tls.cafile`) from the node's own config file; --control, --cookie-file
and --cacert win when given. Without --config: --control is the node's `control:` address;
the token is derived from the cluster cookie, so --cookie-file must name the node's cookie
file (mode 0600), else $RABBITRY_COOKIE_FILE, else ./cookie. A node with `tls:` serves HTTPS:
give --cacert (the cluster's CA file, the nodes' `tls.cafile`; default $RABBITRY_CACERT),
which implies https://."""


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

    singletons = sub.add_parser(
        "singletons",
        help="where each cluster singleton runs, with its fencing token and lease expiry",
        description="Ask a node where each `singleton: true` child of the application tree "
        "runs now, as far as its lease acceptor knows: the holder, its fencing token and the "
        "wall-clock end of its lease. docs/singletons.md describes singletons.",
        formatter_class=HelpFormatter,
    )
    _add_target(singletons)
    singletons.add_argument("--json", action="store_true", help="print the JSON answer as is")
    singletons.set_defaults(
        handler=lambda a: _action(
            a, lambda c: c.singletons() if a.json else format_singletons(c.singletons())
        ),
        help_parser=singletons,
    )

    ui = sub.add_parser(
        "ui",
        help="print a one-time login URL for the node's management page (and open a browser)",
        description="Ask the node for a one-time login token and print the URL of its "
        "management page (/ui/) with it, as Jupyter does. The link works once, within --ttl "
        "seconds; the browser then keeps a session cookie and the address bar shows no "
        "secret. A browser is opened where there is a display, unless --no-browser.",
        epilog="examples:\n  rabbitry cluster ui --config examples/cluster/a.yaml\n"
        "  rabbitry cluster ui --control 127.0.0.1:7101 --cookie-file ./cookie"
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
    add_target_arguments(parser)


def _client(args: argparse.Namespace) -> ControlClient:
    return client_from_args(args)


def status_command(args: argparse.Namespace) -> int:
    try:
        client = _client(args)
        status = client.status()
    except TargetError as exc:
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
    except TargetError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
    except ControlError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2) if not isinstance(result, str) else result)
    return 0


def format_singletons(answer: dict[str, Any]) -> str:
    """One line per singleton: where it runs, its token and how long its lease has left."""
    rows = answer.get("singletons") or {}
    if not rows:
        return f"{answer.get('node')}: no singletons in this cluster's application tree"
    now = time.time()
    lines = [f"singletons, as {answer.get('node')} sees them:"]
    for name, entry in sorted(rows.items()):
        if not entry.get("node"):
            lines.append(f"  {name:<24} not running now (no lease held)")
            continue
        left = float(entry.get("expires") or 0) - now
        lines.append(f"  {name:<24} on {entry['node']}  token {entry['token']}  lease {left:+.1f}s")
    names = answer.get("global_names") or {}
    for name, node in sorted(names.items()):
        lines.append(f"  global {name:<17} on {node}")
    return "\n".join(lines)


def ui_command(args: argparse.Namespace) -> int:
    """`rabbitry cluster ui`: print (and open) a one-time login URL for the page."""
    try:
        client = _client(args)
        login = client.request("POST", "/ui/token", {"ttl": args.ttl})
    except TargetError as exc:
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
