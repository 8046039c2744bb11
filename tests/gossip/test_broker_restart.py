"""A Redis restart under running Gossip nodes: an outage of the bus says nothing about the peers.

docs/gossip.md, "The bus going away": while the bus is down nothing is sent, no election is
decided and nobody is declared lost; when it is back every known worker gets a fresh window,
the node announces itself, mingles again and resends its election messages. These tests stop a
real redis-server (`redis_servers`, a free port of its own) and start it again on the same port.

The nodes' buses are connected by the test, with a short reconnect backoff (at most 0.2 s),
except one node in the first test whose bus comes back up to 1 s after the others: inside the
fresh window, so it must not be lost. A node that comes back later than a peer's whole window
after that peer IS declared lost by it (the fresh window is 2 x its heartbeat interval, while
the default reconnect backoff goes up to 5 s), which these tests do not cover: that is a known
gap (GossipCore.bus_up), not the promise tested here.

Waits are on conditions, polled with a deadline. The outage itself has to last longer than the
lost window to test anything; it is a loop that checks, all along, that nobody is lost.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from monitors.bus import Bus, BusMessage, connect_bus
from monitors.gossip.shell import ElectionError, Gossip, elect, wait_mingled
from tests.services import RedisServer
from tests.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.redis]

RECONNECT = {"reconnect_initial": 0.05, "reconnect_max": 0.2}


def hold(seconds: float, invariant: Callable[[], None]) -> None:
    """Let `seconds` pass while checking `invariant` every poll: the duration is part of the
    scenario (an outage longer than the lost window), not a wait for something."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        invariant()
        time.sleep(0.05)
    invariant()


@dataclass
class Node:
    name: str
    bus: Bus
    ref: Any
    lost: list[str] = field(default_factory=list)
    joined: list[str] = field(default_factory=list)

    def status(self) -> dict[str, Any]:
        return self.ref.proxy().status().get(timeout=10)


@dataclass
class Cluster:
    server: RedisServer
    exchange: str
    nodes: list[Node]
    started: list[Any] = field(default_factory=list)  # Gossip refs and buses to tear down
    runs: list[str] = field(default_factory=list)  # election handler runs, by node

    def node(
        self,
        name: str,
        heartbeat: float,
        on_revoked: Callable[[Any], Any] | None = None,
        reconnect: dict[str, float] | None = None,
        **opt: Any,
    ) -> Node:
        """A Gossip node on a bus of our own (fast reconnects unless `reconnect` says
        otherwise), with its joins and losses recorded; `opt` goes to the core."""
        bus = connect_bus(
            self.server.url,
            name,
            exchange=self.exchange,
            heartbeat_interval=heartbeat,
            **(reconnect or RECONNECT),
        )
        self.started.append(bus)
        node = Node(name, bus, None)
        node.ref = Gossip.start(
            bus,
            name,
            heartbeat_interval=heartbeat,
            on_node_lost=node.lost.append,
            on_node_join=node.joined.append,
            on_revoked=on_revoked,
            **{"interval": heartbeat, **opt},
        )
        self.started.append(node.ref)
        node.ref.proxy().register_election_handler(
            "job", lambda action, n=name: self.runs.append(n)
        )
        self.nodes.append(node)
        return node

    def probe(self, pattern: str, handler: Callable[[BusMessage], Any]) -> Bus:
        bus = connect_bus(self.server.url, "probe@h", exchange=self.exchange, **RECONNECT)
        self.started.append(bus)
        bus.subscribe(pattern, handler)
        return bus

    def formed(self) -> None:
        names = [n.name for n in self.nodes]
        for node in self.nodes:
            others = [m for m in names if m != node.name]
            wait_until(lambda n=node, o=others: n.status()["alive"] == o, f"{node.name} view", 20)
        for node in self.nodes:
            assert wait_mingled(node.ref, 10)


@pytest.fixture
def cluster(redis_servers: Callable[..., list[RedisServer]]) -> Iterator[Cluster]:
    (server,) = redis_servers(1)
    c = Cluster(server, f"restart-{uuid.uuid4().hex[:8]}", [])
    try:
        yield c
    finally:
        for item in reversed(c.started):
            if isinstance(item, Bus):
                item.close()
            elif item.is_alive():
                item.stop(block=True, timeout=20)


def test_a_broker_restart_loses_nobody_and_heartbeats_resume(cluster: Cluster) -> None:
    """n2's bus reconnects up to 1 s after the others' (its backoff is 0.5-1 s): inside the
    fresh window (2 s) the others give every peer at their reconnect, and far beyond the lost
    check period (0.25 s). Without that window the others would declare n2 lost at once: its
    last heartbeat is older than the outage."""
    heartbeat = 0.5
    lost_after = {"expire_window": 4.0, "interval": 0.25}  # lost after 2 s, checked every 0.25 s
    slow = {"reconnect_initial": 1.0, "reconnect_max": 1.0}
    nodes = [
        cluster.node(f"n{i}@h", heartbeat, reconnect=slow if i == 2 else None, **lost_after)
        for i in range(3)
    ]
    beats: list[tuple[str, float]] = []
    probe = cluster.probe("worker.heartbeat", lambda m: beats.append((m.sender, time.monotonic())))
    cluster.formed()
    assert all(n.lost == [] for n in nodes)
    joins_before = [list(n.joined) for n in nodes]

    cluster.server.stop()
    down_at = time.monotonic()
    for node in nodes:
        wait_until(lambda n=node: n.status()["connected"] is False, f"{node.name} to see it", 10)

    def nobody_lost() -> None:
        assert [n.lost for n in nodes] == [[], [], []]

    outage = 4.0  # two lost windows, sixteen lost checks
    hold(outage - (time.monotonic() - down_at), nobody_lost)
    for node in nodes:  # every view still holds everyone: silence on a dead bus proves nothing
        assert len(node.status()["alive"]) == 2

    cluster.server.start()
    up_at = time.monotonic()
    for node in nodes:
        wait_until(lambda n=node: n.status()["connected"] is True, f"{node.name} to reconnect", 15)
        assert node.bus.stats()["reconnects"] >= 1
    wait_until(lambda: probe.connected, "the probe to reconnect", 15)

    # Heartbeats resume from everyone; waiting for six from each after the restart covers a
    # lost window and many lost checks with everyone back.
    def resumed() -> bool:
        after = [sender for sender, at in beats if at > up_at]
        return all(after.count(n.name) >= 6 for n in nodes)

    wait_until(resumed, "six heartbeats from every node after the restart", 15)
    nobody_lost()
    assert [n.joined for n in nodes] == joins_before  # no leave-and-rejoin either
    for node in nodes:
        status = node.status()
        assert status["connected"] is True and len(status["alive"]) == 2, status
        assert status["mingling"] is False


def test_an_election_in_flight_across_a_broker_restart_still_has_one_winner(
    cluster: Cluster,
) -> None:
    """a and b propose; c has received both proposals but cannot ack them before the broker
    goes (its process is held up), and its acks, sent during the outage, are lost. The election
    has to finish through the resend after the reconnect."""
    gate, held = threading.Event(), threading.Event()

    def hold_c(ids: Any) -> None:  # runs on c's gossip process: c handles nothing until gate
        if "hold-c" in ids:
            held.set()
            gate.wait(30)

    # 1 s heartbeats: c is held for a moment before the outage and must not be lost for it
    a, b, c = (
        cluster.node(f"{x}@h", 1.0, on_revoked=hold_c if x == "c" else None, election_retry=0.5)
        for x in "abc"
    )
    cluster.formed()

    try:
        a.ref.proxy().revoke(["hold-c"]).get(timeout=10)
        assert held.wait(10), "c never got the revoke"
        outcomes: dict[str, str | BaseException] = {}

        def ask(node: Node) -> None:
            try:
                outcomes[node.name] = elect(node.ref, "across", "job", "go", timeout=30)
            except ElectionError as exc:
                outcomes[node.name] = exc

        threads = [threading.Thread(target=ask, args=(n,)) for n in (a, b)]
        for thread in threads:
            thread.start()

        def waits_for_c_only(node: Node) -> bool:
            return node.status()["elections"]["waiting_for"].get("across") == ["c@h"]

        # a and b have each other's candidacy (as good as an ack), and wait for c's ack
        wait_until(lambda: waits_for_c_only(a) and waits_for_c_only(b), "a and b to know", 10)
        assert outcomes == {}  # both wait for c
        cluster.server.stop()
        for node in (a, b):
            wait_until(lambda n=node: n.status()["connected"] is False, f"{node.name} down", 10)
    finally:
        gate.set()  # c goes on: it acks both proposals into a dead bus
    wait_until(lambda: c.status()["connected"] is False, "c to see the outage", 10)

    def undecided() -> None:
        assert outcomes == {}  # nothing is decided while the bus is down

    hold(1.5, undecided)  # a few election retries fire into the outage
    cluster.server.start()
    for thread in threads:
        thread.join(40)
    assert set(outcomes) == {"a@h", "b@h"}

    # Either answer is acceptable from an asker: the winner, or a clean ElectionError; asking
    # again must then give the winner. Everyone, c included, must name the same one.
    winners = set()
    for node in (a, b, c):
        outcome = outcomes.get(node.name)
        if not isinstance(outcome, str):
            outcome = elect(node.ref, "across", "job", "go", timeout=30)
        winners.add(outcome)
    assert len(winners) == 1 and winners <= {"a@h", "b@h"}, (winners, outcomes)
    wait_until(lambda: cluster.runs, "the winner to run the handler", 10)
    assert cluster.runs == list(winners)
    assert all(n.lost == [] for n in (a, b, c))


def test_an_election_asked_during_the_outage_completes_after_it(cluster: Cluster) -> None:
    nodes = [cluster.node(f"n{i}@h", 0.5) for i in range(3)]
    cluster.formed()
    cluster.server.stop()
    for node in nodes:
        wait_until(lambda n=node: n.status()["connected"] is False, f"{node.name} down", 10)
    future = nodes[1].ref.proxy().start_election("later", "job", "go", 30).get(timeout=10)

    def undecided() -> None:
        assert not future.done(), "decided while the bus was down"

    hold(1.0, undecided)
    cluster.server.start()
    winner = future.result(40)
    assert winner == "n1@h"  # the only proposer
    assert {elect(n.ref, "later", "job", "go", timeout=30) for n in nodes} == {winner}
    wait_until(lambda: cluster.runs, "the winner to run the handler", 10)
    assert cluster.runs == [winner]
    assert all(n.lost == [] for n in nodes)
