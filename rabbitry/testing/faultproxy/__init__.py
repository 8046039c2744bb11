"""A Toxiproxy-compatible fault proxy: Toxiproxy's HTTP API and toxics in pure asyncio.

No Toxiproxy binary can be installed here, so rabbitry ships a server the `toxiproxy-python`
client cannot tell apart from the real one. See docs/faultproxy.md.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from rabbitry.testing.faultproxy.server import FaultProxyServer

__all__ = ["FaultProxyServer", "serve"]


async def serve(
    host: str = "127.0.0.1",
    port: int = 8474,
    ready: Callable[[FaultProxyServer], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Run a server until `stop` is set (or forever); `ready` is called once it listens."""
    server = FaultProxyServer(host, port)
    await server.start()
    try:
        if ready is not None:
            ready(server)
        await (stop or asyncio.Event()).wait()
    finally:
        await server.close()
