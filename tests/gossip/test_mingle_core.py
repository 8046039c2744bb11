"""Mingle: the start-up sync (Celery's test_Mingle and test_control's hello tests, ported),
plus what we do better: early finish, simultaneous starts, chunked deltas, late merges."""

from __future__ import annotations

import logging
from typing import Any

from monitors.effects import CancelTimer, Log, SetTimer
from monitors.gossip import wire
from monitors.gossip.clock import LamportClock
from monitors.gossip.effects import Direct, MingleDone, Publish
from monitors.gossip.gossip_core import GossipCore
from monitors.gossip.limited_set import LimitedSet
from monitors.gossip.mingle_core import MingleCore
from tests.gossip.test_gossip_core import T0, Pump, msg, started


def hello(host: str = "b@h", pid: int = 7, clock: int = 1, rnd: int = 1, **f: Any):
    return msg(wire.HELLO, host, pid, clock, round=rnd, **{"chunks": 1, "revoked": {}, **f})


def reply(host: str = "b@h", pid: int = 7, clock: int = 1, rnd: int = 1, **f: Any):
    fields = {"chunks": 1, "revoked": {}, "alive": [], "settled": True, **f}
    return msg(wire.REPLY, host, pid, clock, round=rnd, **fields)


def texts(effects: list[Any]) -> list[str]:
    return [e.text for e in effects if isinstance(e, Log)]


# ---- Celery's test_Mingle -------------------------------------------------------------------------


def test_start_no_replies() -> None:
    core = GossipCore("a@h", 1)
    out = core.start(T0)
    hellos = [e for e in out if isinstance(e, Publish) and e.routing_key == wire.HELLO]
    assert len(hellos) == 1 and hellos[0].body["revoked"] == {}
    assert "mingle: searching for neighbors" in texts(out)
    clock = core.clock.value
    out = core.timer("mingle", T0 + 1.0)
    assert MingleDone((), all_alone=True) in out
    assert "mingle: all alone" in texts(out)
    online = [e for e in out if isinstance(e, Publish) and e.routing_key == wire.ONLINE]
    assert len(online) == 1  # worker-online follows the mingle
    assert core.clock.value == clock + 1  # nobody to adjust to: only our online's stamp
    assert core.mingled and not core.mingle.mingling


def test_start() -> None:
    """Replies adjust the clock and merge the revoked sets; a bad one is logged, not fatal."""
    core = GossipCore("a@h", 1)
    core.start(T0)
    b = reply("b@h", clock=312, revoked={"r1": T0 - 5}, alive=["c@h"])
    out = core.receive(wire.REPLY, b, T0 + 0.1)
    assert not [e for e in out if isinstance(e, MingleDone)]  # b says c@h is alive: wait
    assert core.clock.value == 313
    assert core.is_revoked("r1")
    bad = reply("old@h", clock=3)
    del bad["alive"]  # an old or broken peer: Celery's {'error': 'unknown method'}
    out = core.receive(wire.REPLY, bad, T0 + 0.1)
    assert [e.level for e in out] == [logging.WARNING]
    out = core.receive(wire.REPLY, reply("c@h", clock=2, revoked={"r2": T0 - 1}), T0 + 0.2)
    assert MingleDone(("b@h", "c@h"), all_alone=False) in out  # both answered: done early
    assert CancelTimer("mingle") in out
    assert core.is_revoked("r1") and core.is_revoked("r2")
    online = [e for e in out if isinstance(e, Publish) and e.routing_key == wire.ONLINE]
    assert [e.body["clock"] for e in online] == [315]  # 313 -> 314 (c's reply) -> 315
    assert core.clock.value == 315


# ---- test_control: hello ---------------------------------------------------------------------------


def test_hello() -> None:
    core = GossipCore("a@h", 1)
    core.clock.value = 313
    core.revoked.add("ours", T0 - 10)
    out = core.receive(
        wire.HELLO, hello("george@vandelay.com", clock=100, revoked={"theirs": T0 - 1}), T0
    )
    (r,) = [e for e in out if isinstance(e, Direct)]
    assert r.node == "george@vandelay.com" and r.routing_key == wire.REPLY
    assert wire.problem(wire.REPLY, r.body) is None
    assert core.clock.value == 315  # 313 -> 314 (adjust to the hello) -> 315 (the reply)
    assert r.body["clock"] == 315
    assert r.body["revoked"] == {"ours": T0 - 10}  # the delta: not what the hello carried
    assert core.is_revoked("theirs")
    assert r.body["round"] == 1 and r.body["chunks"] == 1
    assert r.body["to_pid"] == 7  # for that life of george: direct queues outlive restarts


def test_hello_from_ourselves_is_not_answered() -> None:
    core = GossipCore("a@h", 1)
    assert core.receive(wire.HELLO, hello("a@h", 1), T0) == []


def test_hello_does_not_send_expired_revoked_items() -> None:
    core = GossipCore("a@h", 1, revoke_expires=60.0)
    core.revoked.add("old", T0 - 61)
    core.revoked.add("fresh", T0 - 59)
    out = core.receive(wire.HELLO, hello(), T0)
    (r,) = [e for e in out if isinstance(e, Direct)]
    assert r.body["revoked"] == {"fresh": T0 - 59}
    assert not core.is_revoked("old")


def test_reply_names_our_alive_workers_and_whether_we_are_settled() -> None:
    pump = started("a@h", "b@h", "c@h")
    out = pump.cores["a@h"].receive(wire.HELLO, hello("new@h", 1), T0)
    (r,) = [e for e in out if isinstance(e, Direct)]
    assert r.body["alive"] == ["b@h", "c@h"] and r.body["settled"] is True
    fresh = GossipCore("z@h", 1)
    fresh.start(T0)
    (r,) = [e for e in fresh.receive(wire.HELLO, hello(), T0) if isinstance(e, Direct)]
    assert r.body["settled"] is False  # mingling itself: its view is worth nothing yet


# ---- finishing early, and not too early -------------------------------------------------------------


def test_waits_for_every_node_a_settled_reply_names() -> None:
    core = GossipCore("a@h", 1)
    core.start(T0)
    out = core.receive(wire.REPLY, reply("b@h", alive=["a@h", "b@h", "c@h"]), T0)
    assert not [e for e in out if isinstance(e, MingleDone)]  # c@h is alive too: wait
    out = core.receive(wire.REPLY, reply("c@h"), T0 + 0.01)
    assert MingleDone(("b@h", "c@h"), all_alone=False) in out


def test_unsettled_replies_do_not_end_the_mingle_early() -> None:
    core = GossipCore("a@h", 1)
    core.start(T0)
    out = core.receive(wire.REPLY, reply("b@h", settled=False), T0)
    assert not [e for e in out if isinstance(e, MingleDone)]
    out = core.timer("mingle", T0 + 1)
    assert MingleDone(("b@h",), all_alone=False) in out


def test_a_hello_while_mingling_is_answered_and_counted() -> None:
    """Celery #2355: two nodes started together both said 'all alone'."""
    core = GossipCore("a@h", 1)
    core.start(T0)
    out = core.receive(wire.HELLO, hello("b@h", clock=50, revoked={"x": T0}), T0 + 0.01)
    assert [e.node for e in out if isinstance(e, Direct)] == ["b@h"]  # answered
    assert core.clock.value > 50 and core.is_revoked("x")  # merged
    out = core.timer("mingle", T0 + 1)
    assert MingleDone(("b@h",), all_alone=False) in out  # counted


def test_a_counted_hello_still_waits_for_its_reply_before_finishing_early() -> None:
    core = GossipCore("a@h", 1)
    core.start(T0)
    core.receive(wire.HELLO, hello("b@h"), T0)
    out = core.receive(wire.REPLY, reply("c@h", alive=["b@h"]), T0 + 0.01)
    assert not [e for e in out if isinstance(e, MingleDone)]  # b has not replied yet
    out = core.receive(wire.REPLY, reply("b@h", clock=90), T0 + 0.02)
    assert MingleDone(("b@h", "c@h"), all_alone=False) in out
    assert core.clock.value > 90


def test_nodes_starting_together_find_each_other() -> None:
    pump = Pump(*(GossipCore(f"n{i}@h", i) for i in range(1, 5)))
    pump.start()  # everyone's hello and online are delivered before any mingle ends
    for name in pump.cores:
        pump.fire(name, "mingle")
    for name in pump.cores:
        (done,) = pump.of(name, MingleDone)
        assert done.synced_with == tuple(sorted(set(pump.cores) - {name}))


def test_worker_online_during_mingle_is_waited_for() -> None:
    core = GossipCore("a@h", 1)
    core.start(T0)
    core.receive(wire.ONLINE, msg(wire.ONLINE, "c@h", 3, freq=2.0), T0)
    out = core.receive(wire.REPLY, reply("b@h"), T0 + 0.01)
    assert not [e for e in out if isinstance(e, MingleDone)]


def test_a_late_reply_is_merged_after_the_mingle() -> None:
    core = GossipCore("a@h", 1)
    core.start(T0)
    core.timer("mingle", T0 + 1)
    out = core.receive(wire.REPLY, reply("b@h", clock=99, revoked={"late": T0}), T0 + 1.5)
    assert not [e for e in out if isinstance(e, MingleDone)]
    assert core.is_revoked("late") and core.clock.value == 100


def test_a_reply_to_an_earlier_life_of_ours_is_merged_not_counted() -> None:
    core = GossipCore("a@h", 2)
    core.start(T0)
    out = core.receive(wire.REPLY, reply("b@h", to_pid=1, revoked={"old": T0}), T0)
    assert core.is_revoked("old")
    assert not [e for e in out if isinstance(e, MingleDone)]
    out = core.receive(wire.REPLY, reply("b@h", to_pid=2), T0)
    assert MingleDone(("b@h",), all_alone=False) in out


def test_without_mingle() -> None:
    core = GossipCore("a@h", 1, without_mingle=True)
    out = core.start(T0)
    assert MingleDone((), all_alone=False, skipped=True) in out
    assert not [e for e in out if isinstance(e, Publish) and e.routing_key == wire.HELLO]
    assert not [e for e in out if isinstance(e, SetTimer) and e.key == "mingle"]
    # no mingle to wait for: worker-online goes at once, at start and after a reconnect
    assert [e.routing_key for e in out if isinstance(e, Publish)] == [wire.ONLINE]
    core.bus_down(T0 + 1)
    back = core.bus_up(T0 + 2)
    assert [e.routing_key for e in back if isinstance(e, Publish)] == [wire.ONLINE]
    # it still answers others' hellos (Celery's hello is a control command)
    assert [e for e in core.receive(wire.HELLO, hello(), T0) if isinstance(e, Direct)]


# ---- chunked deltas with a cap (Celery #4959) -----------------------------------------------------------


def big(n: int, t: float = T0) -> dict[str, float]:
    return {f"t{i:05d}": t - i for i in range(n)}


def test_big_sets_go_in_chunks_newest_first_with_a_cap() -> None:
    core = GossipCore("a@h", 1, sync_chunk=100, sync_max=250)
    core.revoked.update(big(1000), now=T0)
    out = core.receive(wire.HELLO, hello(), T0)
    sent = [e for e in out if isinstance(e, Direct)]
    assert [e.routing_key for e in sent] == [wire.REPLY, wire.CHUNK, wire.CHUNK]
    assert [len(e.body["revoked"]) for e in sent] == [100, 100, 50]
    assert all(e.body["chunks"] == 3 for e in sent)
    assert [e.body["seq"] for e in sent[1:]] == [1, 2]
    assert all(wire.problem(e.routing_key, e.body) is None for e in sent)
    got = {k for e in sent for k in e.body["revoked"]}
    assert got == {f"t{i:05d}" for i in range(250)}  # the newest 250


def test_chunked_sync_between_cores_converges_and_counts_once_complete() -> None:
    pump = started("a@h", "b@h", sync_chunk=100)
    a = pump.cores["a@h"]
    a.revoked.update(big(450), now=T0)
    late = GossipCore("z@h", 9, sync_chunk=100)
    late.revoked.update({"only-z": T0}, now=T0)
    pump.cores["z@h"] = late
    pump.effects["z@h"] = []
    pump.feed("z@h", late.start(T0))
    pump.run()
    assert len(late.revoked) == 451
    assert a.is_revoked("only-z") and pump.cores["b@h"].is_revoked("only-z")
    (done,) = pump.of("z@h", MingleDone)
    assert done.synced_with == ("a@h", "b@h")
    # the delta: b had nothing z lacked but a's ids, which it also holds: same 450, not less
    chunks_from_a = [e for n, e in pump.sent if n == "a@h" and isinstance(e, Direct)]
    assert sum(len(e.body["revoked"]) for e in chunks_from_a) == 450
    assert len(chunks_from_a) == 5


def test_reply_missing_a_chunk_is_merged_but_not_counted() -> None:
    core = GossipCore("a@h", 1)
    core.start(T0)
    core.receive(wire.REPLY, reply("b@h", chunks=3, revoked={"r1": T0}), T0)
    chunk = msg(wire.CHUNK, "b@h", 7, round=1, of="reply", seq=2, chunks=3, revoked={"r3": T0})
    out = core.receive(wire.CHUNK, chunk, T0)
    assert core.is_revoked("r1") and core.is_revoked("r3")
    assert not [e for e in out if isinstance(e, MingleDone)]
    out = core.timer("mingle", T0 + 1)
    assert MingleDone((), all_alone=True) in out  # b's state never fully arrived


def test_hello_in_chunks_is_answered_once_complete_with_the_delta() -> None:
    core = GossipCore("a@h", 1)
    core.revoked.update({"both": T0, "only-a": T0}, now=T0)
    out = core.receive(wire.HELLO, hello(chunks=2, revoked={"both": T0}), T0)
    assert not [e for e in out if isinstance(e, Direct)]
    chunk = msg(wire.CHUNK, "b@h", 7, round=1, of="hello", seq=1, chunks=2, revoked={"b2": T0})
    out = core.receive(wire.CHUNK, chunk, T0)
    (r,) = [e for e in out if isinstance(e, Direct)]
    assert r.body["revoked"] == {"only-a": T0}


def test_mingle_core_alone() -> None:
    """The part on its own: a stamper and a set are all it needs."""
    clock = LamportClock()
    core = MingleCore(wire.Stamper("a@h", 1, clock), LimitedSet(maxlen=10), timeout=0.5)
    out = core.start(T0)
    assert SetTimer("mingle", 0.5) in out
    assert core.timer("other", T0) == []
    assert MingleDone((), all_alone=True) in core.timer("mingle", T0 + 0.5)
    assert core.timer("mingle", T0 + 1) == []  # over: a stale fire does nothing
