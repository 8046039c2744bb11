"""Exactly-once claims inside a Spark partition: the cluster logic an ordinary RDD job calls.

Each message id is claimed with `SET <key> <owner> NX` on the current Redis master (through
FailoverRedis, which WAITs for `wait_replicas` replicas after each batch), where the owner is
the run and the Spark *partition*, not the attempt. That choice is what makes retries safe:

- a retried attempt of the same partition finds its own earlier claims (the key holds its
  owner) and processes those messages again; Spark keeps the output of one attempt only;
- another partition holding the same id (a duplicate) finds a foreign owner and skips it;
- a claim lost in a failover (written to the old master, not replicated) was never confirmed
  by WAIT, so its attempt failed; the retry claims it again on the new master;
- the same id twice within one partition is caught locally.

Before every batch the executor's node must be running (`require_running`): a paused executor
(the minority side of a partition) fails the attempt with a retryable error, and the task
runs elsewhere. Revoked ids (gossip's revoked set) are skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

PROCESS, DUPLICATE, REVOKED = "process", "duplicate", "revoked"
DEFAULT_BATCH = 500
DEFAULT_TTL = 7 * 24 * 3600  # seconds a claim is kept: longer than any rerun of the same input


@dataclass(frozen=True)
class Claim:
    """The verdict for one message: PROCESS (ours), DUPLICATE or REVOKED."""

    verdict: str
    item: Any


def claim_key(namespace: str, message_id: str) -> str:
    return f"rabbitry:once:{namespace}:{message_id}"


class Claimer:
    """Claims ids for one partition of one run. `client` is a redis-py client (a FailoverRedis
    inside an embedded executor); `check` runs before each batch (require_running), and
    `revoked()` returns the current revoked set (or an empty one)."""

    def __init__(
        self,
        client: Any,
        namespace: str,
        owner: str,
        *,
        check: Callable[[], None] = lambda: None,
        revoked: Callable[[], Any] = frozenset,
        batch: int = DEFAULT_BATCH,
        ttl: int = DEFAULT_TTL,
    ) -> None:
        if batch < 1 or ttl < 1:
            raise ValueError(f"batch and ttl must be >= 1, got {batch!r} and {ttl!r}")
        self.client = client
        self.namespace = namespace
        self.owner = owner
        self.check = check
        self.revoked = revoked
        self.batch = batch
        self.ttl = ttl
        self._seen: set[str] = set()

    def claim(self, items: Iterable[Any], key: Callable[[Any], str]) -> Iterator[Claim]:
        """Yield a Claim per item, in order, claiming in batches."""
        chunk: list[Any] = []
        for item in items:
            chunk.append(item)
            if len(chunk) >= self.batch:
                yield from self._claim_batch(chunk, key)
                chunk = []
        if chunk:
            yield from self._claim_batch(chunk, key)

    def _claim_batch(self, chunk: list[Any], key: Callable[[Any], str]) -> list[Claim]:
        self.check()
        revoked = self.revoked()
        verdicts: list[Claim | None] = []
        candidates: list[tuple[int, str]] = []
        for item in chunk:
            mid = key(item)
            if mid in revoked:
                verdicts.append(Claim(REVOKED, item))
            elif mid in self._seen:
                verdicts.append(Claim(DUPLICATE, item))
            else:
                self._seen.add(mid)
                candidates.append((len(verdicts), mid))
                verdicts.append(None)
        if candidates:
            pipe = self.client.pipeline(transaction=False)
            for _, mid in candidates:
                pipe.set(claim_key(self.namespace, mid), self.owner, nx=True, ex=self.ttl)
            results = pipe.execute()
            taken = [(at, mid) for (at, mid), ok in zip(candidates, results, strict=True) if not ok]
            owners = (
                self.client.mget([claim_key(self.namespace, mid) for _, mid in taken])
                if taken
                else []
            )
            ours = {
                at for (at, _), who in zip(taken, owners, strict=True) if _text(who) == self.owner
            }
            refused = {at for at, _ in taken} - ours
            for at, _ in candidates:
                item = chunk[at]
                verdicts[at] = Claim(DUPLICATE if at in refused else PROCESS, item)
        return [v for v in verdicts if v is not None]

    def _confirm_own(self, ids: list[str]) -> None:
        """Rewrite claims an earlier attempt of this partition made. A SET NX that finds the
        key replicates nothing, so a WAIT after it would not prove the replicas have the
        earlier claim (it may have died with its connection before its WAIT): rewriting it
        (XX, KEEPTTL) makes the WAIT that FailoverRedis runs after this pipeline cover it."""
        pipe = self.client.pipeline(transaction=False)
        for mid in ids:
            pipe.set(claim_key(self.namespace, mid), self.owner, xx=True, keepttl=True)
        pipe.execute()


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value
