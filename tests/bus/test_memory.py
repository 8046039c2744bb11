"""memory:// specifics: namespaces, unroutable sends, bounded inboxes, bad frames."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import pytest

from monitors.bus import Bus, BusMessage, BusUnroutable, connect_bus
from tests.bus.conftest import Inbox, wait_for

MakeBus = Callable[..., Bus]


def test_named_memory_brokers_are_separate(make_bus: MakeBus) -> None:
    a1, b1 = make_bus("memory://one", "a"), make_bus("memory://one", "b")
    b2 = make_bus("memory://two", "b")
    got1, got2 = Inbox(), Inbox()
    b1.subscribe("#", got1)
    b2.subscribe("#", got2)
    a1.publish("x", {})
    a1.send("b", "y", {})
    got1.wait(2)
    a2 = make_bus("memory://two", "a")
    a2.publish("marker", {})
    got2.wait_key("marker")
    assert got2.routing_keys() == ["marker"]


def test_node_names_are_unique_per_namespace(make_bus: MakeBus) -> None:
    make_bus("memory://dup", "a")
    with pytest.raises(ValueError, match="already has a bus"):
        connect_bus("memory://dup", "a", exchange=make_bus("memory://dup", "b").exchange)
    make_bus("memory://dup", "a", exchange="another")  # another namespace: fine


def test_memory_bus_is_connected_at_once(make_bus: MakeBus) -> None:
    bus = make_bus("memory://", "a", connect_timeout=None)
    assert bus.connected


def test_direct_send_to_unknown_node(make_bus: MakeBus) -> None:
    bus = make_bus("memory://", "a")
    with pytest.raises(BusUnroutable, match="ghost"):
        bus.send("ghost", "k", {}, confirm=True)
    bus.send("ghost", "k", {})
    stats = bus.stats()
    assert stats["returned"] == 1 and stats["confirm_failures"] == 1 and stats["sent"] == 0


def test_full_inbox_drops_and_counts(make_bus: MakeBus, caplog: pytest.LogCaptureFixture) -> None:
    sender, receiver = make_bus("memory://", "s"), make_bus("memory://", "r", max_incoming=5)
    entered, release = threading.Event(), threading.Event()
    seen = Inbox()

    def slow(message: BusMessage) -> None:
        seen(message)
        entered.set()
        release.wait(10)

    receiver.subscribe("#", slow)
    sender.publish("first", {})
    assert entered.wait(5)  # the dispatcher is now stuck in the handler, inbox empty
    with caplog.at_level(logging.WARNING, logger="monitors.bus"):
        for i in range(20):
            sender.publish(f"m{i}", {})
    assert receiver.stats()["dropped_incoming_full"] == 15
    assert receiver.stats()["pending_incoming"] == 5
    assert "inbox full" in caplog.text
    release.set()
    seen.wait(6)
    assert seen.routing_keys() == ["first", "m0", "m1", "m2", "m3", "m4"]


def test_bad_frames_are_dropped_and_logged(
    make_bus: MakeBus, caplog: pytest.LogCaptureFixture
) -> None:
    bus = make_bus("memory://", "a", max_frame=500)
    inbox = Inbox()
    bus.subscribe("#", inbox)
    bad = [
        (b"not json", False),
        (b'{"v":9}', False),
        (b"x" * 600, False),
        (b'{"v":1,"id":"i","from":"b","rk":"k","ts":1,"body":{},"to":"someone"}', True),
    ]
    with caplog.at_level(logging.WARNING, logger="monitors.bus"):
        for data, direct in bad:
            assert bus._receive(data, direct=direct) is False  # memory's "wire" entry point
    assert bus.stats()["dropped_bad"] == 4
    for reason in ("not JSON", "version 9", "over the limit", "addressed to 'someone'"):
        assert reason in caplog.text
    bus.publish("still.alive", {})
    inbox.wait_key("still.alive")


def test_state_listeners_and_errors_in_them(
    make_bus: MakeBus, caplog: pytest.LogCaptureFixture
) -> None:
    bus = make_bus("memory://", "a")
    heard: list[bool] = []

    def broken(connected: bool) -> None:
        raise RuntimeError("listener boom")

    bus.add_state_listener(broken)
    bus.add_state_listener(heard.append)
    with caplog.at_level(logging.ERROR, logger="monitors.bus"):
        bus.last_error = "test"
        bus._set_connected(False)  # memory never loses its "broker"; drive the hook directly
        bus._set_connected(True)
        wait_for(lambda: heard == [False, True], what="both state changes")
    assert "listener boom" in caplog.text
    assert bus.stats()["reconnects"] == 1
    bus.remove_state_listener(heard.append)
