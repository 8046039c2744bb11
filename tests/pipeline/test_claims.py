"""rabbitry.spark.claims.Claimer against real redis-server processes (tests/services.py).

The property the pipeline rests on: the owner of a claim is the run and the Spark partition,
not the attempt, so a retried attempt re-finds its own claims while any other partition is
refused them, and every distinct id is processed by exactly one partition's final attempt.
"""

from __future__ import annotations

import itertools
import os
import signal
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from failover import redis_ops
from failover.errors import ReplicationError
from failover.master_file import RedisMasterFile
from failover.redis_client import FailoverRedis
from rabbitry.spark.claims import (
    DEFAULT_TTL,
    DUPLICATE,
    PROCESS,
    REVOKED,
    Claim,
    Claimer,
    claim_key,
    progress_key,
    read_progress,
)
from tests.services import RedisServer, _free_port
from tests.waiting import wait_until

pytestmark = pytest.mark.redis

Servers = Callable[..., list[Any]]
FAST_SYNC = ("--repl-diskless-sync-delay", "0")  # no 5 s wait before the first full sync
NS = "test-run"


@dataclass(frozen=True)
class Item:
    """A message stand-in: the Claimer yields items, and only `key(item)` is an id."""

    id: str
    n: int


def items(*ids: str) -> list[Item]:
    return [Item(mid, n) for n, mid in enumerate(ids)]


def by_id(item: Item) -> str:
    return item.id


def verdicts(claims: list[Claim]) -> list[tuple[str, str]]:
    return [(c.item.id, c.verdict) for c in claims]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One redis-server for the module's plain tests (emptied before each)."""
    started = RedisServer(_free_port(), tmp_path_factory.mktemp("claims-redis"))
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


def run(
    client: Any, owner: str, ids: list[str] | list[Item], namespace: str = NS, **kwargs: Any
) -> list[Claim]:
    things = ids if ids and isinstance(ids[0], Item) else items(*ids)  # type: ignore[arg-type]
    return list(Claimer(client, namespace, owner, **kwargs).claim(things, key=by_id))


# -- the verdicts --------------------------------------------------------------------------------


def test_claim_key() -> None:
    assert claim_key("run-1", "m-7") == "rabbitry:once:run-1:m-7"


def test_first_claims_are_processed_and_hold_the_owner(client: redis.Redis) -> None:
    claims = run(client, "run:0", ["a", "b", "c"])
    assert verdicts(claims) == [("a", PROCESS), ("b", PROCESS), ("c", PROCESS)]
    for mid in "abc":
        assert client.get(claim_key(NS, mid)) == b"run:0"


def test_ids_of_any_text_are_claimed_under_their_own_keys(client: redis.Redis) -> None:
    """The ids travel to the script joined by the byte 0xFF: no character of an id (U+00FF,
    newlines, the 4-byte UTF-8 of an emoji) may split or merge them."""
    odd = ["\u00ff", "a\nb", "a b", "\U0001f600", "\u00e9\u00ff\u00e9", "x" * 512, "7"]
    claims = run(client, "run:0", odd)
    assert verdicts(claims) == [(mid, PROCESS) for mid in odd]
    assert sorted(client.keys("*")) == sorted(claim_key(NS, mid).encode() for mid in odd)
    assert verdicts(run(client, "run:1", odd[::-1])) == [(mid, DUPLICATE) for mid in odd[::-1]]


def test_an_empty_partition_claims_nothing(client: redis.Redis) -> None:
    calls = []
    assert run(client, "run:0", [], check=lambda: calls.append(1)) == []
    assert calls == []
    assert client.dbsize() == 0


def test_the_same_id_twice_in_one_batch_is_a_duplicate(client: redis.Redis) -> None:
    claims = run(client, "run:0", ["a", "b", "a"], batch=10)
    assert verdicts(claims) == [("a", PROCESS), ("b", PROCESS), ("a", DUPLICATE)]


def test_the_same_id_in_a_later_batch_of_the_partition_is_a_duplicate(client: redis.Redis) -> None:
    claims = run(client, "run:0", ["a", "b", "c", "a", "b"], batch=2)
    assert verdicts(claims) == [
        ("a", PROCESS),
        ("b", PROCESS),
        ("c", PROCESS),
        ("a", DUPLICATE),
        ("b", DUPLICATE),
    ]


def test_another_owners_claim_is_a_duplicate(client: redis.Redis) -> None:
    assert verdicts(run(client, "run:0", ["a", "b"])) == [("a", PROCESS), ("b", PROCESS)]
    claims = run(client, "run:1", ["b", "c", "a"])
    assert verdicts(claims) == [("b", DUPLICATE), ("c", PROCESS), ("a", DUPLICATE)]
    assert client.get(claim_key(NS, "a")) == b"run:0"  # a refused claim changes nothing
    assert client.get(claim_key(NS, "c")) == b"run:1"


def test_a_retry_of_the_same_owner_processes_its_own_claims_again(client: redis.Redis) -> None:
    first = Claimer(client, NS, "run:0", batch=2).claim(items("a", "b", "c", "d"), key=by_id)
    assert [next(first).verdict, next(first).verdict] == [PROCESS, PROCESS]
    first.close()  # the attempt died after its first batch
    assert run(client, "run:1", ["b", "e"]) and client.get(claim_key(NS, "b")) == b"run:0"
    retry = run(client, "run:0", ["a", "b", "c", "d"], batch=2)
    assert verdicts(retry) == [("a", PROCESS), ("b", PROCESS), ("c", PROCESS), ("d", PROCESS)]


def test_a_retry_rewrites_its_own_claims_keeping_their_ttl(client: redis.Redis) -> None:
    """The rewrite is what lets the retry's WAIT cover a claim whose first attempt died
    before its own WAIT: it must be a write (a second SET, XX), keep the owner, and keep the
    original expiry."""
    run(client, "run:0", ["a"])
    client.expire(claim_key(NS, "a"), 500)
    client.config_resetstat()
    assert verdicts(run(client, "run:0", ["a"])) == [("a", PROCESS)]
    assert client.info("commandstats")["cmdstat_set"]["calls"] == 2  # NX refused, then XX
    assert client.get(claim_key(NS, "a")) == b"run:0"
    assert 0 < client.ttl(claim_key(NS, "a")) <= 500


def test_each_batch_records_its_partitions_live_count(client: redis.Redis) -> None:
    key = progress_key(NS, "1")
    claimer = Claimer(client, NS, "run:0", batch=2, progress=(key, "0"))
    stream = claimer.claim(items("a", "b", "a", "c", "d"), key=by_id)
    next(stream), next(stream)  # the first batch: a, b
    assert read_progress(client, key) == 2
    list(stream)
    assert read_progress(client, key) == 4  # a twice is one message
    assert 0 < client.ttl(key) <= 86400
    # a retried attempt writes its own count over the failed one's, never adds to it
    retry = Claimer(client, NS, "run:0", batch=10, progress=(key, "0"))
    list(retry.claim(items("a", "b"), key=by_id))
    assert read_progress(client, key) == 2


def test_a_retry_with_a_decoding_client(client: redis.Redis, server: RedisServer) -> None:
    text_client = redis.Redis(port=server.port, decode_responses=True)
    run(text_client, "run:0", ["a"])
    assert verdicts(run(text_client, "run:0", ["a", "b"])) == [("a", PROCESS), ("b", PROCESS)]
    assert verdicts(run(text_client, "run:1", ["a"])) == [("a", DUPLICATE)]


def test_owners_are_per_namespace(client: redis.Redis) -> None:
    run(client, "x:0", ["a"], namespace="run-x")
    assert verdicts(run(client, "y:0", ["a"], namespace="run-y")) == [("a", PROCESS)]


def test_revoked_ids_are_skipped_and_never_claimed(client: redis.Redis) -> None:
    claims = run(client, "run:0", ["a", "r", "b", "r"], revoked=lambda: {"r"})
    assert verdicts(claims) == [("a", PROCESS), ("r", REVOKED), ("b", PROCESS), ("r", REVOKED)]
    assert client.exists(claim_key(NS, "r")) == 0
    assert sorted(client.keys("*")) == [claim_key(NS, "a").encode(), claim_key(NS, "b").encode()]


def test_revoked_beats_an_earlier_claim(client: redis.Redis) -> None:
    run(client, "run:1", ["r"])
    assert verdicts(run(client, "run:0", ["r"], revoked=lambda: frozenset({"r"}))) == [
        ("r", REVOKED)
    ]


def test_the_revoked_set_is_read_for_every_batch(client: redis.Redis) -> None:
    revoked: set[str] = set()
    claimer = Claimer(client, NS, "run:0", batch=2, revoked=lambda: set(revoked))
    stream = claimer.claim(items("a", "b", "c", "d"), key=by_id)
    assert [next(stream).verdict, next(stream).verdict] == [PROCESS, PROCESS]
    revoked.add("d")  # gossip learnt of it while the first batch was being processed
    assert [(c.item.id, c.verdict) for c in stream] == [("c", PROCESS), ("d", REVOKED)]
    assert client.exists(claim_key(NS, "d")) == 0


# -- check: before every batch -------------------------------------------------------------------


def test_check_runs_before_every_batch(client: redis.Redis) -> None:
    log: list[str] = []
    original = client.execute_command

    def execute_command(*args: Any, **kwargs: Any) -> Any:
        log.append("claim")
        return original(*args, **kwargs)

    client.execute_command = execute_command  # type: ignore[method-assign]
    claimer = Claimer(client, NS, "run:0", batch=2, check=lambda: log.append("check"))
    assert len(list(claimer.claim(items("a", "b", "c", "d", "e"), key=by_id))) == 5
    assert log == ["check", "claim"] * 3


def test_check_runs_even_for_a_batch_with_nothing_to_claim(client: redis.Redis) -> None:
    calls: list[int] = []
    claims = run(
        client, "run:0", ["r", "r"], batch=1, check=lambda: calls.append(1), revoked=lambda: {"r"}
    )
    assert [c.verdict for c in claims] == [REVOKED, REVOKED]
    assert len(calls) == 2


class Paused(Exception):
    pass


def test_a_failing_check_stops_the_first_batch_before_any_claim(client: redis.Redis) -> None:
    def check() -> None:
        raise Paused("node paused")

    with pytest.raises(Paused):
        run(client, "run:0", ["a", "b"], check=check)
    assert client.dbsize() == 0


def test_a_failing_check_stops_a_later_batch_before_any_of_it_is_claimed(
    client: redis.Redis,
) -> None:
    calls = itertools.count()

    def check() -> None:
        if next(calls) == 1:
            raise Paused("node paused")

    stream = Claimer(client, NS, "run:0", batch=2, check=check).claim(
        items("a", "b", "c", "d"), key=by_id
    )
    assert [next(stream).item.id, next(stream).item.id] == ["a", "b"]
    with pytest.raises(Paused):
        next(stream)
    assert client.exists(claim_key(NS, "a"), claim_key(NS, "b")) == 2
    assert client.exists(claim_key(NS, "c"), claim_key(NS, "d")) == 0


def test_the_claimer_is_lazy(client: redis.Redis) -> None:
    consumed: list[int] = []

    def source() -> Iterator[Item]:
        for n, mid in enumerate("abcdef"):
            consumed.append(n)
            yield Item(mid, n)

    stream = Claimer(client, NS, "run:0", batch=2).claim(source(), key=by_id)
    assert next(stream).item.id == "a"
    assert consumed == [0, 1]  # one batch read, one batch claimed
    assert client.dbsize() == 2


# -- batches, order, TTL -------------------------------------------------------------------------


SCENARIO = ["a", "b", "a", "x", "c", "r", "d", "b", "y", "r", "e", "a"]


@pytest.mark.parametrize("batch", [1, 2, 5, len(SCENARIO), len(SCENARIO) + 7])
def test_batch_boundaries_do_not_change_the_verdicts(client: redis.Redis, batch: int) -> None:
    run(client, "other:1", ["x", "y"])  # held by another partition
    claims = run(client, "run:0", SCENARIO, batch=batch, revoked=lambda: {"r"})
    assert verdicts(claims) == [
        ("a", PROCESS),
        ("b", PROCESS),
        ("a", DUPLICATE),
        ("x", DUPLICATE),
        ("c", PROCESS),
        ("r", REVOKED),
        ("d", PROCESS),
        ("b", DUPLICATE),
        ("y", DUPLICATE),
        ("r", REVOKED),
        ("e", PROCESS),
        ("a", DUPLICATE),
    ]


def test_claims_come_out_in_input_order_with_their_items(client: redis.Redis) -> None:
    run(client, "other:1", ["m3", "m7"])
    things = [Item(f"m{n % 9}", n) for n in range(40)]
    claims = run(client, "run:0", things, batch=6, revoked=lambda: {"m5"})
    assert [c.item for c in claims] == things  # the same objects, in order, none lost


def test_claims_have_the_ttl(client: redis.Redis) -> None:
    run(client, "run:0", ["a", "b"], ttl=100)
    for mid in "ab":
        assert 0 < client.ttl(claim_key(NS, mid)) <= 100


def test_the_default_ttl_is_a_week(client: redis.Redis) -> None:
    assert DEFAULT_TTL == 7 * 24 * 3600
    run(client, "run:0", ["a"])
    assert DEFAULT_TTL - 60 < client.ttl(claim_key(NS, "a")) <= DEFAULT_TTL


@pytest.mark.parametrize(("batch", "ttl"), [(0, 10), (10, 0), (-1, 10)])
def test_bad_batch_or_ttl(batch: int, ttl: int) -> None:
    with pytest.raises(ValueError, match="batch and ttl"):
        Claimer(None, NS, "o", batch=batch, ttl=ttl)


# -- through FailoverRedis, with a replica -------------------------------------------------------


def replicated_pair(redis_servers: Servers, tmp_path: Path) -> tuple[Any, Any, Path]:
    master, replica = redis_servers(2, *FAST_SYNC)
    redis_ops.make_replica(replica.address, master.address)

    def online() -> bool:
        info = redis_ops.replication_info(master.address)
        return bool(info and any(s["state"] == "online" for s in info["connected_slaves"]))

    wait_until(online, f"{replica.address} online as a replica of {master.address}")
    path = tmp_path / "redis-master"
    RedisMasterFile(path).write(master.address)
    return master, replica, path


def failover_client(path: Path, wait_timeout: float) -> FailoverRedis:
    return FailoverRedis(
        str(path),
        wait_replicas=1,
        wait_timeout=wait_timeout,
        failover_timeout=5.0,
        retry_interval=0.05,
    )


def test_with_failover_redis_claims_are_on_the_replica_when_the_batch_returns(
    redis_servers: Servers, tmp_path: Path
) -> None:
    _, replica, path = replicated_pair(redis_servers, tmp_path)
    client = failover_client(path, wait_timeout=3.0)  # a loaded host; WAIT returns at once
    on_replica = redis.Redis(port=replica.port)
    stream = Claimer(client, NS, "run:0", batch=3).claim(items(*"abcdefg"), key=by_id)
    for claim in stream:
        # Whatever has been yielded is on the replica already, with no waiting here.
        key = claim_key(NS, claim.item.id)
        assert on_replica.get(key) == b"run:0", claim
        assert on_replica.ttl(key) > 0
    assert verdicts(run(client, "run:1", ["a", "z"])) == [("a", DUPLICATE), ("z", PROCESS)]
    assert on_replica.get(claim_key(NS, "z")) == b"run:1"


def test_with_failover_redis_unreplicated_claims_are_never_yielded(
    redis_servers: Servers, tmp_path: Path
) -> None:
    """With the replica stopped, WAIT cannot be acknowledged: the attempt fails, and so does
    a retry of the same owner that re-finds those claims on the master; only once the replica
    is back does the retry process them."""
    master, replica, path = replicated_pair(redis_servers, tmp_path)
    client = failover_client(path, wait_timeout=0.2)
    os.kill(replica.proc.pid, signal.SIGSTOP)
    try:
        with pytest.raises(ReplicationError):
            run(client, "run:0", ["a", "b"])
        assert redis.Redis(port=master.port).get(claim_key(NS, "a")) == b"run:0"
        fresh = failover_client(path, wait_timeout=0.2)  # a new attempt: a new connection
        with pytest.raises(ReplicationError):
            run(fresh, "run:0", ["a", "b"])
    finally:
        os.kill(replica.proc.pid, signal.SIGCONT)
    retry = run(failover_client(path, wait_timeout=3.0), "run:0", ["a", "b"])
    assert verdicts(retry) == [("a", PROCESS), ("b", PROCESS)]
    assert redis.Redis(port=replica.port).get(claim_key(NS, "b")) == b"run:0"


# -- the property: exactly once across owners, aborted attempts and retries ----------------------

EXAMPLE = itertools.count()  # a fresh namespace per hypothesis example
IDS = st.sampled_from([f"m{n}" for n in range(10)])


@st.composite
def workloads(draw: st.DrawFn) -> dict[str, Any]:
    partitions = draw(st.lists(st.lists(IDS, max_size=10), min_size=1, max_size=4))
    # Per partition, the failed attempts before the one that succeeds: each dies after
    # taking that many verdicts (0: before its first).
    failures = [draw(st.lists(st.integers(0, max(len(p), 1)), max_size=2)) for p in partitions]
    return {
        "partitions": partitions,
        "failures": failures,
        "revoked": draw(st.frozensets(IDS, max_size=2)),
        "batch": draw(st.integers(1, 4)),
    }


class Attempt:
    def __init__(self, client: Any, namespace: str, owner: str, work: dict, ids: list[str]):
        claimer = Claimer(
            client, namespace, owner, batch=work["batch"], revoked=lambda: work["revoked"]
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
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(work=workloads(), data=st.data())
def test_every_distinct_id_is_processed_exactly_once_by_the_final_attempts(
    client: redis.Redis, work: dict[str, Any], data: st.DataObject
) -> None:
    namespace = f"prop-{next(EXAMPLE)}"
    partitions, failures = work["partitions"], work["failures"]
    owners = [f"{namespace}:{index}" for index in range(len(partitions))]
    left = [list(f) for f in failures]  # abort points still to come, per partition
    attempts = {
        i: Attempt(client, namespace, owners[i], work, partitions[i]) for i in range(len(owners))
    }
    final: dict[int, Attempt] = {}
    # Interleave the partitions' attempts one verdict at a time, in an order hypothesis picks.
    while attempts:
        index = data.draw(st.sampled_from(sorted(attempts)), label="next partition")
        attempt = attempts[index]
        if left[index] and len(attempt.taken) >= left[index][0]:
            left[index].pop(0)
            attempt.stream.close()  # the attempt died; Spark retries the partition
            attempts[index] = Attempt(client, namespace, owners[index], work, partitions[index])
            continue
        attempt.step()
        if attempt.done and not left[index]:
            final[index] = attempts.pop(index)
        elif attempt.done:  # it would have died later than its end: it died at the end
            left[index] = []
            final[index] = attempts.pop(index)

    processed = Counter(c.item.id for a in final.values() for c in a.taken if c.verdict == PROCESS)
    distinct = {mid for p in partitions for mid in p}
    assert set(processed) == distinct - work["revoked"]
    assert all(n == 1 for n in processed.values()), processed
    for index, attempt in final.items():
        assert [c.item.id for c in attempt.taken] == partitions[index]
        for claim in attempt.taken:
            assert (claim.verdict == REVOKED) == (claim.item.id in work["revoked"])
