"""redis:// specifics, against real redis-server processes."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from monitors.bus import Bus, BusUnavailable, connect_bus, redis_bus
from tests.bus.conftest import Inbox, wait_for
from tests.services import require_redis

pytestmark = pytest.mark.redis

MakeBus = Callable[..., Bus]


def good_frame(rk: str, to: str | None = None) -> bytes:
    envelope: dict[str, Any] = {"v": 1, "id": "x1", "from": "raw", "rk": rk, "ts": 1.0, "body": {}}
    if to:
        envelope["to"] = to
    return json.dumps(envelope).encode()


def test_bad_frames_from_the_wire_are_dropped_and_logged(
    make_bus: MakeBus, exchange: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = require_redis()
    bus = make_bus(url, "a", max_frame=1000)
    inbox = Inbox()
    bus.subscribe("#", inbox)
    raw = redis.Redis.from_url(url)
    try:
        with caplog.at_level(logging.WARNING, logger="monitors.bus"):
            channel = f"{exchange}:bc:w.x"
            raw.publish(channel, b"\x80 not json")
            raw.publish(channel, json.dumps({"v": 2, "id": "i"}))
            raw.publish(channel, json.dumps({"v": 1, "id": "i", "from": "z", "rk": "w.x", "ts": 1}))
            raw.publish(channel, good_frame("w.x").replace(b"{}", b'{"p":"' + b"y" * 1000 + b'"}'))
            raw.publish(channel, good_frame("w.other"))  # channel and envelope disagree
            raw.lpush(f"{exchange}:direct:a", b"[]", good_frame("w.x", to="b"))
            raw.publish(f"{exchange}:wake:a", b"")
            wait_for(lambda: bus.stats()["dropped_bad"] == 7, what="7 bad frames dropped")
        for reason in (
            "not UTF-8",
            "unsupported envelope version 2",
            "missing field 'body'",
            "over the limit",
            "differs from the broker's",
            "not a JSON object",
            "addressed to 'b'",
        ):
            assert reason in caplog.text
        raw.publish(f"{exchange}:bc:w.ok", good_frame("w.ok"))  # a raw but valid frame
        bus.publish("w.alive", {})
        inbox.wait(2)
        assert sorted(inbox.routing_keys()) == ["w.alive", "w.ok"]
    finally:
        raw.close()


def test_confirmed_direct_send_waits_in_redis_until_the_node_reads_it(
    make_bus: MakeBus, exchange: str
) -> None:
    url = require_redis()
    sender = make_bus(url, "sender", direct_expires=30)
    sender.send("late", "cmd.reconfigure", {"server": "h:1"}, confirm=True)
    raw = redis.Redis.from_url(url)
    try:
        key = f"{exchange}:direct:late"
        assert raw.llen(key) == 1
        assert 0 < raw.pttl(key) <= 30_000  # bounded in time, too
    finally:
        raw.close()
    late = make_bus(url, "late")
    # Not read before anything is subscribed. A bus without patterns receives no broadcast
    # (Redis routes by glob), so nothing marks the reader's turns: the list must stay put for
    # two of its periodic drain checks after the connect.
    wait_for(lambda: late.connected, what="the late bus to connect")
    raw = redis.Redis.from_url(url)
    try:
        until = time.monotonic() + 2 * redis_bus._DRAIN_EVERY
        while time.monotonic() < until:
            assert raw.llen(f"{exchange}:direct:late") == 1
            time.sleep(0.05)
    finally:
        raw.close()
    inbox = Inbox()
    late.subscribe("cmd.*", inbox)
    (message,) = inbox.wait(1)
    assert message.body == {"server": "h:1"} and message.direct


def test_full_direct_queue_refuses_confirmed_sends(make_bus: MakeBus) -> None:
    url = require_redis()
    sender = make_bus(url, "sender", direct_max=2)
    sender.send("away", "k", {"n": 1}, confirm=True)
    sender.send("away", "k", {"n": 2}, confirm=True)
    with pytest.raises(BusUnavailable, match="queue is full"):
        sender.send("away", "k", {"n": 3}, confirm=True)
    sender.send("away", "k", {"n": 4})  # unconfirmed: dropped, counted
    wait_for(lambda: sender.stats()["dropped_unconfirmed"] == 1, what="the drop counted")
    away = make_bus(url, "away")
    inbox = Inbox()
    away.subscribe("k", inbox)
    assert [m.body["n"] for m in inbox.wait(2)] == [1, 2]  # the oldest kept, in order


@pytest.mark.slow
def test_survives_a_redis_restart(
    redis_servers: Callable[..., list[Any]], make_bus: MakeBus, exchange: str
) -> None:
    (server,) = redis_servers(1)
    options = {"reconnect_initial": 0.05, "reconnect_max": 0.5}
    a, b = make_bus(server.url, "a", **options), make_bus(server.url, "b", **options)
    states: list[bool] = []
    a.add_state_listener(states.append)
    inbox = Inbox()
    b.subscribe("w.#", inbox)
    a.publish("w.before", {})
    inbox.wait_key("w.before")

    server.stop()
    wait_for(lambda: not a.connected and not b.connected, what="both buses to see the loss")
    wait_for(lambda: states == [False], what="the listener to hear False")
    with pytest.raises(BusUnavailable, match="not confirmed"):
        a.publish("w.lost", {}, confirm=True, timeout=0.3)
    with pytest.raises(BusUnavailable):
        a.send("b", "w.lost", {}, confirm=True, timeout=0.3)
    a.publish("w.gap", {})  # unconfirmed during the gap: dropped, but counted
    assert a.stats()["dropped_unconfirmed"] >= 1
    assert a.stats()["confirm_failures"] == 2

    server.start()
    wait_for(lambda: a.connected and b.connected, 15, "both buses to reconnect")
    wait_for(lambda: states == [False, True], what="the listener to hear True")
    assert a.stats()["reconnects"] == 1 and b.stats()["reconnects"] == 1
    # Re-subscribed: broadcasts and direct sends flow again.
    a.publish("w.after", {}, confirm=True)
    a.send("b", "w.direct", {}, confirm=True)
    inbox.wait_key("w.after")
    inbox.wait_key("w.direct")
    assert "w.gap" not in inbox.routing_keys()


@pytest.mark.slow
def test_confirmed_send_rides_out_a_short_outage(
    redis_servers: Callable[..., list[Any]], make_bus: MakeBus
) -> None:
    (server,) = redis_servers(1)
    options = {"reconnect_initial": 0.05, "reconnect_max": 0.2}
    a, b = make_bus(server.url, "a", **options), make_bus(server.url, "b", **options)
    inbox = Inbox()
    b.subscribe("k", inbox)
    server.stop()
    wait_for(lambda: not a.connected, what="the loss")
    import threading

    outcome: list[object] = []

    def send() -> None:
        try:
            a.send("b", "k", {"n": 1}, confirm=True, timeout=20)
            outcome.append("ok")
        except Exception as exc:
            outcome.append(exc)

    thread = threading.Thread(target=send)
    thread.start()
    wait_for(lambda: a.stats()["pending_outgoing"] == 1 or outcome, what="the send to queue")
    server.start()
    thread.join(25)
    assert outcome == ["ok"]
    (message,) = inbox.wait(1)
    assert message.body == {"n": 1}


def test_connect_in_the_background(redis_servers: Callable[..., list[Any]], exchange: str) -> None:
    (server,) = redis_servers(1)
    server.stop()
    with pytest.raises(BusUnavailable, match=f"127.0.0.1:{server.port}"):
        connect_bus(server.url, "a", exchange=exchange, connect_timeout=0.2)
    bus = connect_bus(server.url, "a", exchange=exchange, connect_timeout=None, reconnect_max=0.2)
    try:
        assert not bus.connected
        server.start()
        assert bus.wait_connected(10)
        assert bus.stats()["reconnects"] == 0  # the first connection is not a reconnect
    finally:
        bus.close()


def test_redis_routes_broadcasts_by_pattern_at_the_broker(make_bus: MakeBus, exchange: str) -> None:
    """A bus PSUBSCRIBEs one glob per pattern: Redis delivers a heartbeat only to the nodes
    that listen for heartbeats (issue 26: N executors that do not, cost the broker nothing).
    Overlapping patterns (worker.# and worker.revoke) deliver each message once."""
    url = require_redis()
    core, client, sender = (make_bus(url, n) for n in ("core", "client", "sender"))
    core_in, client_in = Inbox(), Inbox()
    core.subscribe("worker.#", core_in)
    client.subscribe("worker.revoke", client_in)
    client.subscribe("worker.#.result", client_in)
    raw = redis.Redis.from_url(url)
    try:
        channels = {c.decode() for c in raw.pubsub_channels(f"{exchange}:bc:*")}
        assert not channels  # broadcasts go to pattern subscriptions only
        numpat = raw.pubsub_numpat()
        assert numpat >= 3
    finally:
        raw.close()
    for key in ("worker.heartbeat", "worker.revoke", "worker.elect.result", "mingle.hello"):
        sender.publish(key, {"k": key}, confirm=True)
    got_core = [m.routing_key for m in core_in.wait(3)]
    got_client = [m.routing_key for m in client_in.wait(2)]
    assert got_core == ["worker.heartbeat", "worker.revoke", "worker.elect.result"]
    assert got_client == ["worker.revoke", "worker.elect.result"]
    # what Redis handed over: the client's connection got two messages, not four
    assert client.stats()["received"] == 2
    sender.publish("worker.revoke", {"k": "again"}, confirm=True)
    assert client_in.wait(3)[-1].body == {"k": "again"}
    assert client.stats()["received"] == 3  # once, though both of its globs match it


def test_redis_unsubscribe_drops_the_glob(make_bus: MakeBus) -> None:
    """Cancelling the last subscription of a pattern PUNSUBSCRIBEs its glob (soon after: the
    reader thread owns the connection), so Redis stops handing those messages over."""
    url = require_redis()
    node, sender = make_bus(url, "node"), make_bus(url, "sender")
    beats, revokes = Inbox(), Inbox()
    sub = node.subscribe("worker.heartbeat", beats)
    keep = node.subscribe("worker.revoke", revokes)
    sender.publish("worker.heartbeat", {"n": 0}, confirm=True)
    beats.wait(1)
    sub.cancel()
    # one sender's messages arrive in order: once a revoke sent after a heartbeat arrives and
    # the counter moved by one, Redis no longer routed that heartbeat to us
    deadline = time.monotonic() + 10
    for n in range(1, 1000):
        before = node.stats()["received"]
        sender.publish("worker.heartbeat", {"n": n}, confirm=True)
        sender.publish("worker.revoke", {"n": n}, confirm=True)
        revokes.wait(n)
        if node.stats()["received"] == before + 1:
            break
        assert time.monotonic() < deadline, "heartbeats still routed to us 10 s after cancel"
    assert len(beats.routing_keys()) == 1  # the handler got none after cancel
    keep.cancel()
