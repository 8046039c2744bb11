"""Fixtures for the bus tests: real brokers (tests/services.py), a unique exchange per test so
tests never see each other's messages, and clean-up of what a test left on a broker."""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from monitors.bus import Bus, BusMessage, connect_bus
from tests.services import faultproxy_api, require_amqp, require_redis
from tests.waiting import wait_until

BACKENDS = [
    pytest.param("memory", id="memory"),
    pytest.param("redis", id="redis", marks=pytest.mark.redis),
    pytest.param("amqp", id="amqp", marks=pytest.mark.amqp),
]


def wait_for(condition: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    """Poll `condition` until truthy (returned) or fail after `timeout` seconds."""
    return wait_until(condition, what, timeout, poll=0.01)


class Inbox:
    """A handler that records messages and lets a test wait for them."""

    def __init__(self) -> None:
        self.messages: list[BusMessage] = []
        self.lock = threading.Lock()
        self.threads: set[str] = set()

    def __call__(self, message: BusMessage) -> None:
        with self.lock:
            self.messages.append(message)
            self.threads.add(threading.current_thread().name)

    def routing_keys(self) -> list[str]:
        with self.lock:
            return [m.routing_key for m in self.messages]

    def wait(self, n: int, timeout: float = 10.0) -> list[BusMessage]:
        wait_for(
            lambda: len(self.messages) >= n, timeout, f"{n} messages (have {self.routing_keys()})"
        )
        with self.lock:
            return list(self.messages)

    def wait_key(self, key: str, timeout: float = 10.0) -> BusMessage:
        def find() -> BusMessage | None:
            with self.lock:
                return next((m for m in self.messages if m.routing_key == key), None)

        return wait_for(find, timeout, f"a message {key!r} (have {self.routing_keys()})")


def broker_url(backend: str) -> str:
    if backend == "redis":
        return require_redis()
    if backend == "amqp":
        return require_amqp()
    return f"memory://{uuid.uuid4().hex[:8]}"


@pytest.fixture
def exchange() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def cleanup(exchange: str) -> Iterator[dict[str, Any]]:
    """Records what a test created on which broker; removes it afterwards."""
    made: dict[str, Any] = {"amqp": set(), "redis": set(), "exchanges": {exchange}, "queues": set()}
    yield made
    for url in made["redis"]:
        import redis

        with contextlib.suppress(Exception):
            client = redis.Redis.from_url(url, socket_connect_timeout=1)
            for ex in made["exchanges"]:
                keys = list(client.scan_iter(f"{ex}:*"))
                if keys:
                    client.delete(*keys)
            client.close()
    for url in made["amqp"]:
        with contextlib.suppress(Exception):
            amqp_delete(url, made["exchanges"], made["queues"])


def amqp_delete(url: str, exchanges: set[str], queues: set[str]) -> None:
    """Delete the test's exchanges and direct queues (direct queues outlive their nodes)."""
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = conn.channel()
        for queue in queues:
            channel.queue_delete(queue)
        for ex in exchanges:
            channel.exchange_delete(ex)
    finally:
        conn.close()


@pytest.fixture
def make_bus(exchange: str, cleanup: dict[str, Any]) -> Iterator[Callable[..., Bus]]:
    """`make_bus(url, node, **options)`: connect_bus with this test's exchange, closed after."""
    buses: list[Bus] = []

    def make(url: str, node: str, **options: Any) -> Bus:
        options.setdefault("exchange", exchange)
        cleanup["exchanges"].add(options["exchange"])
        cleanup["queues"].add(f"{options['exchange']}.direct.{node}")
        if url.startswith("amqp"):
            cleanup["amqp"].add(url)
        elif url.startswith("redis"):
            cleanup["redis"].add(url)
        bus = connect_bus(url, node, **options)
        buses.append(bus)
        return bus

    yield make
    for bus in buses:
        bus.close()


@pytest.fixture
def faultproxy() -> Iterator[Any]:
    """`rabbitry faultproxy` as a subprocess; yields a ToxiproxyAPI on it."""
    with faultproxy_api() as api:
        yield api


def bus_threads(node: str) -> list[str]:
    return [
        t.name
        for t in threading.enumerate()
        if t.name.startswith("rabbitry-bus") and t.name.endswith(f":{node}")
    ]


def broker_sockets(port: int) -> int:
    """How many TCP connections this process has open to `port` on localhost."""
    import psutil

    return sum(
        1
        for c in psutil.Process().net_connections(kind="tcp")
        if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED
    )
