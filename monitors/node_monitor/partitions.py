"""Pure functions on membership and connectivity: majorities, preferred nodes, cliques, and
autoheal's partitions and winner.

Nothing here depends on which node computes it. That is the point: two nodes that hold the
same views reach the same answer, so a partial partition is resolved the same way everywhere,
without a coordinator (RabbitMQ's check_partial_partition has none, and its symmetric
disconnects can leave the whole cluster cut up; the seed's closing remark).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

Adjacency = dict[str, frozenset[str]]


def majority(alive: Iterable[str], members: Iterable[str]) -> bool:
    """rabbit_node_monitor:majority: `length(Alive) / length(Nodes) > 0.5`, a strict majority
    of ALL members. So 2|2 is no majority on either side, and in a 2-node cluster one node is
    none: both pause on any failure, as RabbitMQ documents.
    """
    member_set = set(members)
    if not member_set:
        return True
    return 2 * len(set(alive) & member_set) > len(member_set)


def in_preferred_partition(
    preferred: Iterable[str], members: Iterable[str], reachable: Iterable[str]
) -> bool:
    """pause_if_all_down: some preferred node that is still a member is reachable.

    An empty list of real preferred nodes counts as "in the partition" (never pause), as
    rabbit_node_monitor:in_preferred_partition/1 does.
    """
    real = set(preferred) & set(members)
    return not real or bool(real & set(reachable))


def mutual_graph(views: Mapping[str, Collection[str]], nodes: Iterable[str]) -> Adjacency:
    """Who can see whom both ways: an edge u-v when u's view holds v and v's view holds u.

    A node without a view sees nobody. Requiring both directions means a stale view can only
    ever hide an edge that one side has already dropped, never invent one.
    """
    node_list = sorted(set(nodes))
    seen = {n: set(views.get(n, ())) for n in node_list}
    return {
        u: frozenset(v for v in node_list if v != u and v in seen[u] and u in seen[v])
        for u in node_list
    }


def is_fully_connected(adj: Adjacency) -> bool:
    """Every node sees every other, both ways."""
    return all(len(neigh) == len(adj) - 1 for neigh in adj.values())


def maximal_cliques(adj: Adjacency) -> list[frozenset[str]]:
    """All maximal fully-connected sets (Bron-Kerbosch with pivoting; clusters are small)."""
    out: list[frozenset[str]] = []

    def expand(r: frozenset[str], p: set[str], x: set[str]) -> None:
        if not p and not x:
            out.append(r)
            return
        pivot = max(sorted(p | x), key=lambda u: len(adj[u] & p))
        for v in sorted(p - adj[pivot]):
            expand(r | {v}, p & adj[v], x & adj[v])
            p = p - {v}
            x = x | {v}

    expand(frozenset(), set(adj), set())
    return out


def clique_rank(
    clique: Collection[str], preferred: Collection[str] = (), paused: Collection[str] = ()
) -> tuple[int, int, int, tuple[str, ...]]:
    """Sort key, best first: holds a preferred node, most running (not paused) nodes, most
    nodes, then name order (the sorted names, smallest first).

    At the moment a fault happens every node runs, so this picks the largest clique. Ranking
    running nodes before size afterwards is hysteresis: while a partition heals link by link,
    a bigger clique of still-paused nodes does not evict the nodes already serving.
    """
    names = tuple(sorted(clique))
    has_preferred = 1 if set(preferred) & set(clique) else 0
    running = sum(1 for n in clique if n not in paused)
    return (-has_preferred, -running, -len(names), names)


def decompose(
    adj: Adjacency, *, preferred: Collection[str] = (), paused: Collection[str] = ()
) -> list[frozenset[str]]:
    """Split the nodes into disjoint cliques: the best clique, then the best of the rest, ...

    Every node is in exactly one part; the first part is the one that keeps running under
    pause_minority (if it is a majority). Links between parts are the ones a partial partition
    "upgrade to full partition" cuts.
    """
    remaining = set(adj)
    parts: list[frozenset[str]] = []
    while remaining:
        sub = {u: adj[u] & remaining for u in remaining}
        best = min(maximal_cliques(sub), key=lambda c: clique_rank(c, preferred, paused))
        parts.append(best)
        remaining -= best
    return parts


def choose_clique(
    adj: Adjacency, *, preferred: Collection[str] = (), paused: Collection[str] = ()
) -> frozenset[str]:
    """The best fully-connected set (the first part of `decompose`)."""
    return decompose(adj, preferred=preferred, paused=paused)[0] if adj else frozenset()


def part_of(node: str, parts: Iterable[frozenset[str]]) -> frozenset[str]:
    for part in parts:
        if node in part:
            return part
    return frozenset((node,))


# ------------------------------------------------------------------------------- autoheal


def all_partitions(
    members: Iterable[str], cant_see: Mapping[str, Collection[str]]
) -> list[list[str]]:
    """rabbit_autoheal:all_partitions: start from one partition of all members and split the
    one holding each node into what it can and cannot see (its recorded `partitions`).
    Nodes are taken in name order so every leader gets the same answer.
    """
    parts: list[list[str]] = [sorted(set(members))]
    for node in sorted(cant_see):
        containing = next((p for p in parts if node in p), None)
        if containing is None:
            continue
        hidden = set(cant_see[node])
        a = [n for n in containing if n not in hidden]
        b = [n for n in containing if n in hidden]
        if a and b:
            parts.remove(containing)
            parts.extend((a, b))
    return sorted(parts)


def autoheal_winner(
    partitions: Iterable[Collection[str]], weights: Mapping[str, int]
) -> tuple[str, list[str]]:
    """(winner, losers): the partition with the highest weight (the sum of its nodes' weights,
    RabbitMQ's client connections), then the most nodes, then name order; the winner is the
    first node of that partition by name. RabbitMQ breaks the last tie by Erlang term order,
    which its docs call unspecified; ours is written down.
    """
    parts = [sorted(p) for p in partitions if p]
    if not parts:
        raise ValueError("autoheal_winner: no partitions")
    best = min(parts, key=lambda p: (-sum(max(0, weights.get(n, 0)) for n in p), -len(p), tuple(p)))
    losers = sorted(n for p in parts if p is not best for n in p)
    return best[0], losers
