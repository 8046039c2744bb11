"""Property tests of the restart bookkeeping: random crash schedules never get more than
`intensity` restarts within `period`, and the supervisor gives up exactly when they would."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pykka import ActorDeadError

from supervisors import ChildSpec, Process, Supervisor, SupFlags, exit_reason
from supervisors.intensity import RestartIntensity

pytestmark = pytest.mark.usefixtures("process_kind")

intensities = st.integers(min_value=0, max_value=6)
periods = st.floats(min_value=0.01, max_value=10.0, allow_nan=False, allow_infinity=False)
gaps = st.lists(
    st.floats(min_value=0.0, max_value=5.0, allow_nan=False, allow_infinity=False), max_size=60
)


def _times(gap_list: list[float]) -> list[float]:
    now, out = 1000.0, []
    for gap in gap_list:
        now += gap
        out.append(now)
    return out


def _oracle_allows(accepted: list[float], now: float, intensity: int, period: float) -> bool:
    """Brute force: the restarts in [now - period, now], counting this one, are <= intensity."""
    in_window = [t for t in accepted if t >= now - period]
    return len(in_window) + 1 <= intensity


@pytest.mark.one_kind  # RestartIntensity alone: no process involved
@given(intensities, periods, gaps)
def test_agrees_with_brute_force_oracle(
    intensity: int, period: float, gap_list: list[float]
) -> None:
    tracker = RestartIntensity(intensity, period)
    accepted: list[float] = []
    for now in _times(gap_list):
        expected = _oracle_allows(accepted, now, intensity, period)
        assert tracker.add_restart(now) is expected
        if not expected:
            return  # the supervisor gives up here; nothing after counts
        accepted.append(now)


@pytest.mark.one_kind  # RestartIntensity alone: no process involved
@given(intensities, periods, gaps)
def test_never_more_than_intensity_within_period(
    intensity: int, period: float, gap_list: list[float]
) -> None:
    tracker = RestartIntensity(intensity, period)
    accepted: list[float] = []
    for now in _times(gap_list):
        if not tracker.add_restart(now):
            break
        accepted.append(now)
    for t in accepted:
        assert sum(1 for u in accepted if t - period <= u <= t) <= intensity


@pytest.mark.one_kind  # RestartIntensity alone: no process involved
@given(st.integers(min_value=1, max_value=5), periods)
def test_crashes_spaced_wider_than_period_never_give_up(intensity: int, period: float) -> None:
    tracker = RestartIntensity(intensity, period)
    now = 0.0
    for _ in range(200):
        now += period * 1.0001 + 1e-9
        assert tracker.add_restart(now)


@pytest.mark.one_kind  # RestartIntensity alone: no process involved
def test_float_period_is_not_rounded() -> None:
    # OTP rounds to whole seconds, so intensity 1 / period 1 would count 1.2 s apart crashes
    # as "within one second" when they straddle a second boundary; we do not.
    tracker = RestartIntensity(1, 1.0)
    assert tracker.add_restart(10.9)
    assert tracker.add_restart(12.1)
    assert not tracker.add_restart(12.5)


class _Crasher(Process):
    def on_receive(self, message: object) -> object:
        if message == "crash":
            raise RuntimeError("scheduled crash")
        return "ok"


class _RestartLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.restarts: list[float] = []
        self.gave_up = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        report = getattr(record, "report", {})
        if report.get("event") == "child_restarted":
            self.restarts.append(record.created)
        elif report.get("event") == "reached_max_restart_intensity":
            self.gave_up.set()


@pytest.mark.one_kind  # the supervisor's clock; the child's kind changes nothing here
@settings(max_examples=8, deadline=None)
@given(
    st.integers(min_value=1, max_value=3),
    st.lists(st.floats(min_value=0.0, max_value=0.12), min_size=1, max_size=12),
)
def test_live_supervisor_respects_intensity(intensity: int, gap_list: list[float]) -> None:
    """A real supervisor under a random crash schedule: restarts within any window shorter than
    the period (by a margin for logging delay) never exceed the intensity."""
    period = 0.3
    handler = _RestartLog()
    logger = logging.getLogger("supervisors.report")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    sup = Supervisor.start(SupFlags("one_for_one", intensity, period), [ChildSpec("w", _Crasher)])
    try:
        for gap in gap_list:
            time.sleep(gap)
            try:
                children = sup.proxy().which_children().get()
            except ActorDeadError:
                break  # it gave up between two crashes
            ref = children[0].ref
            if ref is None or ref == "restarting":
                continue
            ref.tell("crash")
            deadline = time.monotonic() + 2
            while ref.is_alive() and time.monotonic() < deadline:
                time.sleep(0.001)
        margin = 0.05
        for t in handler.restarts:
            within = [u for u in handler.restarts if t - (period - margin) <= u <= t]
            assert len(within) <= intensity
        if handler.gave_up.is_set():
            deadline = time.monotonic() + 5
            while sup.is_alive() and time.monotonic() < deadline:
                time.sleep(0.005)
            assert exit_reason(sup) == "shutdown"
    finally:
        logger.removeHandler(handler)
        if sup.is_alive():
            sup.stop()
