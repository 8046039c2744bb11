"""The "hash" layout of rabbitry.spark.claims (what the pipeline uses): a run's claims are the
fields of one hash, with the expiry on the hash. The same verdicts as the "keys" layout
(test_claims.py), against real redis-servers: first claims, other owners' claims, a retry
re-finding (and rewriting) its own, revoked ids, progress, the replica holding every yielded
claim, unreplicated claims never yielded, and the exactly-once property under interleaved,
aborted and retried attempts.
"""

from __future__ import annotations

import itertools
import os
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from failover.errors import ReplicationError
from rabbitry.spark.claims import (
    DEFAULT_TTL,
    DUPLICATE,
    PROCESS,
    REVOKED,
    Claim,
    Claimer,
    claim_hash_key,
    progress_key,
    read_progress,
)
from tests.pipeline.test_claims import (
    NS,
    Servers,
    by_id,
    failover_client,
    items,
    replicated_pair,
    verdicts,
    workloads,
)
from tests.services import RedisServer, _free_port

pytestmark = pytest.mark.redis
KEY = claim_hash_key(NS)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One redis-server for the module's plain tests (emptied before each)."""
    started = RedisServer(_free_port(), tmp_path_factory.mktemp("claims-hash-redis"))
    started.start()
    try:
        yield started
    finally:
        started.stop(kill=True)


@pytest.fixture
def client(server: RedisServer) -> Iterator[redis.Redis]:
    connection = redis.Redis(port=server.port)
    connection.flushall()
    yield connection
    connection.close()


def run(client: Any, owner: str, ids: list[str], namespace: str = NS, **kwargs: Any) -> list[Claim]:
    claimer = Claimer(client, namespace, owner, layout="hash", **kwargs)
    return list(claimer.claim(items(*ids), key=by_id))


def test_claims_are_fields_of_one_hash_with_its_expiry(client: redis.Redis) -> None:
    claims = run(client, "run:0", ["a", "b", "c"], ttl=600)
    assert verdicts(claims) == [("a", PROCESS), ("b", PROCESS), ("c", PROCESS)]
    assert client.keys("*") == [KEY.encode()]
    assert client.hgetall(KEY) == {b"a": b"run:0", b"b": b"run:0", b"c": b"run:0"}
    assert 0 < client.ttl(KEY) <= 600


def test_the_default_ttl_is_a_week(client: redis.Redis) -> None:
    run(client, "run:0", ["a"])
    assert DEFAULT_TTL - 60 < client.ttl(KEY) <= DEFAULT_TTL


def test_ids_of_any_text(client: redis.Redis) -> None:
    odd = ["\u00ff", "a\nb", "a b", "\U0001f600", "\u00e9\u00ff\u00e9", "x" * 512, "7"]
    assert verdicts(run(client, "run:0", odd)) == [(mid, PROCESS) for mid in odd]
    assert sorted(client.hkeys(KEY)) == sorted(mid.encode() for mid in odd)
    assert verdicts(run(client, "run:1", odd[::-1])) == [(mid, DUPLICATE) for mid in odd[::-1]]


def test_repeats_within_a_partition_and_other_owners(client: redis.Redis) -> None:
    claims = run(client, "run:0", ["a", "b", "a", "c", "b"], batch=2)
    assert verdicts(claims) == [
        ("a", PROCESS),
        ("b", PROCESS),
        ("a", DUPLICATE),
        ("c", PROCESS),
        ("b", DUPLICATE),
    ]
    claims = run(client, "run:1", ["b", "d", "a"])
    assert verdicts(claims) == [("b", DUPLICATE), ("d", PROCESS), ("a", DUPLICATE)]
    assert client.hget(KEY, "a") == b"run:0"  # a refused claim changes nothing
    assert client.hget(KEY, "d") == b"run:1"


def test_a_retry_processes_and_rewrites_its_own_claims(client: redis.Redis) -> None:
    """The rewrite is what lets the retry's WAIT cover a claim whose first attempt died before
    its own WAIT: the retry's one HSET writes them again."""
    first = Claimer(client, NS, "run:0", batch=2, layout="hash")
    stream = first.claim(items("a", "b", "c", "d"), key=by_id)
    assert [next(stream).verdict, next(stream).verdict] == [PROCESS, PROCESS]
    stream.close()  # the attempt died after its first batch
    assert verdicts(run(client, "run:1", ["b", "e"])) == [("b", DUPLICATE), ("e", PROCESS)]
    client.config_resetstat()
    retry = run(client, "run:0", ["a", "b", "c", "d"], batch=10)
    assert verdicts(retry) == [("a", PROCESS), ("b", PROCESS), ("c", PROCESS), ("d", PROCESS)]
    stats = client.info("commandstats")
    assert stats["cmdstat_hmget"]["calls"] == 1
    assert stats["cmdstat_hset"]["calls"] == 1  # a, b rewritten with c, d: one call
    assert client.hget(KEY, "a") == b"run:0"


def test_revoked_ids_are_skipped_and_never_claimed(client: redis.Redis) -> None:
    claims = run(client, "run:0", ["a", "r", "b"], revoked=lambda: {"r"})
    assert verdicts(claims) == [("a", PROCESS), ("r", REVOKED), ("b", PROCESS)]
    assert not client.hexists(KEY, "r")


def test_all_foreign_batch_writes_nothing(client: redis.Redis) -> None:
    run(client, "run:0", ["a", "b"])
    client.config_resetstat()
    assert verdicts(run(client, "run:1", ["a", "b"])) == [("a", DUPLICATE), ("b", DUPLICATE)]
    assert "cmdstat_hset" not in client.info("commandstats")


def test_a_batch_larger_than_one_unpack_slice(client: redis.Redis) -> None:
    ids = [f"m{n}" for n in range(9000)]
    assert [c.verdict for c in run(client, "run:0", ids, batch=9000)] == [PROCESS] * 9000
    assert client.hlen(KEY) == 9000
    again = run(client, "run:1", [*ids[::2], "new"], batch=9000)
    assert [c.verdict for c in again] == [DUPLICATE] * 4500 + [PROCESS]


def test_each_batch_records_its_partitions_live_count(client: redis.Redis) -> None:
    key = progress_key(NS, "1")
    claimer = Claimer(client, NS, "run:0", batch=2, progress=(key, "0"), layout="hash")
    list(claimer.claim(items("a", "b", "a", "c", "d"), key=by_id))
    assert read_progress(client, key) == 4
    retry = Claimer(client, NS, "run:0", batch=10, progress=(key, "0"), layout="hash")
    list(retry.claim(items("a", "b"), key=by_id))
    assert read_progress(client, key) == 2


def test_batches_sorted_out_in_order_may_land_in_any_order(client: redis.Redis) -> None:
    """What the job does with claims in flight (job._ClaimQueue): sort_out in the partition's
    order (repeats caught locally, across batches too), send in any order; the verdicts and
    the live count come out as if sent in order."""
    key = progress_key(NS, "1")
    claimer = Claimer(client, NS, "run:0", progress=(key, "0"), layout="hash")
    first = claimer.sort_out(["a", "b", "c"])
    second = claimer.sort_out(["d", "a", "e"])  # "a" repeats the first batch's
    client.hset(KEY, "e", "run:1")  # another partition has "e"
    assert claimer.send(second) == bytes([0, 1, 1])  # d ours; a repeated; e foreign
    assert read_progress(client, key) == 1
    # in flight at once: `first` was sent before `second` answered, when this attempt had
    # counted nothing yet; the count in Redis must not depend on that
    claimer.processed = 0
    assert claimer.send(first) == bytes(3)
    assert read_progress(client, key) == 4  # added up, whatever the order
    retry = Claimer(client, NS, "run:0", progress=(key, "0"), layout="hash")
    assert retry.send(retry.sort_out(["b"])) == bytes(1)  # its own claim, again
    assert read_progress(client, key) == 1  # a new attempt's count replaces, never adds


def test_a_bad_layout() -> None:
    with pytest.raises(ValueError, match="layout"):
        Claimer(None, NS, "run:0", layout="zset")


def test_with_failover_redis_claims_are_on_the_replica_when_the_batch_returns(
    redis_servers: Servers, tmp_path: Path
) -> None:
    _, replica, path = replicated_pair(redis_servers, tmp_path)
    client = failover_client(path, wait_timeout=3.0)
    on_replica = redis.Redis(port=replica.port)
    stream = Claimer(client, NS, "run:0", batch=3, layout="hash").claim(
        items(*"abcdefg"), key=by_id
    )
    for claim in stream:
        assert on_replica.hget(KEY, claim.item.id) == b"run:0", claim
        assert on_replica.ttl(KEY) > 0
    assert verdicts(run(client, "run:1", ["a", "z"])) == [("a", DUPLICATE), ("z", PROCESS)]
    assert on_replica.hget(KEY, "z") == b"run:1"


def test_with_failover_redis_unreplicated_claims_are_never_yielded(
    redis_servers: Servers, tmp_path: Path
) -> None:
    master, replica, path = replicated_pair(redis_servers, tmp_path)
    client = failover_client(path, wait_timeout=0.2)
    os.kill(replica.proc.pid, signal.SIGSTOP)
    try:
        with pytest.raises(ReplicationError):
            run(client, "run:0", ["a", "b"])
        assert redis.Redis(port=master.port).hget(KEY, "a") == b"run:0"
        with pytest.raises(ReplicationError):
            run(failover_client(path, wait_timeout=0.2), "run:0", ["a", "b"])
    finally:
        os.kill(replica.proc.pid, signal.SIGCONT)
    retry = run(failover_client(path, wait_timeout=3.0), "run:0", ["a", "b"])
    assert verdicts(retry) == [("a", PROCESS), ("b", PROCESS)]
    assert redis.Redis(port=replica.port).hget(KEY, "b") == b"run:0"


EXAMPLE = itertools.count()


class Attempt:
    def __init__(self, client: Any, namespace: str, owner: str, work: dict, ids: list[str]):
        claimer = Claimer(
            client,
            namespace,
            owner,
            batch=work["batch"],
            revoked=lambda: work["revoked"],
            layout="hash",
        )
        self.stream = claimer.claim(items(*ids), key=by_id)
        self.taken: list[Claim] = []
        self.done = False

    def step(self) -> None:
        try:
            self.taken.append(next(self.stream))
        except StopIteration:
            self.done = True


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(work=workloads(), data=st.data())
def test_every_distinct_id_is_processed_exactly_once_by_the_final_attempts(
    client: redis.Redis, work: dict[str, Any], data: st.DataObject
) -> None:
    """test_claims.py's property, on the hash layout."""
    namespace = f"hprop-{next(EXAMPLE)}"
    partitions, failures = work["partitions"], work["failures"]
    owners = [f"{namespace}:{index}" for index in range(len(partitions))]
    left = [list(f) for f in failures]
    attempts = {
        i: Attempt(client, namespace, owners[i], work, partitions[i]) for i in range(len(owners))
    }
    final: dict[int, Attempt] = {}
    while attempts:
        index = data.draw(st.sampled_from(sorted(attempts)), label="next partition")
        attempt = attempts[index]
        if left[index] and len(attempt.taken) >= left[index][0]:
            left[index].pop(0)
            attempt.stream.close()
            attempts[index] = Attempt(client, namespace, owners[index], work, partitions[index])
            continue
        attempt.step()
        if attempt.done:
            left[index] = []
            final[index] = attempts.pop(index)
    processed = Counter(c.item.id for a in final.values() for c in a.taken if c.verdict == PROCESS)
    distinct = {mid for p in partitions for mid in p}
    assert set(processed) == distinct - work["revoked"]
    assert all(n == 1 for n in processed.values()), processed
    for index, attempt in final.items():
        assert [c.item.id for c in attempt.taken] == partitions[index]
