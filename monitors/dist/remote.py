"""Processes on other nodes: RemoteRef, and links, monitors and exit signals across the wire.

A `RemoteRef(node, name)` names a process on another node: by its registered name, or by its
process identity (an actor URN, "urn:uuid:...") when it came to us as the sender of a signal.
It has `tell`, `ask`, `actor_urn` and `_sv_endpoint()`, the hook through which
`supervisors.Process.link/monitor/unlink/demonitor` and `supervisors.exit` reach it (see
`supervisors.process.signal_endpoint`). The endpoint turns each of those into a frame:

    link    {"from": our process, "to": theirs}        exit   {"from", "to", "reason", "link"}
    unlink  {"from", "to"}                             mon    {"mid", "to"}
    demon   {"mid"}                                    down   {"mid", "reason"}

"from"/"to" are how the receiver names the process: a registered name or a URN. Both sides
keep a table per connection, so that when the connection goes every link fires with
"noconnection" and every monitor delivers Down(id, ref, "noconnection"), as in Erlang.

Reasons cross as JSON: strings, numbers and null as they are; tuples, lists and dicts
tagged ({"tuple": [...]}, so ("shutdown", x) stays a tuple); an exception, or anything else,
as its string form, e.g. "ValueError('boom')": the receiver sees that string as the reason.
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pykka import ActorDeadError

from monitors.dist.frames import FrameError, encode
from supervisors import Down, exit_reason, format_reason
from supervisors.process import signal_endpoint
from supervisors.reasons import NOCONNECTION, NOPROC

if TYPE_CHECKING:
    from monitors.dist.connection import Connection
    from monitors.dist.netkernel import NetKernel

__all__ = ["RemoteRef", "reason_from_wire", "reason_to_wire"]

log = logging.getLogger("monitors.dist")

# Live kernels, so that RemoteRef(node, name) without a kernel finds the one in this process.
_KERNELS: weakref.WeakSet[NetKernel] = weakref.WeakSet()

SIGNAL_FRAMES = frozenset({"link", "unlink", "exit", "mon", "demon", "down"})


def reason_to_wire(reason: Any) -> Any:
    """An exit reason as JSON (see the module docstring)."""
    if reason is None or isinstance(reason, str | int | float | bool):
        return reason
    if isinstance(reason, BaseException):
        return format_reason(reason)
    if isinstance(reason, tuple | list):
        kind = "tuple" if isinstance(reason, tuple) else "list"
        return {kind: [reason_to_wire(item) for item in reason]}
    if isinstance(reason, dict) and all(isinstance(key, str) for key in reason):
        return {"dict": {key: reason_to_wire(value) for key, value in reason.items()}}
    return format_reason(reason)


def reason_from_wire(data: Any) -> Any:
    """The reason that `reason_to_wire` encoded (exceptions stay strings)."""
    if isinstance(data, dict) and len(data) == 1:
        ((kind, value),) = data.items()
        if kind == "tuple" and isinstance(value, list):
            return tuple(reason_from_wire(item) for item in value)
        if kind == "list" and isinstance(value, list):
            return [reason_from_wire(item) for item in value]
        if kind == "dict" and isinstance(value, dict):
            return {key: reason_from_wire(item) for key, item in value.items()}
    return data


def _default_kernel() -> NetKernel:
    live = [k for k in list(_KERNELS) if k.is_running]
    if len(live) == 1:
        return live[0]
    raise RuntimeError(
        f"RemoteRef: {len(live)} NetKernels run in this process; pass kernel= "
        "(or use kernel.remote_ref(node, name))"
    )


@dataclass(frozen=True)
class RemoteRef:
    """A process on `node`, by registered name (or by URN). Equal refs name the same process.

    `kernel` is the local NetKernel to reach it through; by default the only one running in
    this process.
    """

    node: str
    name: str
    kernel: Any = field(default=None, compare=False, repr=False)

    def _kernel(self) -> NetKernel:
        return self.kernel if self.kernel is not None else _default_kernel()

    @property
    def actor_urn(self) -> str:
        """A stable identity, so local processes can key their links by it."""
        return f"dist:{self.node}/{self.name}"

    def tell(self, msg: dict[str, Any]) -> None:
        """Send `msg` (a JSON object) to the process; dropped if the node is unreachable."""
        self._kernel().send(self.node, self.name, msg)

    def ask(self, msg: dict[str, Any], timeout: float = 5.0) -> Any:
        """`call` the process: its on_receive return value comes back."""
        return self._kernel().call(self.node, self.name, msg, timeout)

    def is_alive(self) -> bool:
        """True while this node is connected to `node` (all we can know cheaply)."""
        return self.node in self._kernel().nodes()

    def _sv_endpoint(self) -> Any:
        # Called from supervisors' link/monitor machinery, process teardown included: it
        # must not raise. With no kernel to go through, the process is as good as gone.
        try:
            kernel = self._kernel()
        except RuntimeError:
            return None
        if self.node == kernel.node:  # a "remote" ref to our own node is a local process
            local = kernel._resolve(self.name)
            return None if local is None else signal_endpoint(local)
        return _Endpoint(kernel.signals, self)

    def __str__(self) -> str:
        return f"{self.name}@{{{self.node}}}"


class _Endpoint:
    """What `supervisors.process.signal_endpoint` gets for a RemoteRef: the signal methods a
    Process has, each turned into a frame (see SignalRouter)."""

    __slots__ = ("_ref", "_router")

    def __init__(self, router: SignalRouter, ref: RemoteRef) -> None:
        self._router = router
        self._ref = ref

    def _sv_add_link(self, local_ref: Any) -> bool:
        return self._router.add_link(self._ref, local_ref)

    def _sv_remove_link(self, local_urn: str) -> None:
        self._router.remove_link(self._ref, local_urn)

    def _sv_add_watcher(self, monitor_id: int, watcher: Any) -> bool:
        return self._router.add_watcher(self._ref, monitor_id, watcher)

    def _sv_remove_watcher(self, monitor_id: int) -> None:
        self._router.remove_watcher(self._ref, monitor_id)

    def _sv_link_exit(self, sender: Any, reason: Any) -> None:
        self._router.link_exit(self._ref, sender, reason)

    def _sv_receive_exit(self, sender: Any, reason: Any, *, via_link: bool) -> None:
        if via_link:
            self._router.link_exit(self._ref, sender, reason)
        else:
            self._router.exit_signal(self._ref, sender, reason)


class _DownForwarder:
    """Stands in for a remote watcher in a local process's monitor table: the Down the
    process sends it when it ends goes over the wire."""

    __slots__ = ("_conn", "_mid")

    def __init__(self, conn: Connection, mid: int) -> None:
        self._conn = conn
        self._mid = mid

    @property
    def actor_urn(self) -> str:
        return f"dist:{self._conn.node}/monitor/{self._mid}"

    def tell(self, message: Any) -> None:
        conn = self._conn
        with conn.lock:
            conn.mon_in.pop(self._mid, None)
        reason = message.reason if isinstance(message, Down) else NOPROC
        _write(conn, {"v": 1, "t": "down", "mid": self._mid, "reason": reason_to_wire(reason)})


def _write(conn: Connection, frame: dict[str, Any]) -> None:
    try:
        data = encode(frame, conn.max_frame)
    except (TypeError, ValueError, FrameError):
        frame["reason"] = format_reason(frame.get("reason"))
        data = encode(frame, conn.max_frame)
    conn.write(data, block=False)


def _link_exit(local_ref: Any, remote: RemoteRef, reason: Any) -> None:
    proc = signal_endpoint(local_ref)
    if proc is not None:
        proc._sv_link_exit(remote, reason)


def _tell_down(watcher: Any, mid: int, remote: RemoteRef, reason: Any) -> None:
    with contextlib.suppress(ActorDeadError):
        watcher.tell(Down(mid, remote, reason))


class SignalRouter:
    """The kernel's half of remote links and monitors: local calls out, frames in, and the
    "noconnection" sweep when a connection goes."""

    def __init__(self, kernel: NetKernel) -> None:
        self._kernel = kernel

    # ------------------------------------------------------------ from our processes

    def add_link(self, remote: RemoteRef, local_ref: Any) -> bool:
        conn = self._kernel._connection_for_signals(remote.node)
        if conn is not None:
            key = local_ref.actor_urn
            with conn.lock:
                live = conn.down is None
                if live:
                    conn.links[(key, remote.name)] = (local_ref, remote)
                    conn.link_keys[(local_ref.actor_urn, remote.name)] = key
            if live:
                self._kernel._expose(local_ref)
                _write(conn, {"v": 1, "t": "link", "from": key, "to": remote.name})
                return True
        # Erlang: linking to a process on a node we cannot reach gives noconnection at once.
        _link_exit(local_ref, remote, NOCONNECTION)
        return True

    def remove_link(self, remote: RemoteRef, local_urn: str) -> None:
        conn = self._kernel._conns.get(remote.node)
        if conn is None:
            return
        with conn.lock:
            key = conn.link_keys.pop((local_urn, remote.name), None)
            if key is not None:
                conn.links.pop((key, remote.name), None)
        if key is not None:
            _write(conn, {"v": 1, "t": "unlink", "from": key, "to": remote.name})

    def link_exit(self, remote: RemoteRef, sender: Any, reason: Any) -> None:
        """Our process `sender`, linked to `remote`, ended with `reason`."""
        conn = self._kernel._conns.get(remote.node)
        if conn is None:
            return
        with conn.lock:
            key = conn.link_keys.pop((sender.actor_urn, remote.name), None)
            if key is not None:
                conn.links.pop((key, remote.name), None)
        if key is not None:
            _write(
                conn,
                {
                    "v": 1,
                    "t": "exit",
                    "from": key,
                    "to": remote.name,
                    "reason": reason_to_wire(reason),
                    "link": True,
                },
            )

    def exit_signal(self, remote: RemoteRef, sender: Any, reason: Any) -> None:
        """supervisors.exit(remote, reason), from `sender` (a local ref, or None)."""
        conn = self._kernel._connection_for_signals(remote.node)
        if conn is None:
            log.debug("dist: exit signal to %s dropped: no connection", remote)
            return
        if sender is not None:
            self._kernel._expose(sender)
        _write(
            conn,
            {
                "v": 1,
                "t": "exit",
                "from": None if sender is None else sender.actor_urn,
                "to": remote.name,
                "reason": reason_to_wire(reason),
                "link": False,
            },
        )

    def add_watcher(self, remote: RemoteRef, mid: int, watcher: Any) -> bool:
        conn = self._kernel._connection_for_signals(remote.node)
        if conn is not None:
            with conn.lock:
                live = conn.down is None
                if live:
                    conn.mon_out[mid] = (watcher, remote)
            if live:
                _write(conn, {"v": 1, "t": "mon", "mid": mid, "to": remote.name})
                return True
        _tell_down(watcher, mid, remote, NOCONNECTION)
        return True

    def remove_watcher(self, remote: RemoteRef, mid: int) -> None:
        conn = self._kernel._conns.get(remote.node)
        if conn is None:
            return
        with conn.lock:
            found = conn.mon_out.pop(mid, None) is not None
        if found:
            _write(conn, {"v": 1, "t": "demon", "mid": mid})

    # ------------------------------------------------------------ frames from the peer

    def on_frame(self, conn: Connection, frame: dict[str, Any]) -> None:
        kind = frame["t"]
        if kind == "link":
            self._in_link(conn, _key(frame, "from"), _key(frame, "to"))
        elif kind == "unlink":
            self._in_unlink(conn, _key(frame, "from"), _key(frame, "to"))
        elif kind == "exit":
            self._in_exit(conn, frame)
        elif kind == "mon":
            self._in_monitor(conn, _mid(frame), _key(frame, "to"))
        elif kind == "demon":
            self._in_demonitor(conn, _mid(frame))
        elif kind == "down":
            self._in_down(conn, _mid(frame), reason_from_wire(frame.get("reason")))

    def _in_link(self, conn: Connection, remote_key: str, local_key: str) -> None:
        target = self._kernel._resolve(local_key)
        proc = None if target is None else signal_endpoint(target)
        proxy = RemoteRef(conn.node, remote_key, self._kernel)
        if proc is None or not proc._sv_add_link(proxy):
            self._send_link_exit(conn, local_key, remote_key, NOPROC)
            return
        with conn.lock:
            live = conn.down is None
            if live:
                conn.links[(local_key, remote_key)] = (target, proxy)
                conn.link_keys[(target.actor_urn, remote_key)] = local_key
        if not live:
            proc._sv_link_exit(proxy, NOCONNECTION)
            return
        if exit_reason(target) is not None:
            # It ended between accepting the link and our table entry: it found no entry to
            # report through, so report for it.
            with conn.lock:
                found = conn.links.pop((local_key, remote_key), None) is not None
                conn.link_keys.pop((target.actor_urn, remote_key), None)
            if found:
                self._send_link_exit(conn, local_key, remote_key, exit_reason(target))

    def _send_link_exit(
        self, conn: Connection, local_key: str, remote_key: str, reason: Any
    ) -> None:
        _write(
            conn,
            {
                "v": 1,
                "t": "exit",
                "from": local_key,
                "to": remote_key,
                "reason": reason_to_wire(reason),
                "link": True,
            },
        )

    def _in_unlink(self, conn: Connection, remote_key: str, local_key: str) -> None:
        with conn.lock:
            entry = conn.links.pop((local_key, remote_key), None)
            if entry is not None:
                conn.link_keys.pop((entry[0].actor_urn, remote_key), None)
        if entry is not None:
            proc = signal_endpoint(entry[0])
            if proc is not None:
                proc._sv_remove_link(entry[1].actor_urn)

    def _in_exit(self, conn: Connection, frame: dict[str, Any]) -> None:
        reason = reason_from_wire(frame.get("reason"))
        local_key = _key(frame, "to")
        sender_key = frame.get("from")
        if frame.get("link"):
            remote_key = _key(frame, "from")
            with conn.lock:
                entry = conn.links.pop((local_key, remote_key), None)
                if entry is not None:
                    conn.link_keys.pop((entry[0].actor_urn, remote_key), None)
            if entry is not None:  # else unlinked meanwhile: dropped, as in Erlang
                _link_exit(entry[0], entry[1], reason)
            return
        target = self._kernel._resolve(local_key)
        proc = None if target is None else signal_endpoint(target)
        if proc is None:
            return
        sender = None
        if isinstance(sender_key, str):
            sender = RemoteRef(conn.node, sender_key, self._kernel)
        proc._sv_receive_exit(sender, reason, via_link=False)

    def _in_monitor(self, conn: Connection, mid: int, local_key: str) -> None:
        target = self._kernel._resolve(local_key)
        proc = None if target is None else signal_endpoint(target)
        key = ("dist", conn.node, mid)  # never equal to a local (int) monitor id
        forwarder = _DownForwarder(conn, mid)
        if proc is None or not proc._sv_add_watcher(key, forwarder):
            _write(conn, {"v": 1, "t": "down", "mid": mid, "reason": NOPROC})
            return
        with conn.lock:
            live = conn.down is None
            if live:
                conn.mon_in[mid] = (target, key)
        if not live:
            proc._sv_remove_watcher(key)

    def _in_demonitor(self, conn: Connection, mid: int) -> None:
        with conn.lock:
            entry = conn.mon_in.pop(mid, None)
        if entry is not None:
            proc = signal_endpoint(entry[0])
            if proc is not None:
                proc._sv_remove_watcher(entry[1])

    def _in_down(self, conn: Connection, mid: int, reason: Any) -> None:
        with conn.lock:
            entry = conn.mon_out.pop(mid, None)
        if entry is not None:
            _tell_down(entry[0], mid, entry[1], reason)

    # ------------------------------------------------------------ the connection went

    def connection_lost(self, links: dict, mon_out: dict, mon_in: dict) -> None:
        """Fire what the tables held: noconnection for links, Down for our monitors, and
        forget the peer's monitors of our processes."""
        for local_ref, remote in links.values():
            _link_exit(local_ref, remote, NOCONNECTION)
        for mid, (watcher, remote) in mon_out.items():
            _tell_down(watcher, mid, remote, NOCONNECTION)
        for target, key in mon_in.values():
            proc = signal_endpoint(target)
            if proc is not None:
                proc._sv_remove_watcher(key)


def _key(frame: dict[str, Any], field_name: str) -> str:
    value = frame[field_name]
    if not isinstance(value, str):
        raise TypeError(f"{field_name!r} must be a string; got {value!r}")
    return value


def _mid(frame: dict[str, Any]) -> int:
    value = frame["mid"]
    if type(value) is not int:
        raise TypeError(f"'mid' must be an int; got {value!r}")
    return value
