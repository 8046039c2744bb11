"""Fixtures for the supervisors tests: no process may outlive the test that started it."""

from __future__ import annotations

import contextlib
import logging
import threading
import types
from collections.abc import Callable, Iterator

import pykka
import pytest

from supervisors import PooledProcess, Process, exit, processes
from tests.supervisors import helpers

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


# ------------------------------------------------------------- both kinds of process

KINDS = {"Process": Process, "PooledProcess": PooledProcess}
_BASES = ((Process,), (PooledProcess,))


def _set_kind(module: types.ModuleType, kind: type[Process]) -> None:
    """Make the module's (and helpers') processes of `kind`: every class defined directly on
    Process (Worker, the tests' own) gets `kind` as its base, and the name `Process` in the
    module is bound to `kind`, so classes defined inside a test function follow too. The
    test's Probe stays a Process: it is the test case process, as in OTP."""
    for mod in (module, helpers):
        if getattr(mod, "Process", None) in KINDS.values():
            mod.Process = kind  # type: ignore[attr-defined]
        for value in list(vars(mod).values()):
            if (
                isinstance(value, type)
                and value.__module__ == mod.__name__
                and value.__bases__ in _BASES
                and value is not helpers._ProbeProcess
            ):
                value.__bases__ = (kind,)


@pytest.fixture(params=list(KINDS))
def process_kind(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run a test once with its processes on threads of their own and once on the pool.

    Use it with `pytestmark = pytest.mark.usefixtures("process_kind")`. A test marked
    `one_kind` runs with Process only: its subject is the supervisor's clock, not the child.
    """
    _set_kind(request.module, KINDS[request.param])
    yield request.param
    _stop_everything()  # while the classes still have the base their objects were made with
    _set_kind(request.module, Process)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Drop the PooledProcess run of tests marked `one_kind`."""
    items[:] = [
        item
        for item in items
        if not (
            item.get_closest_marker("one_kind")
            and getattr(getattr(item, "callspec", None), "params", {}).get("process_kind")
            == "PooledProcess"
        )
    ]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "one_kind: run with Process only, not parametrized over PooledProcess"
    )
