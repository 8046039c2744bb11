"""What each toxic does to the byte stream of one direction of one connection.

A behaviour sees one chunk at a time (with the time it was read, so latency is measured from
arrival and chunks queued behind a sleeping one are not delayed twice) and passes what is left
to `emit`, the next stage of the chain. Attributes are read on every chunk, so an update through
the API takes effect on live connections, as in Toxiproxy.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from rabbitry.testing.faultproxy.model import Toxic

if TYPE_CHECKING:
    from rabbitry.testing.faultproxy.link import Link

Emit = Callable[[bytes], Awaitable[None]]


class ToxicState:
    """Per-connection state of one toxic: whether this connection drew it, plus scratch data."""

    def __init__(self, toxic: Toxic, active: bool) -> None:
        self.toxic = toxic
        self.active = active
        self.data: dict[str, Any] = {}
        self.timer: asyncio.TimerHandle | None = None


class Behaviour:
    """The no-op toxic; every other behaviour overrides some of these hooks."""

    close_on_remove = False
    """Toxiproxy's Cleanup: removing this toxic closes the connections it affected."""

    def attach(self, link: Link, state: ToxicState) -> None:
        """Called once when the toxic meets the connection (either may come first)."""

    async def handle(
        self, link: Link, state: ToxicState, chunk: bytes, arrival: float, emit: Emit
    ) -> None:
        await emit(chunk)

    async def on_eof(self, link: Link, state: ToxicState) -> None:
        """Called when this direction's input ends, before the end is passed on."""


class Latency(Behaviour):
    async def handle(
        self, link: Link, state: ToxicState, chunk: bytes, arrival: float, emit: Emit
    ) -> None:
        attrs = state.toxic.attributes
        delay = attrs["latency"]
        jitter = attrs["jitter"]
        if jitter > 0:
            delay += random.randrange(-jitter, jitter)
        wait = arrival + delay / 1000.0 - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        await emit(chunk)


class Bandwidth(Behaviour):
    async def handle(
        self, link: Link, state: ToxicState, chunk: bytes, arrival: float, emit: Emit
    ) -> None:
        rate = state.toxic.attributes["rate"]  # KB/s, i.e. bytes per millisecond
        if rate <= 0:
            await emit(chunk)
            return
        view = memoryview(chunk)
        step = rate * 100  # 100 ms worth of bytes per slice
        for start in range(0, len(view), step):
            piece = view[start : start + step]
            await asyncio.sleep(len(piece) / rate / 1000.0)
            await emit(bytes(piece))


class SlowClose(Behaviour):
    async def on_eof(self, link: Link, state: ToxicState) -> None:
        await asyncio.sleep(state.toxic.attributes["delay"] / 1000.0)


class Timeout(Behaviour):
    close_on_remove = True

    def attach(self, link: Link, state: ToxicState) -> None:
        timeout = state.toxic.attributes["timeout"]
        if timeout > 0:
            state.timer = asyncio.get_running_loop().call_later(timeout / 1000.0, link.close)

    async def handle(
        self, link: Link, state: ToxicState, chunk: bytes, arrival: float, emit: Emit
    ) -> None:
        return  # everything is dropped while the toxic is in place


class ResetPeer(Behaviour):
    async def handle(
        self, link: Link, state: ToxicState, chunk: bytes, arrival: float, emit: Emit
    ) -> None:
        await asyncio.sleep(state.toxic.attributes["timeout"] / 1000.0)
        link.close(reset=True)


def slice_bounds(length: int, average: int, variation: int) -> list[int]:
    """Toxiproxy's recursive split of [0, length) around average ± variation, as boundaries."""
    if average <= 0:
        return [0, length]
    out = [0]
    stack = [(0, length)]
    while stack:
        start, end = stack.pop()
        if (end - start) - average <= variation:
            out.append(end)
            continue
        mid = start + (end - start) // 2
        if variation > 0:
            mid += random.randrange(-variation, variation)
        mid = min(max(mid, start + 1), end - 1)
        stack.append((mid, end))
        stack.append((start, mid))
    return out


class Slicer(Behaviour):
    async def handle(
        self, link: Link, state: ToxicState, chunk: bytes, arrival: float, emit: Emit
    ) -> None:
        attrs = state.toxic.attributes
        bounds = slice_bounds(len(chunk), attrs["average_size"], attrs["size_variation"])
        delay = attrs["delay"] / 1_000_000.0  # microseconds
        for i in range(len(bounds) - 1):
            await emit(chunk[bounds[i] : bounds[i + 1]])
            if delay > 0:
                await asyncio.sleep(delay)


class LimitData(Behaviour):
    async def handle(
        self, link: Link, state: ToxicState, chunk: bytes, arrival: float, emit: Emit
    ) -> None:
        limit = state.toxic.attributes["bytes"]
        sent = state.data.get("sent", 0)
        if limit > 0 and sent + len(chunk) >= limit:
            await emit(chunk[: limit - sent])
            state.data["sent"] = limit
            link.end_stream(state.toxic.stream)
            return
        state.data["sent"] = sent + len(chunk)
        await emit(chunk)


BEHAVIOURS: dict[str, Behaviour] = {
    "latency": Latency(),
    "bandwidth": Bandwidth(),
    "slow_close": SlowClose(),
    "timeout": Timeout(),
    "reset_peer": ResetPeer(),
    "slicer": Slicer(),
    "limit_data": LimitData(),
}
