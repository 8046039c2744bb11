"""start_children(n, args): a simple_one_for_one batch start in one ask.

Its semantics are those of n start_child calls made one after the other: the children start in
order with the same extra args, each linked to the supervisor and supervised per the template;
which_children lists them in start order; a child that fails to start stops the batch there,
with the children before it still running (StartChildError.started has their refs); a child
that ignores gives None in its place. Reports: one children_started at INFO per batch, and
each child's child_started at DEBUG. Runs with Process and with PooledProcess children.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from supervisors import (
    InvalidChildSpec,
    StartChildError,
    SupervisorError,
    SupFlags,
    exit_reason,
)
from tests.supervisors.helpers import (
    TIMEOUT,
    Control,
    Probe,
    StartFailed,
    is_ref,
    reports,
    spec,
    wait_until,
)

pytestmark = pytest.mark.usefixtures("process_kind")

SIMPLE = SupFlags("simple_one_for_one", 3, 3600)


def test_start_children_in_order_with_args() -> None:
    probe = Probe()
    sup = probe.start_sup(SIMPLE, [spec("child", "template_arg")])
    first = sup.start_child(["single"])
    refs = sup.start_children(3, ["extra", 7])
    assert len(refs) == 3 and all(is_ref(r) for r in refs)
    assert len({r.actor_urn for r in refs}) == 3
    # start order, after the child started before the batch, as n start_child calls give
    assert sup.refs() == [first, *refs]
    for ref in refs:
        assert ref.proxy().get_extra().get(timeout=TIMEOUT) == ("template_arg", "extra", 7)
    assert sup.counts() == [1, 4, 0, 4]
    assert sup.start_children(0, []) == []
    assert probe.stop_sup(sup) == "shutdown"
    for ref in refs:
        wait_until(lambda r=ref: exit_reason(r) == "shutdown", f"{ref} to stop")


def test_batch_children_are_linked_and_restarted() -> None:
    """Each child is linked and supervised as a start_child child: a crash restarts it with
    the batch's args, and the supervisor's stop ends every one."""
    probe = Probe()
    sup = probe.start_sup(SIMPLE, [spec("child")])
    refs = sup.start_children(2, ["arg"])
    probe.terminate(refs[0], "abnormal")
    now = sup.refs()
    assert len(now) == 2 and refs[1] in now and refs[0] not in now
    restarted = next(r for r in now if r is not refs[1])
    assert restarted.proxy().get_extra().get(timeout=TIMEOUT) == ("arg",)
    for ref in now:
        probe.link(ref)
    assert probe.stop_sup(sup) == "shutdown"
    for ref in now:
        assert probe.wait_exit(ref) == "shutdown"


class FailThird(Control):
    """Start attempts 1 and 2 pass; the third raises StartFailed."""

    def attempt(self, name: Any) -> None:
        super().attempt(name)
        if self.attempts == 3:
            raise StartFailed(f"{name}: the third start fails")


def test_failed_child_stops_the_batch() -> None:
    """The third start fails: the two before it keep running, the rest are not attempted,
    and the supervisor takes the next call."""
    probe = Probe()
    sup = probe.start_sup(SIMPLE, [spec("child")])
    control = FailThird()
    with pytest.raises(StartChildError) as caught:
        sup.start_children(5, [control])
    assert isinstance(caught.value.reason, StartFailed)
    assert control.attempts == 3
    started = caught.value.started
    assert len(started) == 2 and all(r.is_alive() for r in started)
    assert sup.refs() == started
    assert sup.counts() == [1, 2, 0, 2]
    assert len(sup.start_children(1, [])) == 1
    assert probe.stop_sup(sup) == "shutdown"


def test_ignored_child_gives_none() -> None:
    probe = Probe()
    sup = probe.start_sup(SIMPLE, [spec("child")])
    refs = sup.start_children(2, [Control(ignore=True)])
    assert refs == [None, None]
    assert sup.counts() == [1, 0, 0, 0]
    assert probe.stop_sup(sup) == "shutdown"


def test_bad_calls_are_errors_and_the_supervisor_lives() -> None:
    probe = Probe()
    sup = probe.start_sup(SIMPLE, [spec("child")])
    with pytest.raises(InvalidChildSpec):
        sup.start_children(-1, [])
    with pytest.raises(InvalidChildSpec):
        sup.start_children(2, "not a list")
    static = probe.start_sup(SupFlags("one_for_one", 1, 5), [spec("a")])
    with pytest.raises(SupervisorError, match="simple_one_for_one"):
        static.start_children(2, [])
    assert sup.counts() == [1, 0, 0, 0]
    assert probe.stop_sup(sup) == "shutdown"
    assert probe.stop_sup(static) == "shutdown"


def test_reports_one_info_per_batch_debug_per_child(caplog: pytest.LogCaptureFixture) -> None:
    probe = Probe()
    sup = probe.start_sup(SIMPLE, [spec("child")])
    with caplog.at_level(logging.INFO, logger="supervisors.report"):
        sup.start_children(4, [])
    assert reports(caplog, "child_started") == []  # DEBUG, not logged at INFO
    [batch] = reports(caplog, "children_started")
    assert batch["count"] == 4 and batch["asked"] == 4 and batch["child"] == "child"
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="supervisors.report"):
        refs = sup.start_children(2, [])
    started = reports(caplog, "child_started")
    assert [r["ref"] for r in started] == [r.actor_urn for r in refs]
    assert all(
        rec.levelno == logging.DEBUG
        for rec in caplog.records
        if getattr(rec, "report", {}).get("event") == "child_started"
    )
    assert probe.stop_sup(sup) == "shutdown"


def test_mass_stop_reports_once_at_info(caplog: pytest.LogCaptureFixture) -> None:
    """A simple_one_for_one stopping all its children logs one children_shutdown at INFO;
    each clean stop is a shutdown at DEBUG (listeners, e.g. metrics, still get every one)."""
    probe = Probe()
    sup = probe.start_sup(SIMPLE, [spec("child")])
    refs = sup.start_children(3, [])
    with caplog.at_level(logging.DEBUG, logger="supervisors.report"):
        assert probe.stop_sup(sup) == "shutdown"
        wait_until(lambda: reports(caplog, "children_shutdown"), "the batch's shutdown report")
    [summary] = reports(caplog, "children_shutdown")
    assert summary["count"] == 3 and summary["errors"] == 0
    stops = [r for r in caplog.records if getattr(r, "report", {}).get("event") == "shutdown"]
    assert len(stops) == 3 and all(r.levelno == logging.DEBUG for r in stops)
    assert all(exit_reason(r) == "shutdown" for r in refs)
