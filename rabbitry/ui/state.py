"""What the management page shows, as one JSON object, built when the page asks (twice a
second). It gathers the node's parts and the views of the peers it is connected to within
PAGE_BUDGET (see rabbitry.observe.gather): a part or a peer that does not answer in time is
missing from that answer, and `missing` says so.

Who cannot see whom. RabbitMQ's banner lists the partitions each node recorded; we list those
(`partitions`), and also the links that are down now between members known to be alive
(`cut`): X cannot see Y when Y is not among X's dist connections, while Y answered us, or
another member is connected to Y, or X paused because it cannot see enough of the cluster.
A member that nobody reaches may simply be stopped: it is shown down, not as a partition.
"""

from __future__ import annotations

import functools
import time
from typing import Any

from rabbitry.observe.gather import Gatherer
from rabbitry.observe.metrics import cluster_name, rabbitry_version
from rabbitry.observe.observer import VIEW_NAME
from rabbitry.observe.parts import node_parts

PAGE_BUDGET = 0.3
PEER_TIMEOUT = 0.5


class PageState:
    """Builds the page's state for one node."""

    def __init__(self, node: Any) -> None:
        self.node = node
        self.gatherer = Gatherer(f"ui-{node.name}", max_workers=48)

    def close(self) -> None:
        self.gatherer.close()

    def build(self) -> dict[str, Any]:
        node = self.node
        up, _known, _downs = node.observations.dist()
        parts = node_parts(node)
        for peer in sorted(up):
            parts[f"peer:{peer}"] = functools.partial(peer_view, node, peer)
        if node.parts.monitor is not None:
            parts["partition_modes"] = node.partition_modes
        gathered = self.gatherer.gather(parts, PAGE_BUDGET)
        status = gathered.get("node_monitor")
        dist = gathered.get("dist")
        views: dict[str, dict[str, Any]] = {}
        if status is not None:
            views[node.name] = {
                "status": status,
                "net_ticktime": dist["net_ticktime"] if dist else None,
                "connected": dist["connected"] if dist else sorted(up),
            }
        for peer in up:
            view = gathered.get(f"peer:{peer}")
            if isinstance(view, dict) and isinstance(view.get("status"), dict):
                views[peer] = view
        core = list(status["all"]) if status else node.observations.members()
        ephemeral = list(status.get("ephemeral", [])) if status else []
        failover = gathered.get("failover")
        if failover is not None:
            node.observations.see_failover(s for s in failover if s["role"] == "server")
        restarts, gave_up = node.observations.supervisors()
        return {
            "node": node.name,
            "cluster": cluster_name(core),
            "version": rabbitry_version(),
            "now": time.time(),
            "paused": bool(status and status.get("paused")),
            "members": members(node.name, core, ephemeral, status=status, views=views, up=up),
            "cut": cut_links(core, views),
            "partitions": {
                n: partition_list(v["status"].get("partitions")) for n, v in sorted(views.items())
            },
            "net_ticktimes": {
                n: v.get("net_ticktime") for n, v in sorted(views.items()) if v.get("net_ticktime")
            },
            "supervision": supervision(gathered.get("supervision"), restarts, gave_up),
            "reports": node.observations.reports(20),
            "gossip": gathered.get("gossip"),
            "failover": failover,
            "mnesia": gathered.get("mnesia"),
            "singletons": gathered.get("singletons"),
            "has_gossip": node.parts.gossip is not None,
            "has_mnesia": node.parts.mnesia is not None,
            "timeline": node.observations.timeline(50),
            "partition_modes": gathered.get("partition_modes"),
            "missing": {k: v for k, v in gathered.missing.items() if not k.startswith("peer:")},
            "unanswered_peers": sorted(
                k.removeprefix("peer:") for k in gathered.missing if k.startswith("peer:")
            ),
        }


def partition_list(value: Any) -> list[str]:
    """The peers a status says it was partitioned from (a list, or a mapping by peer)."""
    if isinstance(value, dict):
        return sorted(str(k) for k in value)
    return sorted(str(v) for v in value or [])


def peer_view(node: Any, peer: str) -> dict[str, Any]:
    """What `peer` sees (its status, net_ticktime, connections), asked over dist."""
    view = node.kernel.call(peer, VIEW_NAME, {"t": "view"}, timeout=PEER_TIMEOUT)
    if not isinstance(view, dict):
        raise ValueError(f"{peer} answered the view call with {type(view).__name__}")
    return view


def members(
    me: str,
    core: list[str],
    ephemeral: list[str],
    *,
    status: dict[str, Any] | None,
    views: dict[str, dict[str, Any]],
    up: set[str],
) -> list[dict[str, Any]]:
    """One row per member: role, state (running, paused, down), alarms, what it reported."""
    running = set(status.get("running", [])) if status else set()
    alarms: dict[str, set[str]] = {}
    for view in views.values():
        for name, resources in view["status"].get("alarms", {}).items():
            alarms.setdefault(name, set()).update(resources)
    rows = []
    for role, names in (("core", core), ("ephemeral", ephemeral)):
        for name in sorted(set(names)):
            seen = views.get(name)
            if seen is not None:
                state = "paused" if seen["status"].get("paused") else "running"
            elif name == me:
                state = "unknown"  # our own monitor did not answer in time
            elif name in running or (role == "ephemeral" and name in up):
                state = "running"
            else:
                state = "down"
            rows.append(
                {
                    "name": name,
                    "role": role,
                    "state": state,
                    "self": name == me,
                    "reachable": name == me or name in up,
                    "alarms": sorted(alarms.get(name, ())),
                    "net_ticktime": seen.get("net_ticktime") if seen else None,
                }
            )
    return rows


def cut_links(core: list[str], views: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """[{node, cannot_see: [...]}] for links down now between members known to be alive."""
    connected = {name: set(view.get("connected") or []) for name, view in views.items()}
    rows = []
    for viewer, view in sorted(views.items()):
        paused = bool(view["status"].get("paused"))
        unseen = []
        for other in sorted(set(core) - {viewer}):
            if other in connected[viewer]:
                continue
            alive = other in views or any(
                other in links for name, links in connected.items() if name != viewer
            )
            if alive or paused:
                unseen.append(other)
        if unseen:
            rows.append({"node": viewer, "cannot_see": unseen, "paused": paused})
    return rows


def supervision(
    tree: list[dict[str, Any]] | None,
    restarts: dict[tuple[str, str], int],
    gave_up: dict[str, int],
) -> list[dict[str, Any]] | None:
    """The gathered tree with each child's restart count and each supervisor's give-ups."""
    if tree is None:
        return None
    out = []
    for sup in tree:
        name = sup["supervisor"]
        children = [
            {**child, "restarts": restarts.get((name, child["id"]), 0)} for child in sup["children"]
        ]
        out.append({**sup, "children": children, "gave_up": gave_up.get(name, 0)})
    return out
