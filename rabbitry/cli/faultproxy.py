"""`rabbitry faultproxy [--listen HOST:PORT]`: serve the Toxiproxy-compatible fault proxy.

Serves until SIGINT or SIGTERM, then closes every proxy and exits 0. Once listening it prints
exactly one line, `READY <host:port>`, on stdout, so a launcher can pass `--listen 127.0.0.1:0`
and read the port it got.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import Any

from rabbitry.cli import HelpFormatter, add_log_level, configure_logging

log = logging.getLogger("rabbitry.faultproxy")

EPILOG = """\
examples:
  rabbitry faultproxy                              serve on 127.0.0.1:8474, like toxiproxy-server
  rabbitry faultproxy --listen 127.0.0.1:0         any free port; prints READY 127.0.0.1:PORT

then, from Python, with the toxiproxy-python client:

  from toxiproxy import Toxiproxy
  from toxiproxy.api import APIConsumer
  APIConsumer.host, APIConsumer.port = "127.0.0.1", 8474
  proxy = Toxiproxy().create(name="redis", upstream="127.0.0.1:6379", listen="127.0.0.1:26379")
  proxy.add_toxic(type="latency", attributes={"latency": 100, "jitter": 10})
  with proxy.down():
      ...   # the listener is closed and every connection dropped here

The API and the toxics are described in docs/faultproxy.md.

exit codes: 0 stopped by a signal, 1 could not listen, 2 bad usage"""


def register(commands: Any) -> None:
    """Add `faultproxy` to the `rabbitry` command's subparsers."""
    parser = commands.add_parser(
        "faultproxy",
        help="serve a Toxiproxy-compatible fault-injection proxy",
        description="Serve Toxiproxy's HTTP API (proxies, toxics, populate, reset, version) "
        "and the TCP proxies it creates, until SIGINT or SIGTERM.",
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "--listen",
        default="127.0.0.1:8474",
        metavar="HOST:PORT",
        help="address of the HTTP API; port 0 picks a free port",
    )
    add_log_level(parser, default="warning")
    parser.set_defaults(handler=faultproxy_command, help_parser=parser)


def faultproxy_command(args: argparse.Namespace) -> int:
    """Run the server in the foreground until a stop signal."""
    configure_logging(args.log_level)
    host, sep, port = args.listen.rpartition(":")
    if not sep or not port.isdigit():
        print(
            f"rabbitry faultproxy: --listen: expected HOST:PORT, got {args.listen!r}",
            file=sys.stderr,
        )
        return 2
    try:
        asyncio.run(_main(host.strip("[]") or "127.0.0.1", int(port)))
    except OSError as exc:
        print(f"rabbitry faultproxy: cannot listen on {args.listen}: {exc}", file=sys.stderr)
        return 1
    return 0


async def _main(host: str, port: int) -> None:
    from rabbitry.testing.faultproxy import serve

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)

    def ready(server: Any) -> None:
        print(f"READY {server.address}", flush=True)
        log.info("faultproxy: serving on %s", server.address)

    await serve(host, port, ready=ready, stop=stop)
