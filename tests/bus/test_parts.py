"""URLs, options, backoff and the outbox: the pure parts under the backends."""

from __future__ import annotations

import random
import threading

import pytest

from monitors.bus import BusOptions, BusUnavailable, connect_bus
from monitors.bus.backoff import Backoff
from monitors.bus.outbox import BIND, BROADCAST, Outbox, Request
from monitors.bus.urls import parse_bus_url
from supervisors.process import SEND_AFTER_THREAD


def test_urls() -> None:
    assert parse_bus_url("memory://").name == ""
    assert parse_bus_url("memory://cluster1").name == "cluster1"
    redis = parse_bus_url("redis://127.0.0.1:6380/2")
    assert (redis.host, redis.port, redis.db, redis.password) == ("127.0.0.1", 6380, 2, None)
    assert parse_bus_url("redis://:s3cret@h").password == "s3cret"
    assert parse_bus_url("redis://h").port == 6379
    amqp = parse_bus_url("amqp://guest:guest@127.0.0.1:5672/%2F")
    assert (amqp.username, amqp.password, amqp.vhost, amqp.port) == ("guest", "guest", "/", 5672)
    assert parse_bus_url("amqp://u:p@h/prod").vhost == "prod"
    assert parse_bus_url("amqp://u:p@h/a%2Fb").vhost == "a/b"
    assert parse_bus_url("amqp://h").vhost == "/"
    assert "s3cret" not in parse_bus_url("amqp://u:s3cret@h/").redacted()


@pytest.mark.parametrize(
    "url",
    [
        "",
        "localhost:6379",
        "http://h/",
        "redis://",
        "redis://h/x",
        "redis://h:notaport/0",
        "amqp://h/a/b",
        "amqp://h/?heartbeat=1",
        "memory://x/y",
    ],
)
def test_bad_urls(url: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_bus_url(url)
    assert repr(url) in str(info.value)
    assert "memory://" in str(info.value) and "amqp://" in str(info.value)


def test_connect_bus_checks_url_node_and_options() -> None:
    with pytest.raises(ValueError, match="accepted forms"):
        connect_bus("kafka://h", "a")
    with pytest.raises(ValueError, match="node name"):
        connect_bus("memory://", "has space")
    with pytest.raises(TypeError, match="unknown bus option"):
        connect_bus("memory://", "a", exchnage="x")
    with pytest.raises(ValueError, match="exchange"):
        connect_bus("memory://", "a", exchange="a:b")
    with pytest.raises(ValueError, match="heartbeat_interval"):
        BusOptions(heartbeat_interval=0)


def test_unreachable_broker_fails_clearly_and_leaks_nothing() -> None:
    """No thread of the failed bus outlives the call. The send_after timers of processes
    that other tests of this worker left running are not the bus's: a periodic one starts a
    new timer thread every period, which made this test flaky (issue 27)."""
    before = set(threading.enumerate())
    with pytest.raises(BusUnavailable) as info:
        connect_bus("redis://127.0.0.1:1/0", "a", connect_timeout=0.3)
    assert "redis://127.0.0.1:1/0" in str(info.value) and "running" in str(info.value)
    new = [t for t in set(threading.enumerate()) - before if t.is_alive()]
    assert not [t for t in new if t.name != SEND_AFTER_THREAD], new


def test_backoff_grows_caps_and_jitters() -> None:
    backoff = Backoff(0.1, 2.0, jitter=0.5, rng=random.Random(7))
    delays = [backoff.next() for _ in range(12)]
    ceilings = [min(2.0, 0.1 * 2**i) for i in range(12)]
    assert all(c * 0.5 <= d <= c for d, c in zip(delays, ceilings, strict=True))
    assert len(set(delays)) == len(delays)  # jittered: no two equal
    assert max(delays) <= 2.0
    backoff.reset()
    assert backoff.next() <= 0.1
    for _ in range(10_000):  # a long outage must not overflow
        backoff.next()
    with pytest.raises(ValueError):
        Backoff(2.0, 1.0)


def test_outbox_bound_and_control_requests() -> None:
    box = Outbox(2)
    assert box.put(Request(BROADCAST, "a")) and box.put(Request(BROADCAST, "b"))
    assert not box.put(Request(BROADCAST, "c"))  # full
    assert box.put(Request(BIND, "#"))  # control requests are never refused
    first = box.get(0)
    assert first is not None and first.routing_key == "a"
    box.put_front(first)
    assert [r.routing_key for r in box.take_all()] == ["a", "b", "#"]
    assert box.get(0) is None


def test_request_abandoned_by_caller_is_skipped() -> None:
    request = Request(BROADCAST, "a", confirm=True)
    with pytest.raises(BusUnavailable, match="not confirmed within"):
        request.wait(0.01, "publish 'a'")
    assert request.abandoned and not request.start()


def test_request_started_then_timed_out_says_it_may_arrive() -> None:
    request = Request(BROADCAST, "a", confirm=True)
    assert request.start()
    with pytest.raises(BusUnavailable, match="may still arrive"):
        request.wait(0.01, "publish 'a'")
    request.finish()  # the I/O thread completes later: harmless
