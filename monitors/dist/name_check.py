"""Is the node behind an old link still alive? Asked when a second connection claims a name
we already hold a live link from (DESIGN "Names and roles are verified, not believed").

Erlang's handshake lets such a newcomer take the name over (`alive` status); we ask the old
link first, with one ping frame and a short deadline:
- it answers: a running node holds the name, and the newcomer is refused (`name_in_use`);
- it is silent or closed: the old process is gone or frozen, so this is a restart in
  progress, and the newcomer is let in (it replaces the old link, as before).

A ping is an ordinary frame on the old connection ({"t": "ping", "id": n}, answered by
{"t": "pong", "id": n} from the peer's I/O loop), so it neither disturbs nor replaces the
ticks: the old link stays up either way until the decision.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

from monitors.dist.frames import encode

__all__ = ["PING", "PONG", "NameCheck", "Pings", "refused_log_line"]

PING = "ping"
PONG = "pong"


class Pings:
    """Outstanding pings by id; thread-safe. One per NetKernel."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._waiting: dict[int, threading.Event] = {}

    def ask(self, conn: Any, timeout: float) -> float | None:
        """Ping `conn` (a Connection) and wait for its pong: the round trip in seconds, or
        None if none came within `timeout` (or the connection is closed)."""
        ping_id = next(self._ids)
        event = threading.Event()
        with self._lock:
            self._waiting[ping_id] = event
        try:
            began = time.monotonic()
            if not conn.write(encode({"v": 1, "t": PING, "id": ping_id}), block=False):
                return None
            if not event.wait(timeout) or conn.down is not None:
                return None
            return time.monotonic() - began
        finally:
            with self._lock:
                self._waiting.pop(ping_id, None)

    def on_pong(self, frame: dict[str, Any]) -> None:
        """A pong arrived (the I/O loop's thread); an unknown or late id is ignored."""
        with self._lock:
            event = self._waiting.get(frame["id"])
        if event is not None:
            event.set()

    @staticmethod
    def answer(conn: Any, frame: dict[str, Any]) -> None:
        """A ping arrived (the I/O loop's thread): answer at once, without waiting."""
        ping_id = frame["id"]
        if type(ping_id) is not int:
            raise TypeError(f"ping id must be an int; got {ping_id!r}")
        conn.write(encode({"v": 1, "t": PONG, "id": ping_id}), block=False)


class NameCheck:
    """One NetKernel's side of the check: its pings, how long to wait for a pong, what to do
    when a peer refuses us, and the refusals counted by reason (for /metrics and the UI)."""

    def __init__(
        self,
        net_ticktime: float,
        timeout: float | None = None,
        on_refused: Callable[[str, str], None] | None = None,
        role: str = "core",
        role_check: Callable[[str, str], str] | None = None,
    ) -> None:
        self.pings = Pings()
        self.role = role  # ours, said in the handshake
        self.role_check = role_check  # (peer, its role) -> "" or why it may not connect
        self.timeout = float(min(1.0, net_ticktime / 4) if timeout is None else timeout)
        if not self.timeout > 0:
            raise ValueError(f"name_check_timeout must be seconds > 0; got {timeout!r}")
        self._on_refused = on_refused
        self._lock = threading.Lock()
        self.refused: dict[str, int] = {}
        # Told of each refusal, either side (the node puts it on its timeline); must not block.
        self.on_refusal: Callable[[str, str, str], None] | None = None

    def count(self, reason: str, node: str = "", detail: str = "") -> None:
        """One refusal of `node` (ours or theirs) for `reason`, e.g. name_in_use."""
        with self._lock:
            self.refused[reason] = self.refused.get(reason, 0) + 1
        listener = self.on_refusal
        if listener is not None:
            listener(reason, node, detail)

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self.refused)

    def take_callback(self) -> Callable[[str, str], None] | None:
        """The owner's callback (reason, the line to print), once: a node is told it may not
        run one time only."""
        with self._lock:
            callback, self._on_refused = self._on_refused, None
        return callback


def refused_log_line(node: str, at: str) -> str:
    """The line a refused newcomer prints and logs (DESIGN fixes its wording)."""
    return f"node {node}: the name is in use by a running node at {at}"
