"""One client connection through a proxy: each direction forwarded through its toxic chain.

Built on asyncio protocols rather than streams, for throughput: with no toxic in a direction,
bytes go straight from one transport to the other inside the read callback, with transport
flow control (pause_writing on the destination pauses reading from the source). Once a toxic
this connection drew acts on a direction, chunks are stamped with their arrival time into a
bounded queue (Toxiproxy's 1024-chunk buffer) and a writer task runs them through the chain.
The chain is looked up per chunk, so toxics added or removed later apply to live connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import struct
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from rabbitry.testing.faultproxy.model import Toxic, split_hostport
from rabbitry.testing.faultproxy.toxics import BEHAVIOURS, ToxicState

if TYPE_CHECKING:
    from rabbitry.testing.faultproxy.server import Proxy

log = logging.getLogger("rabbitry.faultproxy")

QUEUE_CHUNKS = 1024
WRITE_BUFFER_HIGH = 1024 * 1024
READ_SIZE = 1024 * 1024
STREAMS = ("upstream", "downstream")
Item = tuple[bytes, float] | None


class _Side(asyncio.Protocol):
    """One socket of a link; `stream` is the direction this socket is the source of."""

    def __init__(self, stream: str) -> None:
        self.stream = stream
        self.link: Link | None = None
        self.transport: asyncio.Transport | None = None
        self.early: list[bytes | None] = []
        """What arrived before the link existed (a server may greet first), replayed on start."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.link is not None:
            self.link.on_data(self.stream, data)
        else:
            self.early.append(data)

    def eof_received(self) -> bool:
        if self.link is not None:
            self.link.on_data(self.stream, None)
        else:
            self.early.append(None)
        return True  # keep the other direction open (half-close)

    def pause_writing(self) -> None:
        if self.link is not None:
            self.link.set_blocked(_other(self.stream), "dst", True)

    def resume_writing(self) -> None:
        if self.link is not None:
            self.link.set_blocked(_other(self.stream), "dst", False)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.link is not None:
            if exc is not None:
                log.debug("proxy %s: connection lost: %s", self.link.proxy.name, exc)
            self.link.close()


class ClientSide(_Side):
    """The accepted client socket: dials the upstream, then starts the link."""

    def __init__(self, proxy: Proxy) -> None:
        super().__init__("upstream")
        self.proxy = proxy

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        assert self.transport is not None
        self.transport.pause_reading()
        task = asyncio.get_running_loop().create_task(self._dial())
        self.proxy.tasks.add(task)
        task.add_done_callback(self.proxy.tasks.discard)

    async def _dial(self) -> None:
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        try:
            host, port = split_hostport(self.proxy.upstream)
            server, _ = await loop.create_connection(lambda: _Side("downstream"), host, port)
        except asyncio.CancelledError:  # the proxy stopped while dialling
            self.transport.close()
            raise
        except Exception as exc:
            log.info(
                "proxy %s: cannot dial upstream %s: %s", self.proxy.name, self.proxy.upstream, exc
            )
            self.transport.close()
            return
        assert isinstance(server, asyncio.Transport)
        if not self.proxy.enabled or self.transport.is_closing():
            self.transport.close()
            server.close()
            return
        link = Link(self.proxy, self.transport, server)
        self.link = link
        protocol = server.get_protocol()
        assert isinstance(protocol, _Side)
        protocol.link = link
        link.start()
        for data in protocol.early:
            link.on_data("downstream", data)
        protocol.early.clear()


def _other(stream: str) -> str:
    return "downstream" if stream == "upstream" else "upstream"


class Link:
    """Both directions of one proxied connection; closing it closes both sockets."""

    def __init__(self, proxy: Proxy, client: asyncio.Transport, server: asyncio.Transport) -> None:
        self.proxy = proxy
        self.client = client
        self.server = server
        self.src = {"upstream": client, "downstream": server}
        self.dst = {"upstream": server, "downstream": client}
        self.states: dict[int, ToxicState] = {}
        self.closed = False
        self.done: set[str] = set()
        self.ended: set[str] = set()
        self.busy: set[str] = set()
        """Directions with chunks queued or in a toxic (so direct forwarding must wait)."""
        self.blocked: dict[str, set[str]] = {s: set() for s in STREAMS}
        """Why each direction's source is paused: "dst" (flow control) or "queue" (full)."""
        self.writable = {s: asyncio.Event() for s in STREAMS}
        self.queues: dict[str, asyncio.Queue[Item]] = {s: asyncio.Queue() for s in STREAMS}
        self.tasks: list[asyncio.Task[None]] = []
        for transport in (client, server):
            transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH)
            if hasattr(transport, "max_size"):
                transport.max_size = READ_SIZE  # asyncio's selector transports read 256 KiB at most

    def start(self) -> None:
        """Meet the current toxics, start the writer tasks, and start reading."""
        self.proxy.links.add(self)
        for toxic in self.proxy.toxics:
            self.attach(toxic)
        for stream in STREAMS:
            self.writable[stream].set()
            task = asyncio.get_running_loop().create_task(self._write(stream))
            self.tasks.append(task)
            self.proxy.tasks.add(task)
            task.add_done_callback(self.proxy.tasks.discard)
        self.client.resume_reading()

    def attach(self, toxic: Toxic) -> None:
        """Draw the toxicity for this connection (once) and let the toxic start its timers."""
        if self.closed or id(toxic) in self.states:
            return
        state = ToxicState(toxic, random.random() < toxic.toxicity)
        self.states[id(toxic)] = state
        if state.active:
            BEHAVIOURS[toxic.type].attach(self, state)

    def detach(self, toxic: Toxic) -> None:
        """The toxic was removed; some toxics (timeout) close the connections they held."""
        state = self.states.pop(id(toxic), None)
        if state is None:
            return
        if state.timer is not None:
            state.timer.cancel()
        if state.active and BEHAVIOURS[toxic.type].close_on_remove:
            self.close()

    def _poisoned(self, stream: str) -> bool:
        """Whether a toxic this connection drew acts on `stream` (or the stream has ended)."""
        if stream in self.ended:
            return True
        for toxic in self.proxy.toxics:
            if toxic.stream == stream:
                state = self.states.get(id(toxic))
                if state is not None and state.active:
                    return True
        return False

    def set_blocked(self, stream: str, reason: str, on: bool) -> None:
        """Pause or resume reading the source of `stream` for one reason among several."""
        reasons = self.blocked[stream]
        was = bool(reasons)
        if on:
            reasons.add(reason)
        else:
            reasons.discard(reason)
        if reason == "dst":
            if on:
                self.writable[stream].clear()
            else:
                self.writable[stream].set()
        if self.closed or was == bool(reasons):
            return
        src = self.src[stream]
        if src.is_closing():
            return
        if reasons:
            src.pause_reading()
        else:
            src.resume_reading()

    def on_data(self, stream: str, data: bytes | None) -> None:
        """A chunk (or EOF, None) read from the source of `stream`."""
        if self.closed or stream in self.done:
            return
        queue = self.queues[stream]
        if stream not in self.busy and not self._poisoned(stream):
            # Fast path: nothing queued, nothing in flight, no toxic: forward directly.
            if data is None:
                self._finish(stream)
            else:
                self.dst[stream].write(data)
            return
        self.busy.add(stream)
        queue.put_nowait(None if data is None else (data, time.monotonic()))
        if queue.qsize() >= QUEUE_CHUNKS:
            self.set_blocked(stream, "queue", True)

    def _finish(self, stream: str) -> None:
        """This direction is over: pass the EOF on; once both are, close."""
        self.done.add(stream)
        dst = self.dst[stream]
        if not self.closed and not dst.is_closing() and dst.can_write_eof():
            dst.write_eof()
        if len(self.done) == 2:
            self.close()

    async def _write(self, stream: str) -> None:
        queue = self.queues[stream]
        dst = self.dst[stream]
        writable = self.writable[stream]

        async def sink(data: bytes) -> None:
            if data and not self.closed:
                dst.write(data)
                await writable.wait()

        while not self.closed:
            item = await queue.get()
            if queue.qsize() < QUEUE_CHUNKS // 2:
                self.set_blocked(stream, "queue", False)
            chain = [
                self.states[id(t)]
                for t in self.proxy.toxics
                if t.stream == stream and id(t) in self.states and self.states[id(t)].active
            ]
            if item is None:
                for state in chain:
                    await BEHAVIOURS[state.toxic.type].on_eof(self, state)
                if not self.closed:
                    self._finish(stream)
                return
            await self._run(chain, 0, item[0], item[1], sink)
            if self.closed:
                return
            if stream in self.ended:
                self._finish(stream)
                return
            if queue.empty():
                self.busy.discard(stream)

    async def _run(
        self,
        chain: list[ToxicState],
        i: int,
        chunk: bytes,
        arrival: float,
        sink: Callable[[bytes], Awaitable[None]],
    ) -> None:
        if self.closed:
            return
        if i == len(chain):
            await sink(chunk)
            return
        state = chain[i]

        async def emit(data: bytes) -> None:
            await self._run(chain, i + 1, data, arrival, sink)

        await BEHAVIOURS[state.toxic.type].handle(self, state, chunk, arrival, emit)

    def end_stream(self, stream: str) -> None:
        """End one direction after the current chunk: its destination sees EOF (limit_data)."""
        self.ended.add(stream)

    def close(self, reset: bool = False) -> None:
        """Close both sockets; with reset, the client gets an RST (SO_LINGER 0)."""
        if self.closed:
            return
        self.closed = True
        for state in self.states.values():
            if state.timer is not None:
                state.timer.cancel()
        if reset:
            sock = self.client.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        for transport in (self.client, self.server):
            if reset:
                transport.abort()
            else:
                transport.close()
        for event in self.writable.values():
            event.set()
        current = asyncio.current_task()
        for task in self.tasks:
            if task is not current:
                task.cancel()
        self.proxy.links.discard(self)
