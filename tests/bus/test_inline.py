"""subscribe(..., inline=True) and add_state_listener(..., inline=True): handlers that only
hand a message on, called where the frame arrives instead of on the bus's dispatcher thread.

Against memory://, a real Redis and a real RabbitMQ: an inline handler gets the same messages
as a queued one, in order, counted in the same stats, never on the dispatcher thread; a
cancelled one gets nothing more; and an inline state listener hears of the connection before
any message that follows it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from monitors.bus import Bus
from tests.bus.conftest import BACKENDS, Inbox, broker_url, wait_for

by_backend = pytest.mark.parametrize("backend", BACKENDS)

MakeBus = Callable[..., Bus]


@by_backend
def test_inline_and_queued_handlers_get_the_same_messages(backend: str, make_bus: MakeBus) -> None:
    url = broker_url(backend)
    sender, receiver = make_bus(url, "s"), make_bus(url, "r")
    inline, queued = Inbox(), Inbox()
    receiver.subscribe("worker.#", inline, inline=True)
    receiver.subscribe("worker.#", queued)
    for i in range(5):
        sender.publish("worker.heartbeat", {"i": i})
    sender.send("r", "worker.direct", {"i": 5})
    queued.wait(6)
    inline.wait(6)
    assert [m.body for m in inline.messages] == [m.body for m in queued.messages]
    assert not any("dispatch" in name for name in inline.threads)
    assert all("dispatch" in name for name in queued.threads)
    stats = receiver.stats()
    assert stats["received"] == 6 and stats["delivered"] == 12 and stats["unrouted"] == 0


@by_backend
def test_inline_only_counts_and_skips_the_dispatcher(backend: str, make_bus: MakeBus) -> None:
    url = broker_url(backend)
    sender, receiver = make_bus(url, "s"), make_bus(url, "r")
    inline = Inbox()
    sub = receiver.subscribe("worker.#", inline, inline=True)
    sender.publish("worker.heartbeat", {})
    sender.publish("other.key", {})  # matched by no pattern we have: unrouted, if it arrives
    sender.publish("worker.marker", {})
    inline.wait_key("worker.marker")
    assert inline.routing_keys() == ["worker.heartbeat", "worker.marker"]
    wait_for(lambda: receiver.stats()["delivered"] == 2, 5, "the counters")
    assert receiver.stats()["pending_incoming"] == 0
    sub.cancel()
    marker = Inbox()
    receiver.subscribe("end", marker)
    sender.publish("worker.after_cancel", {})
    sender.publish("end", {})
    marker.wait(1)
    assert inline.routing_keys() == ["worker.heartbeat", "worker.marker"]


@by_backend
def test_an_inline_handler_that_raises_is_counted_and_the_bus_goes_on(
    backend: str, make_bus: MakeBus
) -> None:
    url = broker_url(backend)
    sender, receiver = make_bus(url, "s"), make_bus(url, "r")
    got = Inbox()

    def handler(message: Any) -> None:
        got(message)
        if message.body.get("boom"):
            raise RuntimeError("an inline handler's bug")

    receiver.subscribe("worker.#", handler, inline=True)
    sender.publish("worker.a", {"boom": True})
    sender.publish("worker.b", {})
    got.wait(2)
    assert got.routing_keys() == ["worker.a", "worker.b"]
    assert receiver.stats()["handler_errors"] == 1


@pytest.mark.slow
@pytest.mark.redis
def test_an_inline_state_listener_hears_a_reconnect_before_the_messages_after_it(
    redis_servers: Callable[..., list[Any]], make_bus: MakeBus
) -> None:
    """Redis restarted: the inline listener hears False then True on the bus's reader thread,
    and True before the first message read on the new connection."""
    (server,) = redis_servers(1)
    options = {"reconnect_initial": 0.05, "reconnect_max": 0.5}
    sender, receiver = make_bus(server.url, "s", **options), make_bus(server.url, "r", **options)
    events: list[tuple[str, Any, str]] = []
    lock = threading.Lock()

    def listener(connected: bool) -> None:
        with lock:
            events.append(("state", connected, threading.current_thread().name))

    def handler(message: Any) -> None:
        with lock:
            events.append(("message", message.routing_key, threading.current_thread().name))

    receiver.add_state_listener(listener, inline=True)
    receiver.subscribe("w.#", handler, inline=True)
    sender.publish("w.before", {}, confirm=True)
    wait_for(lambda: len(events) == 1, what="the first message")
    server.stop()
    wait_for(lambda: not receiver.connected, what="the receiver to see the loss")
    server.start()
    wait_for(lambda: sender.connected and receiver.connected, 15, "both to reconnect")
    sender.publish("w.after", {}, confirm=True)
    wait_for(lambda: len(events) == 4, what="the message after the reconnect")
    assert [e[:2] for e in events] == [
        ("message", "w.before"),
        ("state", False),
        ("state", True),
        ("message", "w.after"),
    ]
    assert all("reader" in e[2] for e in events)
