"""Global names on real node processes: three core nodes each try to register "billing" at
start (exactly one holds it), and an ephemeral member finds the holder with whereis_global and
tells it something through the RemoteRef it got. When the holder's node is killed, another
core node's registration is not retried by itself, so the name is free: whereis_global says
none."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rabbitry.testing.cluster import ClusterFactory
from tests.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def _tree(path: Path, body: str) -> Path:
    path.write_text("supervisor:\n  children:\n" + body)
    return path


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture(scope="module")
def names_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    root = tmp_path_factory.mktemp("globals")
    registered, seen = root / "registered.log", root / "seen.log"
    core_tree = _tree(
        root / "core.yaml",
        "    - id: billing\n"
        "      start: 'rabbitry.examples_workers:GlobalName'\n"
        f"      kwargs: {{name: billing, out: {str(registered)!r}}}\n"
        "      restart: temporary\n",
    )
    lookup_tree = _tree(
        root / "lookup.yaml",
        "    - id: lookup\n"
        "      start: 'rabbitry.examples_workers:GlobalLookup'\n"
        f"      kwargs: {{name: billing, out: {str(seen)!r}, every: 0.3s}}\n",
    )
    factory = ClusterFactory(root)
    try:
        cluster = factory(3, "pause_minority", 1.0, tree=core_tree)
        cluster.registered, cluster.seen, cluster.lookup_tree = registered, seen, lookup_tree
        yield cluster
    finally:
        factory.close()


def test_exactly_one_core_node_holds_the_name(names_cluster: Any) -> None:
    c = names_cluster
    wait_until(lambda: len(_lines(c.registered)) >= 3, timeout=60, poll=0.1, what="3 attempts")
    lines = _lines(c.registered)
    held = [line.split()[0] for line in lines if line.endswith(" registered")]
    assert len(held) == 1, lines
    assert sum(line.endswith(" refused") for line in lines) == 2, lines
    # A node that lost the race learns the holder from the holder's next renewal (a third of
    # a lease later), so its view is waited on; it must never name another node.
    views: list[dict[str, Any]] = []

    def a_names_the_holder() -> bool:
        views.append(c.client("a").singletons()["global_names"])
        return views[-1] == {"billing": held[0]}

    wait_until(a_names_the_holder, timeout=15, poll=0.1, what=f"a to name {held[0]}")
    assert all(v in ({}, {"billing": held[0]}) for v in views), views


def test_an_ephemeral_member_finds_it_and_reaches_it(names_cluster: Any) -> None:
    c = names_cluster
    holder = next(line.split()[0] for line in _lines(c.registered) if line.endswith(" registered"))
    (eph,) = c.add_ephemeral(1, {"tree": str(c.lookup_tree)})
    wait_until(
        lambda: any(line == f"{eph} sees {holder}" for line in _lines(c.seen)),
        timeout=30,
        poll=0.1,
        what=f"{eph} to find billing on {holder}",
    )
    wait_until(
        lambda: f"{holder} asked by {eph}" in _lines(c.registered),
        timeout=30,
        poll=0.1,
        what="the holder to get the ephemeral member's message",
    )
