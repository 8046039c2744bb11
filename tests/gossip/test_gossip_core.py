"""GossipCore: heartbeats, alive tracking, the clock, revokes, bus events, bad input.

Celery's test_Gossip cases (test_init, test_callbacks, test_on_node_join/leave/lost,
test_register_timer, test_periodic, test_on_message, test_worker_event_across_timezones_...)
rewritten for a pure core: instead of mocks, events go in and effects come out. `Pump` runs
several cores on an instant bus; the election and mingle tests use it too.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from typing import Any

import pytest

from monitors.effects import CancelTimer, Log, SetTimer
from monitors.gossip import wire
from monitors.gossip.effects import (
    Direct,
    ElectionFailed,
    MingleDone,
    NodeJoined,
    NodeLeft,
    NodeLost,
    Publish,
    Revoked,
)
from monitors.gossip.gossip_core import TIMER_HEARTBEAT, TIMER_PERIODIC, GossipCore

T0 = 1_700_000_000.0


class Pump:
    """Cores on an instant bus. A Publish reaches every core (the sender too: the bus echoes),
    a Direct its node; in order, each through JSON. `cut` nodes send and receive nothing.
    Non-bus effects are kept per node in `effects`."""

    def __init__(self, *cores: GossipCore, now: float = T0) -> None:
        self.cores = {c.node: c for c in cores}
        self.now = now
        self.queue: deque[tuple[str, str, dict[str, Any], str]] = deque()
        self.effects: dict[str, list[Any]] = {c.node: [] for c in cores}
        self.sent: list[tuple[str, Any]] = []
        self.cut: set[str] = set()

    def feed(self, node: str, effects: list[Any]) -> list[Any]:
        for eff in effects:
            if isinstance(eff, Publish):
                self.sent.append((node, eff))
                if node not in self.cut:
                    for dst in self.cores:
                        self.queue.append((dst, eff.routing_key, _json(eff.body), node))
            elif isinstance(eff, Direct):
                self.sent.append((node, eff))
                if node not in self.cut and eff.node in self.cores:
                    self.queue.append((eff.node, eff.routing_key, _json(eff.body), node))
            else:
                self.effects[node].append(eff)
        return effects

    def run(self, limit: int = 10_000) -> None:
        while self.queue:
            limit -= 1
            assert limit > 0, "message storm"
            dst, rk, body, src = self.queue.popleft()
            if dst in self.cut or dst not in self.cores:
                continue
            self.feed(dst, self.cores[dst].receive(rk, body, self.now, sender=src))

    def call(self, node: str, method: str, *args: Any) -> list[Any]:
        out = self.feed(node, getattr(self.cores[node], method)(*args, self.now))
        self.run()
        return out

    def start(self) -> None:
        for name in self.cores:
            self.feed(name, self.cores[name].start(self.now))
        self.run()

    def fire(self, node: str, key: str) -> list[Any]:
        out = self.feed(node, self.cores[node].timer(key, self.now))
        self.run()
        return out

    def of(self, node: str, cls: type) -> list[Any]:
        return [e for e in self.effects[node] if isinstance(e, cls)]

    def clear(self) -> None:
        for v in self.effects.values():
            v.clear()
        self.sent.clear()


def _json(body: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(body, allow_nan=False))


def started(*names: str, **options: Any) -> Pump:
    """Cores that have started and finished mingle (its timer fired)."""
    pump = Pump(*(GossipCore(n, 100 + i, **options) for i, n in enumerate(names)))
    pump.start()
    for n in names:
        if pump.cores[n].mingle.mingling:
            pump.fire(n, "mingle")
    pump.clear()
    return pump


def msg(rk: str, host: str = "b@h", pid: int = 7, clock: int = 1, ts: float = T0, **f: Any):
    return {"v": 1, "type": wire.type_of(rk), "hostname": host, "pid": pid, "clock": clock,
            "ts": ts, **f}  # fmt: skip


def heartbeat(host: str = "b@h", pid: int = 7, ts: float = T0, **f: Any) -> dict[str, Any]:
    return msg(wire.HEARTBEAT, host, pid, ts=ts, **{"freq": 2.0, **f})


def logs(effects: list[Any], level: int = logging.WARNING) -> list[str]:
    return [e.text for e in effects if isinstance(e, Log) and e.level >= level]


# ---- test_init ------------------------------------------------------------------------------------


def test_init_defaults() -> None:
    core = GossipCore("a@h", 42)
    assert core.heartbeat_interval == 2.0
    assert core.interval == 5.0
    assert core.mingle.timeout == 1.0
    assert core.revoked.maxlen == 50000
    assert core.revoked.expires == 10800
    assert core.stamper.member == "a@h.42"
    assert core.clock.value == 0
    assert core.alive_workers() == []
    assert not core.paused
    assert core.gossip and core.mingle.enabled


def test_start_announces_arms_timers_and_mingles() -> None:
    core = GossipCore("a@h", 42)
    out = core.start(T0)
    # worker-online waits for the mingle's end: a peer answers the hello sooner
    assert [e.routing_key for e in out if isinstance(e, Publish)] == [wire.HELLO]
    assert SetTimer(TIMER_HEARTBEAT, 2.0) in out
    assert SetTimer(TIMER_PERIODIC, 5.0) in out
    assert SetTimer("mingle", 1.0) in out
    done = core.timer("mingle", T0 + 1.0)
    pubs = [e for e in done if isinstance(e, Publish)]
    assert [p.routing_key for p in pubs] == [wire.ONLINE]
    assert done.index(pubs[0]) > done.index(MingleDone((), all_alone=True))
    online = pubs[0].body
    assert online["freq"] == 2.0 and online["hostname"] == "a@h" and online["pid"] == 42
    assert wire.problem(wire.ONLINE, online) is None
    assert logs(core.start(T0)) == ["gossip: start called twice; ignored"]


def test_without_gossip_sends_no_events_but_still_mingles() -> None:
    core = GossipCore("a@h", 1, without_gossip=True)
    out = core.start(T0)
    assert [e.routing_key for e in out if isinstance(e, Publish)] == [wire.HELLO]
    assert core.receive(wire.ONLINE, msg(wire.ONLINE, freq=2.0), T0) == []
    assert core.alive_workers() == []
    assert core.election("e", "task", None, T0) == [
        ElectionFailed("e", "gossip is disabled (without_gossip)")
    ]


# ---- test_callbacks / test_on_node_join / leave / lost ----------------------------------------------


def test_callbacks_join_leave_lost() -> None:
    core = GossipCore("a@h", 1)
    core.start(T0)
    out = core.receive(wire.ONLINE, msg(wire.ONLINE, "b@h", 7, freq=2.0), T0)
    assert NodeJoined("b@h") in out
    assert core.alive_workers() == ["b@h"]
    assert core.receive(wire.HEARTBEAT, heartbeat(), T0 + 1) == []  # known: no second join
    out = core.receive(wire.OFFLINE, msg(wire.OFFLINE, "b@h", 7), T0 + 2)
    assert NodeLeft("b@h") in out
    assert core.alive_workers() == []
    core.receive(wire.HEARTBEAT, heartbeat(), T0 + 3)  # back: joins again
    out = core.timer(TIMER_PERIODIC, T0 + 3 + 4.0)  # 2 x freq later: lost
    assert NodeLost("b@h") in out
    assert "gossip: missed heartbeat from node" in logs(out, logging.INFO)


def test_on_node_join_from_first_heartbeat() -> None:
    core = GossipCore("a@h", 1)
    out = core.receive(wire.HEARTBEAT, heartbeat("c@h", 9), T0)
    assert out[-1] == NodeJoined("c@h")


def test_on_node_leave_ignores_an_older_incarnation() -> None:
    core = GossipCore("a@h", 1)
    core.receive(wire.HEARTBEAT, heartbeat("b@h", 8), T0)
    assert core.receive(wire.OFFLINE, msg(wire.OFFLINE, "b@h", 7), T0) == []
    assert core.alive_workers() == ["b@h"]


def test_on_node_lost_when_it_comes_back_with_another_pid() -> None:
    core = GossipCore("a@h", 1)
    core.receive(wire.HEARTBEAT, heartbeat("b@h", 7), T0)
    out = core.receive(wire.ONLINE, msg(wire.ONLINE, "b@h", 8, freq=2.0), T0 + 0.5)
    kinds = [e for e in out if isinstance(e, (NodeLost, NodeJoined))]
    assert kinds == [NodeLost("b@h"), NodeJoined("b@h")]
    assert core.workers["b@h"].pid == 8


# ---- test_register_timer / test_periodic ---------------------------------------------------------------


def test_heartbeats_report_stats_that_peers_accept() -> None:
    core = GossipCore("a@h", 1, sw_ver="0.1.0", sw_sys="Linux", utcoffset=-8)
    core.set_stats(active=3, processed=-5, loadavg=(0.5, float("nan"), 1.239, 9.0))
    hb = next(e for e in core.timer(TIMER_HEARTBEAT, T0) if isinstance(e, Publish)).body
    assert (hb["active"], hb["processed"], hb["loadavg"]) == (3, 0, [0.5, 0.0, 1.24])
    assert (hb["sw_ver"], hb["sw_sys"], hb["utcoffset"]) == ("0.1.0", "Linux", -8)
    assert wire.problem(wire.HEARTBEAT, _json(hb)) is None
    peer = GossipCore("b@h", 2)
    peer.receive(wire.HEARTBEAT, _json(hb), T0)
    assert peer.workers["a@h"].info == {"active": 3, "processed": 0, "loadavg": [0.5, 0.0, 1.24]}


def test_register_timer_rearms_each_period() -> None:
    core = GossipCore("a@h", 1, interval=3.0, heartbeat_interval=0.5)
    core.start(T0)
    assert core.timer(TIMER_PERIODIC, T0 + 3)[0] == SetTimer(TIMER_PERIODIC, 3.0)
    out = core.timer(TIMER_HEARTBEAT, T0 + 0.5)
    assert out[0] == SetTimer(TIMER_HEARTBEAT, 0.5)
    hb = next(e for e in out if isinstance(e, Publish))
    assert hb.routing_key == wire.HEARTBEAT and wire.problem(wire.HEARTBEAT, hb.body) is None


def test_periodic_loses_only_expired_workers() -> None:
    core = GossipCore("a@h", 1)
    core.receive(wire.HEARTBEAT, heartbeat("old@h", 1), T0)
    core.receive(wire.HEARTBEAT, heartbeat("new@h", 2), T0 + 3)
    # old expires at T0 + 4 (freq 2 x window 2), new at T0 + 7
    out = core.timer(TIMER_PERIODIC, T0 + 4.5)
    assert [e for e in out if isinstance(e, NodeLost)] == [NodeLost("old@h")]
    assert core.alive_workers() == ["new@h"]
    assert core.alive_workers(T0 + 7.5) == []  # past its window, before the next check


def test_expiry_follows_the_senders_freq() -> None:
    core = GossipCore("a@h", 1)
    core.receive(wire.HEARTBEAT, heartbeat("slow@h", 1, freq=10.0), T0)
    assert [e for e in core.timer(TIMER_PERIODIC, T0 + 19) if isinstance(e, NodeLost)] == []
    assert NodeLost("slow@h") in core.timer(TIMER_PERIODIC, T0 + 20)


def test_stop_says_offline_fails_elections_and_cancels_timers() -> None:
    pump = started("a@h")
    a = pump.cores["a@h"]
    pump.call("a@h", "election", "e1", "task", None)  # alone: decided at once
    pump.cores["a@h"].elections.alive.add("ghost@h")  # now one that never acks
    pump.call("a@h", "election", "e2", "task", None)
    out = a.stop(T0)
    assert ElectionFailed("e2", "stopped") in out
    assert [e.routing_key for e in out if isinstance(e, Publish)] == [wire.OFFLINE]
    assert CancelTimer(TIMER_HEARTBEAT) in out and CancelTimer(TIMER_PERIODIC) in out
    assert a.stop(T0) == []
    assert a.receive(wire.HEARTBEAT, heartbeat(), T0) == []
    assert a.timer(TIMER_PERIODIC, T0) == []


# ---- test_on_message ------------------------------------------------------------------------------------


def test_on_message_from_another_node_adjusts_the_clock() -> None:
    core = GossipCore("a@h", 1)
    core.clock.value = 10
    core.receive(wire.HEARTBEAT, heartbeat(clock=40), T0)
    assert core.clock.value == 41


def test_on_message_from_ourselves_only_forwards_the_clock() -> None:
    core = GossipCore("a@h", 1)
    core.clock.value = 10
    assert core.receive(wire.HEARTBEAT, heartbeat("a@h", 1, clock=40), T0) == []
    assert core.clock.value == 11
    assert core.alive_workers() == []
    # the same name with another pid: a second process with our name (said once)
    out = core.receive(wire.HEARTBEAT, heartbeat("a@h", 2), T0)
    assert logs(out) == ["gossip: another process uses our node name"]
    assert core.receive(wire.HEARTBEAT, heartbeat("a@h", 2), T0) == []


def test_on_message_task_events_are_not_ours() -> None:
    core = GossipCore("a@h", 1)
    assert core.receive("task.succeeded", {"anything": 1}, T0) == []
    assert core.clock.value == 0


@pytest.mark.parametrize(
    ("rk", "body", "why"),
    [
        (wire.HEARTBEAT, ["not", "a", "dict"], "expected a JSON object"),
        (wire.HEARTBEAT, {**heartbeat(), "v": 2}, "unsupported version"),
        (
            wire.HEARTBEAT,
            {k: v for k, v in heartbeat().items() if k != "freq"},
            "missing field 'freq'",
        ),
        (wire.HEARTBEAT, heartbeat(freq="2"), "field 'freq'"),
        (wire.HEARTBEAT, {**heartbeat(), "clock": -1}, "field 'clock'"),
        (wire.HEARTBEAT, {**heartbeat(), "type": "worker-online"}, "sent under routing key"),
        (wire.ELECT, msg(wire.ELECT, id="e", topic="task"), "missing field 'candidate'"),
        (
            wire.ELECT_ACK,
            msg(wire.ELECT_ACK, id="e", to="x.1", to_clock=1, best=[1, "x", 1]),
            "go together",
        ),
        (wire.REVOKE, msg(wire.REVOKE, ids={"t1": "yesterday"}), "bad timestamp"),
        (wire.REVOKE, msg(wire.REVOKE, ids={"": 1.0}), "bad task id"),
        (wire.HELLO, msg(wire.HELLO, round=1, chunks=0, revoked={}), "field 'chunks'"),
        ("worker.nonsense", heartbeat(), "unknown routing key"),
    ],
)
def test_bad_messages_are_logged_and_dropped(rk: str, body: Any, why: str) -> None:
    core = GossipCore("a@h", 1)
    out = core.receive(rk, body, T0)
    assert len(out) == 1 and isinstance(out[0], Log) and out[0].level == logging.WARNING
    assert why in out[0].fields["why"]
    assert core.alive_workers() == [] and core.clock.value == 0


def test_a_message_sent_in_another_nodes_name_is_dropped() -> None:
    core = GossipCore("a@h", 1)
    out = core.receive(wire.HEARTBEAT, heartbeat("b@h"), T0, sender="mallory@h")
    assert "in the name of" in out[0].fields["why"]
    assert core.alive_workers() == []


# ---- test_worker_event_across_timezones_causes_no_drift_warning -------------------------------------------


def test_worker_event_across_timezones_causes_no_drift_warning() -> None:
    core = GossipCore("a@h", 1)
    # a node eight hours west: its utcoffset differs, its epoch timestamp does not
    out = core.receive(wire.HEARTBEAT, heartbeat(ts=T0 + 0.2, utcoffset=-8), T0)
    assert logs(out) == []


def test_real_drift_is_warned_once_until_it_recovers() -> None:
    core = GossipCore("a@h", 1)
    assert logs(core.receive(wire.HEARTBEAT, heartbeat(ts=T0 - 20), T0)) == [
        "gossip: substantial drift from node; are its and our clocks in sync?"
    ]
    assert logs(core.receive(wire.HEARTBEAT, heartbeat(ts=T0 - 18), T0 + 2)) == []
    assert logs(core.receive(wire.HEARTBEAT, heartbeat(ts=T0 + 4), T0 + 4)) == []
    assert len(logs(core.receive(wire.HEARTBEAT, heartbeat(ts=T0 + 30), T0 + 6))) == 1


def test_liveness_uses_our_clock_not_the_senders() -> None:
    """A peer whose clock is 100 s behind is not lost for it (Celery #5037's floods)."""
    core = GossipCore("a@h", 1)
    core.receive(wire.HEARTBEAT, heartbeat(ts=T0 - 100), T0)
    assert not [e for e in core.timer(TIMER_PERIODIC, T0 + 3.9) if isinstance(e, NodeLost)]


# ---- revokes -------------------------------------------------------------------------------------------


def test_revoke_is_merged_everywhere() -> None:
    pump = started("a@h", "b@h", "c@h")
    out = pump.call("a@h", "revoke", ["t1", "t2"])
    assert Revoked(("t1", "t2")) in out
    for name in ("b@h", "c@h"):
        assert pump.cores[name].is_revoked("t1") and pump.cores[name].is_revoked("t2")
        assert pump.of(name, Revoked) == [Revoked(("t1", "t2"))]
    pump.clear()
    pump.call("b@h", "revoke", ["t2"])  # again: nothing new anywhere
    assert pump.of("a@h", Revoked) == [] and pump.of("b@h", Revoked) == []


def test_revoke_in_chunks_and_bad_ids_refused() -> None:
    core = GossipCore("a@h", 1, sync_chunk=2)
    out = core.revoke(["t1", "t2", "t3", "", 5], T0)  # type: ignore[list-item]
    pubs = [e for e in out if isinstance(e, Publish)]
    assert [len(p.body["ids"]) for p in pubs] == [2, 1]
    assert logs(out) == ["revoke: ignored bad task ids"]
    assert len(core.revoked) == 3


def test_revoke_from_a_clock_ahead_is_stamped_no_later_than_now() -> None:
    core = GossipCore("a@h", 1)
    core.receive(wire.REVOKE, msg(wire.REVOKE, ids={"t1": T0 + 5000.0}), T0)
    assert core.revoked.as_dict()["t1"] == T0


def test_heartbeat_digests_that_keep_differing_start_a_resync() -> None:
    pump = started("a@h", "b@h")
    a, b = pump.cores["a@h"], pump.cores["b@h"]
    b.revoked.add("only-b", T0)  # as if b had missed telling a (a lost broadcast)
    b._revoked_version += 1
    pump.fire("b@h", TIMER_HEARTBEAT)
    assert "only-b" not in a.revoked  # one mismatch could be a message in flight
    pump.fire("b@h", TIMER_HEARTBEAT)
    assert "only-b" in a.revoked  # a has fewer ids: it sent b a hello, b replied the delta
    hellos = [
        (n, e.node) for n, e in pump.sent if isinstance(e, Direct) and e.routing_key == wire.HELLO
    ]
    assert hellos == [("a@h", "b@h")]  # one side only: a, which holds fewer ids
    pump.sent.clear()
    pump.fire("b@h", TIMER_HEARTBEAT)
    pump.fire("b@h", TIMER_HEARTBEAT)
    assert not [e for _, e in pump.sent if isinstance(e, Direct)]  # equal now: quiet


# ---- the bus going away ----------------------------------------------------------------------------------


def test_bus_down_sends_nothing_and_loses_nobody() -> None:
    pump = started("a@h", "b@h")
    a = pump.cores["a@h"]
    assert a.alive_workers() == ["b@h"]
    out = a.bus_down(T0)
    assert logs(out) == ["gossip: bus disconnected"]
    assert not [e for e in a.timer(TIMER_HEARTBEAT, T0 + 2) if isinstance(e, Publish)]
    out = a.timer(TIMER_PERIODIC, T0 + 60)
    assert not [e for e in out if isinstance(e, NodeLost)]
    assert not [e for e in a.revoke(["t1"], T0 + 60) if isinstance(e, Publish)]
    assert a.is_revoked("t1")


def test_bus_up_gives_a_fresh_window_announces_and_mingles_again() -> None:
    pump = started("a@h", "b@h")
    a = pump.cores["a@h"]
    a.bus_down(T0)
    out = a.bus_up(T0 + 60)
    assert [e.routing_key for e in out if isinstance(e, Publish)] == [wire.HELLO]
    assert a.mingle.mingling  # worker-online follows its end
    # b is not lost at once, only if it stays silent for the reconnect grace (5 s: peers
    # reconnect over the bus's jittered backoff) and then a whole window (2 x 2 s)
    assert not [e for e in a.timer(TIMER_PERIODIC, T0 + 68) if isinstance(e, NodeLost)]
    assert NodeLost("b@h") in a.timer(TIMER_PERIODIC, T0 + 69)


def test_a_node_started_without_its_broker_mingles_only_once_connected() -> None:
    """Found by the gossip benchmark: a mingle started while disconnected heard nobody and
    ended "all alone" after 1 s, claiming a sync that never happened."""
    core = GossipCore("a@h", 1, connected=False)
    out = core.start(T0)
    assert not [e for e in out if isinstance(e, Publish) and e.routing_key == wire.HELLO]
    assert not [e for e in core.timer("mingle", T0 + 1.0) if isinstance(e, MingleDone)]
    assert not core.mingled
    out = core.bus_up(T0 + 2.0)
    assert [e.routing_key for e in out if isinstance(e, Publish)][-1] == wire.HELLO


def test_reconnect_brings_back_what_was_revoked_meanwhile() -> None:
    pump = started("a@h", "b@h", "c@h")
    pump.cut.add("c@h")
    pump.feed("c@h", pump.cores["c@h"].bus_down(pump.now))
    pump.call("a@h", "revoke", ["missed"])
    pump.call("c@h", "revoke", ["offline-revoke"])
    assert not pump.cores["c@h"].is_revoked("missed")
    pump.cut.discard("c@h")
    pump.call("c@h", "bus_up")
    for core in pump.cores.values():
        assert core.is_revoked("missed") and core.is_revoked("offline-revoke")
    done = pump.of("c@h", MingleDone)
    assert done and done[-1].synced_with == ("a@h", "b@h")
