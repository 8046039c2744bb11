"""Ticks, as a pure core: when to send a keepalive tick, and when a silent peer is down.

Fed "we sent something at", "we received something at" and "the timer fired at"; returns
effects: SendTick, PeerDown("net_tick_timeout"), and SetTimer for its next wake-up. No
clock, no thread: the shell (NetKernel's ticker) reads the clock and does the I/O.

Erlang sends a tick when nothing else went out for net_ticktime/4, and calls a peer down after
four quiet checks, i.e. somewhere between 0.75 and 1.25 x net_ticktime. We keep the first rule
and make the second exact: down when nothing at all arrived for net_ticktime. The timer is set
for whichever comes first (the next tick, or the moment silence would reach net_ticktime), so
detection is not late by up to a tick interval. Any bytes count as life, not only ticks, and
so do bytes that reached our socket but wait for a late loop (`silent` asks; the shell peeks).
"""

from __future__ import annotations

from dataclasses import dataclass

from monitors.effects import SetTimer

__all__ = ["PeerDown", "SendTick", "TickCore"]

# Timers fire a little early or late; treat "within 1% of due" as due, so that an early wake
# does not re-arm a timer of a few microseconds (a busy loop).
_SLACK = 0.01


@dataclass(frozen=True)
class SendTick:
    """Write a tick (an empty frame) to the peer: nothing else went out for a while."""


@dataclass(frozen=True)
class PeerDown:
    """The peer has been silent for net_ticktime: drop the connection with this reason."""

    reason: str = "net_tick_timeout"


TickEffect = SendTick | PeerDown | SetTimer


class TickCore:
    """Tick state for one connection. `TIMER` is the key of the one timer it sets."""

    TIMER = "tick"

    def __init__(self, net_ticktime: float, now: float) -> None:
        if not net_ticktime > 0:
            raise ValueError(f"net_ticktime: expected seconds > 0; got {net_ticktime!r}")
        self.net_ticktime = float(net_ticktime)
        self.interval = self.net_ticktime / 4
        self._last_sent = now
        self._last_received = now
        self._down = False

    @property
    def down(self) -> bool:
        return self._down

    def start(self, now: float) -> list[TickEffect]:
        """The connection is up: arm the timer."""
        return [SetTimer(self.TIMER, self._next_wake(now))]

    def sent(self, at: float) -> None:
        """Something was written to the peer at `at` (a tick or any frame)."""
        self._last_sent = max(self._last_sent, at)

    def received(self, at: float) -> None:
        """Something arrived from the peer at `at`."""
        self._last_received = max(self._last_received, at)

    def silent(self, now: float) -> bool:
        """Whether nothing has arrived for net_ticktime: the peer is down at this timer
        unless the shell finds that bytes did arrive (see NetKernel's ticks)."""
        return now - self._last_received >= self.net_ticktime * (1 - _SLACK)

    def timer(self, now: float) -> list[TickEffect]:
        """The timer fired: maybe tick, maybe declare the peer down; re-arm unless down."""
        if self._down:
            return []
        if self.silent(now):
            self._down = True
            return [PeerDown()]
        effects: list[TickEffect] = []
        if now - self._last_sent >= self.interval * (1 - _SLACK):
            effects.append(SendTick())
            self._last_sent = now
        effects.append(SetTimer(self.TIMER, self._next_wake(now)))
        return effects

    def _next_wake(self, now: float) -> float:
        due = min(self._last_sent + self.interval, self._last_received + self.net_ticktime)
        return max(due - now, self.interval * _SLACK)
