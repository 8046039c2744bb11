"""The control API's routes: what each of rabbitry/control.py's routes does on a node.

`ControlRoutes(node).table()` is the table the ControlServer serves ((method, path) ->
handler(body) -> JSON-able result) and the management page reuses for its join, leave and
forget actions (rabbitry/ui/web.py), so that they behave exactly as the CLI's. The handlers
run on the HTTP server's threads and reach the node's parts through their actors (thread-safe):
the node monitor, the store, gossip, the singleton service and the NetKernel.

A handler raises ValueError for a bad request (400) and `Conflict` when the action cannot be
done now (409); see rabbitry/control.py. The routes, by area:

    cluster      GET /status, /app, /cluster/modes, /cluster/ephemeral;
                 POST /cluster/join, /cluster/leave, /cluster/forget
    store        GET /mnesia; POST /mnesia (one Schema operation, or a transaction)
    gossip       GET /gossip, /gossip/revoked; POST /gossip/revoke, /gossip/elect,
                 /gossip/elect_once
    singletons   GET /singletons
    debug        POST /debug/block, /debug/unblock (fault injection: NetKernel.block)
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from monitors.gossip import ElectionError, LimitedSet, elect
from monitors.node_monitor.core import NodeMonitorCore
from rabbitry.control import Conflict, Handler
from rabbitry.node_files import read_addresses, save_addresses

if TYPE_CHECKING:
    from pykka import ActorProxy

    from mnesia_like import Schema
    from monitors.gossip import Gossip
    from monitors.node_monitor.shell import NodeMonitor
    from rabbitry.node import Node

__all__ = ["ELECT_TOPIC", "MNESIA_OPS", "ControlRoutes"]

# Elections asked for over the control API run under this topic; the node registers a handler
# that does nothing, because the asker (a Spark task) runs the action itself when it won.
ELECT_TOPIC = "rabbitry.elect"
# Store operations the control API may run (POST /mnesia); all of mnesia_like.Schema's reads
# and writes, not its subscriptions.
MNESIA_OPS = frozenset(
    [
        "system_info",
        "change_config",
        "create_table",
        "delete_table",
        "add_table_copy",
        "del_table_copy",
        "table_info",
        "dirty_read",
        "dirty_write",
        "dirty_delete",
        "dirty_match",
        "dirty_select",
        "wait_for_tables",
        "reload_from",
    ]
)


class ControlRoutes:
    """The handlers of the control API over one node's parts (see the module docstring)."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self._once_lock = threading.Lock()
        # elect_once keys this node handed out; bounded like the revoked set
        self._once_ran = LimitedSet(maxlen=50_000, expires=3 * 3600.0)

    def table(self) -> dict[tuple[str, str], Handler]:
        """(method, path) -> handler(body): every route of the control API."""
        node = self.node
        return {
            ("GET", "/status"): lambda _body: node.status(),
            ("GET", "/app"): lambda _body: node.app_status(),
            ("GET", "/gossip"): lambda _body: self.gossip_status(),
            ("GET", "/gossip/revoked"): lambda _body: self.revoked(),
            ("POST", "/gossip/revoke"): self.revoke,
            ("POST", "/gossip/elect"): self.elect,
            ("POST", "/gossip/elect_once"): self.elect_once,
            ("POST", "/debug/block"): self.block,
            ("POST", "/debug/unblock"): self.unblock,
            ("GET", "/mnesia"): lambda _body: self.mnesia_status(),
            ("POST", "/mnesia"): self.mnesia_call,
            ("POST", "/cluster/join"): self.join,
            ("GET", "/cluster/ephemeral"): lambda _body: self.ephemeral(),
            ("GET", "/cluster/modes"): lambda _body: node.partition_modes(),
            ("POST", "/cluster/leave"): self.leave,
            ("POST", "/cluster/forget"): self.forget,
            ("GET", "/singletons"): lambda _body: self.singletons_status(),
        }

    # ---- the parts ------------------------------------------------------------------------

    def _monitor(self) -> ActorProxy[NodeMonitor]:
        monitor = self.node.parts.monitor
        if monitor is None:
            raise Conflict("the node monitor is not running")
        return monitor.proxy()

    def _gossip(self) -> ActorProxy[Gossip]:
        gossip = self.node.parts.gossip
        if gossip is None:
            raise Conflict("this node has no `bus:` configured, so it does not gossip")
        return gossip.proxy()

    # ---- cluster ---------------------------------------------------------------------------

    def join(self, body: dict[str, Any]) -> dict[str, Any]:
        node = self.node
        peer, address = body.get("node"), body.get("address")
        if not isinstance(peer, str) or not isinstance(address, str):
            raise ValueError('join needs {"node": "name@host", "address": "host:port"}')
        kernel = node.kernel
        kernel.set_address(peer, address)
        if not kernel.connect(peer):
            raise Conflict(f"cannot reach {peer} at {address}; is it running?")
        remote = kernel.call(peer, NodeMonitorCore.NAME, {"t": "cluster_query"}, timeout=10)
        if remote.get("role", "core") != "core":
            raise Conflict(f"{peer} is an ephemeral node; join a core member")
        me = node.config.node
        if node.config.role == "ephemeral":
            return self._attach(peer, remote)
        learned = read_addresses(node.config.data_dir)
        for member, member_address in remote.get("addresses", {}).items():
            if member != me and member not in kernel.addresses():
                kernel.set_address(member, member_address)
                learned[member] = member_address
        learned[peer] = address
        save_addresses(node.config.data_dir, learned)
        monitor = self._monitor()
        for member in remote.get("all", []):
            if member != me:
                monitor.joined_cluster(member, member in remote.get("disc", [])).get()
        monitor.joined_cluster(me, True).get()
        for member in remote.get("all", []):
            if member != me:
                kernel.send(
                    member,
                    NodeMonitorCore.NAME,
                    {"t": "address", "node": me, "address": node.dist_address},
                )
        return node.status()

    def _attach(self, peer: str, remote: dict[str, Any]) -> dict[str, Any]:
        """`rabbitry cluster join` on an ephemeral node: attach to the core `peer` belongs
        to. The core does not learn our address (it never connects to us); only the core
        members' addresses are kept, for the next start."""
        node = self.node
        kernel = node.kernel
        me = node.config.node
        learned = read_addresses(node.config.data_dir)
        for member, member_address in remote.get("addresses", {}).items():
            if member != me and member not in kernel.addresses():
                kernel.set_address(member, member_address)
            learned[member] = member_address
        save_addresses(node.config.data_dir, learned)
        monitor = self._monitor()
        for member in sorted({peer, *remote.get("all", [])} - {me}):
            monitor.joined_cluster(member, member in remote.get("disc", [])).get()
        return node.status()

    def leave(self, _body: dict[str, Any]) -> dict[str, Any]:
        self._monitor().left_cluster(self.node.config.node).get()
        return self.node.status()

    def forget(self, body: dict[str, Any]) -> dict[str, Any]:
        node = self.node
        peer = body.get("node")
        if not isinstance(peer, str):
            raise ValueError('forget needs {"node": "name@host"}')
        if peer == node.config.node:
            raise Conflict("a node cannot forget itself; use `rabbitry cluster leave`")
        if peer in node.kernel.nodes():
            raise Conflict(f"{peer} is running and connected; stop it before forgetting it")
        if node.config.role == "ephemeral":
            raise Conflict("an ephemeral node keeps no membership; forget on a core member")
        if peer not in node.status()["all"] and not self._knows_ephemeral(peer):
            raise Conflict(f"{peer} is not a member of this cluster")
        self._monitor().left_cluster(peer).get()
        return node.status()

    def ephemeral(self) -> dict[str, list[str]]:
        up, down = self._monitor().ephemeral_members().get(timeout=10)
        return {"up": up, "down": down}

    def _knows_ephemeral(self, peer: str) -> bool:
        up, down = self._monitor().ephemeral_members().get(timeout=10)
        return peer in up or peer in down

    # ---- the store -------------------------------------------------------------------------

    def mnesia_status(self) -> dict[str, Any]:
        """running_db_nodes, per-table copies, and the store events the monitor saw."""
        status = self.node.mnesia.status()
        events = self._monitor().store_events().get(timeout=10)
        return {**status, "events": events}

    def mnesia_call(self, body: dict[str, Any]) -> Any:
        """POST /mnesia: {"op": name, "args": {...}} for one Schema operation, or "op":
        "transaction" with "writes"/"deletes" lists applied in one transaction."""
        op, args = body.get("op"), body.get("args", {})
        if not isinstance(args, dict):
            raise ValueError('mnesia: "args" must be an object')
        from mnesia_like import MnesiaError

        self._refuse_ephemeral_copies(op, args)
        try:
            return _mnesia_op(self.node.mnesia, op, args)
        except MnesiaError as exc:  # the store said no: the request was fine, the moment not
            raise Conflict(f"{type(exc).__name__}: {exc}") from None

    def _refuse_ephemeral_copies(self, op: Any, args: dict[str, Any]) -> None:
        """A table copy on an ephemeral member would vanish with it: say so, by name."""
        named: list[Any] = []
        if op == "add_table_copy":
            named = [args.get("node")]
        elif op == "create_table":
            for key in ("ram_copies", "disc_copies"):
                value = args.get(key)
                named += list(value) if isinstance(value, list | tuple) else []
        bad = sorted({n for n in named if isinstance(n, str) and self._knows_ephemeral(n)})
        if bad:
            raise Conflict(
                f"mnesia {op}: {', '.join(bad)} is an ephemeral member; ephemeral members hold "
                "no mnesia_like copies (they are forgotten when they go): put copies on core "
                "members"
            )

    # ---- gossip ----------------------------------------------------------------------------

    def gossip_status(self) -> dict[str, Any]:
        """The gossip state (clock, alive workers, revoked, bus, elections)."""
        return self._gossip().status().get(timeout=10)

    def revoked(self) -> dict[str, Any]:
        ids = self._gossip().revoked_ids().get(timeout=10)
        return {"count": len(ids), "ids": ids}

    def revoke(self, body: dict[str, Any]) -> dict[str, Any]:
        ids = body.get("ids")
        if not isinstance(ids, list) or not all(isinstance(i, str) and i for i in ids):
            raise ValueError('revoke needs {"ids": ["id", ...]} (non-empty strings)')
        self._gossip().revoke(ids).get(timeout=10)
        return {"revoked": len(ids)}

    def elect(self, body: dict[str, Any]) -> dict[str, Any]:
        """Run gossip election `id` with this node as a candidate; the winner's name."""
        eid, topic = body.get("id"), body.get("topic", ELECT_TOPIC)
        timeout = body.get("timeout", 10.0)
        if not isinstance(eid, str) or not eid or not isinstance(topic, str):
            raise ValueError('elect needs {"id": "...", "topic": "...", "timeout": seconds}')
        if not isinstance(timeout, int | float) or not 0 < timeout <= 300:
            raise ValueError(f"elect: timeout must be 0 < seconds <= 300, got {timeout!r}")
        gossip = self.node.parts.gossip
        if gossip is None:
            raise Conflict(
                "this node has no `bus:` configured, so it cannot take part in elections"
            )
        try:
            winner = elect(gossip, eid, topic, None, float(timeout))
        except ElectionError as exc:
            raise Conflict(str(exc)) from None
        return {"id": eid, "winner": winner, "me": winner == self.node.config.node}

    def elect_once(self, body: dict[str, Any]) -> dict[str, Any]:
        """Stand in the election for `key`; `run` is true for exactly one asker cluster-wide:
        the first one on the winning node. (The node remembers in memory what it handed out.)"""
        key = body.get("key")
        if not isinstance(key, str) or not key:
            raise ValueError('elect_once needs {"key": "...", "timeout": seconds}')
        result = self.elect({"id": f"once:{key}", "timeout": body.get("timeout", 10.0)})
        run = False
        if result["me"]:
            with self._once_lock:
                run = key not in self._once_ran
                self._once_ran.add(key, time.time())
        return {"key": key, "winner": result["winner"], "run": run}

    # ---- singletons ------------------------------------------------------------------------

    def singletons_status(self) -> dict[str, Any]:
        """GET /singletons: where each singleton runs, with its token and expiry."""
        singletons = self.node.parts.singletons
        if singletons is None:
            raise Conflict("the singleton service is not running on this node")
        return singletons.proxy().status().get(timeout=10)

    # ---- fault injection -------------------------------------------------------------------

    def block(self, body: dict[str, Any]) -> dict[str, Any]:
        """Fault injection (demo, tests): cut this node off from `nodes` ("all": every peer
        in the cluster) for `seconds`. See NetKernel.block."""
        node = self.node
        nodes, seconds = body.get("nodes"), body.get("seconds")
        if nodes == "all":
            nodes = [n for n in node.status()["all"] if n != node.config.node]
        if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
            raise ValueError('block needs {"nodes": ["b@host", ...] | "all", "seconds": s}')
        if not isinstance(seconds, int | float) or not 0 < seconds <= 3600:
            raise ValueError(f"block: seconds must be 0 < s <= 3600, got {seconds!r}")
        return {"blocked": nodes, "cut": node.kernel.block(nodes, float(seconds))}

    def unblock(self, body: dict[str, Any]) -> dict[str, Any]:
        """Fault injection: end a block early ("all" or absent: every blocked peer)."""
        nodes = body.get("nodes", "all")
        if nodes != "all" and (
            not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes)
        ):
            raise ValueError('unblock needs {"nodes": ["b@host", ...] | "all"}')
        return {"unblocked": self.node.kernel.unblock(None if nodes == "all" else nodes)}


def _mnesia_op(db: Schema, op: Any, args: dict[str, Any]) -> Any:
    """One POST /mnesia operation on the store's blocking API."""
    if op == "transaction":
        writes, deletes = args.get("writes", []), args.get("deletes", [])

        def apply(tx: Any) -> int:
            for table, record in writes:
                tx.write(table, record)
            for table, key in deletes:
                tx.delete(table, key)
            return len(writes) + len(deletes)

        return {"result": db.transaction(apply)}
    if op not in MNESIA_OPS:
        raise ValueError(
            f"mnesia: op must be one of {sorted(MNESIA_OPS)} or transaction; got {op!r}"
        )
    try:
        return {"result": getattr(db, op)(**args)}
    except TypeError as exc:
        raise ValueError(f"mnesia {op}: {exc}") from None
