"""Fixtures for the supervisors tests: no process may outlive the test that started it."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

import pykka
import pytest

from supervisors import exit, processes

log = logging.getLogger(__name__)


def _all_actors() -> list[pykka.ActorRef]:
    """Processes (oldest first), then any plain pykka actors a test started."""
    return processes() + pykka.ActorRegistry.get_all()


def _stop_everything() -> list[str]:
    """Stop every live actor, oldest first, so a supervisor stops its own children in order
    (pykka's stop_all goes newest first, which would make supervisors restart them). A process
    that does not stop within 5 s is killed. Returns what had to be stopped."""
    leftovers = []
    for ref in _all_actors():
        if not ref.is_alive():
            continue
        leftovers.append(str(ref))
        try:
            ref.stop(block=True, timeout=5)
        except pykka.Timeout:
            with contextlib.suppress(TypeError):
                exit(ref, "kill")
        except pykka.ActorDeadError:
            pass
    return leftovers


@pytest.fixture(autouse=True)
def no_leftover_processes() -> Iterator[None]:
    """After each test, stop any Process still alive, then check that none is left."""
    yield
    leftovers = _stop_everything()
    if leftovers:
        log.info("stopped %d process(es) left running by the test", len(leftovers))
    alive = [ref for ref in _all_actors() if ref.is_alive()]
    if alive:  # a supervisor may have restarted a child while it was being stopped
        _stop_everything()
        alive = [ref for ref in _all_actors() if ref.is_alive()]
    assert not alive, f"processes still alive after the test: {alive}"


@pytest.fixture
def gate() -> Iterator[Callable[[], threading.Event]]:
    """Make Events that hold a handler (or an on_stop); all are set when the test ends, so no
    abandoned thread waits for its BLOCK_LIMIT."""
    made: list[threading.Event] = []

    def make() -> threading.Event:
        event = threading.Event()
        made.append(event)
        return event

    yield make
    for event in made:
        event.set()
