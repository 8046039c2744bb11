"""Helpers for the dist tests: polling waits, a recording Probe process, an Echo worker.

Waits poll with a deadline, and the deadline only proves that nothing hung.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from monitors.dist import Message, NetKernel
from supervisors import Process
from tests.waiting import TIMEOUT, wait_until  # noqa: F401 - wait_until is re-exported

COOKIE = b"test-cookie"


def mesh(*kernels: NetKernel) -> None:
    """Give every kernel the address of every other."""
    for kernel in kernels:
        for other in kernels:
            if other is not kernel:
                kernel.set_address(other.node, other.address)


class _ProbeProcess(Process):
    def __init__(self, box: list, cond: threading.Condition, trap: bool) -> None:
        super().__init__()
        self._box = box
        self._cond = cond
        self.trap_exit = trap

    def on_receive(self, message: Any) -> Any:
        with self._cond:
            self._box.append(message)
            self._cond.notify_all()

    def run(self, fn: Callable[..., Any]) -> Any:
        return fn(self)


class Probe:
    """A test's own process: records every message; runs code in its own thread so the
    test can link and monitor from inside a process."""

    def __init__(self, trap_exit: bool = True) -> None:
        self._cond = threading.Condition()
        self._box: list[Any] = []
        self.ref = _ProbeProcess.start(self._box, self._cond, trap_exit)

    def run(self, fn: Callable[[Process], Any]) -> Any:
        return self.ref.proxy().run(fn).get(timeout=TIMEOUT)

    def link(self, ref: Any) -> None:
        self.run(lambda p: p.link(ref))

    def unlink(self, ref: Any) -> None:
        self.run(lambda p: p.unlink(ref))

    def monitor(self, ref: Any) -> int:
        return self.run(lambda p: p.monitor(ref))

    def demonitor(self, mid: int) -> bool:
        return self.run(lambda p: p.demonitor(mid))

    def messages(self, kind: type | None = None) -> list[Any]:
        with self._cond:
            return [m for m in self._box if kind is None or isinstance(m, kind)]

    def wait_for(
        self, predicate: Callable[[Any], bool], what: str, timeout: float = TIMEOUT
    ) -> Any:
        """Wait for a message matching `predicate` and return it."""
        with self._cond:
            found: list[Any] = []

            def match() -> bool:
                found[:] = [m for m in self._box if predicate(m)]
                return bool(found)

            if not self._cond.wait_for(match, timeout):
                raise AssertionError(
                    f"timed out after {timeout} s waiting for {what}; got {self._box}"
                )
            return found[0]

    def wait_type(self, kind: type, what: str = "", timeout: float = TIMEOUT) -> Any:
        return self.wait_for(lambda m: isinstance(m, kind), what or kind.__name__, timeout)


class Echo(Process):
    """A registered worker. Message ops: {"op": "echo"} returns the message and the sender
    node; "raise" raises ValueError(text); "exit" exits with reason; "sleep" sleeps s seconds;
    "bad_reply" returns something that is not JSON. Anything else is recorded."""

    def __init__(self, trap_exit: bool = False, probe: Probe | None = None) -> None:
        super().__init__()
        self.trap_exit = trap_exit
        self.probe = probe

    def on_receive(self, message: Any) -> Any:
        if self.probe is not None:
            self.probe.ref.tell(message)
        if not isinstance(message, Message):
            return None
        op = message.msg.get("op")
        if op == "echo":
            return {"node": message.node, "msg": message.msg}
        if op == "raise":
            raise ValueError(message.msg.get("text", "boom"))
        if op == "exit":
            reason = message.msg["reason"]
            self.exit(tuple(reason) if isinstance(reason, list) else reason)
        if op == "sleep":
            time.sleep(message.msg["s"])
            return "slept"
        if op == "bad_reply":
            return {"x": object()}
        return None


def fake_peer(kernel: NetKernel, node: str, creation: int = 7) -> Any:
    """A raw socket that does the handshake as `node` (with the pure core) and then does
    only what the test makes it do: it never ticks, and reads only when told to."""
    import socket

    from monitors.dist.handshake import Connector, Established

    host, port = str(kernel.address).rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    core = Connector(COOKIE, node, creation, kernel.node, nonce=b"\x05" * 32)
    core.start()
    while True:
        step = core.feed(sock.recv(4096))
        if step.out:
            sock.sendall(step.out)
        if step.verdict is not None:
            assert isinstance(step.verdict, Established), step.verdict
            return sock
