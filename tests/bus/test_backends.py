"""Behaviour every backend shares, run against memory://, a real Redis and a real RabbitMQ.

Ordering trick used for "X is NOT delivered": messages from one sender reach one receiver in
order (one queue / one pub/sub connection / synchronous memory), and the dispatcher runs
handlers in arrival order. So once a marker published after X has been handled, X would have
been handled too if it were coming.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest

from monitors.bus import Bus, BusError, BusMessage, connect_bus
from tests.bus.conftest import BACKENDS, Inbox, broker_sockets, broker_url, bus_threads, wait_for

pytestmark = pytest.mark.parametrize("backend", BACKENDS)

MakeBus = Callable[..., Bus]


def test_broadcast_reaches_every_node_including_the_sender(backend: str, make_bus: MakeBus) -> None:
    url = broker_url(backend)
    buses = [make_bus(url, f"n{i}@host") for i in range(3)]
    inboxes = [Inbox() for _ in buses]
    for bus, inbox in zip(buses, inboxes, strict=True):
        bus.subscribe("worker.#", inbox)
    buses[0].publish("worker.heartbeat", {"clock": 7})
    for inbox in inboxes:
        (message,) = inbox.wait(1)
        assert message.routing_key == "worker.heartbeat"
        assert message.body == {"clock": 7} and message.sender == "n0@host"
        assert message.direct is False and message.sent_at > 0 and message.id
    assert buses[0].stats()["published"] == 1
    assert all(bus.stats()["delivered"] == 1 for bus in buses)


def test_direct_reaches_only_its_node(backend: str, make_bus: MakeBus) -> None:
    url = broker_url(backend)
    a, b, c = (make_bus(url, n) for n in ("a", "b", "c"))
    got_b, got_c = Inbox(), Inbox()
    b.subscribe("rcs.*", got_b)
    c.subscribe("rcs.*", got_c)
    a.send("b", "rcs.ping", {"token": 1})
    (message,) = got_b.wait(1)
    assert message.direct is True and message.body == {"token": 1} and message.sender == "a"
    a.send("c", "rcs.marker", {})
    got_c.wait_key("rcs.marker")
    assert got_c.routing_keys() == ["rcs.marker"]
    assert a.stats()["sent"] == 2


def test_patterns_select_by_topic_rules(backend: str, make_bus: MakeBus) -> None:
    url = broker_url(backend)
    sender, receiver = make_bus(url, "s"), make_bus(url, "r")
    star, hash_, ack, end = Inbox(), Inbox(), Inbox(), Inbox()
    receiver.subscribe("worker.*", star)
    receiver.subscribe("worker.#", hash_)
    receiver.subscribe("*.elect.ack", ack)
    receiver.subscribe("end", end)
    for key in ("worker", "worker.heartbeat", "worker.elect.ack", "task.elect.ack", "other.x"):
        sender.publish(key, {})
    sender.publish("end", {})
    end.wait(1)
    assert star.routing_keys() == ["worker.heartbeat"]
    assert hash_.routing_keys() == ["worker", "worker.heartbeat", "worker.elect.ack"]
    assert ack.routing_keys() == ["worker.elect.ack", "task.elect.ack"]


def test_confirmed_publish_and_send(backend: str, make_bus: MakeBus) -> None:
    url = broker_url(backend)
    a, b = make_bus(url, "a"), make_bus(url, "b")
    inbox = Inbox()
    b.subscribe("#", inbox)
    a.publish("cfg.reconfigure", {"server": "h:1"}, confirm=True, timeout=5)
    a.send("b", "cfg.invalidate", {"token": 2}, confirm=True, timeout=5)
    messages = inbox.wait(2)
    assert sorted(m.routing_key for m in messages) == ["cfg.invalidate", "cfg.reconfigure"]
    assert a.stats()["confirm_failures"] == 0


def test_echo_false_hides_own_broadcasts(backend: str, make_bus: MakeBus) -> None:
    url = broker_url(backend)
    quiet, other = make_bus(url, "quiet", echo=False), make_bus(url, "other")
    mine, theirs = Inbox(), Inbox()
    quiet.subscribe("g.#", mine)
    other.subscribe("g.#", theirs)
    quiet.publish("g.own", {})
    theirs.wait_key("g.own")  # it was published and routed...
    other.publish("g.marker", {})
    mine.wait_key("g.marker")
    assert mine.routing_keys() == ["g.marker"]  # ...but not delivered to its sender


def test_exchanges_are_isolated(backend: str, make_bus: MakeBus, exchange: str) -> None:
    url = broker_url(backend)
    x1, x2 = make_bus(url, "a"), make_bus(url, "b")
    other = exchange + "-other"
    y1, y2 = make_bus(url, "a", exchange=other), make_bus(url, "b", exchange=other)
    got_x, got_y = Inbox(), Inbox()
    x2.subscribe("#", got_x)
    y2.subscribe("#", got_y)
    x1.publish("k.x", {})
    x1.send("b", "k.direct", {})
    got_x.wait(2)
    y1.publish("k.marker", {})
    got_y.wait_key("k.marker")
    assert got_y.routing_keys() == ["k.marker"]


def test_handler_errors_are_logged_and_the_bus_goes_on(
    backend: str, make_bus: MakeBus, caplog: pytest.LogCaptureFixture
) -> None:
    url = broker_url(backend)
    bus = make_bus(url, "a")
    inbox = Inbox()

    def broken(message: BusMessage) -> None:
        raise RuntimeError(f"boom on {message.routing_key}")

    bus.subscribe("e.#", broken)
    bus.subscribe("e.#", inbox)
    with caplog.at_level(logging.ERROR, logger="monitors.bus"):
        bus.publish("e.one", {})
        bus.publish("e.two", {})
        inbox.wait(2)
    wait_for(lambda: bus.stats()["handler_errors"] == 2, what="both errors counted")
    assert "boom on e.one" in caplog.text and "the bus goes on" in caplog.text


def test_handlers_run_on_the_bus_thread_and_may_publish_with_confirm(
    backend: str, make_bus: MakeBus
) -> None:
    url = broker_url(backend)
    a, b = make_bus(url, "a"), make_bus(url, "b")
    replies = Inbox()

    def ping(message: BusMessage) -> None:
        # A reply from inside a handler, confirmed: must not deadlock with the I/O thread.
        b.send(message.sender, "rpc.pong", {"n": message.body["n"]}, confirm=True)

    b.subscribe("rpc.ping", ping)
    a.subscribe("rpc.pong", replies)
    a.publish("rpc.ping", {"n": 1})
    (reply,) = replies.wait(1)
    assert reply.body == {"n": 1} and reply.direct
    assert threading.current_thread().name not in replies.threads
    assert all(name.startswith("rabbitry-bus") for name in replies.threads)


def test_cancel_stops_delivery(backend: str, make_bus: MakeBus) -> None:
    url = broker_url(backend)
    bus = make_bus(url, "a")
    first, marker = Inbox(), Inbox()
    sub = bus.subscribe("c.*", first)
    bus.subscribe("m", marker)
    bus.publish("c.one", {})
    first.wait(1)
    sub.cancel()
    sub.cancel()  # idempotent
    bus.publish("c.two", {})
    bus.publish("m", {})
    marker.wait(1)
    assert first.routing_keys() == ["c.one"] and not sub.active
    # A new subscription to the same pattern works again (AMQP: bound again).
    again = Inbox()
    bus.subscribe("c.*", again)
    bus.publish("c.three", {})
    again.wait_key("c.three")


def test_oversized_and_bad_publishes_raise_before_sending(backend: str, make_bus: MakeBus) -> None:
    bus = make_bus(broker_url(backend), "a", max_frame=2000)
    with pytest.raises(ValueError, match="frame limit of 2000"):
        bus.publish("big", {"x": "y" * 3000})
    with pytest.raises(ValueError, match="frame limit"):
        bus.send("a", "big", {"x": "y" * 3000}, confirm=True)
    with pytest.raises(TypeError):
        bus.publish("k", {"x": {1, 2}})
    with pytest.raises(ValueError):
        bus.publish("a.*", {})
    stats = bus.stats()
    assert stats["published"] == stats["sent"] == 0


def test_close_leaks_no_threads_or_connections(backend: str, exchange: str, cleanup: Any) -> None:
    url = broker_url(backend)
    if backend != "memory":
        cleanup[backend].add(url)
        cleanup["queues"].add(f"{exchange}.direct.leaky")
    port = {"redis": 6379, "amqp": 5672}.get(backend)
    before = broker_sockets(port) if port else 0
    with connect_bus(url, "leaky", exchange=exchange) as bus:
        bus.subscribe("#", Inbox())
        bus.publish("x", {}, confirm=True)
        assert bus_threads("leaky")
        if port:
            assert broker_sockets(port) > before
    assert bus.closed and not bus.connected
    bus.close()  # idempotent
    wait_for(lambda: not bus_threads("leaky"), 5, "bus threads to end")
    if port:
        wait_for(lambda: broker_sockets(port) == before, 5, "broker connections to close")
    with pytest.raises(BusError, match="closed"):
        bus.publish("x", {})
    with pytest.raises(BusError, match="closed"):
        bus.subscribe("x", Inbox())


def test_close_from_a_handler(backend: str, exchange: str, cleanup: Any) -> None:
    url = broker_url(backend)
    if backend != "memory":
        cleanup[backend].add(url)
        cleanup["queues"].add(f"{exchange}.direct.selfclose")
    bus = connect_bus(url, "selfclose", exchange=exchange)
    bus.subscribe("stop", lambda message: bus.close())
    bus.publish("stop", {})
    wait_for(lambda: bus.closed, what="the bus to close itself")
    wait_for(lambda: not bus_threads("selfclose"), 5, "bus threads to end")
