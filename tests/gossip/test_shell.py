"""The Gossip/Mingle actor shells on real buses: memory://, then Redis and RabbitMQ.

Waits are on conditions (polling with a deadline), never on fixed sleeps.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from monitors.bus import connect_bus
from monitors.gossip.shell import ElectionError, Gossip, Mingle, elect, wait_mingled
from supervisors import exit
from tests.services import require_amqp, require_redis
from tests.waiting import wait_until

FAST = {"heartbeat_interval": 0.2, "interval": 0.3, "mingle_timeout": 1.0}


@pytest.fixture
def gossips() -> Iterator[Callable[..., Any]]:
    started: list[Any] = []

    def start(url: str, node: str, cls: type = Gossip, **options: Any) -> Any:
        ref = cls.start(url, node, exchange=EXCHANGE[url], **{**FAST, **options})
        started.append(ref)
        return ref

    yield start
    for ref in started:
        if ref.is_alive():
            ref.stop()


EXCHANGE: dict[str, str] = {}


def _url(kind: str) -> str:
    if kind == "memory":
        url = f"memory://gossip-{uuid.uuid4().hex[:8]}"
    elif kind == "redis":
        url = require_redis()
    else:
        url = require_amqp()
    EXCHANGE[url] = f"gossip-test-{uuid.uuid4().hex[:8]}"
    return url


@pytest.fixture(
    params=[
        "memory",
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("amqp", marks=pytest.mark.amqp),
    ]
)
def url(request: pytest.FixtureRequest) -> str:
    return _url(request.param)


def alive(ref: Any) -> list[str]:
    return ref.proxy().alive_workers().get(timeout=5)


def test_nodes_see_each_other_and_one_wins_each_election(gossips, url: str) -> None:
    refs = [gossips(url, f"n{i}@h") for i in range(3)]
    for i, ref in enumerate(refs):
        others = sorted(f"n{j}@h" for j in range(3) if j != i)
        wait_until(lambda r=ref, o=others: alive(r) == o, f"n{i} to see {others}", 15)
    ran: list[tuple[str, Any]] = []
    for i, ref in enumerate(refs):
        ref.proxy().register_election_handler("job", lambda a, i=i: ran.append((f"n{i}@h", a)))
    winners = {elect(ref, "e1", "job", "go", timeout=10) for ref in refs}
    assert len(winners) == 1  # every caller learns the same winner
    wait_until(lambda: ran, "the winner to run the handler", 5)
    time.sleep(0.3)  # a second run would show up by now
    assert ran == [(winners.pop(), "go")]


def test_revoke_reaches_everyone_and_a_late_node_mingles_it(gossips, url: str) -> None:
    a = gossips(url, "a@h")
    b = gossips(url, "b@h")
    wait_until(lambda: alive(a) == ["b@h"], "a to see b", 15)
    a.proxy().revoke(["t1", "t2"]).get(timeout=5)
    wait_until(lambda: b.proxy().is_revoked("t2").get(timeout=5), "b to learn t2", 10)
    late = gossips(url, "c@h", cls=Mingle)
    assert wait_mingled(late, 5)
    assert late.proxy().is_revoked("t1").get(timeout=5)
    clock = late.proxy().clock().get(timeout=5)
    assert clock > 0


def test_a_stopped_node_leaves_and_a_killed_one_is_lost(gossips, url: str) -> None:
    events: list[tuple[str, str]] = []
    a = gossips(
        url,
        "a@h",
        on_node_leave=lambda n: events.append(("leave", n)),
        on_node_lost=lambda n: events.append(("lost", n)),
    )
    b = gossips(url, "b@h")
    c = gossips(url, "c@h")
    wait_until(lambda: alive(a) == ["b@h", "c@h"], "a to see b and c", 15)
    b.stop()  # says worker-offline
    wait_until(lambda: ("leave", "b@h") in events, "b to leave", 10)
    exit(c, "kill")  # says nothing: lost after missed heartbeats
    wait_until(lambda: ("lost", "c@h") in events, "c to be lost", 10)
    assert alive(a) == []


def test_a_paused_node_never_wins(gossips) -> None:
    url = _url("memory")
    refs = [gossips(url, f"n{i}@h") for i in range(3)]
    wait_until(lambda: alive(refs[0]) == ["n1@h", "n2@h"], "n0 to see the others", 15)
    for ref in refs:
        wait_until(lambda r=ref: len(alive(r)) == 2, "everyone to see everyone", 15)
    # n0 would win ties on name; pause it as its node monitor would
    from monitors.node_monitor.shell import NodeEvent

    refs[0].tell(NodeEvent("paused", "n0@h"))
    for k in range(3):
        winners = {elect(ref, f"p{k}", "job", None, timeout=10) for ref in refs[1:]}
        assert winners <= {"n1@h", "n2@h"} and len(winners) == 1


def test_an_election_with_gossip_off_fails_clearly(gossips) -> None:
    url = _url("memory")
    ref = gossips(url, "solo@h", cls=Mingle)
    with pytest.raises(ElectionError, match="without_gossip"):
        elect(ref, "x", "job", timeout=2)


def test_a_broker_down_at_start_is_waited_for(redis_servers) -> None:
    (server,) = redis_servers(1)
    url = server.url
    server.stop()
    ref = Gossip.start(url, "a@h", exchange="g-down", **FAST)
    try:
        assert ref.proxy().status().get(timeout=5)["connected"] is False
        server.start()
        wait_until(
            lambda: ref.proxy().status().get(timeout=5)["connected"], "the bus to reconnect", 20
        )
        with connect_bus(url, "probe@h", exchange="g-down") as probe:
            seen: list[str] = []
            probe.subscribe("worker.heartbeat", lambda m: seen.append(m.sender))
            wait_until(lambda: "a@h" in seen, "a heartbeat after the reconnect", 10)
    finally:
        ref.stop()
