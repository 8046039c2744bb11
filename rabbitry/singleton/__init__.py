"""Cluster singletons and global names (docs/singletons.md).

A child of a core node's application tree that says `singleton: true` runs on exactly one
running core member at a time, under a lease a majority of the core granted, with a fencing
token that only grows. `current()` gives a Process child its lease; an OS child reads
RABBITRY_SINGLETON_TOKEN and RABBITRY_SINGLETON_LEASE_FILE.

Global names, as Erlang's `global`: `register_global(name, process)` holds `name` cluster-wide
under the same leases, `whereis_global(name)` gives a RemoteRef to the process from any node
(ephemeral members included), and `unregister_global(name)` lets it go. A process that loses its
name (its node was cut off and another registered it) receives ("global_name_conflict", name).
"""

from __future__ import annotations

import time
from typing import Any

from rabbitry.singleton.core import SingletonCore
from rabbitry.singleton.leases import SingletonLease
from rabbitry.singleton.leases import current as _current_lease
from rabbitry.singleton.service import GLOBAL_PREFIX, SingletonService, global_regname

__all__ = [
    "SingletonCore",
    "SingletonLease",
    "SingletonService",
    "current",
    "register_global",
    "unregister_global",
    "whereis_global",
]


def current(name: str | None = None) -> SingletonLease | None:
    """This node's lease of singleton `name` (token and wall-clock expiry), or None if this
    node does not hold it. Without a name: the one singleton this node holds."""
    return _current_lease(name)


def _node() -> Any:
    from rabbitry.node import current_node

    node = current_node()
    service = node.parts.singletons
    if service is None:
        raise RuntimeError(f"node {node.name} runs no singleton service")
    return node, service


def register_global(name: str, process: Any, timeout: float | None = None) -> bool:
    """Hold `name` cluster-wide for `process` (a local Process's ActorRef). True once a majority
    of the core granted it; False if another process holds it. Raises TimeoutError if no
    majority answered within `timeout` (default: two leases)."""
    if not isinstance(name, str) or not name or len(name) > 200:
        raise ValueError(
            f"global name: expected a non-empty string of at most 200 characters; got {name!r}"
        )
    node, service = _node()
    regname = global_regname(name)
    node.kernel.register(regname, process)
    proxy = service.proxy()
    proxy.register_global(name, process, regname).get(timeout=10)
    limit = time.monotonic() + (timeout if timeout is not None else 4 * node.config.net_ticktime)
    while time.monotonic() < limit:
        state = proxy.registered(name).get(timeout=10)
        if state == "held":
            return True
        if state in ("taken", "none"):
            proxy.unregister_global(name).get(timeout=10)
            node.kernel.unregister(regname)
            return False
        time.sleep(0.02)
    proxy.unregister_global(name).get(timeout=10)
    node.kernel.unregister(regname)
    raise TimeoutError(f"global name {name!r}: no majority of the core answered in time")


def unregister_global(name: str) -> bool:
    """Let `name` go; True if this node held it."""
    node, service = _node()
    held = bool(service.proxy().unregister_global(name).get(timeout=10))
    node.kernel.unregister(global_regname(name))
    return held


def whereis_global(name: str, timeout: float = 5.0) -> Any:
    """A RemoteRef to the process holding `name` cluster-wide, or None."""
    node, service = _node()
    future = service.proxy().whereis(GLOBAL_PREFIX + name).get(timeout=10)
    grant = future.result(timeout=timeout)
    if not grant or not isinstance(grant.get("info"), dict) or not grant.get("holder"):
        return None
    return node.kernel.remote_ref(
        grant["holder"], grant["info"].get("name") or global_regname(name)
    )
