"""Resource alarms: the pure evaluation and a real psutil sample."""

from __future__ import annotations

from pathlib import Path

from monitors.alarms import DISK, MEMORY, Readings, evaluate, sample


def test_thresholds() -> None:
    calm = Readings(memory_used=30, memory_total=100, disk_free=10**9)
    assert evaluate(calm, 0.4, 50 * 10**6) == set()
    assert evaluate(Readings(41, 100, 10**9), 0.4, 50 * 10**6) == {MEMORY}
    assert evaluate(Readings(40, 100, 10**9), 0.4, 50 * 10**6) == set()  # at the mark: no alarm
    assert evaluate(Readings(30, 100, 10**6), 0.4, 50 * 10**6) == {DISK}
    assert evaluate(Readings(99, 100, 0), 0.4, 1) == {MEMORY, DISK}
    assert evaluate(Readings(0, 0, 10), 0.4, 1) == set()  # no total memory reading: no alarm


def test_sample_reads_this_machine(tmp_path: Path) -> None:
    readings = sample(tmp_path / "not" / "yet" / "created")
    assert 0 < readings.memory_used < readings.memory_total
    assert readings.disk_free > 0
    # a watermark of 1.0 can never be exceeded; a disk limit above the free space always fires
    assert MEMORY not in evaluate(readings, 1.0, 0)
    assert DISK in evaluate(readings, 1.0, readings.disk_free + 1)
