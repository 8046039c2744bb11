"""Five-node chaos cases under pause_minority, net_ticktime 1 s, with the acknowledged-writes
workload running on every node and the history checked at the end of each."""

from __future__ import annotations

import itertools

from rabbitry.testing.cluster import Cluster, node_name
from tests.chaos.conftest import healed

A, B, C, D, E = (node_name(i) for i in range(5))


def _safe(c: Cluster) -> bool:
    """Every node that runs (not paused) can talk, both ways, to every other node that runs,
    and they are a strict majority: there is one side, and it is the big one."""
    up = [n for n in c.nodes if c.side(n)]
    running = [n for n in up if not c.paused(n)]
    connected = all(b in c.side(a) for a, b in itertools.combinations(running, 2))
    return connected and 2 * len(running) > len(c.nodes)


def test_two_three_split(workload_cluster) -> None:
    c, w = workload_cluster(5)
    w.wait_acked(20)
    c.partition(["a", "b"], ["c", "d", "e"])
    c.wait_for(lambda: c.paused("a") and c.paused("b"), 15, "a and b to pause")
    c.wait_for(lambda: c.running("c") == [C, D, E], 15, "c d e to run")
    assert not any(c.paused(n) for n in (C, D, E))
    w.wait_acked(20)
    c.heal()
    healed(c, 40)
    w.wait_acked(10)
    w.stop_and_check(quorum=True)


def test_a_node_that_sees_only_half_the_cluster(workload_cluster) -> None:
    """e reaches a and b but not c and d. Three of five is a majority by count, but c and d
    (who see a, b and each other) cannot reach e: the fully connected majority a b c d runs,
    and e, left out, pauses."""
    c, w = workload_cluster(5)
    w.wait_acked(20)
    c.partition(["e"], ["c", "d"])  # a and b keep every link
    c.wait_for(lambda: c.paused("e"), 20, "e to pause")
    c.wait_for(lambda: not any(c.paused(n) for n in (A, B, C, D)), 20, "a b c d to run")
    w.wait_acked(20)
    c.heal()
    healed(c, 40)
    w.wait_acked(10)
    w.stop_and_check(quorum=True)


def test_two_links_cut_at_once(workload_cluster) -> None:
    """a-b and c-d go at the same moment: two overlapping partial partitions. Whatever runs
    must be one fully connected majority, and the cluster heals when the links come back."""
    c, w = workload_cluster(5)
    w.wait_acked(20)
    c.cut("a", "b")
    c.cut("c", "d")
    c.wait_for(
        lambda: sum(c.paused(n) for n in c.nodes) >= 2, 20, "the ends of the cut links to pause"
    )
    c.wait_for(lambda: _safe(c), 20, "one fully connected majority running")
    w.wait_acked(10)
    c.heal()
    healed(c, 40)
    w.wait_acked(10)
    w.stop_and_check(quorum=True)


def test_a_flapping_link(workload_cluster) -> None:
    """The a-b link flaps: latency spikes past net_ticktime, then resets, three times over.
    Nothing is acknowledged by a minority and nothing acknowledged is lost."""
    c, w = workload_cluster(5)
    w.wait_acked(20)
    proxies = [c.proxy_name("a", "b"), c.proxy_name("b", "a")]
    for round_ in range(3):
        for proxy in proxies:
            for stream in ("upstream", "downstream"):
                c.api.add_toxic(
                    proxy,
                    {
                        "name": f"spike_{stream}",
                        "type": "latency",
                        "stream": stream,
                        "attributes": {"latency": 1500, "jitter": 500},
                    },
                )
        c.note_fault(f"flap {round_}: latency 1500±500 ms on a<->b")
        c.wait_for(
            lambda: not (B in c.running("a") and A in c.running("b")), 20, "the spike noticed"
        )
        for proxy in proxies:
            for stream in ("upstream", "downstream"):
                c.api.delete_toxic(proxy, f"spike_{stream}")
            c.api.add_toxic(
                proxy,
                {"name": "reset", "type": "reset_peer", "attributes": {"timeout": 0}},
            )
        c.note_fault(f"flap {round_}: reset_peer on a<->b")
        c.heal()
        healed(c, 40)
        w.wait_acked(5)
    w.stop_and_check(quorum=True)


def test_sigstop_longer_than_net_ticktime(workload_cluster) -> None:
    c, w = workload_cluster(5)
    w.wait_acked(20)
    c.stop("c")
    c.wait_for(lambda: all(C not in c.running(n) for n in (A, B, D, E)), 15, "c seen down")
    assert not any(c.paused(n) for n in (A, B, D, E))  # four of five: a majority
    w.wait_acked(20)
    c.cont("c")
    healed(c, 40)
    w.wait_acked(10)
    w.stop_and_check(quorum=True)
