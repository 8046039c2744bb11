"""A node program for the real-process dist tests (and a handy manual tool).

    python tests/dist/node_main.py --name a@127.0.0.1 --listen 127.0.0.1:0 \
        --cookie-file ./cookie --peer b@127.0.0.1=127.0.0.1:7002 [--net-ticktime 1] \
        [--ping-interval 0.3]

It starts a NetKernel, registers an "echo" process, prints `READY <node> <address>
<creation>` once listening, then one stdout line per node event:
`EVENT nodeup <node> <creation>` / `EVENT nodedown <node> <reason>`. Logs go to stderr.
With --ping-interval it connects to every peer it is not connected to that often, as
rabbit_node_monitor pings down nodes. Commands on stdin, one per line (answers on stdout):
`peer NODE HOST:PORT`, `connect NODE`, `disconnect NODE`, `nodes`, `quit`. It stops on
SIGTERM, on `quit`, and when stdin closes (its parent went away).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from typing import Any

from monitors.dist import Message, NetKernel, NodeDown, NodeUp
from supervisors import Process


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class Echo(Process):
    """Answers {"op": "echo"} calls with the sender and the message."""

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Message):
            return {"node": message.node, "msg": message.msg}
        return None


class Printer(Process):
    """Prints NodeUp/NodeDown as EVENT lines."""

    def on_receive(self, message: Any) -> None:
        if isinstance(message, NodeUp):
            say(f"EVENT nodeup {message.node} {message.creation}")
        elif isinstance(message, NodeDown):
            say(f"EVENT nodedown {message.node} {message.reason}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--listen", default="127.0.0.1:0")
    parser.add_argument("--cookie-file", required=True)
    parser.add_argument("--peer", action="append", default=[], metavar="NODE=HOST:PORT")
    parser.add_argument("--net-ticktime", type=float, default=4.0)
    parser.add_argument("--handshake-timeout", type=float, default=5.0)
    parser.add_argument("--ping-interval", type=float, default=0.0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    with open(args.cookie_file, "rb") as f:
        cookie = f.read().strip()
    peers = dict(p.split("=", 1) for p in args.peer)
    printer = Printer.start()
    ref = NetKernel.start(
        args.name,
        args.listen,
        cookie,
        peers,
        net_ticktime=args.net_ticktime,
        handshake_timeout=args.handshake_timeout,
    )
    kernel = NetKernel.of(ref)
    kernel.monitor_nodes(printer)
    kernel.register("echo", Echo.start())
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    if args.ping_interval > 0:
        threading.Thread(
            target=ping_loop, args=(kernel, args.ping_interval, done), daemon=True
        ).start()
    threading.Thread(target=command_loop, args=(kernel, done), daemon=True).start()
    say(f"READY {kernel.node} {kernel.address} {kernel.creation}")
    while not done.wait(0.5):
        pass
    ref.stop(timeout=10)
    printer.stop(timeout=5)
    return 0


def ping_loop(kernel: NetKernel, interval: float, done: threading.Event) -> None:
    """Connect to every peer in the address book that is not connected, every `interval`."""
    while not done.wait(interval):
        for node in kernel.addresses():
            if node not in kernel.nodes():
                kernel.connect(node, timeout=interval)


def command_loop(kernel: NetKernel, done: threading.Event) -> None:
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        try:
            if words[0] == "peer":
                kernel.set_address(words[1], words[2])
                say(f"OK peer {words[1]}")
            elif words[0] == "connect":
                say(f"CONNECT {words[1]} {kernel.connect(words[1])}")
            elif words[0] == "disconnect":
                say(f"DISCONNECT {words[1]} {kernel.disconnect(words[1])}")
            elif words[0] == "nodes":
                say("NODES " + ",".join(kernel.nodes()))
            elif words[0] == "quit":
                break
            else:
                say(f"ERROR unknown command {words[0]!r}")
        except (IndexError, ValueError) as exc:
            say(f"ERROR {exc}")
    done.set()  # stdin closed (the parent is gone) or quit


if __name__ == "__main__":
    sys.exit(main())
