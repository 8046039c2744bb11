"""What a node has seen happen: counters and a timeline, read without asking any actor.

The metrics endpoint and the management page read these; the node's `observer` child and a
supervisor report listener write them. They live on the Node object, not in a process, so a
restart of the observer (or of the application it follows under rest_for_one) loses nothing.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Iterable
from typing import Any

from supervisors import add_report_listener, format_reason, remove_report_listener

TIMELINE_MAX = 200
REPORTS_MAX = 50
# The supervisor reports worth a line on the page's timeline (progress reports are not).
_TIMELINE_REPORTS = {
    "child_crashed": "crash",
    "child_restarted": "restart",
    "start_error": "start_error",
    "reached_max_restart_intensity": "gave_up",
    "shutdown_error": "shutdown_error",
}
_KEPT_REPORTS = frozenset(_TIMELINE_REPORTS) | {"child_exited", "auto_shutdown"}


class Observations:
    """Thread-safe counters and a bounded timeline for one node."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.started = time.time()
        self._lock = threading.Lock()
        self._up: set[str] = set()
        self._known: set[str] = set()
        self._node_down: collections.Counter[tuple[str, str]] = collections.Counter()
        self._restarts: collections.Counter[tuple[str, str]] = collections.Counter()
        self._gave_up: collections.Counter[str] = collections.Counter()
        self._timeline: collections.deque[dict[str, Any]] = collections.deque(maxlen=TIMELINE_MAX)
        self._reports: collections.deque[dict[str, Any]] = collections.deque(maxlen=REPORTS_MAX)
        self._members: list[str] = [node]
        self._switches_seen: set[tuple[str, float]] = set()
        self._alarms: dict[str, frozenset[str]] | None = None
        self._attached = False

    # ------------------------------------------------------------------ lifecycle

    def attach(self) -> None:
        """Start counting supervisor reports (every supervisor of this OS process)."""
        if not self._attached:
            add_report_listener(self._on_report)
            self._attached = True

    def detach(self) -> None:
        if self._attached:
            remove_report_listener(self._on_report)
            self._attached = False

    # ------------------------------------------------------------------ writers

    def note(self, kind: str, node: str | None = None, detail: Any = None) -> None:
        """Add one line to the timeline."""
        entry = {"at": time.time(), "kind": kind, "node": node, "detail": detail}
        with self._lock:
            self._timeline.append(entry)

    def connected(self, peers: Iterable[str]) -> None:
        """The peers connected when the observer (re)started."""
        with self._lock:
            self._up = set(peers)
            self._known |= self._up

    def node_up(self, peer: str) -> None:
        with self._lock:
            self._up.add(peer)
            self._known.add(peer)
        self.note("nodeup", peer)

    def node_down(self, peer: str, reason: str) -> None:
        with self._lock:
            self._up.discard(peer)
            self._known.add(peer)
            self._node_down[(peer, reason)] += 1
        self.note("nodedown", peer, reason)

    def monitor_event(self, event: str, node: str) -> None:
        """A node monitor event: partition, partial_partition, paused, resumed (node_up and
        node_down come from the dist layer, with their reason)."""
        if event not in ("node_up", "node_down"):
            self.note(event, node)

    def remember_members(self, members: Iterable[str]) -> None:
        with self._lock:
            self._members = sorted(set(members) | {self.node})
            self._known |= set(self._members) - {self.node}

    def see_failover(self, statuses: Iterable[dict[str, Any]]) -> None:
        """Put each failover switch not seen before on the timeline."""
        for status in statuses:
            last = status.get("last_switch")
            if not isinstance(last, dict):
                continue
            key = (str(status.get("system")), float(last.get("at") or 0.0))
            with self._lock:
                if key in self._switches_seen:
                    continue
                self._switches_seen.add(key)
            detail = f"{last.get('from')} -> {last.get('to')} in {last.get('took', 0):.1f} s"
            self.note("failover", status.get("system"), detail)

    def see_alarms(self, alarms: dict[str, list[str]]) -> None:
        """Put alarms raised or cleared since the last look on the timeline."""
        now = {node: frozenset(resources) for node, resources in alarms.items()}
        with self._lock:
            before, self._alarms = self._alarms, now
        if before is None:
            return
        for node in sorted(set(now) | set(before)):
            for resource in sorted(now.get(node, frozenset()) - before.get(node, frozenset())):
                self.note("alarm", node, f"{resource} alarm set")
            for resource in sorted(before.get(node, frozenset()) - now.get(node, frozenset())):
                self.note("alarm_cleared", node, f"{resource} alarm cleared")

    def _on_report(self, report: dict[str, Any]) -> None:
        event = report.get("event")
        if event not in _KEPT_REPORTS:
            return
        supervisor = str(report.get("supervisor"))
        child = report.get("child")
        reason = report.get("reason")
        entry = {
            "at": time.time(),
            "event": event,
            "supervisor": supervisor,
            "child": None if child is None else str(child),
            "reason": None if reason is None else format_reason(reason),
        }
        with self._lock:
            self._reports.append(entry)
            if event == "child_restarted":
                self._restarts[(supervisor, entry["child"] or "")] += 1
            elif event == "reached_max_restart_intensity":
                self._gave_up[supervisor] += 1
        kind = _TIMELINE_REPORTS.get(str(event))
        if kind is not None:
            where = f"{supervisor}/{entry['child']}" if entry["child"] else supervisor
            self.note(kind, self.node, f"{where}: {entry['reason']}" if entry["reason"] else where)

    # ------------------------------------------------------------------ readers

    def dist(self) -> tuple[set[str], set[str], dict[tuple[str, str], int]]:
        """(peers up, every peer seen or configured, NodeDown counts by (peer, reason))."""
        with self._lock:
            return set(self._up), set(self._known), dict(self._node_down)

    def know(self, peers: Iterable[str]) -> None:
        with self._lock:
            self._known |= set(peers) - {self.node}

    def supervisors(self) -> tuple[dict[tuple[str, str], int], dict[str, int]]:
        """(restarts by (supervisor, child), times each supervisor gave up)."""
        with self._lock:
            return dict(self._restarts), dict(self._gave_up)

    def members(self) -> list[str]:
        with self._lock:
            return list(self._members)

    def timeline(self, limit: int = 50) -> list[dict[str, Any]]:
        """The last `limit` events, newest first."""
        with self._lock:
            return list(self._timeline)[-limit:][::-1]

    def reports(self, limit: int = 20) -> list[dict[str, Any]]:
        """The last `limit` supervisor reports, newest first."""
        with self._lock:
            return list(self._reports)[-limit:][::-1]
