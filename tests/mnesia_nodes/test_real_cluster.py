"""mnesia_like in real 3-node clusters: `rabbitry node start` processes with `mnesia:` in their
config, behind fault proxies (the `cluster` fixture), driven through the control API
(POST /mnesia). Kill -9 during writes, the last-stopped node rule, partitions healed by
autoheal and by lww, and change_config(extra_db_nodes)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from rabbitry.cli.cluster import format_mnesia
from rabbitry.control import ControlError
from tests.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

A, B, C = "a@127.0.0.1", "b@127.0.0.1", "c@127.0.0.1"


def _contents(c: Any, node: str) -> dict[str, Any]:
    rows = c.client(node).mnesia("dirty_match", table="kv", pattern={})
    return {row["k"]: row["v"] for row in rows}


def _settled(c: Any, predicate: Any) -> bool:
    """`predicate(contents by node)`, False while a node cannot answer (reloading, say)."""
    try:
        return bool(predicate({node: _contents(c, node) for node in (A, B, C)}))
    except ControlError:
        return False


def _loaded(c: Any, node: str, timeout: float = 0.5) -> bool:
    try:
        c.client(node).mnesia("wait_for_tables", tables=["kv"], timeout=timeout)
        return True
    except ControlError:
        return False


def _running_db_nodes(c: Any, node: str) -> list[str]:
    try:
        return c.client(node).mnesia("system_info", key="running_db_nodes")
    except ControlError:
        return []


def _create(c: Any, nodes: list[str]) -> None:
    # the nodes' monitors formed the cluster; their stores merge schemas a moment later
    for node in nodes:
        wait_until(
            lambda n=node: set(_running_db_nodes(c, n)) >= set(nodes),
            f"{node}'s store running with {nodes}",
            20,
        )
    c.client(nodes[0]).mnesia("create_table", name="kv", attributes=["k", "v"], disc_copies=nodes)
    for node in nodes:
        wait_until(lambda n=node: _loaded(c, n), f"kv loaded on {node}", 20)


class Writer(threading.Thread):
    """Writes k<prefix><i> = i in one transaction each through one node, until stopped or
    the node fails; `acked` holds the ones the node confirmed."""

    def __init__(self, c: Any, node: str, prefix: str) -> None:
        super().__init__(daemon=True)
        self.client, self.prefix = c.client(node), prefix
        self.acked: dict[str, int] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            key = f"{self.prefix}{i}"
            try:
                self.client.mnesia("transaction", writes=[["kv", {"k": key, "v": i}]])
            except ControlError:
                if self.stop.wait(0.05):
                    return
                continue  # refused (a participant just went down): not acked, try the next
            self.acked[key] = i
            i += 1


def test_kill_9_during_writes_loses_no_committed_transaction(cluster: Any) -> None:
    _kill_9_during_writes(cluster, {})


def test_kill_9_during_parallel_commits_loses_no_committed_transaction(cluster: Any) -> None:
    # the same with parallel commit (prepare records decide; the tables are written lazily)
    _kill_9_during_writes(cluster, {"parallel_commit": True})


def _kill_9_during_writes(cluster: Any, mnesia: dict[str, Any]) -> None:
    c = cluster(3, partition_handling="pause_minority", config={"mnesia": mnesia})
    _create(c, [A, B, C])
    on_a, on_b = Writer(c, A, "a"), Writer(c, B, "b")
    on_a.start()
    on_b.start()
    wait_until(lambda: len(on_a.acked) >= 20 and len(on_b.acked) >= 20, "writes acked", 30)
    c.kill("a")  # the coordinator of one writer, a participant of the other's transactions
    on_a.stop.set()
    on_a.join(15)
    wait_until(lambda: len(on_b.acked) >= 40, "writes go on without a", 30)
    on_b.stop.set()
    on_b.join(15)
    c.restart("a")
    wait_until(lambda: _loaded(c, A), "a loads kv again", 30)
    acked = {**on_a.acked, **on_b.acked}
    for node in (A, B, C):
        content = _contents(c, node)
        missing = {k for k in acked if content.get(k) != acked[k]}
        assert not missing, f"{node} lost acknowledged commits {sorted(missing)[:10]}"
    assert _contents(c, A) == _contents(c, B) == _contents(c, C)
    # and every node killed at once: the disc copies alone hold it all
    for node in ("a", "b", "c"):
        c.kill(node)
    for node in ("a", "b", "c"):
        c.restart(node)
    for node in (A, B, C):
        wait_until(lambda n=node: _loaded(c, n), f"{node} loads kv after kill -9 of all", 40)
        content = _contents(c, node)
        assert all(content.get(k) == v for k, v in acked.items()), node


def test_a_node_that_did_not_stop_last_waits_for_the_one_that_did(cluster: Any) -> None:
    c = cluster(3, partition_handling="ignore", config={"mnesia": {"load_timeout": "2s"}})
    _create(c, [A, B, C])
    c.client(A).mnesia("transaction", writes=[["kv", {"k": "k1", "v": 1}]])
    c.proc("a").stop()  # SIGTERM: a clean stop
    c.client(B).mnesia("transaction", writes=[["kv", {"k": "k2", "v": 2}]])
    c.proc("b").stop()
    c.client(C).mnesia("transaction", writes=[["kv", {"k": "k3", "v": 3}]])
    c.proc("c").stop()  # c stopped last: it has everything
    c.restart("a")
    assert not _loaded(c, A, timeout=3), "a loaded its stale copy instead of waiting for c"
    wait_until(
        lambda: any(
            "c@127.0.0.1" in line and "wait" in line.lower() for line in c.proc("a").stderr()
        ),
        "a's log says it waits for c",
        10,
    )
    c.restart("c")
    wait_until(lambda: _loaded(c, A), "a loads kv from c", 30)
    assert _contents(c, A) == {"k1": 1, "k2": 2, "k3": 3}
    c.restart("b")
    wait_until(lambda: _loaded(c, B), "b loads kv", 30)
    assert _contents(c, B) == {"k1": 1, "k2": 2, "k3": 3}


def test_force_load_loads_the_local_copy_without_waiting(cluster: Any) -> None:
    c = cluster(2, partition_handling="ignore", config={"mnesia": {"force_load": True}})
    _create(c, [A, B])
    c.client(A).mnesia("transaction", writes=[["kv", {"k": "k1", "v": 1}]])
    c.proc("a").stop()
    c.client(B).mnesia("transaction", writes=[["kv", {"k": "k2", "v": 2}]])
    c.proc("b").stop()
    c.restart("a")  # b stopped last, but force_load: a serves what its disc has
    wait_until(lambda: _loaded(c, A), "a force-loads kv", 20)
    assert _contents(c, A) == {"k1": 1}


def _events(c: Any, node: str) -> list[str]:
    return [e["kind"] for e in c.client(node).mnesia_status()["events"]]


def test_partition_then_heal_autoheal_reloads_the_loser_from_the_winner(cluster: Any) -> None:
    c = cluster(3, partition_handling="autoheal", config={"mnesia": {"merge": "autoheal"}})
    _create(c, [A, B, C])
    c.client(A).mnesia("dirty_write", table="kv", record={"k": "base", "v": 0})
    wait_until(lambda: _contents(c, C).get("base") == 0, "base everywhere", 10)
    c.partition([A], [B, C])
    wait_until(
        lambda: c.client(A).mnesia("system_info", key="running_db_nodes") == [A],
        "a sees itself alone",
        20,
    )
    c.client(A).mnesia("transaction", writes=[["kv", {"k": "only_a", "v": 1}]])
    c.client(B).mnesia("transaction", writes=[["kv", {"k": "only_b", "v": 2}]])
    c.heal()
    wait_until(
        lambda: any("inconsistent_database" in _events(c, n) for n in (A, B, C)),
        "inconsistent_database reported",
        40,
    )
    wait_until(
        lambda: _settled(c, lambda v: v[A] == v[B] == v[C] and "only_b" in v[A]),
        "the same content everywhere: the winner's",
        60,
    )
    assert "only_a" not in _contents(c, B), "the loser's write survived an autoheal reload"


def test_partition_then_heal_lww_keeps_both_sides_writes(cluster: Any) -> None:
    c = cluster(3, partition_handling="ignore", config={"mnesia": {"merge": "lww"}})
    _create(c, [A, B, C])
    c.partition([A], [B, C])
    wait_until(
        lambda: c.client(A).mnesia("system_info", key="running_db_nodes") == [A],
        "a sees itself alone",
        20,
    )
    c.client(A).mnesia("transaction", writes=[["kv", {"k": "only_a", "v": 1}]])
    c.client(B).mnesia("transaction", writes=[["kv", {"k": "only_b", "v": 2}]])
    c.client(A).mnesia("transaction", writes=[["kv", {"k": "both", "v": "from a"}]])
    c.client(C).mnesia("transaction", writes=[["kv", {"k": "both", "v": "from c"}]])
    c.heal()
    wait_until(
        lambda: _settled(
            c, lambda v: v[A] == v[B] == v[C] and {"only_a", "only_b", "both"} <= set(v[A])
        ),
        "both sides' writes everywhere, the conflict decided alike",
        60,
    )
    assert _contents(c, B)["both"] in ("from a", "from c")
    assert any("inconsistent_database" in _events(c, n) for n in (A, B, C))


def test_change_config_extra_db_nodes_joins_and_merges_schemas(cluster: Any) -> None:
    c = cluster(2, partition_handling="ignore", config={"mnesia": {"extra_db_nodes": []}})
    assert c.client(B).mnesia("system_info", key="running_db_nodes") == [B]
    c.client(A).mnesia("create_table", name="kv", attributes=["k", "v"], disc_copies=[A])
    c.client(A).mnesia("dirty_write", table="kv", record={"k": "k1", "v": 1})
    running = c.client(B).mnesia("change_config", key="extra_db_nodes", value=[A])
    assert A in running
    assert c.client(B).mnesia("system_info", key="running_db_nodes") == [A, B]
    c.client(B).mnesia("add_table_copy", table="kv", node=B, type="disc_copies")
    wait_until(lambda: _loaded(c, B), "b has a copy of kv", 20)
    assert _contents(c, B) == {"k1": 1}
    info = c.client(A).mnesia_status()["tables"]["kv"]
    assert info["all"] == [A, B] and info["active"] == [A, B]
    # what `rabbitry cluster status` prints about the store
    text = format_mnesia(c.client(A).mnesia_status())
    assert f"running db     {A}, {B}" in text and f"table kv       {A}, {B}" in text
    c.kill("b")
    wait_until(
        lambda: f"{B} (inactive)" in format_mnesia(c.client(A).mnesia_status()), "b inactive", 20
    )
