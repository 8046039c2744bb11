"""Pure partition functions: majority, preferred partition, cliques, autoheal's decision."""

from __future__ import annotations

import itertools
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from monitors.node_monitor.partitions import (
    all_partitions,
    autoheal_winner,
    choose_clique,
    decompose,
    in_preferred_partition,
    is_fully_connected,
    majority,
    maximal_cliques,
    mutual_graph,
)

N = [f"n{i}@h" for i in range(7)]


def test_majority_is_strict_and_of_all_members() -> None:
    four = N[:4]
    assert not majority(N[:2], four)  # 2|2: neither side
    assert not majority(N[2:4], four)
    assert majority(N[:3], four)
    assert not majority(N[:1], N[:2])  # a 2-node cluster pauses on any failure
    assert majority(N[:2], N[:3])
    assert not majority([*N[:2], "other@h"], N[:5])  # non-members do not count
    assert majority([], [])


def test_in_preferred_partition() -> None:
    members = N[:3]
    assert in_preferred_partition([N[0]], members, [N[0], N[1]])
    assert not in_preferred_partition([N[0]], members, [N[1], N[2]])
    assert in_preferred_partition([N[0], N[2]], members, [N[2]])
    # preferred nodes that are not members do not count; none left means "in the partition"
    assert in_preferred_partition(["gone@h"], members, [N[1]])


def test_mutual_graph_needs_both_directions() -> None:
    a, b, c = N[:3]
    g = mutual_graph({a: {a, b, c}, b: {a, b}, c: {c}}, [a, b, c])
    assert g == {a: frozenset({b}), b: frozenset({a}), c: frozenset()}
    assert not is_fully_connected(g)
    assert is_fully_connected(mutual_graph({a: {a, b}, b: {a, b}}, [a, b]))


def test_triangle_with_one_link_cut() -> None:
    a, b, c = N[:3]
    g = mutual_graph({a: {a, c}, b: {b, c}, c: {a, b, c}}, [a, b, c])
    assert sorted(map(sorted, maximal_cliques(g))) == [[a, c], [b, c]]
    assert decompose(g) == [frozenset({a, c}), frozenset({b})]


def test_1667_three_datacentres() -> None:
    # 7 nodes, DC1 {0,1,2}, DC2 {3,4}, DC3 {5,6}; DC1-DC2 is cut, DC3 sees everyone
    dc1, dc2, dc3 = set(N[:3]), set(N[3:5]), set(N[5:])
    views = dict.fromkeys(dc1, dc1 | dc3) | dict.fromkeys(dc2, dc2 | dc3) | {n: set(N) for n in dc3}
    parts = decompose(mutual_graph(views, N))
    assert parts[0] == frozenset(dc1 | dc3)
    assert majority(parts[0], N)
    assert parts[1] == frozenset(dc2)


def test_rank_prefers_preferred_then_running_then_size() -> None:
    a, b, c, d = N[:4]
    g = mutual_graph({a: {a, b}, b: {a, b}, c: {c, d}, d: {c, d}}, [a, b, c, d])
    assert choose_clique(g) == {a, b}  # name order
    assert choose_clique(g, preferred=[c]) == {c, d}
    assert choose_clique(g, paused=[a]) == {c, d}  # hysteresis: running nodes first
    g3 = mutual_graph({a: {a, b, c}, b: {a, b, c}, c: {a, b, c}, d: {d}}, [a, b, c, d])
    assert choose_clique(g3, paused=[a, b]) == {a, b, c}  # one running node each: size decides
    assert choose_clique({}) == frozenset()


def test_all_partitions_and_winner() -> None:
    a, b, c, d = N[:4]
    parts = all_partitions([a, b, c, d], {a: [c, d], b: [c, d], c: [a, b], d: [a, b]})
    assert parts == [[a, b], [c, d]]
    assert autoheal_winner(parts, {}) == (a, [c, d])  # tie: name order
    assert autoheal_winner(parts, {d: 5}) == (c, [a, b])  # weight first
    parts3 = all_partitions([a, b, c], {a: [b, c]})
    assert autoheal_winner(parts3, {a: 1}) == (a, [b, c])  # weight beats node count
    assert autoheal_winner(parts3, {}) == (b, [a])  # then node count
    assert all_partitions([a, b], {}) == [[a, b]]
    assert all_partitions([a, b], {"gone@h": [a]}) == [[a, b]]


# ----------------------------------------------------------------------------- properties


@st.composite
def graphs(draw: st.DrawFn) -> tuple[list[str], dict[str, set[str]]]:
    nodes = N[: draw(st.integers(1, 7))]
    views = {n: {n} for n in nodes}
    for u, v in itertools.combinations(nodes, 2):
        if draw(st.booleans()):
            views[u].add(v)
        if draw(st.booleans()):
            views[v].add(u)
    return nodes, views


@settings(max_examples=80, deadline=None)
@given(graphs(), st.randoms(use_true_random=False), st.sets(st.sampled_from(N)))
def test_decompose_is_the_same_on_every_node(
    g: tuple, rnd: random.Random, paused: set[str]
) -> None:
    """The answer depends on the views only, not on who computes it or in what order they
    arrived: every node holding the same views picks the same parts."""
    nodes, views = g
    reference = decompose(mutual_graph(views, nodes), paused=paused)
    for _ in range(3):
        order = nodes[:]
        rnd.shuffle(order)
        shuffled = {n: set(views[n]) for n in order}
        assert decompose(mutual_graph(shuffled, order), paused=set(paused)) == reference
    # parts are disjoint cliques covering every node, and at most one is a majority
    adj = mutual_graph(views, nodes)
    assert sorted(n for p in reference for n in p) == sorted(nodes)
    for part in reference:
        assert all(v in adj[u] for u in part for v in part if u != v)
    assert sum(majority(p, nodes) for p in reference) <= 1


@settings(max_examples=80, deadline=None)
@given(graphs(), st.data())
def test_no_majority_on_both_sides_of_a_split(g: tuple, data: st.DataObject) -> None:
    """Cut the cluster in two. Each side knows its own links and holds any stale views of the
    other side; a node runs only if its part is a strict majority. Never on both sides."""
    nodes, _ = g
    side = set(data.draw(st.sets(st.sampled_from(nodes))))
    other = set(nodes) - side

    def run_set(here: set[str], there: set[str]) -> set[str]:
        views = {}
        for n in here:  # fresh: only links within this side survive
            views[n] = {n} | {m for m in here if data.draw(st.booleans())}
        for n in there:  # stale: anything at all
            views[n] = set(data.draw(st.sets(st.sampled_from(nodes))))
        parts = decompose(mutual_graph(views, nodes))
        return {n for n in here for p in parts if n in p and majority(p, nodes)}

    assert not (run_set(side, other) and run_set(other, side))


def test_a_relayed_view_keeps_a_member_its_relay_did_not_know_yet() -> None:
    """A join, found by tests/sim/adversarial.py: c5's view names the new member c6; c4 relays
    it before c4 has heard of c6, then c5's own copy (same stamp) arrives. c6 must see that c5
    sees it, else c6 finds no fully connected part and stays paused for good."""
    from monitors.node_monitor.views import ViewTable, view_from_wire

    c1, c4, c5, c6 = "c1@h", "c4@h", "c5@h", "c6@h"
    raw = {"c": 5, "s": 18, "seen": [c1, c4, c5, c6], "p": False}
    relay = ViewTable(c4, 4)
    relay.merge(c5, {c5: view_from_wire(raw)}, [c1, c4, c5], {c5: 5})  # c4: no c6 yet
    joiner = ViewTable(c6, 6)
    joiner.merge(c4, relay.others, [c1, c4, c5, c6], {c4: 4, c5: 5})
    joiner.merge(c5, {c5: view_from_wire(raw)}, [c1, c4, c5, c6], {c4: 4, c5: 5})
    joiner.set_own([c4, c5, c6], paused=True)
    assert c6 in mutual_graph(joiner.seen_map(), [c1, c4, c5, c6])[c5]
