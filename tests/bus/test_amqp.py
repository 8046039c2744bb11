"""amqp:// specifics, against a real RabbitMQ (and the fault proxy for losing it)."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

import pika
import pytest

from monitors.bus import Bus, BusUnavailable, BusUnroutable, connect_bus
from tests.bus.conftest import Inbox, wait_for
from tests.services import require_amqp, services_required

pytestmark = pytest.mark.amqp

MakeBus = Callable[..., Bus]


def raw_channel(url: str) -> tuple[Any, Any]:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    return conn, conn.channel()


def list_queues() -> dict[str, dict[str, Any]]:
    """The broker's own view of its queues (name -> arguments, exclusive, auto_delete)."""
    if shutil.which("rabbitmqctl") is None:
        message = "rabbitmqctl is needed to read queue arguments"
        if services_required():
            pytest.fail(message)
        pytest.skip(message)
    columns = ["name", "arguments", "exclusive", "auto_delete"]
    out = subprocess.run(
        ["rabbitmqctl", "list_queues", *columns, "--formatter", "json", "-q"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    queues = {}
    for row in json.loads(out):
        row["arguments"] = {name: value for name, _type, value in row["arguments"]}
        queues[row["name"]] = row
    return queues


@pytest.mark.slow  # rabbitmqctl takes most of a second per call
def test_queue_arguments_ttl_and_lifetimes(make_bus: MakeBus, exchange: str) -> None:
    url = require_amqp()
    # The direct queue has no consumer here, so the broker deletes it `direct_expires` after
    # the declare: long enough that rabbitmqctl's start (seconds on a loaded machine) is not
    # a race. With 7 s it failed under load, the queue gone before it was listed.
    bus = make_bus(
        url, "n1", heartbeat_interval=0.75, max_incoming=300, direct_expires=120, direct_max=50
    )
    assert bus.events_queue.startswith(f"{exchange}.events.n1.")
    queues = list_queues()
    events = queues[bus.events_queue]
    # Celery's queue_ttl: stale heartbeats are dropped by the broker.
    assert events["arguments"] == {"x-message-ttl": 750, "x-max-length": 300}
    assert events["exclusive"] is True and events["auto_delete"] is True
    direct = queues[f"{exchange}.direct.n1"]
    assert direct["arguments"] == {
        "x-expires": 120000,
        "x-max-length": 50,
        "x-overflow": "reject-publish",
    }
    assert direct["exclusive"] is False and direct["auto_delete"] is False
    bus.close()
    queues = list_queues()
    assert bus.events_queue not in queues  # went with the connection
    assert f"{exchange}.direct.n1" in queues  # stays until x-expires


def test_bad_frames_from_the_wire_are_dropped_and_logged(
    make_bus: MakeBus, exchange: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = require_amqp()
    bus = make_bus(url, "a", max_frame=1000)
    inbox = Inbox()
    bus.subscribe("w.#", inbox)
    conn, channel = raw_channel(url)
    try:
        with caplog.at_level(logging.WARNING, logger="monitors.bus"):
            channel.basic_publish(exchange, "w.x", b"not json at all")
            channel.basic_publish(exchange, "w.x", json.dumps({"v": 99}).encode())
            channel.basic_publish(exchange, "w.x", b"{" + b" " * 2000 + b"}")
            channel.basic_publish("", f"{exchange}.direct.a", b'"a string"')
            wait_for(lambda: bus.stats()["dropped_bad"] == 4, what="4 bad frames dropped")
        for reason in ("not JSON", "version 99", "over the limit", "not a JSON object"):
            assert reason in caplog.text
    finally:
        conn.close()
    bus.publish("w.alive", {})
    inbox.wait_key("w.alive")


def test_direct_send_to_a_node_without_a_queue(make_bus: MakeBus) -> None:
    bus = make_bus(require_amqp(), "a")
    with pytest.raises(BusUnroutable, match="not running"):
        bus.send("ghost", "k", {}, confirm=True)
    bus.send("ghost", "k", {})  # unconfirmed: the broker returns it; counted
    wait_for(lambda: bus.stats()["returned"] == 2, what="both returns counted")
    assert bus.stats()["confirm_failures"] == 1


def test_direct_queue_outlives_its_node_and_refuses_when_full(make_bus: MakeBus) -> None:
    url = require_amqp()
    away = make_bus(url, "away", direct_max=2, direct_expires=30)
    away.close()
    sender = make_bus(url, "sender")
    sender.send("away", "cmd", {"n": 1}, confirm=True)
    sender.send("away", "cmd", {"n": 2}, confirm=True)
    with pytest.raises(BusUnavailable, match="refused by the broker"):
        sender.send("away", "cmd", {"n": 3}, confirm=True)
    back = make_bus(url, "away", direct_max=2, direct_expires=30)
    conn, channel = raw_channel(url)
    try:  # queued frames wait for a subscription: nobody consumes them yet
        declared = channel.queue_declare(back.direct_queue_name("away"), passive=True)
        assert declared.method.consumer_count == 0 and declared.method.message_count == 2
    finally:
        conn.close()
    inbox = Inbox()
    back.subscribe("cmd", inbox)
    assert [m.body["n"] for m in inbox.wait(2)] == [1, 2]


def test_queue_options_that_disagree_with_the_broker_fail_clearly(make_bus: MakeBus) -> None:
    url = require_amqp()
    make_bus(url, "n", direct_max=5)
    with pytest.raises(BusUnavailable, match="PRECONDITION_FAILED"):
        make_bus(url, "n", direct_max=6, connect_timeout=1)


@pytest.mark.slow
def test_survives_losing_the_broker_through_a_proxy(
    faultproxy: Any, make_bus: MakeBus, exchange: str
) -> None:
    url = require_amqp()
    faultproxy.create_proxy(f"amqp-{exchange}", "127.0.0.1:0", "127.0.0.1:5672")
    listen = faultproxy.request("GET", f"/proxies/amqp-{exchange}")["listen"]
    proxied = f"amqp://guest:guest@{listen}/%2F"
    options = {"reconnect_initial": 0.05, "reconnect_max": 0.3}
    a = make_bus(proxied, "a", **options)  # behind the proxy
    b = make_bus(url, "b", **options)  # straight to RabbitMQ
    states: list[bool] = []
    a.add_state_listener(states.append)
    got_a, got_b = Inbox(), Inbox()
    a.subscribe("w.#", got_a)
    b.subscribe("w.#", got_b)
    b.publish("w.before", {})
    got_a.wait_key("w.before")

    faultproxy.set_enabled(f"amqp-{exchange}", False)  # every connection through it dropped
    wait_for(lambda: not a.connected, what="the bus to see the cut")
    wait_for(lambda: states == [False], what="the listener to hear False")
    with pytest.raises(BusUnavailable, match="not confirmed"):
        a.publish("w.lost", {}, confirm=True, timeout=0.3)
    with pytest.raises(BusUnavailable):
        a.send("b", "w.lost", {}, confirm=True, timeout=0.3)
    a.publish("w.gap", {})
    assert a.stats()["dropped_unconfirmed"] >= 1
    assert b.connected

    faultproxy.set_enabled(f"amqp-{exchange}", True)
    wait_for(lambda: a.connected, 20, "the bus to reconnect")
    wait_for(lambda: states == [False, True], what="the listener to hear True")
    assert a.stats()["reconnects"] == 1
    # Re-declared and re-bound: both directions work again.
    b.publish("w.after", {}, confirm=True)
    got_a.wait_key("w.after")
    b.send("a", "w.direct", {}, confirm=True)
    got_a.wait_key("w.direct")
    a.send("b", "w.back", {}, confirm=True)
    got_b.wait_key("w.back")
    assert "w.gap" not in got_b.routing_keys() and "w.lost" not in got_b.routing_keys()


def test_bad_credentials_fail_clearly(exchange: str) -> None:
    require_amqp()
    with pytest.raises(BusUnavailable) as info:
        connect_bus(
            "amqp://guest:wrong@127.0.0.1:5672/%2F", "a", exchange=exchange, connect_timeout=1
        )
    assert "credentials" in str(info.value) and "wrong" not in str(info.value)
