"""The exactly-once check, the JSON report and the printed summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rabbitry.demo.report import check_exactly_once, summary_lines, write_report
from rabbitry.demo.timeline import REDIS_MASTER_CHANGED, REDIS_MASTER_KILLED, Timeline

EXPECTED = {f"m{i:06d}" for i in range(10)}
REVOKED = {"m000003", "m000007"}
GOOD_OUTPUT = sorted(EXPECTED - REVOKED)


def test_exactly_once() -> None:
    check = check_exactly_once(EXPECTED, REVOKED, GOOD_OUTPUT)

    assert check.ok
    assert (check.expected, check.processed, check.distinct_processed) == (8, 8, 8)
    assert (check.duplicates_executed, check.lost, check.unexpected) == (0, 0, 0)


@pytest.mark.parametrize(
    ("output", "duplicates", "lost", "unexpected"),
    [
        # m000001 run three times: two executions too many
        ([*GOOD_OUTPUT, "m000001", "m000001"], 2, 0, 0),
        # m000002 never processed
        ([i for i in GOOD_OUTPUT if i != "m000002"], 0, 1, 0),
        # a revoked id that was not skipped, and an id that was never in the input
        ([*GOOD_OUTPUT, "m000003", "zzz"], 0, 0, 2),
    ],
    ids=["duplicate", "lost", "unexpected"],
)
def test_each_violation_is_counted(
    output: list[str], duplicates: int, lost: int, unexpected: int
) -> None:
    check = check_exactly_once(EXPECTED, REVOKED, output)

    assert not check.ok
    assert check.processed == len(output)
    assert (check.duplicates_executed, check.lost, check.unexpected) == (
        duplicates,
        lost,
        unexpected,
    )
    assert len(check.duplicate_examples) == (1 if duplicates else 0)
    assert check.lost_examples == (["m000002"] if lost else [])
    assert check.unexpected_examples == (["m000003", "zzz"] if unexpected else [])


def _timeline() -> Timeline:
    clock = iter([0.0, 1.0, 2.5, 3.0, 4.0])
    timeline = Timeline(clock=lambda: next(clock))
    timeline.event(REDIS_MASTER_KILLED, "127.0.0.1:7000")
    timeline.event(REDIS_MASTER_CHANGED, "127.0.0.1:7001")
    timeline.sample({"a": "paused"}, "127.0.0.1:7001", 5)
    timeline.sample({"a": "running"}, "127.0.0.1:7001", 8)
    return timeline


def test_write_report(tmp_path: Path) -> None:
    timeline = _timeline()
    check = check_exactly_once(EXPECTED, REVOKED, GOOD_OUTPUT)
    path = tmp_path / "out" / "demo-report.json"
    written = write_report(
        path,
        messages=12,
        distinct_ids=10,
        revoked=REVOKED,
        check=check,
        failover_seconds=timeline.failover_seconds(),
        pause_seconds=timeline.pause_seconds(),
        timeline=timeline,
        extra={"quick": True, "input": tmp_path / "in.jsonl"},
    )
    report = json.loads(path.read_text())

    assert report == json.loads(json.dumps(written, default=str))
    for key in (
        "messages",
        "distinct_ids",
        "revoked",
        "processed",
        "duplicates_executed",
        "lost",
        "failover_seconds",
        "pause_seconds",
        "timeline",
        "ok",
    ):
        assert key in report, key
    assert report["ok"] is True
    assert (report["messages"], report["distinct_ids"], report["revoked"]) == (12, 10, 2)
    assert (report["processed"], report["duplicates_executed"], report["lost"]) == (8, 0, 0)
    assert report["failover_seconds"] == 1.5
    assert report["pause_seconds"] == {"a": 1.0}
    assert report["timeline"]["events"][0]["kind"] == REDIS_MASTER_KILLED
    assert len(report["timeline"]["samples"]) == 2
    assert report["quick"] is True and report["input"].endswith("in.jsonl")
    assert not list(path.parent.glob("*.tmp"))


def test_extra_cannot_overwrite_the_verdict(tmp_path: Path) -> None:
    check = check_exactly_once(EXPECTED, REVOKED, [])
    with pytest.raises(ValueError, match="'ok'"):
        write_report(
            tmp_path / "r.json",
            messages=10,
            distinct_ids=10,
            revoked=2,
            check=check,
            failover_seconds=None,
            pause_seconds=None,
            extra={"ok": True},
        )


def test_summary_lines(tmp_path: Path) -> None:
    good = write_report(
        tmp_path / "good.json",
        messages=12,
        distinct_ids=10,
        revoked=2,
        check=check_exactly_once(EXPECTED, REVOKED, GOOD_OUTPUT),
        failover_seconds=1.25,
        pause_seconds={"a": 2.0, "b": 0.0},
    )
    lines = summary_lines(good, markup=False)
    text = "\n".join(lines)

    assert "Messages: 12 (10 distinct ids, 2 revoked)" in text
    assert "✓ processed 8 (expected distinct ids - revoked = 8)" in text
    assert "✓ duplicates executed: 0" in text
    assert "✓ lost: 0" in text
    assert "Redis failover: 1.25 s" in text
    assert "Paused: a 2.00 s" in text and "b 0.00" not in text
    assert lines[-1] == "Exactly once: yes"
    assert any("[green]" in line for line in summary_lines(good))

    bad = write_report(
        tmp_path / "bad.json",
        messages=12,
        distinct_ids=10,
        revoked=2,
        check=check_exactly_once(EXPECTED, REVOKED, [*GOOD_OUTPUT, "m000001", "m000003"]),
        failover_seconds=None,
        pause_seconds=None,
    )
    text = "\n".join(summary_lines(bad, markup=False))
    assert "✗ processed 10" in text
    assert "✗ duplicates executed: 1" in text
    assert "✗ unexpected ids in the output (revoked or unknown): 1" in text
    assert "Redis failover: none" in text
    assert text.endswith("Exactly once: NO (see report)")
