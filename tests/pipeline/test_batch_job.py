"""The pipeline's Python pass (`_BatchJob`, what mapInArrow runs per partition) on Arrow
batches, outside Spark: parse, check, claim (plain SET NX on a real redis-server) and the
verdict columns. The JVM's part (reading, counting, writing) is tested in tests/spark."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rabbitry.pipeline.job import PipelineOptions, _BatchJob
from rabbitry.spark.claims import progress_key, read_progress
from tests.services import RedisServer, _free_port

pa = pytest.importorskip("pyarrow")


class Counter:
    """Stands in for a Spark accumulator (the job only calls add)."""

    def __init__(self) -> None:
        self.value = 0

    def add(self, n: int) -> None:
        self.value += n


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    started = RedisServer(_free_port(), tmp_path_factory.mktemp("batch-job-redis"))
    started.start()
    try:
        yield started
    finally:
        started.stop(kill=True)


def run(job: _BatchJob, *batches: list[str | None]) -> list[dict[str, Any]]:
    arrow = [pa.RecordBatch.from_pydict({"value": lines}) for lines in batches]
    return [row for out in job(iter(arrow)) for row in out.to_pylist()]


def make(server: RedisServer, tmp_path: Path, **options: Any) -> tuple[_BatchJob, Counter]:
    done = Counter()
    opts = PipelineOptions(run_id="bj", batch=2, plain_redis=f"127.0.0.1:{server.port}", **options)
    job = _BatchJob(
        "bj",
        opts,
        pause_wait=0.0,
        fmt="jsonl",
        progress=progress_key("bj", "1"),
        retried=Counter(),
        finished=done,
    )
    return job, done


def test_verdicts_line_numbers_and_rejects(server: RedisServer, tmp_path: Path) -> None:
    import redis

    redis.Redis(port=server.port).flushall()
    job, done = make(server, tmp_path)
    first = [json.dumps({"id": "a", "payload": "1"}), "{oops", ""]
    second = [json.dumps({"id": "b", "payload": {"n": 2}}), json.dumps({"id": "a", "payload": "3"})]
    *rows, last = run(job, first, second)
    # the partition's last row counts its lines (blank ones too): the driver's offsets
    assert (last["kind"], last["partition"], last["line"]) == ("lines", 0, 5)
    by_line = {row["line"]: row for row in rows}
    assert sorted(by_line) == [1, 2, 4, 5]  # line 3 is blank: neither message nor reject
    assert (by_line[1]["kind"], by_line[1]["id"], by_line[1]["payload"]) == ("process", "a", "1")
    assert by_line[2]["kind"] == "reject" and by_line[2]["reason"].startswith("malformed JSON")
    assert by_line[2]["text"] == "{oops"
    assert (by_line[4]["kind"], by_line[4]["payload"]) == ("process", '{"n":2}')
    assert (by_line[5]["kind"], by_line[5]["payload"]) == ("duplicate", None)
    assert {row["node"] for row in rows if row["kind"] != "reject"} == {"-"}
    assert done.value == 2
    assert read_progress(redis.Redis(port=server.port), progress_key("bj", "1")) == 2


def test_no_claims_is_the_same_pass_without_redis(server: RedisServer, tmp_path: Path) -> None:
    job, done = make(server, tmp_path, no_claims=True)
    lines = [json.dumps({"id": "x", "payload": "p"})] * 2
    rows = run(job, lines)
    # nothing claimed or deduped; then the partition's line count
    assert [row["kind"] for row in rows] == ["process", "process", "lines"]
    assert done.value == 2


def test_the_driver_reads_the_live_count_from_the_executors_master_file(
    server: RedisServer, tmp_path: Path
) -> None:
    """What the demo's view shows while the job runs: the driver finds the master file in the
    settings configure() gave the executors, and sums the partitions' counts there."""
    import redis
    from pyspark import SparkConf

    from failover.master_file import RedisMasterFile
    from rabbitry.pipeline.job import _progress_reader
    from rabbitry.spark.settings import ENV_SETTINGS, EmbedSettings

    master_file = tmp_path / "redis-master"
    RedisMasterFile(master_file, "demo").write(f"127.0.0.1:{server.port}")
    settings = EmbedSettings(node={}, master_file=str(master_file), system="demo")

    class Context:
        def getConf(self) -> Any:  # SparkContext's name
            return SparkConf(loadDefaults=False).set(
                f"spark.executorEnv.{ENV_SETTINGS}", settings.to_json()
            )

    key = progress_key("live", "7")
    client = redis.Redis(port=server.port)
    client.hset(key, mapping={"0": 300, "1": 200})
    reader = _progress_reader(Context(), PipelineOptions(), key)
    assert reader is not None and reader() == 500


def test_a_failed_claim_fails_the_attempt_after_only_answered_verdicts(
    server: RedisServer, tmp_path: Path
) -> None:
    """Claims are in flight while the next slices are parsed; still, every verdict that comes
    out was answered, and a claim that fails (a paused node, no WAIT) fails the attempt."""

    class Paused(Exception):
        pass

    class Stub:
        """The two halves of Claimer.claim_ids that the job calls (sort_out, then send)."""

        calls = 0

        def sort_out(self, ids: list[str]) -> list[str]:
            return ids

        def send(self, ids: list[str]) -> bytes:
            self.calls += 1
            if self.calls == 2:
                raise Paused("node paused")
            return bytes(len(ids))

    job, done = make(server, tmp_path)
    stub = Stub()
    job._claimer = lambda index: (stub, "-")  # type: ignore[method-assign,assignment,return-value]
    lines = [json.dumps({"id": f"m{n}", "payload": "p"}) for n in range(6)]  # 3 claim batches
    out = job(iter([pa.RecordBatch.from_pydict({"value": lines})]))
    seen = []
    with pytest.raises(Paused):
        for batch in out:
            seen += batch.to_pylist()
    assert [row["id"] for row in seen] == ["m0", "m1"]  # the first batch only
    assert done.value == 0  # a failed attempt adds nothing
