"""hold_app: under the pause modes a node's application starts only once it may run.

Without it, RabbitMQ's behaviour (and ours with a start-up grace) lets a node that boots in a
minority run its application until something goes down: the chaos suite's history checker
caught such a node acknowledging writes alone. A held node never runs on a minority.
"""

from __future__ import annotations

from monitors.node_monitor import NodeMonitorCore, PartitionHandling
from monitors.node_monitor.effects import PauseApp, ResumeApp
from tests.node_monitor.helpers import A, B, C, connect, core, of


def held(mode: str | PartitionHandling = "pause_minority", **kw: object) -> NodeMonitorCore:
    return core(A, mode=mode, hold_app=True, **kw)


def test_a_held_node_alone_in_a_minority_never_starts_its_application() -> None:
    c = held()
    out = c.start(0.0)
    assert [type(e) for e in of(out, PauseApp)] == [PauseApp]
    assert not of(out, ResumeApp)
    out = c.app_stopped(0.1)
    assert not of(out, ResumeApp)
    assert c.status()["paused"] is True
    assert A not in c.status()["running"]
    for t in (1.0, 2.0, 5.0):  # time passing alone changes nothing (no grace to run out)
        assert not of(c.timer("ping", t), ResumeApp)


def test_a_held_node_starts_its_application_once_it_reaches_a_majority() -> None:
    c = held()
    c.start(0.0)
    c.app_stopped(0.1)
    out = connect(c, B, now=0.2)
    assert len(of(out, ResumeApp)) == 1
    assert c.status()["paused"] is False
    c.app_started(0.3)
    assert A in c.status()["running"]


def test_a_single_node_cluster_starts_at_once() -> None:
    c = core(A, members=(A,), mode="pause_minority", hold_app=True)
    out = c.start(0.0)
    assert of(out, PauseApp) and of(out, ResumeApp)  # stop-if-running, then start, in order
    assert out.index(of(out, PauseApp)[0]) < out.index(of(out, ResumeApp)[0])


def test_pause_if_all_down_holds_until_a_preferred_node_is_reached() -> None:
    mode = PartitionHandling("pause_if_all_down", nodes=[C], recover="ignore")
    c = held(mode)
    c.start(0.0)
    c.app_stopped(0.1)
    assert not of(connect(c, B, now=0.2), ResumeApp)  # b is no preferred node
    assert of(connect(c, C, now=0.3), ResumeApp)


def test_modes_that_never_pause_do_not_hold() -> None:
    for mode in ("ignore", "autoheal"):
        c = held(mode)
        assert c.hold_app is False
        out = c.start(0.0)
        assert not of(out, PauseApp) and c.status()["paused"] is False
