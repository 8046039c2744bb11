"""MnesiaCore: schema, db_nodes, change_config, table copies, dirty operations, bad input."""

from __future__ import annotations

import pytest

from mnesia_like.errors import (
    BadArgument,
    BadRecord,
    NodeNotRunning,
    NoSuchTable,
    SchemaConflict,
    TableExists,
    TablesNotLoaded,
    UnknownNode,
)
from tests.mnesia_like.harness import Harness, cluster

A, B, C = "a@h", "b@h", "c@h"


def test_nodes_connect_and_report_running_db_nodes() -> None:
    h = cluster(3)
    for n in h.names:
        assert h.call(n, "system_info", key="running_db_nodes") == [A, B, C]
        assert h.call(n, "system_info", key="db_nodes") == [A, B, C]
    assert sorted(h.events_of("mnesia_up")) == sorted(
        (x, y, None) for x in h.names for y in h.names if x != y
    )
    with pytest.raises(BadArgument, match="unknown key"):
        h.call(A, "system_info", key="nope")


def test_create_table_is_replicated_to_every_running_node_and_persisted() -> None:
    h = cluster(3)
    h.call(A, "create_table", name="t", attributes=["k", "v"], disc_copies=[A], ram_copies=[B])
    for n in h.names:
        info = h.call(n, "table_info", table="t")
        assert info["all_nodes"] == [A, B] and info["active_replicas"] == [A, B]
        assert h.discs[n].schema["tables"]["t"]["disc"] == [A]
    assert h.call(C, "table_info", table="t", key="storage_type") == "remote"
    assert h.discs[A].tables["t"] == {}  # the disc copy exists from the start
    with pytest.raises(TableExists):
        h.call(B, "create_table", name="t", attributes=["k"], ram_copies=[B])


def test_a_table_on_an_unknown_or_stopped_node_is_refused() -> None:
    h = cluster(2)
    with pytest.raises(UnknownNode, match="z@h"):
        h.call(A, "create_table", name="t", ram_copies=[A, "z@h"])
    h.crash(B)
    with pytest.raises(NodeNotRunning, match="b@h"):
        h.call(A, "create_table", name="t", ram_copies=[A, B])
    assert h.call(A, "system_info", key="tables") == []


def test_dirty_operations_on_all_replicas_and_from_a_node_without_a_copy() -> None:
    h = cluster(3)
    h.call(A, "create_table", name="p", attributes=["name", "age"], ram_copies=[A, B])
    h.call(C, "dirty_write", table="p", record={"name": "ann", "age": 30})
    h.call(A, "dirty_write", table="p", record={"name": "bob", "age": 20})
    assert h.content(A, "p") == h.content(B, "p") and len(h.content(A, "p")) == 2
    assert h.call(C, "dirty_read", table="p", key="ann") == {"name": "ann", "age": 30}
    assert h.call(C, "dirty_match", table="p", pattern={"age": 20}) == [{"name": "bob", "age": 20}]
    sel = h.call(B, "dirty_select", table="p", spec={"where": [["age", ">=", 25]]})
    assert sel == [{"name": "ann", "age": 30}]
    h.call(B, "dirty_delete", table="p", key="ann")
    assert h.call(A, "dirty_read", table="p", key="ann") is None
    with pytest.raises(BadRecord, match="unknown field"):
        h.call(A, "dirty_write", table="p", record={"name": "x", "zip": 1})
    with pytest.raises(NoSuchTable):
        h.call(A, "dirty_write", table="nope", record={"name": "x"})


def test_add_table_copy_copies_the_content_and_del_table_copy_drops_it() -> None:
    h = cluster(3, chunk_bytes=200)  # several chunks
    h.call(A, "create_table", name="t", attributes=["k", "v"], disc_copies=[A])
    for i in range(20):
        h.call(B, "dirty_write", table="t", record={"k": i, "v": "x" * 10})
    h.call(B, "add_table_copy", table="t", node=C, type="disc_copies")
    assert h.content(C, "t") == h.content(A, "t") and len(h.content(C, "t")) == 20
    assert len(h.discs[C].tables["t"]) == 20
    assert h.call(A, "table_info", table="t", key="active_replicas") == [A, C]
    h.call(A, "del_table_copy", table="t", node=C)
    assert "t" not in h.discs[C].tables
    assert h.call(B, "table_info", table="t", key="all_nodes") == [A]
    with pytest.raises(BadArgument, match="last copy"):
        h.call(A, "del_table_copy", table="t", node=A)
    h.call(A, "delete_table", name="t")
    assert "t" not in h.discs[A].tables and h.call(C, "system_info", key="tables") == []


def test_change_config_joins_a_node_with_an_empty_schema() -> None:
    h = Harness([A, B, C], startup_timeout=0.5)
    h.node_options[B]["extra_db_nodes"] = [A]
    h.boot(A, B)
    h.call(A, "create_table", name="t", ram_copies=[A, B])
    h.call(A, "dirty_write", table="t", record={"key": 1, "value": 2})
    h.boot(C)
    assert h.call(C, "system_info", key="db_nodes") == [C]
    joined = h.call(C, "change_config", key="extra_db_nodes", value=[A])
    assert joined == [A]
    assert h.call(C, "system_info", key="running_db_nodes") == [A, B, C]
    assert h.call(C, "system_info", key="tables") == ["t"]
    assert h.call(C, "dirty_read", table="t", key=1) == {"key": 1, "value": 2}
    assert C in h.call(A, "system_info", key="db_nodes")
    h.call(C, "add_table_copy", table="t", node=C)
    assert h.content(C, "t") == h.content(A, "t")


def test_conflicting_schemas_are_not_merged() -> None:
    h = Harness([A, B], startup_timeout=0.5)
    h.boot(A, B)
    h.call(A, "create_table", name="t", ram_copies=[A])
    h.call(B, "create_table", name="t", ram_copies=[B])
    h.call(B, "create_table", name="u", ram_copies=[B])
    with pytest.raises(SchemaConflict, match=r"table\(s\) t were created separately"):
        h.call(A, "change_config", key="extra_db_nodes", value=[B])
    assert h.call(A, "system_info", key="running_db_nodes") == [A]
    assert h.events_of("schema_conflict")


def test_wait_for_tables_answers_when_loaded_or_times_out_naming_why() -> None:
    h = cluster(2)
    h.call(A, "create_table", name="t", disc_copies=[A, B])
    assert h.call(B, "wait_for_tables", tables=["t"], timeout=1.0) is None
    with pytest.raises(NoSuchTable):
        h.call(B, "wait_for_tables", tables=["t", "nope"], timeout=1.0)
    h.crash(B)
    h.crash(A)
    h.boot(B)  # A was running when B stopped: B waits for A
    with pytest.raises(TablesNotLoaded, match=r"waiting for \['a@h'\]"):
        h.call(B, "wait_for_tables", tables=["t"], timeout=1.0, run=2.0)
    req = h.submit(B, "wait_for_tables", tables=["t"], timeout=10.0)
    h.boot(A)
    reply = h.result(B, req)
    assert reply is not None and reply.error is None


def test_bad_network_input_is_logged_and_dropped() -> None:
    h = cluster(2)
    core = h.cores[A]
    for msg in [
        "junk",
        {"v": 2, "t": "hello", "l": 1},
        {"v": 1, "t": "nope", "l": 1},
        {"v": 1, "t": "lock", "l": -1},
        {"v": 1, "t": "dirty", "l": 1, "table": "t", "entries": 5, "to": [], "fwd": False},
        {"v": 1, "t": "prepare", "l": 1, "tid": "x", "ops": [[1, 2]], "parts": {}},
        {
            "v": 1,
            "t": "hello",
            "l": 1,
            "reply": True,
            "inc": 1,
            "db_nodes": [1],
            "tables": {},
            "running": [],
            "loaded": [],
            "loading": [],
            "mark": False,
            "starting": False,
            "heal": False,
            "disc_max": {},
        },
    ]:
        h.perform(A, core.receive(B, msg, h.now))
    h.run()
    assert len(h.logged("dropped")) >= 5
    assert h.call(A, "system_info", key="running_db_nodes") == [A, B]
