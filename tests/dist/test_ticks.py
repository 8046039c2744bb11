"""The tick core, fed times by hand."""

from __future__ import annotations

import pytest

from monitors.dist.ticks import PeerDown, SendTick, TickCore
from monitors.effects import SetTimer


def due(effects) -> float:
    (timer,) = [e for e in effects if isinstance(e, SetTimer)]
    assert timer.key == TickCore.TIMER
    return timer.after


def test_start_arms_the_timer_for_one_interval():
    core = TickCore(4.0, now=100.0)
    assert core.interval == 1.0
    assert due(core.start(100.0)) == pytest.approx(1.0)


def test_a_quiet_connection_gets_a_tick_each_interval():
    core = TickCore(4.0, now=0.0)
    effects = core.timer(1.0)
    assert SendTick() in effects
    core.received(1.0)
    assert due(effects) == pytest.approx(1.0)


def test_no_tick_when_something_else_went_out():
    core = TickCore(4.0, now=0.0)
    core.sent(0.7)
    core.received(0.9)
    effects = core.timer(1.0)
    assert SendTick() not in effects
    assert due(effects) == pytest.approx(0.7)  # the next tick is due at 1.7


def test_silence_for_net_ticktime_is_net_tick_timeout():
    core = TickCore(4.0, now=0.0)
    core.received(1.0)
    assert PeerDown() not in core.timer(4.9)
    assert core.timer(5.0) == [PeerDown("net_tick_timeout")]
    assert core.down


def test_after_down_the_timer_does_nothing():
    core = TickCore(1.0, now=0.0)
    assert core.timer(1.0) == [PeerDown()]
    assert core.timer(2.0) == []


def test_the_timer_wakes_for_whichever_comes_first():
    core = TickCore(4.0, now=0.0)
    core.received(0.5)
    core.sent(3.9)  # busy sending: the next tick is far, but the silence deadline is at 4.5
    effects = core.timer(4.0)
    assert due(effects) == pytest.approx(0.5)


def test_an_early_timer_within_slack_counts_as_due():
    core = TickCore(4.0, now=0.0)
    effects = core.timer(0.995)
    assert SendTick() in effects
    core = TickCore(4.0, now=0.0)
    assert core.timer(3.97 + 1.0) == [PeerDown()]


def test_the_timer_is_never_armed_for_almost_nothing():
    core = TickCore(4.0, now=0.0)
    core.sent(0.9999999)
    core.received(0.9999999)
    assert due(core.timer(0.99999)) >= 0.01


def test_times_never_go_back():
    core = TickCore(4.0, now=10.0)
    core.received(12.0)
    core.received(11.0)  # a stale reading
    assert PeerDown() not in core.timer(15.5)


def test_driven_by_its_own_timers_a_silent_peer_is_down_exactly_at_net_ticktime():
    core = TickCore(1.0, now=0.0)
    now, ticks = 0.0, 0
    effects = core.start(now)
    while PeerDown() not in effects:
        now += due(effects)
        effects = core.timer(now)
        ticks += SendTick() in effects
        assert now < 2.0, "never declared down"
    assert now == pytest.approx(1.0, abs=0.011)
    assert ticks == 3  # at 0.25, 0.5 and 0.75


@pytest.mark.parametrize("bad", [0, -1.0, float("nan")])
def test_net_ticktime_must_be_positive(bad):
    with pytest.raises(ValueError, match="net_ticktime"):
        TickCore(bad, now=0.0)
