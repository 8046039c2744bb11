"""The tarpit for failed cookie proofs. Pure: fed the time, it answers; the shell holds
sockets and logs.

Why a tarpit and not a lockout: refusing an address before any handshake (as we did) lets
one node with a stale cookie, or three bad handshakes per window from a neighbour behind the
same NAT, keep every right-cookie node on that address out. Postfix instead answers the
client that keeps erring more and more slowly (`smtpd_error_sleep_time`); only the failing
conversation pays. Here:

- A failed proof holds its own connection open, doing nothing, for a delay that doubles per
  (address, claimed name) (FailureGate: `initial` doubling to `maximum`), then closes it. The
  sender learns "wrong" only then. Other connections from that address are never refused.
- Guesses per address are bounded by a token bucket (`rate` per second, `burst`): every proof
  checked takes a token, a proof that succeeds gives it back. So right-cookie nodes spend
  nothing, and a stale neighbour retrying sequentially (each try held by the tarpit) never
  empties the bucket. Only a flood of parallel guesses beyond `rate` per second empties it;
  a proof that arrives then waits (in the pending loop, costing no thread) for a token, up to
  the handshake deadline. That wait is the one way a same-address right-cookie node can be
  slowed, and only while someone on its address guesses faster than `rate` per second.
"""

from __future__ import annotations

from dataclasses import dataclass

from monitors.dist.gate import FailureGate

DEFAULT_RATE = 10.0  # proofs checked per address per second (the goal: at most 10/s)
DEFAULT_BURST = 10.0


@dataclass
class _Bucket:
    tokens: float
    at: float


class Tarpit:
    """Per-address token buckets for proof checks, and per-(address, name) doubling holds."""

    def __init__(
        self,
        gate: FailureGate | None = None,
        rate: float = DEFAULT_RATE,
        burst: float = DEFAULT_BURST,
        max_keys: int = 10_000,
    ) -> None:
        if not rate > 0 or not burst >= 1 or max_keys < 1:
            raise ValueError(
                f"Tarpit needs rate > 0, burst >= 1, max_keys >= 1; got {rate}, {burst}, {max_keys}"
            )
        # free=0: the first failure already costs `initial` (Postfix sleeps from the first
        # error); a success never resets it (the success is usually another node).
        self.gate = gate if gate is not None else FailureGate(free=0, initial=1.0, maximum=30.0)
        self.rate, self.burst, self.max_keys = float(rate), float(burst), max_keys
        self._buckets: dict[str, _Bucket] = {}

    def _bucket(self, address: str, now: float) -> _Bucket:
        bucket = self._buckets.get(address)
        if bucket is None:
            if len(self._buckets) >= self.max_keys:
                # Full buckets carry no state worth keeping; drop those first, then the oldest.
                full = [k for k, b in self._buckets.items() if self._level(b, now) >= self.burst]
                for key in full or [min(self._buckets, key=lambda k: self._buckets[k].at)]:
                    del self._buckets[key]
            bucket = self._buckets[address] = _Bucket(self.burst, now)
        return bucket

    def _level(self, bucket: _Bucket, now: float) -> float:
        return min(self.burst, bucket.tokens + (now - bucket.at) * self.rate)

    def take(self, address: str, now: float) -> bool:
        """May a proof from `address` be checked now? True takes a token."""
        bucket = self._bucket(address, now)
        bucket.tokens, bucket.at = self._level(bucket, now), now
        if bucket.tokens < 1.0:
            return False
        bucket.tokens -= 1.0
        return True

    def wait(self, address: str, now: float) -> float:
        """Seconds until `address` has a token again (0.0: now)."""
        bucket = self._buckets.get(address)
        if bucket is None:
            return 0.0
        return max((1.0 - self._level(bucket, now)) / self.rate, 0.0)

    def refund(self, address: str, now: float) -> None:
        """The proof was right: give its token back."""
        bucket = self._buckets.get(address)
        if bucket is not None:
            bucket.tokens, bucket.at = min(self.burst, self._level(bucket, now) + 1.0), now

    def failed(self, address: str, name: str, now: float) -> tuple[int, float]:
        """A wrong proof from `address` claiming `name` ("" when not known, as without TLS,
        where the name comes after the proof): (failures so far, seconds to hold it)."""
        return self.gate.failed(f"{address} {name}".rstrip(), now)
