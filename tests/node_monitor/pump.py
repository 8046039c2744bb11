"""A tiny message pump for node monitor tests: several cores, a network with links that can be
cut, and timers, all in virtual time. Deliberately small; the real simulator is tests/sim.

Every link has a fixed latency and keeps order. A cut link drops what is in flight and, after
`detect` seconds (net_ticktime in spirit), gives both ends a nodedown. PauseApp/ResumeApp take
`app_delay` to complete. Nothing here is random.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable
from typing import Any

from monitors.effects import CancelTimer, Connect, Disconnect, Log, Send, SetTimer
from monitors.node_monitor import (
    ClusterStatus,
    NodeMonitorCore,
    Notify,
    PartitionHandling,
    PauseApp,
    ResumeApp,
    SaveClusterStatus,
)


def pair(a: str, b: str) -> frozenset[str]:
    return frozenset((a, b))


class Pump:
    def __init__(
        self,
        names: Iterable[str],
        config: PartitionHandling | str = "ignore",
        *,
        latency: float = 0.01,
        detect: float = 0.5,
        app_delay: float = 0.1,
        cuts: Iterable[tuple[str, str]] = (),
        **core_kwargs: Any,
    ) -> None:
        self.names = sorted(names)
        self.config = PartitionHandling(config) if isinstance(config, str) else config
        self.latency, self.detect, self.app_delay = latency, detect, app_delay
        self.core_kwargs = core_kwargs
        self.now = 0.0
        self._queue: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._creations = itertools.count(100)
        self.cores: dict[str, NodeMonitorCore] = {}
        self.conn: dict[frozenset[str], int] = {}  # connected pairs -> generation
        self._gen = itertools.count(1)
        self.cut_links: set[frozenset[str]] = {pair(a, b) for a, b in cuts}
        self.banned: dict[frozenset[str], float] = {}
        self.timers: dict[tuple[str, str], int] = {}
        self.app: dict[str, str] = {}
        self.weights: dict[str, int] = {}
        self.logs: list[tuple[str, Log]] = []
        self.notes: list[tuple[float, str, Notify]] = []
        self.saved: dict[str, SaveClusterStatus] = {}
        self.sent: list[tuple[str, Send]] = []
        for n in self.names:
            self._boot(n)

    # ------------------------------------------------------------------ control

    def _boot(self, n: str) -> None:
        core = NodeMonitorCore(
            n,
            next(self._creations),
            ClusterStatus(all=self.names, disc=self.names),
            self.config,
            **self.core_kwargs,
        )
        core.set_weight(self.weights.get(n, 0))
        self.cores[n] = core
        self.app[n] = "running"
        self.apply(n, core.start(self.now))

    def at(self, delay: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._queue, (self.now + delay, next(self._seq), fn))

    def run(self, duration: float) -> None:
        end = self.now + duration
        while self._queue and self._queue[0][0] <= end:
            when, _, fn = heapq.heappop(self._queue)
            self.now = when
            fn()
        self.now = end

    def cut(self, a: str, b: str) -> None:
        self.cut_links.add(pair(a, b))
        if pair(a, b) in self.conn:
            gen = self.conn[pair(a, b)]
            self.at(
                self.detect, lambda: self._drop(a, b, gen, "net_tick_timeout", "net_tick_timeout")
            )

    def heal(self, a: str, b: str) -> None:
        self.cut_links.discard(pair(a, b))

    def isolate(self, node: str, others: Iterable[str] | None = None) -> None:
        for o in others or self.names:
            if o != node:
                self.cut(node, o)

    def heal_all(self) -> None:
        self.cut_links.clear()

    def crash(self, n: str) -> None:
        self.cores.pop(n)
        self.timers = {k: v for k, v in self.timers.items() if k[0] != n}
        for p, gen in list(self.conn.items()):
            if n in p:
                (o,) = p - {n}
                self._drop(n, o, gen, None, "connection_closed")

    def restart(self, n: str) -> None:
        if n in self.cores:
            self.crash(n)
        self._boot(n)

    # ------------------------------------------------------------------ queries

    def status(self, n: str) -> dict[str, Any]:
        return self.cores[n].status()

    def paused(self) -> set[str]:
        return {n for n, c in self.cores.items() if c.paused}

    def serving(self) -> set[str]:
        """Nodes whose application is running right now."""
        return {n for n, s in self.app.items() if s == "running" and n in self.cores}

    def connected(self, a: str, b: str) -> bool:
        return pair(a, b) in self.conn

    def logged(self, text: str, node: str | None = None) -> list[Log]:
        return [log for n, log in self.logs if text in log.text and node in (None, n)]

    # ------------------------------------------------------------------ effects

    def apply(self, n: str, effects: list[Any]) -> None:
        for e in effects:
            if isinstance(e, Send):
                self.sent.append((n, e))
                self._send(n, e)
            elif isinstance(e, SetTimer):
                token = next(self._seq)
                self.timers[(n, e.key)] = token
                self.at(e.after, lambda k=e.key, t=token: self._fire(n, k, t))
            elif isinstance(e, CancelTimer):
                self.timers.pop((n, e.key), None)
            elif isinstance(e, Connect):
                self._connect(n, e.node)
            elif isinstance(e, Disconnect):
                gen = self.conn.get(pair(n, e.node))
                if gen is not None:
                    # what was sent before the disconnect still arrives (TCP close)
                    self.banned[pair(n, e.node)] = self.now + e.ban
                    self.at(
                        self.latency,
                        lambda o=e.node, g=gen: self._drop(
                            n, o, g, "disconnect", "connection_closed"
                        ),
                    )
            elif isinstance(e, PauseApp | ResumeApp):
                self._app_change(n, isinstance(e, PauseApp))
            elif isinstance(e, Log):
                self.logs.append((n, e))
            elif isinstance(e, Notify):
                self.notes.append((self.now, n, e))
            elif isinstance(e, SaveClusterStatus):
                self.saved[n] = e
            else:  # pragma: no cover
                raise AssertionError(f"unknown effect {e!r}")

    def _call(self, n: str, method: str, *args: Any) -> None:
        core = self.cores.get(n)
        if core is not None:
            self.apply(n, getattr(core, method)(*args, self.now))

    def _fire(self, n: str, key: str, token: int) -> None:
        if self.timers.get((n, key)) == token:
            del self.timers[(n, key)]
            self._call(n, "timer", key)

    def _app_change(self, n: str, stop: bool) -> None:
        core = self.cores[n]

        def done() -> None:
            if self.cores.get(n) is core:
                self.app[n] = "stopped" if stop else "running"
                self._call(n, "app_stopped" if stop else "app_started")

        # serialized per node: each change completes app_delay after the previous one
        self._app_busy = getattr(self, "_app_busy", {})
        start = max(self.now, self._app_busy.get(n, 0.0))
        self._app_busy[n] = start + self.app_delay
        self.at(start + self.app_delay - self.now, done)

    def _connect(self, a: str, b: str) -> None:
        p = pair(a, b)
        if p in self.conn or p in self.cut_links or b not in self.cores or a == b:
            return
        if self.banned.get(p, 0.0) > self.now:
            return
        gen = next(self._gen)
        self.conn[p] = gen
        ca, cb = self.cores[a].creation, self.cores[b].creation
        self.at(self.latency, lambda: self._if_gen(p, gen, lambda: self._call(a, "nodeup", b, cb)))
        self.at(self.latency, lambda: self._if_gen(p, gen, lambda: self._call(b, "nodeup", a, ca)))

    def _if_gen(self, p: frozenset[str], gen: int, fn: Callable[[], None]) -> None:
        if self.conn.get(p) == gen:
            fn()

    def _drop(self, a: str, b: str, gen: int, reason_a: str | None, reason_b: str) -> None:
        p = pair(a, b)
        if self.conn.get(p) != gen:
            return
        del self.conn[p]
        if reason_a is not None:
            self.at(0.0, lambda: self._call(a, "nodedown", b, reason_a))
        self.at(0.0, lambda: self._call(b, "nodedown", a, reason_b))

    def _send(self, src: str, e: Send) -> None:
        p = pair(src, e.node)
        if p not in self.conn:
            self._connect(src, e.node)  # auto-connect, as Erlang does
            if p not in self.conn:
                return
        gen = self.conn[p]

        def deliver() -> None:
            if self.conn.get(p) == gen and p not in self.cut_links:
                self._call(e.node, "receive", src, e.msg)

        self.at(self.latency, deliver)
