"""`rabbitry node start --config FILE`: run one cluster node in the foreground."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

from rabbitry.cli import HelpFormatter, add_log_level, configure_logging
from supervisors import ConfigError, StartChildError, format_reason

NODE_EPILOG = """\
examples:
  rabbitry node start --config examples/cluster/a.yaml
  rabbitry node start --config node.yaml --log-level debug

Once every part runs, the node prints one line on stdout:
  READY <node> <dist host:port> control=<host:port|-> metrics=<host:port|->
SIGTERM or Ctrl-C stops it in order (the application first, the dist layer last) and writes
nodes_running_at_shutdown in its data_dir. SIGHUP re-reads the `tls:` files (they are also
re-read when they change): new connections use them, established ones stay up. The config
format is in docs/node.md."""


def register(commands: Any) -> None:
    """Add `node start` to the `rabbitry` command's subparsers."""
    node = commands.add_parser(
        "node",
        help="run a cluster node (dist, node monitor, control API, application tree)",
        description="Run a rabbitry node: one OS process, one cluster member.",
        epilog=NODE_EPILOG,
        formatter_class=HelpFormatter,
    )
    node.set_defaults(help_parser=node)
    sub = node.add_subparsers(title="node commands", metavar="COMMAND")
    start = sub.add_parser(
        "start",
        help="start a node from its config file and run it until SIGTERM/Ctrl-C",
        description="Start the node's root tree (net_kernel, node_monitor, node_stats, control, "
        "app) and run it in the foreground.",
        epilog=NODE_EPILOG,
        formatter_class=HelpFormatter,
    )
    start.add_argument("--config", required=True, metavar="FILE", help="the node config file")
    add_log_level(start)
    start.set_defaults(handler=start_command, help_parser=start)


def _start_failed(config: Any, exc: StartChildError) -> int:
    """Say why a node did not start: a config mistake (a taken port, a missing file) exits 2,
    anything else 1."""
    from rabbitry import port_holder

    key = port_holder.CHILD_KEYS.get(exc.child_id)
    if key and port_holder.is_address_in_use(exc.reason):  # a config mistake: exit 2
        address = getattr(config, key)
        error = port_holder.address_in_use_error(config, key, address)
        print(f"rabbitry node start: {error}", file=sys.stderr)
        return 2
    if isinstance(exc.reason, ConfigError):  # the config names what cannot be had
        print(f"rabbitry node start: {exc.reason}", file=sys.stderr)
        return 2
    print(f"rabbitry node start: {config.node} failed to start: {exc}", file=sys.stderr)
    return 1


def start_command(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    from monitors.dist.name_lock import NameInUse
    from rabbitry.node import Node, wait_ready
    from rabbitry.node_config import load_node_config

    try:
        config = load_node_config(args.config)
    except ConfigError as exc:
        print(f"rabbitry node start: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    received: list[str] = []

    def on_signal(signum: int, _frame: Any) -> None:
        if received:  # a second signal while stopping: give up waiting
            print("rabbitry node start: stopping now", file=sys.stderr)
            raise SystemExit(1)
        received.append(signal.Signals(signum).name)
        stop.set()

    started: list[Any] = []

    def on_hup(_signum: int, _frame: Any) -> None:  # runs on the main thread; quick
        if started:
            started[0].reload_tls()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_hup)
    try:
        node = Node.start(config)
        started.append(node)
        wait_ready(node)
        node.wait_first_contact()
    except NameInUse as exc:  # this host runs the name already
        print(exc, file=sys.stderr)
        return 2
    except StartChildError as exc:
        return _start_failed(config, exc)
    # A peer may refuse us as soon as the dist layer connects: a running node elsewhere holds
    # our name. Then this process must not run beside it: no READY, stop, exit 2.
    if node.fatal is None:
        print(
            f"READY {config.node} {node.dist_address} control={node.control_address or '-'} "
            f"metrics={node.metrics_address or '-'}",
            flush=True,
        )
    while node.fatal is None and not stop.wait(0.1):
        if not node.root.is_alive():
            from supervisors import exit_reason

            reason = format_reason(exit_reason(node.root))
            print(f"rabbitry node start: {config.node} stopped: {reason}", file=sys.stderr)
            return 1
    if node.fatal is not None:
        print(node.fatal, file=sys.stderr, flush=True)
        node.stop()
        return 2
    print(f"rabbitry node start: {received[0]}: stopping {config.node}", file=sys.stderr)
    node.stop()
    return 0
