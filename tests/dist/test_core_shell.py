"""monitors/core_shell.py on real kernels: the incoming half every shell around a core shares
(registering, NodeUp/NodeDown, the nodeups of peers connected before it subscribed, timers,
a shell's own routes, and what no route takes)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

import pytest

from monitors.core_shell import NodeCoreShell
from monitors.effects import Send, SetTimer
from monitors.shell_effects import ShellEffects
from tests.dist.helpers import Probe, mesh, wait_until

pytestmark = pytest.mark.timeout(60)
log = logging.getLogger("tests.core_shell")


class Recorder:
    """A core that writes down what it is fed (a NodeCore: mypy checks it through the shell)."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self._lock = threading.Lock()

    def _note(self, *event: Any) -> None:
        with self._lock:
            self.events.append(event)

    def start(self, now: float) -> list[Any]:
        self._note("start")
        return [SetTimer("tick", 0.02, data=3)]

    def timer(self, key: str, now: float, data: Any = None) -> list[Any]:
        self._note("timer", key, data)
        return []

    def receive(self, sender: str, msg: Any, now: float) -> list[Any]:
        self._note("receive", sender, msg)
        if msg.get("echo"):
            return [Send(sender, "inbox", {"echoed": msg["echo"]})]
        return []

    def nodeup(self, node: str, creation: int, now: float) -> list[Any]:
        self._note("nodeup", node, isinstance(creation, int))
        return []

    def nodedown(self, node: str, reason: str, now: float) -> list[Any]:
        self._note("nodedown", node)
        return []


class RecordingShell(NodeCoreShell[Recorder]):
    def __init__(self, kernel: Any) -> None:
        super().__init__()
        self.kernel = kernel
        self.texts: list[str] = []
        self.route(str, self._on_text)

    def on_start(self) -> None:
        self.core = Recorder()
        self._effects = ShellEffects(self, self._timers, log, "recorder", kernel=self.kernel)
        self.attach("recorder")
        self._perform(self.core.start(self.now()))
        self.replay_nodeups()

    def on_stop(self) -> None:
        self.detach("recorder")

    def _on_text(self, message: str, now: float) -> str:
        self.texts.append(message)
        return message.upper()

    def _perform(self, effects: Iterable[Any]) -> None:
        for effect in effects:
            assert self._common_effects().perform(effect), effect

    def events(self) -> list[tuple[Any, ...]]:
        assert self.core is not None
        with self.core._lock:
            return list(self.core.events)


def test_the_incoming_half_feeds_the_core(make_kernel) -> None:
    a, b = make_kernel("a"), make_kernel("b")
    mesh(a, b)
    assert a.connect(b.node)  # connected before the shell subscribes: replayed as a nodeup
    ref = RecordingShell.start(a)
    shell = ref.proxy()
    wait_until(lambda: ("timer", "tick", 3) in shell.events().get(), "the core's timer")
    assert shell.events().get()[:2] == [("start",), ("nodeup", b.node, True)]

    inbox = Probe()
    b.register("inbox", inbox.ref)
    b.send(a.node, "recorder", {"echo": "hi"})  # to the registered name, through dist
    got = inbox.wait_for(lambda m: getattr(m, "msg", None) == {"echoed": "hi"}, "the echo")
    assert got.node == a.node
    assert ("receive", b.node, {"echo": "hi"}) in shell.events().get()

    assert ref.ask("hello") == "HELLO"  # a shell's own route answers a call
    assert shell.texts.get() == ["hello"]

    b.disconnect(a.node)
    wait_until(lambda: ("nodedown", b.node) in shell.events().get(), "the nodedown")
    ref.stop()
    assert "recorder" not in a.registered()
