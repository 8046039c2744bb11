"""Reconnect delays: exponential, capped and jittered.

Jitter matters because a broker restart drops every node at once; without it they all come back
in the same instant, again and again (the thundering herd). Pure: the random source is injected.
"""

from __future__ import annotations

import random


class Backoff:
    """Delays initial, initial*factor, ... capped at `maximum`, each scaled by a random factor in
    [1 - jitter, 1]. `reset()` after a success starts over."""

    def __init__(
        self,
        initial: float = 0.1,
        maximum: float = 5.0,
        factor: float = 2.0,
        jitter: float = 0.5,
        rng: random.Random | None = None,
    ) -> None:
        if not 0 < initial <= maximum:
            raise ValueError(f"backoff needs 0 < initial ({initial}) <= maximum ({maximum})")
        if factor < 1 or not 0 <= jitter <= 1:
            raise ValueError(
                f"backoff needs factor >= 1 ({factor}) and 0 <= jitter <= 1 ({jitter})"
            )
        self.initial, self.maximum, self.factor, self.jitter = initial, maximum, factor, jitter
        self._rng = rng or random.Random()
        self.attempts = 0

    def next(self) -> float:
        """The next delay in seconds."""
        # Grow by exponent but stop computing once capped (avoid float overflow on long outages).
        ceiling = self.initial
        for _ in range(self.attempts):
            ceiling *= self.factor
            if ceiling >= self.maximum:
                break
        ceiling = min(ceiling, self.maximum)
        self.attempts += 1
        return ceiling * (1 - self.jitter * self._rng.random())

    def reset(self) -> None:
        self.attempts = 0
