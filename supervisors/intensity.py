"""Restart intensity: the pure bookkeeping behind "at most N restarts in T seconds".

Kept apart from the Supervisor actor so it can be tested exhaustively (hypothesis) and reused
by anything else that needs a crash budget. Times are float seconds from a monotonic clock;
unlike OTP we do not round them to whole seconds.
"""

from __future__ import annotations

from collections import deque


class RestartIntensity:
    """Counts restarts within a sliding window of `period` seconds (OTP's add_restart/1)."""

    __slots__ = ("_times", "intensity", "period")

    def __init__(self, intensity: int, period: float) -> None:
        if intensity < 0:
            raise ValueError(f"intensity must be >= 0; got {intensity}")
        if period <= 0:
            raise ValueError(f"period must be > 0; got {period}")
        self.intensity = intensity
        self.period = float(period)
        self._times: deque[float] = deque()

    def add_restart(self, now: float) -> bool:
        """Record a restart at `now`. False means the budget is exceeded: give up.

        As in OTP, restarts at or after `now - period` still count, and the new restart is
        allowed while the count (including it) is at most `intensity`.
        """
        threshold = now - self.period
        times = self._times
        while times and times[0] < threshold:
            times.popleft()
        times.append(now)
        return len(times) <= self.intensity

    def recent(self) -> list[float]:
        """The restart times still inside the window (oldest first)."""
        return list(self._times)
