"""Messages between registered processes: `send`, `send_many` and `call` going out, and
the frames that come in (sends, calls, replies, link and monitor signals, name-check pings)
dispatched from the I/O loop.

Why dispatch can run on the I/O loop's thread: nothing it does waits. A send is a `tell`
into a mailbox; a call goes into the handler's mailbox with our own reply object, so the
handler's thread writes the reply as it returns; a reply wakes its caller's slot; signals
take a process's short lock; pings are answered with a write that never waits. A handler
that blocks blocks its own actor, never the loop.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

import pykka
from pykka import ActorDeadError

from monitors.dist.connection import Connection
from monitors.dist.errors import DistTimeout, FrameTooLarge, NodeUnreachable, RemoteCallError
from monitors.dist.frames import FrameError, encode
from monitors.dist.messages import Message
from monitors.dist.name_check import PING, PONG, Pings
from monitors.dist.names import validate_node
from monitors.dist.remote import SIGNAL_FRAMES
from supervisors import format_reason

if TYPE_CHECKING:
    from monitors.dist.netkernel import NetKernel

log = logging.getLogger("monitors.dist")


class _Slot:
    """Where a call's reply lands. A bare lock: the cheapest wake-up CPython has."""

    __slots__ = ("_lock", "error", "reply")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self.reply: dict[str, Any] | None = None
        self.error: Exception | None = None

    def set(self, reply: dict[str, Any]) -> None:
        self.reply = reply
        self._lock.release()

    def fail(self, error: Exception) -> None:
        self.error = error
        self._lock.release()

    def wait(self, timeout: float | None) -> bool:
        if timeout is None:
            return self._lock.acquire()
        return self._lock.acquire(timeout=max(timeout, 0.0))


class _Envelope:
    """A mailbox envelope with our own reply object (duck-typed as pykka's): the handler's
    thread writes the reply frame as it returns, so no thread sits between them."""

    __slots__ = ("message", "reply_to")

    def __init__(self, message: Any, reply_to: Any) -> None:
        self.message = message
        self.reply_to = reply_to


class _Reply:
    """Stands in for a pykka future: Process calls set()/set_exception() when the handler is
    done (or the process ends first). It must never raise into the handler's thread."""

    __slots__ = ("_conn", "_id", "_name")

    def __init__(self, conn: Connection, call_id: Any, name: str) -> None:
        self._conn = conn
        self._id = call_id
        self._name = name

    def set(self, value: Any = None) -> None:
        try:
            frame = {"v": 1, "t": "reply", "id": self._id, "ok": True, "m": value}
            data = encode(frame, self._conn.max_frame)
        except (TypeError, ValueError, FrameError) as exc:
            self.error("bad_reply", f"the reply of {self._name!r} is not a JSON frame: {exc}")
            return
        self._conn.write(data, block=False)

    def set_exception(self, exc_info: Any = None) -> None:
        exc = (exc_info or sys.exc_info())[1]
        if isinstance(exc, ActorDeadError):
            self.error("exit", f"{self._name!r} ended before replying")
        else:
            self.error("exception", format_reason(exc))

    def error(self, kind: str, detail: str) -> None:
        with contextlib.suppress(Exception):
            frame = {"v": 1, "t": "reply", "id": self._id, "ok": False, "kind": kind}
            frame["error"] = detail[:4096]
            self._conn.write(encode(frame), block=False)


def _roundtrip(msg: dict[str, Any]) -> dict[str, Any]:
    """What a message looks like after the wire: local delivery behaves as remote does."""
    return json.loads(json.dumps(msg, allow_nan=False))


class Messenger:
    """The kernel's sends, calls and incoming frames. The kernel's public `send`,
    `send_many` and `call` are these (their docstrings are there)."""

    def __init__(self, kernel: NetKernel) -> None:
        self._k = kernel
        self._call_ids = itertools.count(1)

    def encode(self, frame: dict[str, Any], node: str, name: str, verb: str) -> bytes:
        k = self._k
        try:
            return encode(frame, k.max_frame)
        except FrameError as exc:
            raise FrameTooLarge(f"{verb} to {name!r} on {node}: {exc}") from None
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"{verb} to {name!r} on {node}: the message must be a JSON object: {exc}"
            ) from None

    def send(self, node: str, name: str, msg: dict[str, Any]) -> None:
        """Send `msg` (a JSON object) to the process registered as `name` on `node`.

        Connects first if need be, without waiting (the message is queued meanwhile). As in
        Erlang, a message to a node that cannot be reached is dropped (logged at debug).
        Raises only for a bad message (TypeError) or one over max_frame (FrameTooLarge).
        """
        k = self._k
        if type(msg) is not dict:
            raise TypeError(f"send to {name!r} on {node}: msg must be a dict; got {msg!r}")
        conn = k._conns.get(node)
        if conn is not None:
            data = self.encode({"v": 1, "t": "send", "to": name, "m": msg}, node, name, "send")
            if not conn.write(data):
                log.debug(
                    "dist %s: send to %r on %s dropped: connection closed", k.node, name, node
                )
            return
        if node == k.node:
            self._deliver_local(name, msg)
            return
        validate_node(node)
        data = self.encode({"v": 1, "t": "send", "to": name, "m": msg}, node, name, "send")
        with k._lock:
            conn = k._conns.get(node)
            if conn is None:
                pending = k._outgoing.get(node) or k.dialer.start(node)
                if pending is None:
                    log.debug(
                        "dist %s: send to %r on %s dropped: %s",
                        k.node,
                        name,
                        node,
                        k._why_unreachable(node),
                    )
                elif pending.queued + len(data) > k._max_queue:
                    log.debug("dist %s: send to %s dropped: connect queue full", k.node, node)
                else:
                    pending.frames.append(data)
                    pending.queued += len(data)
                return
        conn.write(data)

    def send_many(self, node: str, name: str, msgs: list[dict[str, Any]]) -> None:
        """Send `msgs` in order to `name` on `node`, as `send` does each, but over a live
        connection in one write: the frames are joined and go out in one `send` call (one
        syscall instead of one per message, and the peer's reader gets them in one `recv`).
        A shell that releases several messages to one peer at once (a group commit's acks,
        commits or lock requests) uses this. A message that cannot be sent (not JSON, over
        max_frame) is left out and its error raised once the others are on their way."""
        k = self._k
        conn = k._conns.get(node) if len(msgs) > 1 else None
        if conn is None:
            for msg in msgs:
                self.send(node, name, msg)
            return
        frames: list[bytes] = []
        error: Exception | None = None
        for msg in msgs:
            try:
                if type(msg) is not dict:
                    raise TypeError(f"send to {name!r} on {node}: msg must be a dict; got {msg!r}")
                frame = {"v": 1, "t": "send", "to": name, "m": msg}
                frames.append(self.encode(frame, node, name, "send"))
            except (TypeError, FrameTooLarge) as exc:
                error = error or exc
        if frames and not conn.write(b"".join(frames)):
            log.debug(
                "dist %s: %d sends to %r on %s dropped: connection closed",
                k.node,
                len(frames),
                name,
                node,
            )
        if error is not None:
            raise error

    def _deliver_local(self, name: str, msg: dict[str, Any]) -> None:
        k = self._k
        ref = k._resolve(name)
        if ref is None:
            log.debug("dist %s: local send to %r dropped: not registered", k.node, name)
            return
        with contextlib.suppress(ActorDeadError):
            ref.tell(Message(k.node, _roundtrip(msg)))

    def call(self, node: str, name: str, msg: dict[str, Any], timeout: float = 5.0) -> Any:
        """Send `msg` to `name` on `node` and return what its `on_receive` returns.

        Raises DistTimeout (no reply within `timeout` s), NodeUnreachable (no connection, or
        it went before the reply), RemoteCallError (no such name, the handler raised, ...).
        """
        k = self._k
        if type(msg) is not dict:
            raise TypeError(f"call to {name!r} on {node}: msg must be a dict; got {msg!r}")
        if node == k.node:
            return self._call_local(name, msg, timeout)
        deadline = time.monotonic() + timeout
        conn = k._conns.get(node)
        if conn is None:
            if not k.connect(node, timeout=timeout):
                raise NodeUnreachable(node, k._why_unreachable(node))
            conn = k._conns.get(node)
            if conn is None:
                raise NodeUnreachable(node, "the connection went down as it came up")
        call_id = next(self._call_ids)
        data = self.encode(
            {"v": 1, "t": "call", "id": call_id, "to": name, "m": msg}, node, name, "call"
        )
        slot = _Slot()
        with conn.lock:
            if conn.down is not None:
                raise NodeUnreachable(node, f"the connection went down ({conn.down})")
            calls = conn.calls  # keep this dict: a teardown swaps in a new one
            calls[call_id] = slot
        if not conn.write(data):
            calls.pop(call_id, None)
            raise NodeUnreachable(node, "the connection closed before the call went out")
        if not slot.wait(deadline - time.monotonic()):
            if calls.pop(call_id, None) is not None:
                raise DistTimeout(node, name, timeout)
            slot.wait(None)  # resolved just now by the reader or a teardown: it is set
        if slot.error is not None:
            raise slot.error
        reply = slot.reply
        assert reply is not None
        if reply.get("ok") is True:
            return reply.get("m")
        raise RemoteCallError(node, name, str(reply.get("kind")), str(reply.get("error")))

    def _call_local(self, name: str, msg: dict[str, Any], timeout: float) -> Any:
        k = self._k
        ref = k._resolve(name)
        if ref is None:
            raise RemoteCallError(k.node, name, "noproc", f"no process registered as {name!r}")
        try:
            result = ref.ask(Message(k.node, _roundtrip(msg)), timeout=timeout)
        except pykka.Timeout:
            raise DistTimeout(k.node, name, timeout) from None
        except ActorDeadError:
            raise RemoteCallError(k.node, name, "exit", f"{name!r} ended before replying") from None
        except Exception as exc:
            raise RemoteCallError(k.node, name, "exception", format_reason(exc)) from exc
        try:
            return _roundtrip({"m": result})["m"]
        except (TypeError, ValueError) as exc:
            raise RemoteCallError(k.node, name, "bad_reply", str(exc)) from None

    # ------------------------------------------------------------------ frames in

    def on_frame(self, conn: Connection, frame: dict[str, Any]) -> None:
        """The I/O loop's thread: one authenticated frame. A malformed one is logged and
        dropped. Nothing here waits: `tell`s, a reply slot, writes that never block."""
        k = self._k
        kind = frame["t"]
        try:
            if kind == "send":
                ref = k._resolve(frame["to"])
                if ref is None:
                    log.debug(
                        "dist %s: message for %r dropped: not registered", k.node, frame["to"]
                    )
                    return
                try:
                    ref.tell(Message(conn.node, frame["m"]))
                except ActorDeadError:
                    log.debug("dist %s: message for %r dropped: it ended", k.node, frame["to"])
            elif kind == "reply":
                slot = conn.calls.pop(frame["id"], None)
                if slot is not None:  # else it timed out: a late reply is dropped
                    slot.set(frame)
            elif kind == "call":
                self._serve_call(conn, frame)
            elif kind in SIGNAL_FRAMES:
                k.signals.on_frame(conn, frame)
            elif kind == PING:
                Pings.answer(conn, frame)
            elif kind == PONG:
                k.names.pings.on_pong(frame)
            else:
                log.info(
                    "dist %s: ignored a frame of unknown type %r from %s",
                    k.node,
                    kind,
                    conn.node,
                )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            log.warning(
                "dist %s: dropped a malformed %r frame from %s at %s: %s",
                k.node,
                kind,
                conn.node,
                conn.address,
                format_reason(exc),
            )

    def _serve_call(self, conn: Connection, frame: dict[str, Any]) -> None:
        k = self._k
        name, call_id, msg = frame["to"], frame["id"], frame["m"]
        if not isinstance(name, str):
            raise TypeError(f"'to' must be a string; got {name!r}")
        reply = _Reply(conn, call_id, name)
        ref = k._resolve(name)
        if ref is None:
            reply.error("noproc", f"no process registered as {name!r} on {k.node}")
            return
        # Straight into the mailbox with our reply object: the reader never waits for the
        # handler, and the reply is written from the handler's thread (see _Reply).
        ref.actor_inbox.put(_Envelope(Message(conn.node, msg), reply))
