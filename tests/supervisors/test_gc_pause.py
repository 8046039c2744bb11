"""gc_pause: a supervisor's batch pauses the cyclic collector and gives it back as it was.

The collector has one switch per interpreter, so what matters is that every way out of a
batch (the end, an error, a nested or concurrent batch) restores it, and that a program that
turned it off itself keeps it off.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from supervisors import SupFlags, add_report_listener, remove_report_listener
from supervisors.gc_pause import gc_paused
from tests.supervisors.helpers import Probe, spec


@pytest.fixture(autouse=True)
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


def test_paused_inside_and_restored_after_even_on_error() -> None:
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("a failed batch")
    assert gc.isenabled()


def test_nested_and_concurrent_pauses_share_one() -> None:
    inside = threading.Event()
    release = threading.Event()

    def other_batch() -> None:
        with gc_paused():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=other_batch)
    with gc_paused():
        thread.start()
        assert inside.wait(10)
    assert not gc.isenabled()  # the other batch still runs: the collector stays paused
    release.set()
    thread.join(10)
    assert gc.isenabled()


def test_a_collector_turned_off_by_the_program_stays_off() -> None:
    gc.disable()
    with gc_paused():
        pass
    assert not gc.isenabled()


def test_a_batch_start_and_stop_give_the_collector_back() -> None:
    probe = Probe()
    sup = probe.start_sup(SupFlags("simple_one_for_one", 3, 3600), [spec("child")])
    assert len(sup.start_children(20, [])) == 20
    assert gc.isenabled()
    assert probe.stop_sup(sup) == "shutdown"
    assert gc.isenabled()


def test_listeners_get_every_child_report_whatever_the_log_level() -> None:
    """A batch asks once whether per-child reports go anywhere: a listener (a node's metrics)
    is somewhere, so it still gets each child_started and each shutdown."""
    seen: list[str] = []
    listener = lambda report: seen.append(report["event"])  # noqa: E731
    add_report_listener(listener)
    try:
        probe = Probe()
        sup = probe.start_sup(SupFlags("simple_one_for_one", 3, 3600), [spec("child")])
        sup.start_children(5, [])
        assert probe.stop_sup(sup) == "shutdown"
    finally:
        remove_report_listener(listener)
    assert seen.count("child_started") == 5
    assert seen.count("children_started") == 1
    assert seen.count("shutdown") == 5
    assert seen.count("children_shutdown") == 1
