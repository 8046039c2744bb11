"""Readers of a node's parts, one function each, for the Gatherer.

Each asks one actor (or reads one object) and returns plain data. Each waits at most
PART_TIMEOUT itself, but callers do not wait that long: the Gatherer gives up on a part after
its budget and leaves the part's data out.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pykka import ActorRef

from failover import ConfigurationClient, ConfigurationServer
from supervisors import processes

PART_TIMEOUT = 2.0  # the longest a part's own thread waits for an actor


def node_parts(node: Any) -> dict[str, Callable[[], Any]]:
    """The parts of `node` (a rabbitry Node) worth reading now."""
    parts: dict[str, Callable[[], Any]] = {
        "node_monitor": lambda: monitor_status(node),
        "dist": lambda: dist_info(node),
        "supervision": lambda: supervision(node.root, node.name),
        "failover": failover_statuses,
    }
    if node.parts.gossip is not None:
        parts["gossip"] = lambda: node.parts.gossip.proxy().status().get(timeout=PART_TIMEOUT)
    if node.parts.mnesia is not None:
        parts["mnesia"] = lambda: mnesia_status(node)
    if getattr(node.parts, "singletons", None) is not None:
        parts["singletons"] = lambda: (
            node.parts.singletons.proxy().status().get(timeout=PART_TIMEOUT)
        )
    return parts


def monitor_status(node: Any) -> dict[str, Any]:
    """The cluster status (the keys of `rabbitry cluster status --json`)."""
    monitor = node.parts.monitor
    if monitor is None:
        raise LookupError("the node monitor is not running")
    status = monitor.proxy().get_status().get(timeout=PART_TIMEOUT)
    node.observations.remember_members(status.get("all", []))
    node.observations.know(status.get("ephemeral", []))
    node.observations.see_alarms(status.get("alarms", {}))
    return status


def dist_info(node: Any) -> dict[str, Any]:
    kernel = node.kernel
    return {
        "connected": kernel.nodes(),
        "net_ticktime": kernel.net_ticktime,
        "address": kernel.address,
    }


def mnesia_status(node: Any) -> dict[str, Any]:
    from mnesia_like import Schema

    return Schema(node.parts.mnesia, timeout=PART_TIMEOUT).status()


def supervision(root: Any, root_name: str) -> list[dict[str, Any]]:
    """Every supervisor of the tree under `root`, level by level (each level asked at once):
    its name, its path of child ids from the root, and each child's id, type and state
    (running, restarting or stopped). A supervisor that does not answer in time is listed
    with `answered: False` and no children; the others are still there."""
    if root is None:
        raise LookupError("the node's root supervisor is not running")
    deadline = time.monotonic() + PART_TIMEOUT
    out: list[dict[str, Any]] = []
    level: list[tuple[str, list[str], Any]] = [(root_name, [], root)]
    while level:
        asked = [
            (name, path, ref, ref.proxy().which_children(), ref.proxy().name)
            for name, path, ref in level
        ]
        level = []
        for given, path, _ref, children_future, name_future in asked:
            remaining = max(0.0, deadline - time.monotonic())
            try:
                children = children_future.get(timeout=remaining)
                name = str(name_future.get(timeout=max(0.0, deadline - time.monotonic())))
            except Exception:
                out.append({"supervisor": given, "path": path, "answered": False, "children": []})
                continue
            rows = []
            for info in children:
                child_id = "" if info.id is None else str(info.id)
                rows.append({"id": child_id, "type": info.type, "state": child_state(info.ref)})
                if info.type == "supervisor" and isinstance(info.ref, ActorRef):
                    level.append((child_id, [*path, child_id], info.ref))
            out.append({"supervisor": name, "path": path, "answered": True, "children": rows})
    return out


def child_state(ref: Any) -> str:
    if ref is None:
        return "stopped"
    if ref == "restarting":
        return "restarting"
    return "running"


def failover_statuses() -> list[dict[str, Any]]:
    """The status of every failover server (RCS) and client (RCC) running in this process,
    with `role` server or client."""
    asked = []
    for ref in processes():
        if issubclass(ref.actor_class, ConfigurationServer):
            asked.append(("server", ref.proxy().status()))
        elif issubclass(ref.actor_class, ConfigurationClient):
            asked.append(("client", ref.proxy().status()))
    deadline = time.monotonic() + PART_TIMEOUT
    out = []
    for role, future in asked:
        try:
            status = future.get(timeout=max(0.0, deadline - time.monotonic()))
        except Exception:
            continue  # stopped meanwhile, or busy: its series are left out
        out.append({**status, "role": role})
    return out
