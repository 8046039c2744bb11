"""monitors/retry_log.py: a failing retry loop logs its state changes, then backs off."""

from __future__ import annotations

import logging

import pytest

from monitors.retry_log import RetryBackoff, RetryLog


def test_first_failure_then_one_report_per_step_then_the_recovery() -> None:
    b = RetryBackoff(first_step=1.0, factor=2.0, max_step=300.0)
    kinds = []
    for i in range(20):  # two failures a second for 10 s
        r = b.failure("b@h", i * 0.5)
        if r is not None:
            kinds.append((i * 0.5, r.kind, r.failures, r.new))
    assert kinds == [
        (0.0, "first", 1, 1),
        (1.0, "step", 3, 2),
        (3.0, "step", 7, 4),
        (7.0, "step", 15, 8),
    ]
    r = b.success("b@h", 10.0)
    assert r is not None and (r.kind, r.failures, r.new) == ("recovered", 20, 5)
    assert r.elapsed == 10.0 and "after 20 failed attempts over 10.0 s" in r.suffix()
    assert b.success("b@h", 11.0) is None  # nothing was failing: nothing to say
    assert b.failing("b@h") == 0


def test_an_hour_long_outage_is_a_few_lines_and_keys_are_independent() -> None:
    b = RetryBackoff()
    lines = sum(b.failure("x", t * 0.5) is not None for t in range(7200))
    assert lines == 20  # 0, 1, 3, ..., 511 s, then every 300 s (7,200 attempts)
    assert b.failure("y", 3600.0) is not None  # another key has its own outage
    assert b.failing("x") == 7200 and b.failing("y") == 1
    b.forget("x")
    assert b.success("x", 3601.0) is None


def test_a_new_outage_starts_over() -> None:
    b = RetryBackoff()
    assert b.failure("k", 0.0) is not None
    assert b.failure("k", 0.5) is None
    assert b.success("k", 0.6) is not None
    r = b.failure("k", 0.7)
    assert r is not None and r.kind == "first"


def test_bad_settings_say_what_was_expected() -> None:
    with pytest.raises(ValueError, match="first_step"):
        RetryBackoff(first_step=0)
    with pytest.raises(ValueError, match="factor"):
        RetryBackoff(factor=0.5)


def test_retry_log_writes_the_lines(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    retries = RetryLog(logging.getLogger("test.retry"), clock=lambda: now[0])
    caplog.set_level(logging.INFO, "test.retry")
    for _ in range(20):
        retries.failure("peer", "cannot reach %s: %s", "peer", "refused")
        now[0] += 0.5
    assert retries.success("peer", "reached %s", "peer") is True
    assert retries.success("peer", "reached %s", "peer") is False  # quiet when healthy
    assert retries.success("peer", "up %s", "peer", always=True) is True
    msgs = [r.getMessage() for r in caplog.records]
    assert len(msgs) == 6, msgs
    assert msgs[0].startswith("cannot reach peer: refused (retrying")
    assert "still failing: 2 more failed attempts, 3 in 1 s" in msgs[1]
    assert msgs[4] == "reached peer (after 20 failed attempts over 10.0 s)"
    assert msgs[5] == "up peer"
