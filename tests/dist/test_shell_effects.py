"""ShellEffects on real kernels and a real process: the common effects every shell performs."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from monitors.core_timers import CoreTimers, Fired
from monitors.dist import Message
from monitors.effects import CancelTimer, Connect, Disconnect, Log, Send, SetTimer
from monitors.shell_effects import ConnectDone, ShellEffects
from tests.dist.helpers import Probe, mesh, wait_until

pytestmark = pytest.mark.timeout(60)
log = logging.getLogger("tests.shell_effects")


def _effects(probe: Probe, **options: Any) -> ShellEffects:
    """ShellEffects owned by the probe's process (timers and ConnectDone go to it)."""
    return probe.run(lambda p: ShellEffects(p, CoreTimers(p), log, "test shell", **options))


def test_send_connect_and_disconnect_go_through_the_kernel(make_kernel) -> None:
    a, b = make_kernel("a"), make_kernel("b")
    mesh(a, b)
    owner, inbox = Probe(), Probe()
    b.register("inbox", inbox.ref)
    effects = _effects(owner, kernel=a)
    assert owner.run(lambda p: effects.perform(Connect(b.node)))
    owner.wait_for(lambda m: m == ConnectDone(b.node), "the connect attempt to end")
    assert b.node in a.nodes()
    owner.run(lambda p: effects.connect_over(b.node))
    assert owner.run(lambda p: effects.perform(Send(b.node, "inbox", {"n": 1})))
    got = inbox.wait_for(lambda m: isinstance(m, Message), "the message")
    assert (got.node, got.msg) == (a.node, {"n": 1})
    assert owner.run(lambda p: effects.perform(Disconnect(b.node, ban=0.5)))
    wait_until(lambda: b.node not in a.nodes(), "a to drop b")


def test_timers_fire_to_the_owner_and_cancel() -> None:
    owner = Probe()
    effects = _effects(owner)
    assert owner.run(lambda p: effects.perform(SetTimer("kept", 0.05, data=7)))
    assert owner.run(lambda p: effects.perform(SetTimer("gone", 0.05)))
    assert owner.run(lambda p: effects.perform(CancelTimer("gone")))
    fired = owner.wait_for(lambda m: isinstance(m, Fired), "the timer")
    assert (fired.key, fired.data) == ("kept", 7)
    assert [m.key for m in owner.messages(Fired)] == ["kept"]


def test_log_lines_carry_the_fields_as_the_shell_asks(caplog) -> None:
    owner = Probe()
    plain, prefixed = _effects(owner), _effects(owner, log_prefix="mnesia")
    with caplog.at_level(logging.INFO, logger=log.name):
        plain.perform(Log.warning("hello", node="x@h"))
        prefixed.perform(Log.info("loaded", table="t"))
    first, second = caplog.records
    assert (first.levelno, first.getMessage(), first.fields) == (
        logging.WARNING,
        "hello node=x@h",  # the line names the node (issue 27: "node up" said not which)
        {"node": "x@h"},
    )
    assert second.getMessage() == "mnesia: loaded {'table': 't'}"


def test_without_a_kernel_the_dist_effects_are_left_to_the_shell() -> None:
    effects = _effects(Probe())
    assert not effects.perform(Send("b@h", "x", {}))
    assert not effects.perform(Connect("b@h"))
    assert not effects.perform(object())
