"""The exceptions of mnesia_like: what went wrong, where, and what was expected.

The core never raises them at the caller: it puts one in a `Reply(req_id, error=...)` effect and
the shell raises it in the user's thread. They are plain data (message and a few fields), so
the simulator can compare them too.
"""

from __future__ import annotations

from collections.abc import Iterable


class MnesiaError(Exception):
    """The base of every mnesia_like error."""


class NoSuchTable(MnesiaError):
    def __init__(self, table: str, node: str = "") -> None:
        where = f" on {node}" if node else ""
        super().__init__(f"no table {table!r} in the schema{where}")
        self.table = table


class TableExists(MnesiaError):
    def __init__(self, table: str) -> None:
        super().__init__(f"table {table!r} already exists (delete_table it first)")
        self.table = table


class BadRecord(MnesiaError):
    """A record or key that cannot be stored: not a JSON object, no key, not JSON-serialisable."""

    def __init__(self, table: str, why: str) -> None:
        super().__init__(f"table {table!r}: bad record: {why}")
        self.table = table
        self.why = why


class BadArgument(MnesiaError):
    """An API argument of the wrong shape (a table definition, a select spec, a config key)."""


class UnknownNode(MnesiaError):
    def __init__(self, node: str, db_nodes: Iterable[str], what: str = "") -> None:
        known = ", ".join(sorted(db_nodes)) or "none"
        for_what = f" ({what})" if what else ""
        super().__init__(
            f"node {node!r} is not in the schema's db_nodes{for_what}; known: {known}. "
            "Connect it first with change_config('extra_db_nodes', [...])"
        )
        self.node = node


class NodeNotRunning(MnesiaError):
    def __init__(self, node: str, what: str = "") -> None:
        for_what = f" for {what}" if what else ""
        super().__init__(f"node {node!r} is not a running db node{for_what}")
        self.node = node


class SchemaConflict(MnesiaError):
    """Two non-empty schemas define the same table differently: merging them is refused."""

    def __init__(self, node: str, tables: Iterable[str]) -> None:
        names = ", ".join(sorted(tables))
        super().__init__(
            f"schema of {node!r} conflicts with ours: table(s) {names} were created separately "
            "on both sides; delete one side's table or reset that node's data_dir"
        )
        self.node = node
        self.tables = sorted(tables)


class TablesNotLoaded(MnesiaError):
    """wait_for_tables timed out, or an operation found no active replica."""

    def __init__(self, tables: Iterable[str], why: str = "") -> None:
        names = ", ".join(sorted(tables))
        super().__init__(f"table(s) {names} not loaded{': ' + why if why else ''}")
        self.tables = sorted(tables)


class Aborted(MnesiaError):
    """A transaction that did not commit; nothing of it was written anywhere."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"transaction aborted: {reason}")
        self.reason = reason


class Restart(MnesiaError):
    """Internal: the transaction must be run again (lock conflict with an older one, a
    participant went down, a stale replica set). `Schema.transaction` retries it."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"transaction must restart: {reason}")
        self.reason = reason


class Timeout(MnesiaError):
    """A blocking API call got no answer from the store in time."""


__all__ = [
    "Aborted",
    "BadArgument",
    "BadRecord",
    "MnesiaError",
    "NoSuchTable",
    "NodeNotRunning",
    "Restart",
    "SchemaConflict",
    "TableExists",
    "TablesNotLoaded",
    "Timeout",
    "UnknownNode",
]
