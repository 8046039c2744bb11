"""RabbitMQ's partitions_SUITE (present through v3.8.3), ported to real rabbitry nodes.

Three nodes a, b, c with net_ticktime 1 s; every directed link goes through its own fault
proxy, and a cut drops bytes silently, as the suite's `block` (iptables-like) did. Where our
behaviour differs from RabbitMQ's on purpose, the test says so. Waits are on conditions only.
"""

from __future__ import annotations

import json
import time

import pytest

from monitors.dist import NetKernel
from monitors.node_monitor.core import NodeMonitorCore
from rabbitry.testing.cluster import COOKIE, HOST, node_name
from rabbitry.testing.history import HistoryViolation, check
from tests.chaos.conftest import healed, partitions, sees

A, B, C = (node_name(i) for i in range(3))
PAUSE_IF_C_DOWN = {"pause_if_all_down": {"nodes": [C], "recover": "ignore"}}


def test_ignore(cluster) -> None:
    c = cluster(3, partition_handling="ignore")
    c.partition(["a"], ["b", "c"])
    c.wait_for(lambda: c.running("a") == [A] and c.running("b") == [B, C], 15, "a | b c")
    assert not any(c.paused(n) for n in c.nodes)  # ignore never pauses
    c.heal()
    # as in the suite: after the heal each side has recorded the other as a partition
    c.wait_for(
        lambda: (
            partitions(c, "a") == [B, C] and partitions(c, "b") == [A] and partitions(c, "c") == [A]
        ),
        20,
        "the partitions recorded on both sides",
    )
    assert not any(c.paused(n) for n in c.nodes)


def test_pause_minority_on_down(cluster) -> None:
    c = cluster(3, partition_handling="pause_minority")
    c.kill("b")
    c.wait_for(lambda: c.running("a") == [A, C], 15, "b seen down")
    assert not c.paused("a") and not c.paused("c")  # two of three: still a majority
    c.kill("c")
    c.wait_for(lambda: c.paused("a"), 15, "a to pause, alone")
    c.restart("b")
    c.wait_for(lambda: not c.paused("a") and c.running("a") == [A, B], 20, "a to resume")


def test_pause_minority_on_blocked(cluster) -> None:
    c = cluster(3, partition_handling="pause_minority")
    c.partition(["a"], ["b", "c"])
    c.wait_for(lambda: c.paused("a"), 15, "a to pause")
    c.wait_for(lambda: c.running("b") == [B, C] and c.running("c") == [B, C], 15, "b c run")
    assert not c.paused("b") and not c.paused("c")
    c.heal()
    healed(c)


def test_pause_if_all_down_on_down(cluster) -> None:
    c = cluster(3, partition_handling=PAUSE_IF_C_DOWN)
    c.kill("b")
    c.wait_for(lambda: c.running("a") == [A, C], 15, "b seen down")
    assert not c.paused("a") and not c.paused("c")  # c, the preferred node, is reachable
    c.kill("c")
    c.wait_for(lambda: c.paused("a"), 15, "a to pause: every preferred node is down")
    c.restart("c")
    c.wait_for(lambda: not c.paused("a") and sees(c, "a", "c"), 20, "a to resume with c")


def test_pause_if_all_down_on_blocked(cluster) -> None:
    c = cluster(3, partition_handling=PAUSE_IF_C_DOWN)
    c.partition(["a"], ["b", "c"])
    c.wait_for(lambda: c.paused("a"), 15, "a to pause: c unreachable")
    c.wait_for(lambda: c.running("b") == [B, C], 15, "b c run")
    assert not c.paused("b") and not c.paused("c")
    c.heal()
    healed(c)
    # the other side of the suite's case: b cut off from the preferred c pauses, a and c run
    c.partition(["b"], ["a", "c"])
    c.wait_for(lambda: c.paused("b"), 15, "b to pause")
    assert not c.paused("a") and not c.paused("c")
    c.heal()
    healed(c)


@pytest.mark.parametrize("mode", ["pause_minority", "pause_if_all_down"])
def test_false_promises(workload_cluster, mode: str) -> None:
    """An operation acknowledged while the application ran is never lost across a pause, and
    (pause_minority) none is acknowledged by the minority side. The suite's
    *_false_promises_{mirrored,unmirrored}: confirmed <= survived."""
    handling = PAUSE_IF_C_DOWN if mode == "pause_if_all_down" else mode
    c, w = workload_cluster(3, handling)
    w.wait_acked(30)
    c.partition(["a"], ["b", "c"])  # a is the minority, and cut off from c (the preferred)
    c.wait_for(lambda: c.paused("a"), 15, "a to pause")
    w.wait_acked(30)  # the majority goes on acknowledging
    c.heal()
    healed(c)
    w.wait_acked(10)  # a writes again
    history = w.stop_and_check(quorum=mode == "pause_minority")
    assert any(e["node"] == A and e["ev"] == "ack" for e in history.events)


def test_prompt_disconnect_detection(cluster) -> None:
    """A silent cut is detected within net_ticktime's bound, and the node keeps answering
    while it waits: nothing blocks on the lost peer (the suite checked that list_queues
    returned within the delay)."""
    c = cluster(2, partition_handling="ignore")
    c.cut("a", "b")
    began = time.monotonic()
    c.wait_for(lambda: c.running("a") == [A] and c.running("b") == [B], 10, "both see the cut")
    detected = time.monotonic() - began
    quick = c.client("a", timeout=2)
    for _ in range(5):  # a status call during the partition never waits on the peer
        assert quick.status()["running"] == [A]
    print(f"detected after {detected:.2f} s (net_ticktime 1 s)")


def _pairs_test(c, pairs: list[tuple[str, str]]) -> None:
    """The suite's do_autoheal step: block the pairs until noticed, unblock, all healed."""
    for x, y in pairs:
        c.cut(x, y)
    c.wait_for(
        lambda: any(not sees(c, x, y) or not sees(c, y, x) for x, y in pairs),
        15,
        f"the cut of {pairs} to be noticed",
    )
    c.heal()
    healed(c, 40)


@pytest.mark.parametrize(
    "mode",
    ["autoheal", {"pause_if_all_down": {"nodes": [B, C], "recover": "autoheal"}}],
    ids=["autoheal", "autoheal_after_pause_if_all_down"],
)
def test_autoheal(cluster, mode: object) -> None:
    c = cluster(3, partition_handling=mode)
    _pairs_test(c, [("b", "c")])
    _pairs_test(c, [("a", "c"), ("b", "c")])
    _pairs_test(c, [("a", "b"), ("a", "c"), ("b", "c")])


def test_autoheal_multiple_partial_partitions(cluster) -> None:
    c = cluster(3, partition_handling="autoheal")
    for pair in [("a", "b"), ("a", "c")] * 3:
        c.cut(*pair)
        c.wait_for(lambda p=pair: not sees(c, *p) or not sees(c, p[1], p[0]), 15, f"{pair} cut")
        c.heal()
    healed(c, 40)


def test_autoheal_unexpected_finish(cluster, network) -> None:
    """autoheal_finished messages nobody asked for (from a member, about any winner) are
    logged and dropped; the monitor keeps running and the cluster heals as usual.

    The suite sent them to A's monitor from A itself; our monitor drops messages claiming to
    come from itself, so here they come from a member: the test process takes c's place (c
    killed) with its name and the cluster cookie, and talks to a and b over dist.
    """
    if network == "netns":
        pytest.skip(
            "the test process plays c on c's own address, which in netns mode lives in c's namespace"
        )
    c = cluster(3, partition_handling="autoheal")
    c.kill("c")
    c.wait_for(lambda: c.running("a") == [A, B], 15, "c seen down")
    config = json.loads(c.config_file("c").read_text())
    impostor = NetKernel.start(C, config["listen"], COOKIE, dict(config["cluster"]["nodes"]))
    try:
        kernel = NetKernel.of(impostor)
        for target in (A, B):
            assert kernel.connect(target, timeout=10), f"cannot reach {target}"
            record = {
                "t": "node_up",
                "c": kernel.creation,
                "node": C,
                "disc": True,
                "creation": kernel.creation,
                "running": True,
                "down": None,
                "alarms": [],
            }
            kernel.send(target, NodeMonitorCore.NAME, record)
            for winner in (A, B, C, "z@nowhere"):
                msg = {"t": "autoheal_finished", "c": kernel.creation, "winner": winner}
                kernel.send(target, NodeMonitorCore.NAME, msg)
            kernel.send(target, NodeMonitorCore.NAME, {"t": "autoheal_finished"})  # malformed
        c.wait_for(lambda: sees(c, "a", "c") and sees(c, "b", "c"), 15, "the impostor seen")
    finally:
        impostor.stop()
    c.wait_for(lambda: c.running("a") == [A, B], 15, "the impostor seen gone")
    pids = {n: c.proc(n).pid for n in (A, B)}
    c.restart("c")
    healed(c, 40)
    assert {n: c.proc(n).pid for n in (A, B)} == pids
    for node in (A, B):
        log = "\n".join(c.proc(node).stderr())
        assert "child_terminated" not in log or "node_monitor" not in log, log[-3000:]
        assert "unexpected" in log or "finished according to winner" in log


def test_partial_false_positive(cluster) -> None:
    """a is cut from b, and half a tick later from c: when b times a out and asks c whether
    a is really down, c has not timed a out yet. That is still a full partition of a, not a
    partial one, and b and c must keep each other (c checks with a itself before it
    confirms a partial partition, as RabbitMQ's monitor does)."""
    c = cluster(3, partition_handling="ignore")
    c.cut("a", "b")
    time.sleep(0.5)  # part of the fault schedule (the suite waited 1 s of its 1 s ticktime)
    c.cut("a", "c")
    c.wait_for(lambda: c.running("a") == [A], 15, "a alone")
    c.wait_for(lambda: c.running("b") == [B, C] and c.running("c") == [B, C], 15, "b c")
    for _ in range(20):  # ... and b and c stay together
        assert c.running("b") == [B, C] and c.running("c") == [B, C]
        time.sleep(0.1)
    c.heal()
    c.wait_for(
        lambda: (
            partitions(c, "a") == [B, C] and partitions(c, "b") == [A] and partitions(c, "c") == [A]
        ),
        20,
        "a | b c recorded",
    )


def test_partial_to_full(cluster) -> None:
    """Under ignore a partial partition is made a full one. Which way depends on how the
    nodedowns race, as in the suite: a | b c, b | a c, or all three apart."""
    c = cluster(3, partition_handling="ignore")
    c.cut("a", "b")

    def full() -> tuple[tuple[str, ...], ...] | None:
        seen = tuple(tuple(c.running(n)) for n in c.nodes)
        valid = {
            ((A,), (B, C), (B, C)),
            ((A, C), (B,), (A, C)),
            ((A,), (B,), (C,)),
        }
        return seen if seen in valid else None

    c.wait_for(full, 20, "the partial partition to become a full one")
    c.heal()
    outcomes = {((B, C), (A,), (A,)), ((B,), (A, C), (B,)), ((B, C), (A, C), (A, B))}
    c.wait_for(
        lambda: tuple(tuple(partitions(c, n)) for n in c.nodes) in outcomes,
        20,
        "the partitions recorded as one of the suite's three outcomes",
    )


def test_partial_pause_minority(cluster) -> None:
    """RabbitMQ pauses both a and b (it disconnects them from c). Ours pauses fewer: c sees
    everyone, the best fully connected part holding c runs, the node left out pauses."""
    c = cluster(3, partition_handling="pause_minority")
    c.cut("a", "b")
    c.wait_for(lambda: c.paused("a") or c.paused("b"), 15, "a or b to pause")
    c.wait_for(lambda: not c.paused("c"), 15, "c to run")
    assert not (not c.paused("a") and not c.paused("b")), "a and b both run without a link"
    c.heal()
    healed(c, 40)


def test_partial_pause_if_all_down(cluster) -> None:
    c = cluster(3, partition_handling={"pause_if_all_down": {"nodes": [B], "recover": "ignore"}})
    c.cut("a", "b")
    c.wait_for(lambda: c.paused("a"), 15, "a to pause: its part has no preferred node")
    c.wait_for(lambda: not c.paused("b") and not c.paused("c"), 15, "b c to run")
    c.heal()
    healed(c, 40)


def test_restart_in_a_minority_never_runs_the_application(workload_cluster) -> None:
    """Not in the suite: a node restarted while cut off from the majority keeps its
    application stopped (held at boot) until it rejoins; RabbitMQ would run it."""
    c, w = workload_cluster(3, "pause_minority")
    w.wait_acked(10)
    c.partition(["a"], ["b", "c"])
    c.wait_for(lambda: c.paused("a"), 15, "a to pause")
    restarted = time.time()
    c.kill("a")
    c.restart("a")
    c.wait_for(lambda: c.paused("a"), 15, "a held after its restart")
    w.wait_acked(10)  # b and c go on, and give a's boot time to misbehave
    starts = [e for e in w.history().events if e["node"] == A and e["ev"] == "start"]
    assert all(e["t"] < restarted for e in starts), "a's application ran on a minority"
    c.heal()
    healed(c)
    w.wait_acked(5)
    w.stop_and_check(quorum=True)


def test_the_checker_catches_minority_acks_under_ignore(workload_cluster) -> None:
    """The same workload under ignore: the minority goes on acknowledging on its own, and
    the checker must say so (a checker that cannot fail proves nothing)."""
    c, w = workload_cluster(3, "ignore")
    w.wait_acked(10)
    c.partition(["a"], ["b", "c"])
    cut = c.faults[-1].t
    c.wait_for(lambda: c.running("a") == [A], 15, "a alone")
    # after the cut: a may also have acknowledged alone at its start, before it saw the others,
    # which is no minority ack (no fault yet), and the check would then find nothing
    c.wait_for(
        lambda: any(
            e["ev"] == "ack" and e["node"] == A and e["replicas"] == [A] and e["t"] >= cut
            for e in w.history().events
        ),
        15,
        "a to acknowledge alone after the cut",
    )
    with pytest.raises(HistoryViolation) as failure:  # judged now: ignore never converges
        check(w.history(), len(c.nodes), quorum=True, healed=False, faults=c.faults)
    assert {v.kind for v in failure.value.violations} >= {"minority_ack"}
    assert "fault schedule:" in str(failure.value) and "partition a@127.0.0.1" in str(failure.value)
    assert HOST in str(failure.value)
