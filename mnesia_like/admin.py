"""Admin: the API requests about the schema and the node (create_table, table_info, ...).

Schema changes are validated here and run as one-operation schema transactions on every
running db node (coordinator.schema_op); the answers about the node are read off the shared
picture.
"""

from __future__ import annotations

import json
from typing import Any

from mnesia_like import records as rec
from mnesia_like import schema as sch
from mnesia_like.coordinator import Coordinator
from mnesia_like.effects import MnesiaEffect, Reply
from mnesia_like.errors import BadArgument, NodeNotRunning, NoSuchTable, TableExists, UnknownNode
from mnesia_like.healing import Healer
from mnesia_like.loading import Loader
from mnesia_like.state import NodeState, encode

SYSTEM_INFO_KEYS = (
    "db_nodes",
    "extra_db_nodes",
    "running_db_nodes",
    "tables",
    "local_tables",
    "loaded_tables",
    "merge",
    "is_running",
    "inconsistent_nodes",
)


class Admin:
    """Schema and node requests of the API (see the module docstring)."""

    def __init__(
        self,
        state: NodeState,
        loader: Loader,
        coordinator: Coordinator,
        healer: Healer,
        *,
        merge: str,
    ) -> None:
        self.s = state
        self.loader = loader
        self.coordinator = coordinator
        self.healer = healer
        self.merge = merge

    def status(self) -> dict[str, Any]:
        """What the control API shows: running_db_nodes and per-table active copies."""
        tables = {}
        for name, d in sorted(self.s.tables.items()):
            tables[name] = {
                "all": sorted(sch.copies(d)),
                "active": sorted(set(self.s.read_sources(name))),
                "disc_copies": list(d["disc"]),
                "ram_copies": list(d["ram"]),
                "loaded_here": name in self.s.loaded,
                "size": self.s.size(name),
            }
        return {
            "node": self.s.node,
            "db_nodes": sorted(self.s.db_nodes),
            "running_db_nodes": sorted(self.s.running_all()),
            "extra_db_nodes": sorted(self.s.extra_db_nodes),
            "merge": self.merge,
            "inconsistent_nodes": sorted(self.s.inconsistent),
            "tables": tables,
        }

    def system_info(self, req: int, key: str = "all") -> list[MnesiaEffect]:
        info = {
            "db_nodes": sorted(self.s.db_nodes),
            "extra_db_nodes": sorted(self.s.extra_db_nodes),
            "running_db_nodes": sorted(self.s.running_all()),
            "tables": sorted(self.s.tables),
            "local_tables": sorted(
                t for t, d in self.s.tables.items() if self.s.node in sch.copies(d)
            ),
            "loaded_tables": sorted(self.s.loaded),
            "merge": self.merge,
            "is_running": "yes" if self.loader.startup_done else "starting",
            "inconsistent_nodes": sorted(self.s.inconsistent),
        }
        if key == "all":
            return [Reply(req, info)]
        if key not in info:
            raise BadArgument(f"system_info: unknown key {key!r}; known: {SYSTEM_INFO_KEYS}")
        return [Reply(req, info[key])]

    def create_table(
        self,
        req: int,
        name: Any,
        *,
        attributes: Any = ("key", "value"),
        key: Any = None,
        ram_copies: Any = None,
        disc_copies: Any = None,
    ) -> list[MnesiaEffect]:
        if ram_copies is None and disc_copies is None:
            ram_copies = [self.s.node]
        attrs, key_attr, ram, disc = rec.check_table_def(
            name, attributes, key, ram_copies, disc_copies
        )
        if name in self.s.tables:
            raise TableExists(name)
        self._check_nodes(ram + disc, f"copies of {name!r}")
        self.s.clock += 1
        d = sch.make_def(attrs, key_attr, ram, disc, [self.s.clock, self.s.node])
        return self.coordinator.schema_op(req, name, d, reply=None)

    def _check_nodes(self, nodes: list[str], what: str) -> None:
        for n in nodes:
            if n not in self.s.db_nodes:
                raise UnknownNode(n, self.s.db_nodes, what)
            if n not in self.s.running_all():
                raise NodeNotRunning(n, what)

    def delete_table(self, req: int, name: Any) -> list[MnesiaEffect]:
        if name not in self.s.tables:
            raise NoSuchTable(str(name), self.s.node)
        return self.coordinator.schema_op(req, name, None, reply=None)

    def add_table_copy(
        self, req: int, table: Any, node: Any, type: str = "ram_copies"
    ) -> list[MnesiaEffect]:
        d = self.s.tables.get(table) if isinstance(table, str) else None
        if d is None:
            raise NoSuchTable(str(table), self.s.node)
        if type not in ("ram_copies", "disc_copies"):
            raise BadArgument(f"add_table_copy: type must be ram_copies or disc_copies: {type!r}")
        if not isinstance(node, str):
            raise BadArgument(f"add_table_copy: node must be a node name, not {node!r}")
        self._check_nodes([node], f"a copy of {table!r}")
        if node in sch.copies(d):
            raise BadArgument(f"add_table_copy: {node} already has a copy of {table!r}")
        new = json.loads(encode(d))
        new["ram" if type == "ram_copies" else "disc"] = sorted(
            {*new["ram" if type == "ram_copies" else "disc"], node}
        )
        new["version"] += 1
        return self.coordinator.schema_op(req, table, new, reply=None)

    def del_table_copy(self, req: int, table: Any, node: Any) -> list[MnesiaEffect]:
        d = self.s.tables.get(table) if isinstance(table, str) else None
        if d is None:
            raise NoSuchTable(str(table), self.s.node)
        if node not in sch.copies(d):
            raise BadArgument(f"del_table_copy: {node} has no copy of {table!r}")
        if sch.copies(d) == {node}:
            raise BadArgument(
                f"del_table_copy: {node} holds the last copy of {table!r}; use delete_table"
            )
        new = json.loads(encode(d))
        new["ram"] = [n for n in new["ram"] if n != node]
        new["disc"] = [n for n in new["disc"] if n != node]
        new["version"] += 1
        return self.coordinator.schema_op(req, table, new, reply=None)

    def table_info(self, req: int, table: Any, key: str | None = None) -> list[MnesiaEffect]:
        d = self.s.tables.get(table) if isinstance(table, str) else None
        if d is None:
            raise NoSuchTable(str(table), self.s.node)
        info = {
            "attributes": list(d["attributes"]),
            "key": d["key"],
            "ram_copies": list(d["ram"]),
            "disc_copies": list(d["disc"]),
            "all_nodes": sorted(sch.copies(d)),
            "active_replicas": sorted(set(self.s.read_sources(table))),
            "where_to_write": sorted(self.s.write_view(table)),
            "storage_type": sch.storage(d, self.s.node) or "remote",
            "size": self.s.size(table),
            "loaded": table in self.s.loaded,
        }
        if key is None:
            return [Reply(req, info)]
        if key not in info:
            raise BadArgument(f"table_info: unknown key {key!r}; known: {sorted(info)}")
        return [Reply(req, info[key])]

    def reload_from(self, req: int, node: Any) -> list[MnesiaEffect]:
        if not isinstance(node, str) or node not in self.s.db_nodes or node == self.s.node:
            raise BadArgument(f"reload_from: {node!r} is not another db node")
        return [*self.healer.reload(node, "requested"), Reply(req, None)]

    def status_request(self, req: int) -> list[MnesiaEffect]:
        return [Reply(req, self.status())]
