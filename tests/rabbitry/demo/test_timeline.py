"""Timeline: records, the durations derived from them, JSON round trip and the PNG plot.

A fake clock drives time, so every duration is exact and nothing depends on the machine's speed.
"""

from __future__ import annotations

import struct
import sys
import threading
from pathlib import Path

import pytest

from rabbitry.demo.timeline import (
    PARTITION_END,
    PARTITION_START,
    REDIS_MASTER_CHANGED,
    REDIS_MASTER_KILLED,
    PlotUnavailable,
    Timeline,
)


class FakeClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def _scenario() -> tuple[Timeline, FakeClock]:
    """10 s at 10 samples/s: master killed at 3 s, new master at 4.5 s, node c paused from
    6 s to 8 s while partitioned, 1000 messages/s except during the failover."""
    clock = FakeClock()
    timeline = Timeline(clock=clock)
    processed = 0
    for step in range(101):
        t = step / 10
        clock.now = 1000.0 + t
        if step == 30:
            timeline.event(REDIS_MASTER_KILLED, "127.0.0.1:7000")
        if step == 45:
            timeline.event(REDIS_MASTER_CHANGED, "127.0.0.1:7001")
        if step == 60:
            timeline.event(PARTITION_START, "c")
        if step == 80:
            timeline.event(PARTITION_END, "c")
        master = "127.0.0.1:7000" if step < 30 else (None if step < 45 else "127.0.0.1:7001")
        nodes = {"a": "running", "b": "running", "c": "paused" if 60 <= step < 80 else "running"}
        if step >= 95:
            nodes["b"] = "down"
        timeline.sample(nodes, master, processed)
        if not 30 <= step < 45:
            processed += 100
    return timeline, clock


def test_records_are_stamped_relative_to_the_start() -> None:
    clock = FakeClock(500.0)
    timeline = Timeline(clock=clock)
    clock.now = 502.5
    event = timeline.event("job_started", "40 tasks")
    sample = timeline.sample({"a": "running"}, "127.0.0.1:7000", 12)

    assert (event.t, event.kind, event.detail) == (2.5, "job_started", "40 tasks")
    assert (sample.t, sample.nodes, sample.redis_master, sample.processed) == (
        2.5,
        {"a": "running"},
        "127.0.0.1:7000",
        12,
    )
    assert timeline.now() == 2.5


def test_a_sample_keeps_its_own_copy_of_the_nodes() -> None:
    timeline = Timeline(clock=FakeClock())
    nodes = {"a": "running"}
    timeline.sample(nodes, None, 0)
    nodes["a"] = "down"
    assert timeline.samples[0].nodes == {"a": "running"}


def test_bad_records_are_refused() -> None:
    timeline = Timeline(clock=FakeClock())
    with pytest.raises(ValueError, match="'b' has state 'sleeping'"):
        timeline.sample({"a": "running", "b": "sleeping"}, None, 0)
    with pytest.raises(ValueError, match="non-empty"):
        timeline.event("")
    assert timeline.samples == [] and timeline.events == []


def test_failover_and_pause_durations() -> None:
    timeline, _ = _scenario()

    assert timeline.failover_seconds() == pytest.approx(1.5)
    pauses = timeline.pause_seconds()
    assert pauses.keys() == {"a", "b", "c"}
    assert pauses["c"] == pytest.approx(2.0)
    assert pauses["a"] == pauses["b"] == 0.0
    assert timeline.intervals(PARTITION_START, PARTITION_END) == [
        (pytest.approx(6.0), pytest.approx(8.0))
    ]


def test_intervals_pair_each_start_with_the_next_end() -> None:
    clock = FakeClock(0.0)
    timeline = Timeline(clock=clock)
    for t, kind in [
        (1, REDIS_MASTER_CHANGED),  # an end with nothing open: ignored
        (2, REDIS_MASTER_KILLED),
        (3, REDIS_MASTER_KILLED),  # still the same failover
        (5, REDIS_MASTER_CHANGED),
        (9, REDIS_MASTER_KILLED),
        (10, REDIS_MASTER_CHANGED),
        (12, REDIS_MASTER_KILLED),  # never completed
    ]:
        clock.now = t
        timeline.event(kind)

    assert timeline.intervals(REDIS_MASTER_KILLED, REDIS_MASTER_CHANGED) == [
        (2, 5),
        (9, 10),
        (12, None),
    ]
    assert timeline.failover_durations() == [3, 1]
    assert timeline.failover_seconds() == 3


def test_no_failover_is_none() -> None:
    clock = FakeClock(0.0)
    timeline = Timeline(clock=clock)
    assert timeline.failover_seconds() is None
    timeline.event(REDIS_MASTER_KILLED)
    assert timeline.failover_seconds() is None


def test_spans_and_throughput() -> None:
    timeline, _ = _scenario()

    spans = timeline.state_spans()
    assert [(round(a, 3), round(b, 3), s) for a, b, s in spans["c"]] == [
        (0.0, 6.0, "running"),
        (6.0, 8.0, "paused"),
        (8.0, 10.0, "running"),
    ]
    assert spans["b"][-1][2] == "down"
    masters = [(round(a, 3), round(b, 3), m) for a, b, m in timeline.master_spans()]
    assert masters == [
        (0.0, 3.0, "127.0.0.1:7000"),
        (3.0, 4.5, None),
        (4.5, 10.0, "127.0.0.1:7001"),
    ]

    rates = {round(t, 3): rate for t, rate in timeline.throughput(window=1.0)}
    assert rates[2.0] == pytest.approx(1000.0)
    assert rates[4.4] == pytest.approx(0.0)  # a whole second inside the failover
    assert 0 < rates[3.5] < 1000  # the window straddles the kill
    assert min(rates.values()) >= 0


def test_json_round_trip() -> None:
    timeline, _ = _scenario()
    data = timeline.to_json()

    assert data["events"][0] == {"t": 3.0, "kind": REDIS_MASTER_KILLED, "detail": "127.0.0.1:7000"}
    assert data["samples"][0] == {
        "t": 0.0,
        "nodes": {"a": "running", "b": "running", "c": "running"},
        "redis_master": "127.0.0.1:7000",
        "processed": 0,
    }
    again = Timeline.from_json(data)
    assert again.to_json() == data
    assert again.failover_seconds() == pytest.approx(1.5)


def test_recording_from_many_threads_loses_nothing() -> None:
    timeline = Timeline()

    def record(n: int) -> None:
        for i in range(500):
            timeline.event("tick", f"{n}-{i}")
            timeline.sample({f"n{n}": "running"}, None, i)

    threads = [threading.Thread(target=record, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(timeline.events) == len(timeline.samples) == 2000
    assert len({e.detail for e in timeline.events}) == 2000
    times = [e.t for e in timeline.events]
    assert times == sorted(times)


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    assert data[-8:-4] == b"IEND", "truncated PNG"
    return struct.unpack(">II", data[16:24])


def test_plot_writes_a_png(tmp_path: Path) -> None:
    timeline, _ = _scenario()
    target = timeline.plot(tmp_path / "out" / "demo-timeline.png")

    assert target == tmp_path / "out" / "demo-timeline.png"
    width, height = _png_size(target)
    assert (width, height) == (1200, 650)
    # A blank figure compresses to a few kB; lanes, labels and a curve take far more.
    assert target.stat().st_size > 30_000


def test_plot_of_an_empty_timeline(tmp_path: Path) -> None:
    target = Timeline(clock=FakeClock()).plot(tmp_path / "empty.png")
    assert _png_size(target) == (1200, 650)


def test_plot_without_matplotlib_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    with pytest.raises(PlotUnavailable, match="pip install matplotlib"):
        Timeline(clock=FakeClock()).plot(tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_first_message_is_read_off_the_samples_as_a_share_of_the_job() -> None:
    """The warm-up figure of issue 27: from the job's start to the first sample that counts a
    processed message, in seconds and as a share of the job."""
    clock = FakeClock(0.0)
    timeline = Timeline(clock=clock)
    assert timeline.first_message() is None  # no job yet
    timeline.sample({"a": "running"}, None, 0)
    clock.now = 2.0
    timeline.event("job_started")
    for t, processed in ((2.5, 0), (3.0, 0), (3.5, 40), (9.0, 500)):
        clock.now = t
        timeline.sample({"a": "running"}, None, processed)
    assert timeline.first_message() is None  # not finished: no share to give
    clock.now = 12.0
    timeline.event("job_finished")
    assert timeline.first_message() == {"seconds": 1.5, "share": 0.15}
    empty = Timeline(clock=clock)
    empty.event("job_started")
    clock.now = 13.0
    empty.event("job_finished")
    assert empty.first_message() is None  # nothing processed
