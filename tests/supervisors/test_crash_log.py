"""Crash reports as OTP prints them (issue 27): one structured `child_crashed` line per crash,
with the child's restart count; the traceback once per distinct crash site (then at DEBUG);
a deliberate crash (an example's) at INFO with no traceback above DEBUG."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from supervisors import ChildSpec, Process, Supervisor, SupFlags
from supervisors.crash_log import forget_sites
from tests.supervisors.helpers import reports
from tests.waiting import wait_until


class Boom(Exception):
    pass


class OnPurpose(Exception):
    deliberate = True


class Crasher(Process):
    def on_receive(self, message: Any) -> Any:
        if message == "boom":
            raise Boom("the same site every time")
        if message == "purpose":
            raise OnPurpose("an example's crash")
        return message


@pytest.fixture
def sup() -> Iterator[Any]:
    forget_sites()
    ref = Supervisor.start(SupFlags("one_for_one", 10, 60), [ChildSpec("c", Crasher)])
    try:
        yield ref
    finally:
        ref.stop()


def _crash(sup: Any, message: str, caplog: Any, count: int) -> None:
    child = sup.proxy().which_children().get(timeout=10)[0].ref
    child.tell(message)
    wait_until(lambda: len(reports(caplog, "child_restarted")) == count, "the restart", 10)


def _tracebacks(caplog: Any, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "pykka" and r.exc_info and r.levelno == level]


def test_the_traceback_once_per_site_and_a_line_per_crash(sup: Any, caplog: Any) -> None:
    # the named loggers too: a CLI test in the same worker may have set pykka's to WARNING
    # (rabbitry.cli.configure_logging), and the root's level does not lower a logger's own
    for name in (None, "pykka", "supervisors"):
        caplog.set_level(logging.DEBUG, logger=name)
    for n in range(1, 4):
        _crash(sup, "boom", caplog, n)
    crashed = reports(caplog, "child_crashed")
    assert [r["restarts"] for r in crashed] == [0, 1, 2]
    assert all(isinstance(r["reason"], Boom) for r in crashed)
    assert len(_tracebacks(caplog, logging.ERROR)) == 1
    assert len(_tracebacks(caplog, logging.DEBUG)) == 2  # every one at debug level
    lines = [r for r in caplog.records if r.name == "supervisors.report"]
    assert all(r.levelno == logging.ERROR for r in lines if r.report["event"] == "child_crashed")


def test_a_deliberate_crash_is_not_an_incident(sup: Any, caplog: Any) -> None:
    # the named loggers too: a CLI test in the same worker may have set pykka's to WARNING
    # (rabbitry.cli.configure_logging), and the root's level does not lower a logger's own
    for name in (None, "pykka", "supervisors"):
        caplog.set_level(logging.DEBUG, logger=name)
    _crash(sup, "purpose", caplog, 1)
    [line] = [r for r in caplog.records if getattr(r, "report", {}).get("event") == "child_crashed"]
    assert line.levelno == logging.INFO and "deliberate=True" in line.getMessage()
    assert _tracebacks(caplog, logging.ERROR) == []
    assert len(_tracebacks(caplog, logging.DEBUG)) == 1
