"""Logs that scale with the cluster: a failing retry loop logs its state changes, then backs off.

A node whose peers are down retries each of them every second (dist connects, the RCS's Redis
checks, bus reconnects). Logging every failed attempt is two lines per down peer per second,
hundreds a second with many members, and it drowns the one line that matters. So, per key (a
peer, an address, a broker):

1. the first failure of an outage is logged as it is;
2. further failures are only counted, and reported as one line per back-off step (after 1 s,
   then 2, 4, 8, ... up to `max_step` apart), saying how many failed since the last line;
3. the recovery is logged once, with the count and the length of the outage.

A 10 s outage of one peer retried every 0.5 s is then 5 lines (at 0, 1, 3 and 7 s from the
start, and the recovery), not 20; an hour is 19 lines (steps of at most 300 s) instead of 7,200.

`RetryBackoff` is the pure state (fed the time, answers whether and what to report), for the
pure cores, which log through `Log` effects. `RetryLog` wraps it around a `logging.Logger` and
the monotonic clock, for shells and threads; it is thread-safe.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

__all__ = ["Report", "RetryBackoff", "RetryLog"]

FIRST = "first"
STEP = "step"
RECOVERED = "recovered"


@dataclass(frozen=True)
class Report:
    """What to log now for one key: the first failure, a back-off step, or the recovery."""

    kind: str  # "first" | "step" | "recovered"
    failures: int  # failed attempts in this outage so far
    new: int  # failed attempts since the previous report (this one included)
    elapsed: float  # seconds since the first failure of the outage
    next_in: float | None  # seconds to the next step report (None for a recovery)

    def suffix(self) -> str:
        """The text appended to the caller's own message."""
        if self.kind == FIRST:
            return f" (retrying; next report in {self.next_in:g} s unless it recovers)"
        if self.kind == STEP:
            return (
                f" (still failing: {self.new} more failed attempts, {self.failures} in "
                f"{self.elapsed:.0f} s; next report in {self.next_in:g} s)"
            )
        return f" (after {self.failures} failed attempts over {self.elapsed:.1f} s)"

    def fields(self) -> dict[str, float | int | str]:
        """The same facts as Log-effect fields (for pure cores)."""
        out: dict[str, float | int | str] = {"failures": self.failures}
        if self.kind == STEP:
            out["new"] = self.new
        out["for_s"] = round(self.elapsed, 1)
        if self.next_in is not None:
            out["next_report_s"] = self.next_in
        return out


@dataclass
class _Outage:
    started: float
    failures: int = 0
    reported: int = 0  # failures covered by the previous report
    step: float = 0.0  # the current back-off step
    next_at: float = 0.0  # when the next step report is due


class RetryBackoff:
    """The pure part: per key, when a failure or a recovery is worth a log line.

    `first_step`: seconds from the first failure to the first step report; each step is
    `factor` times the previous one, at most `max_step`.
    """

    def __init__(
        self, first_step: float = 1.0, factor: float = 2.0, max_step: float = 300.0
    ) -> None:
        if not 0 < first_step <= max_step or factor < 1:
            raise ValueError(
                f"RetryBackoff needs 0 < first_step ({first_step}) <= max_step ({max_step}) "
                f"and factor ({factor}) >= 1"
            )
        self.first_step, self.factor, self.max_step = first_step, factor, max_step
        self._outages: dict[Hashable, _Outage] = {}

    def failure(self, key: Hashable, now: float) -> Report | None:
        """An attempt for `key` failed at `now`: the report to log, or None to stay quiet."""
        o = self._outages.get(key)
        if o is None:
            o = self._outages[key] = _Outage(started=now, step=self.first_step)
            o.failures = o.reported = 1
            o.next_at = now + o.step
            return Report(FIRST, 1, 1, 0.0, o.step)
        o.failures += 1
        if now < o.next_at:
            return None
        new, o.reported = o.failures - o.reported, o.failures
        o.step = min(o.step * self.factor, self.max_step)
        o.next_at = now + o.step
        return Report(STEP, o.failures, new, now - o.started, o.step)

    def success(self, key: Hashable, now: float) -> Report | None:
        """An attempt for `key` worked: the recovery report if it had been failing."""
        o = self._outages.pop(key, None)
        if o is None:
            return None
        return Report(RECOVERED, o.failures, o.failures - o.reported, now - o.started, None)

    def failing(self, key: Hashable) -> int:
        """Failed attempts in the current outage of `key` (0: not failing)."""
        o = self._outages.get(key)
        return 0 if o is None else o.failures

    def forget(self, key: Hashable) -> None:
        """Drop `key` without a report (the peer left the cluster; the loop stopped)."""
        self._outages.pop(key, None)


class RetryLog:
    """`RetryBackoff` on a logger and the monotonic clock (thread-safe).

    retries = RetryLog(log)
    retries.failure(peer, "dist %s: cannot connect to %s: %s", me, peer, exc)
    retries.success(peer, "dist %s: node up: %s", me, peer, always=True)
    """

    def __init__(
        self,
        logger: logging.Logger,
        *,
        first_step: float = 1.0,
        factor: float = 2.0,
        max_step: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.clock = clock
        self.state = RetryBackoff(first_step, factor, max_step)
        self._lock = threading.Lock()

    def failure(self, key: Hashable, msg: str, *args: object, level: int = logging.INFO) -> bool:
        """Count a failed attempt; log `msg % args` (with the count) if a report is due.
        True if a line was written."""
        with self._lock:
            report = self.state.failure(key, self.clock())
        if report is None:
            return False
        # The first failure of an outage keeps the caller's level; the step reports too, so
        # that a WARNING loop stays visible at WARNING, only rarer.
        self.logger.log(level, msg + "%s", *args, report.suffix())
        return True

    def success(
        self,
        key: Hashable,
        msg: str,
        *args: object,
        level: int = logging.INFO,
        always: bool = False,
    ) -> bool:
        """An attempt worked: log `msg % args` with the outage's count if it had been failing,
        or plainly if `always`. True if a line was written."""
        with self._lock:
            report = self.state.success(key, self.clock())
        if report is None:
            if always:
                self.logger.log(level, msg, *args)
            return always
        self.logger.log(level, msg + "%s", *args, report.suffix())
        return True

    def failing(self, key: Hashable) -> int:
        with self._lock:
            return self.state.failing(key)

    def forget(self, key: Hashable) -> None:
        with self._lock:
            self.state.forget(key)
