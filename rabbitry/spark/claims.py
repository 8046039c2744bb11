"""Exactly-once claims inside a Spark partition: the cluster logic an ordinary RDD job calls.

Each message id is claimed with `SET <key> <owner> NX` on the current Redis master, a whole
batch in one script call (CLAIM_SCRIPT: one round trip), through FailoverRedis, which WAITs
for `wait_replicas` replicas once after each batch. The owner is the run and the Spark
*partition*, not the attempt. That choice is what makes retries safe:

- a retried attempt of the same partition finds its own earlier claims (the key holds its
  owner) and processes those messages again; Spark keeps the output of one attempt only. Such
  a claim is rewritten, so that this batch's WAIT proves the replicas have it (the earlier
  attempt may have died before its own WAIT);
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
DEFAULT_BATCH = 1000  # claims per round trip (one script call, then one WAIT)
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
    `revoked()` returns the current revoked set (or an empty one). `progress`: a (hash key,
    field) where each batch also records this partition's processed count so far."""

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
        progress: tuple[str, str] | None = None,
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
        # (hash key, field): where the live processed count goes; None: nowhere
        self.progress_key, self.progress_field = progress or ("", "")
        self.processed = 0  # messages of this partition claimed as ours so far

    def claim(self, items: Iterable[Any], key: Callable[[Any], str]) -> Iterator[Claim]:
        """Yield a Claim per item, in order, claiming in batches."""
        chunk: list[Any] = []
        for item in items:
            chunk.append(item)
            if len(chunk) >= self.batch:
                yield from self.claim_batch(chunk, key)
                chunk = []
        if chunk:
            yield from self.claim_batch(chunk, key)

    def claim_batch(self, chunk: list[Any], key: Callable[[Any], str]) -> list[Claim]:
        """The verdicts for one batch, in order: one Redis round trip for all its claims (one
        script), then the WAIT that FailoverRedis runs after it. `check()` runs first."""
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
            answers = self._claim_script([mid for _, mid in candidates])
            ours = 0
            for (at, _), answer in zip(candidates, answers, strict=True):
                mine = int(answer) != FOREIGN
                ours += mine
                verdicts[at] = Claim(PROCESS if mine else DUPLICATE, chunk[at])
            self.processed += ours
        return [v for v in verdicts if v is not None]

    def _claim_script(self, ids: list[str]) -> list[Any]:
        keys = [self.progress_key or claim_key(self.namespace, "-")]
        keys += [claim_key(self.namespace, mid) for mid in ids]
        args = [self.owner, self.ttl, self.progress_field, self.processed]
        pipe = self.client.pipeline(transaction=False)
        pipe.execute_command("EVAL", CLAIM_SCRIPT, len(keys), *keys, *args)
        return list(pipe.execute()[0])


# One script per batch: a claim is SET NX with the owner; a key that already holds OUR owner is
# an earlier attempt's claim of this partition, which may never have reached a replica (its
# attempt died before its WAIT): it is rewritten (XX KEEPTTL), so that the WAIT after this
# script covers it too. Scripts replicate as their effects, so the WAIT counts these writes.
# The live progress (this partition's processed count, so far) rides along in a hash: an
# attempt writes its own count, so a retry overwrites rather than adds.
# Answers per key: 1 claimed now, 2 ours already (rewritten), 0 another owner's.
CLAIMED, OURS_AGAIN, FOREIGN = 1, 2, 0
CLAIM_SCRIPT = """
local owner, ttl = ARGV[1], tonumber(ARGV[2])
local answers, ours = {}, 0
for i = 2, #KEYS do
  if redis.call('SET', KEYS[i], owner, 'NX', 'EX', ttl) then
    answers[i - 1] = 1
    ours = ours + 1
  elseif redis.call('GET', KEYS[i]) == owner then
    redis.call('SET', KEYS[i], owner, 'XX', 'KEEPTTL')
    answers[i - 1] = 2
    ours = ours + 1
  else
    answers[i - 1] = 0
  end
end
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[1], ARGV[3], tonumber(ARGV[4]) + ours)
  redis.call('EXPIRE', KEYS[1], 86400)
end
return answers
"""


def progress_key(namespace: str, nonce: str) -> str:
    """The hash of live per-partition processed counts of one run of a job."""
    return f"rabbitry:progress:{namespace}:{nonce}"


def read_progress(client: Any, key: str) -> int:
    """The processed count so far, over every partition (the driver's live view)."""
    return sum(int(v) for v in client.hvals(key))
