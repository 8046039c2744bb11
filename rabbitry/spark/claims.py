"""Exactly-once claims inside a Spark partition: the cluster logic an ordinary RDD job calls.

Each message id is claimed with `SET <key> <owner> NX` on the current Redis master, a whole
batch in one script call (CLAIM_SCRIPT; the ids travel as one argument and the answers come
back as one string), through FailoverRedis, which sends `WAIT wait_replicas` with it: one
round trip per batch, the WAIT included. The owner is the run and the Spark
*partition*, not the attempt. That choice is what makes retries safe:

- a retried attempt of the same partition finds its own earlier claims (the key holds its
  owner) and processes those messages again; Spark keeps the output of one attempt only. Such
  a claim is rewritten, so that this batch's WAIT proves the replicas have it (the earlier
  attempt may have died before its own WAIT);
- another partition holding the same id (a duplicate) finds a foreign owner and skips it;
- a claim lost in a failover (written to the old master, not replicated) was never confirmed
  by WAIT, so its attempt failed; the retry claims it again on the new master;
- the same id twice within one partition is caught locally.

Two layouts of the claims in Redis (`Claimer(layout=...)`):

- "keys" (the default, and what claim_key names): one key per id, SET NX EX, each with its own
  expiry: a thousand SET calls in the script per batch;
- "hash" (what the pipeline uses): the run's claims are the fields of ONE hash
  (claim_hash_key: field = id, value = owner), with the expiry on the hash, renewed by every
  batch, so the claims of a run live `ttl` after its last batch. The script reads the whole
  batch with one HMGET and writes the ids it takes (and its own earlier ones, rewritten for
  the WAIT) with one HSET: two calls per batch instead of a thousand. Duplicates in other
  partitions must meet the same structure, so the hash is per run, not per Spark partition;
  the owner (run and partition) is the value, as it is the key's value in "keys".

Before every batch the executor's node must be running (`require_running`): a paused executor
(the minority side of a partition) fails the attempt with a retryable error, and the task
runs elsewhere. Revoked ids (gossip's revoked set) are skipped.
"""

from __future__ import annotations

import os
import threading
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


@dataclass
class SortedBatch:
    """A batch after Claimer.sort_out: the codes decided locally (revoked, repeated in this
    partition), and the fresh ids still to claim in Redis with their places in the batch."""

    codes: bytearray
    fresh: list[str]
    at: list[int]


def claim_key(namespace: str, message_id: str) -> str:
    return f"rabbitry:once:{namespace}:{message_id}"


def claim_hash_key(namespace: str) -> str:
    """The hash that holds a run's claims in the "hash" layout (field: id, value: owner)."""
    return f"rabbitry:claims:{namespace}"


LAYOUTS = ("keys", "hash")


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
        layout: str = "keys",
    ) -> None:
        if batch < 1 or ttl < 1:
            raise ValueError(f"batch and ttl must be >= 1, got {batch!r} and {ttl!r}")
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}; got {layout!r}")
        self.layout = layout
        self.client = client
        self.namespace = namespace
        self.owner = owner
        self.check = check
        self.revoked = revoked
        self.batch = batch
        self.ttl = ttl
        self._seen: set[str] = set()
        self._lock = threading.Lock()  # processed, from the threads that send (job._ClaimQueue)
        # (hash key, field): where the live processed count goes; None: nowhere
        self.progress_key, self.progress_field = progress or ("", "")
        self.processed = 0  # messages of this partition claimed as ours so far
        self._token = os.urandom(6).hex()  # this attempt's, in its progress field (_PROGRESS_LUA)

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
        """The verdicts for one batch, in order (see claim_ids)."""
        codes = self.claim_ids([key(item) for item in chunk])
        return [Claim(VERDICTS[code], item) for code, item in zip(codes, chunk, strict=True)]

    def claim_ids(self, ids: list[str]) -> bytes:
        """The verdict codes for one batch of ids, in order, one byte each (an index into
        VERDICTS): one Redis round trip for all its claims (one script call, and the WAIT
        that FailoverRedis sends with it). `check()` runs first, even for an empty batch.

        Bytes, not objects: the job turns them into an Arrow column without a Python object
        per message. The same as send(sort_out(ids)), which the job splits to keep several
        batches in flight."""
        return self.send(self.sort_out(ids))

    def sort_out(self, ids: list[str]) -> SortedBatch:
        """The local half of a batch's claim, which must run in the partition's order: revoked
        ids, and ids this partition saw already (in this batch or an earlier one), are decided
        here; the rest go to Redis (send). Batches sorted out in order may then be sent in
        any order, even at once: no id is in two of them."""
        revoked = self.revoked()
        seen = self._seen
        codes = bytearray(len(ids))  # PROCESS_CODE (0) until found otherwise
        fresh: list[str] = []
        at: list[int] = []
        for n, mid in enumerate(ids):
            if revoked and mid in revoked:
                codes[n] = REVOKED_CODE
            elif mid in seen:
                codes[n] = DUPLICATE_CODE
            else:
                seen.add(mid)
                fresh.append(mid)
                at.append(n)
        return SortedBatch(codes, fresh, at)

    def send(self, batch: SortedBatch) -> bytes:
        """The Redis half: `check()`, then one script call (and its WAIT) for the batch's
        fresh ids; the codes, final. Safe from several threads at once (a FailoverRedis takes
        a connection per call, and WAIT counts that connection's writes), for batches from
        sort_out. The live progress a call writes is the count answered before it was sent:
        with batches in flight it lags by those, and the job's summary counts from the
        verdicts, not from it."""
        self.check()
        codes, fresh, at = batch.codes, batch.fresh, batch.at
        if fresh:
            answers = self._claim_script(fresh)
            taken = answers.count(b"0")  # FOREIGN
            with self._lock:
                self.processed += len(fresh) - taken
            if taken:
                for n, answer in zip(at, answers, strict=True):
                    if answer == _FOREIGN_BYTE:
                        codes[n] = DUPLICATE_CODE
        return bytes(codes)

    def _claim_script(self, ids: list[str]) -> bytes:
        """One script call for the batch: the ids travel as ONE argument (joined by the byte
        0xFF, which UTF-8 never contains) and the script builds the keys, so redis-py packs a
        handful of arguments, not a thousand; the answers come back as one string."""
        joined = b"\xff".join([mid.encode("utf-8") for mid in ids])
        progress = self.progress_key or claim_key(self.namespace, "-")
        if self.layout == "hash":
            reply = self.client.execute_command(
                "EVAL",
                CLAIM_HASH_SCRIPT,
                2,
                progress,
                claim_hash_key(self.namespace),
                self.owner,
                self.ttl,
                "",
                self.progress_field,
                self._token,
                len(ids),
                joined,
            )
        else:
            reply = self._claim_keys(progress, joined, len(ids))
        answers = reply.encode() if isinstance(reply, str) else bytes(reply)
        if len(answers) != len(ids):  # a script from another version answered
            raise RuntimeError(
                f"the claim script answered {len(answers)} verdicts for {len(ids)} ids; "
                "is an older rabbitry's script cached under the same name?"
            )
        return answers

    def _claim_keys(self, progress: str, joined: bytes, count: int) -> Any:
        """The "keys" layout's script call: a key per id."""
        return self.client.execute_command(
            "EVAL",
            CLAIM_SCRIPT,
            1,
            progress,
            self.owner,
            self.ttl,
            claim_key(self.namespace, ""),
            self.progress_field,
            self._token,
            count,
            joined,
        )


# The verdict codes claim_ids returns, one byte per id: indexes into VERDICTS.
PROCESS_CODE, DUPLICATE_CODE, REVOKED_CODE = 0, 1, 2
VERDICTS = (PROCESS, DUPLICATE, REVOKED)

# The live progress, the end of both scripts: this partition's count so far, in its field of
# the progress hash (KEYS[1], field ARGV[4]; none if ''), as "<token>:<count>". A call adds
# its `ours` to the count its own attempt (token ARGV[5], one per Claimer) wrote last, and
# writes over another attempt's: so a retried attempt's count replaces the failed one's, and
# batches of one attempt in flight at once (job._ClaimQueue) all add up, in whatever order
# they reach Redis.
_PROGRESS_LUA = """
if ARGV[4] ~= '' then
  local held, base = redis.call('HGET', KEYS[1], ARGV[4]), 0
  if held then
    local sep = string.find(held, ':', 1, true)
    if sep and string.sub(held, 1, sep - 1) == ARGV[5] then
      base = tonumber(string.sub(held, sep + 1))
    end
  end
  redis.call('HSET', KEYS[1], ARGV[4], ARGV[5] .. ':' .. (base + ours))
  redis.call('EXPIRE', KEYS[1], 86400)
end
"""

# One script per batch: a claim is SET NX with the owner; a key that already holds OUR owner is
# an earlier attempt's claim of this partition, which may never have reached a replica (its
# attempt died before its WAIT): it is rewritten (XX KEEPTTL), so that the WAIT after this
# script covers it too. Scripts replicate as their effects, so the WAIT counts these writes.
# The live progress rides along (_PROGRESS_LUA).
# The claim keys are built in the script from the prefix and the ids (not passed as KEYS):
# fine on a standalone Redis, which is what the failover set is; a Redis Cluster would need
# them declared. Answers, one character per id: 1 claimed now, 2 ours already (rewritten),
# 0 another owner's.
CLAIMED, OURS_AGAIN, FOREIGN = 1, 2, 0
_FOREIGN_BYTE = ord("0")
CLAIM_SCRIPT = (
    """
local owner, ttl, prefix = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local count, ids = tonumber(ARGV[6]), ARGV[7]
local answers, ours, from = {}, 0, 1
for i = 1, count do
  local stop = string.find(ids, '\\255', from, true)
  local id
  if stop then
    id = string.sub(ids, from, stop - 1)
    from = stop + 1
  else
    id = string.sub(ids, from)
  end
  local key = prefix .. id
  if redis.call('SET', key, owner, 'NX', 'EX', ttl) then
    answers[i] = '1'
    ours = ours + 1
  elseif redis.call('GET', key) == owner then
    redis.call('SET', key, owner, 'XX', 'KEEPTTL')
    answers[i] = '2'
    ours = ours + 1
  else
    answers[i] = '0'
  end
end
"""
    + _PROGRESS_LUA
    + """
return table.concat(answers)
"""
)

# The "hash" layout's script: the same answers and the same progress, with the claims as
# fields of one hash (KEYS[2]). One HMGET reads the batch's owners; one HSET writes every id
# we take or already held (rewritten, as "keys" does, so that this batch's WAIT covers an
# earlier attempt's claim); the EXPIRE renews the hash's. Both calls go in slices of 4,000
# arguments, under Lua's limit for unpack(). Within one call of this script an id is never
# twice: a partition filters its own repeats before claiming (Claimer._seen).
CLAIM_HASH_SCRIPT = (
    """
local owner, ttl, key = ARGV[1], tonumber(ARGV[2]), KEYS[2]
local count, ids = tonumber(ARGV[6]), ARGV[7]
local list, from = {}, 1
for i = 1, count do
  local stop = string.find(ids, '\\255', from, true)
  if stop then
    list[i] = string.sub(ids, from, stop - 1)
    from = stop + 1
  else
    list[i] = string.sub(ids, from)
  end
end
local answers, writes, ours, w = {}, {}, 0, 0
local slice = 4000
for s = 1, count, slice do
  local e = math.min(s + slice - 1, count)
  local held = redis.call('HMGET', key, unpack(list, s, e))
  for i = s, e do
    local h = held[i - s + 1]
    if not h then
      answers[i] = '1'
    elseif h == owner then
      answers[i] = '2'
    else
      answers[i] = '0'
    end
    if answers[i] ~= '0' then
      ours = ours + 1
      writes[w + 1] = list[i]
      writes[w + 2] = owner
      w = w + 2
    end
  end
end
for s = 1, w, slice do
  redis.call('HSET', key, unpack(writes, s, math.min(s + slice - 1, w)))
end
if w > 0 then
  redis.call('EXPIRE', key, ttl)
end
"""
    + _PROGRESS_LUA
    + """
return table.concat(answers)
"""
)


def progress_key(namespace: str, nonce: str) -> str:
    """The hash of live per-partition processed counts of one run of a job."""
    return f"rabbitry:progress:{namespace}:{nonce}"


def read_progress(client: Any, key: str) -> int:
    """The processed count so far, over every partition (the driver's live view); each field
    is "<attempt's token>:<count>" (_PROGRESS_LUA)."""
    return sum(
        int(v.rpartition(b":")[2] if isinstance(v, bytes) else v.rpartition(":")[2])
        for v in client.hvals(key)
    )
