"""Table definitions and the schema merge (Mnesia's schema table, as plain JSON data).

A definition is `{"attributes": [...], "key": attr, "ram": [nodes], "disc": [nodes],
"cookie": [lamport, node], "version": n}`. The cookie names the creation (Mnesia's table
cookie): two definitions of one name with different cookies were created separately and cannot
be merged. `version` grows with each change of the copies, so a merge keeps the newer one.
"""

from __future__ import annotations

import json
from typing import Any

from mnesia_like.messages import str_list


def make_def(
    attributes: list[str], key: str, ram: list[str], disc: list[str], cookie: list[Any]
) -> dict[str, Any]:
    return {
        "attributes": list(attributes),
        "key": key,
        "ram": sorted(ram),
        "disc": sorted(disc),
        "cookie": list(cookie),
        "version": 1,
    }


def copies(d: dict[str, Any]) -> set[str]:
    return set(d["ram"]) | set(d["disc"])


def storage(d: dict[str, Any], node: str) -> str | None:
    """ "disc_copies", "ram_copies" or None for `node`."""
    if node in d["disc"]:
        return "disc_copies"
    if node in d["ram"]:
        return "ram_copies"
    return None


def def_ok(d: Any) -> bool:
    """Whether `d` (from the network or a file) is a well-formed definition."""
    if not isinstance(d, dict):
        return False
    attrs = str_list(d.get("attributes"))
    cookie = d.get("cookie")
    return (
        attrs is not None
        and bool(attrs)
        and d.get("key") in attrs
        and str_list(d.get("ram")) is not None
        and str_list(d.get("disc")) is not None
        and isinstance(cookie, list)
        and len(cookie) == 2
        and isinstance(d.get("version"), int)
    )


def merge_tables(
    mine: dict[str, dict[str, Any]], theirs: dict[str, Any]
) -> tuple[dict[str, dict[str, Any]], list[str], list[str]]:
    """Merge `theirs` into `mine` (neither is modified).

    Returns (merged, changed: names whose definition we take from them, conflicts: names
    defined on both sides with different cookies). A table only one side knows is kept (a
    table created on one side of a partition survives the merge).
    """
    merged = dict(mine)
    changed: list[str] = []
    conflicts: list[str] = []
    for name, d in sorted(theirs.items()):
        if not isinstance(name, str) or not def_ok(d):
            continue
        ours = mine.get(name)
        if ours is None:
            merged[name] = d
            changed.append(name)
        elif ours["cookie"] != d["cookie"]:
            conflicts.append(name)
        elif d["version"] > ours["version"] or (
            d["version"] == ours["version"] and _order(d) > _order(ours)
        ):
            # equal versions that differ (copies changed on both sides of a partition): the
            # same choice on every node, whatever the order of the merges
            merged[name] = d
            changed.append(name)
    return merged, changed, conflicts


def _order(d: dict[str, Any]) -> str:
    return json.dumps(d, sort_keys=True)
