"""The RCS and RCCs under partitions, on real redis-server processes and a real fault proxy.

What is checked (docs/failover.md, "Safety in one sentence"): an RCC the RCS cannot reach
blocks the switch; an RCC that still reaches the master refuses to invalidate it, so a cut
between the RCS and the master causes no switch; no two master files ever name different
masters at once; the old master, back, becomes a replica of the new one; and an active RCS
killed in the middle of a switch is replaced by a standby that finishes (or cancels) it. Two
more tests pin fixes made while writing these: an RCC or RCS whose bus connects after it
started (always so on a real broker) still announces itself, and the RCS's census at start
is answered instead of being lost.

How the partitions are made (the design choice):

- Server names are one thing for everyone. The master files, the RCS's state and every bus
  message carry "host:port" strings, and the RCS finds the old master's replicas by comparing
  each replica's `master_host:master_port` (what Redis reports) with the configured names. So
  the shells cannot be handed proxy addresses as server names: each would name the same
  server differently, and a replica of 127.0.0.1:6380 would not be seen as a replica of the
  master that one RCC calls 127.0.0.1:41237.
- A toxic applies to a proxy, not to one client of it. So one proxy in front of each
  redis-server cannot cut one observer off while the others still get through.
- Hence one proxy per (observer, server) pair, in one `rabbitry faultproxy` process: proxy
  "fo-<tag>-rcs-0->127.0.0.1:6380" carries only rcs-0's connections to the server
  127.0.0.1:6380. The shells run in this test process as subclasses (`RoutedServer`,
  `RoutedClient`) given their proxies as `redis_addresses` (how THIS host reaches each
  server), plus hooks for the crash tests. A `QueryRedis`, `WatchServer`, `Promote` or
  `MakeReplica` for server S dials the observer's proxy to S;
  everything else (the names in the cores, the answers' `ServerInfo`, the master given to
  REPLICAOF) stays canonical. The servers' replication links do not go through any proxy. A
  cut is a `timeout` toxic (drop every byte, never close) on both streams of one proxy: the
  observer's calls to that server time out after the shell's Redis timeout, as on a real
  partition; healing removes the toxics.
- Bus partitions use a real broker: a redis-server from the `redis_servers` fixture serves as
  the Redis bus, and the party to be cut connects to it through its own proxy. Disabling that
  proxy closes the party's connections and refuses new ones, so it hears nothing and is heard
  by no one; re-enabling it lets the bus reconnect (the test's Bus has reconnect_max 0.5 s).
  The Redis-cut and election tests use one memory:// bus, as test_shells.py does.
- Killing the active RCS mid-switch: a `CrashPoint` freezes the active RCS's thread right after
  it published invalidate, or right after REPLICAOF NO ONE succeeded on the new master (before
  it hears back), and the test kills it there with `supervisors.exit(ref, "kill")`. Nothing it
  would have done next (promote, announce) ever happens, as with a crash at that instant.
- `FileWatch` samples every client's master file from a thread every 2 ms, for the whole
  test. A snapshot with two different non-empty values counts only when an immediate second
  snapshot is identical: each file then held its value across the read of the other, so the
  two were there at the same moment (files are replaced atomically by rename).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import supervisors
from failover import ConfigurationClient, ConfigurationServer, RedisMasterFile, redis_ops
from failover import shell as failover_shell
from failover.effects import MakeReplica, Promote
from monitors.bus import Bus, connect_bus
from monitors.gossip.effects import Publish
from rabbitry.testing.cluster import ToxiproxyAPI
from tests.failover.fast import FAST_RCC, FAST_RCS
from tests.services import RedisServer, faultproxy_api
from tests.waiting import wait_until

pytestmark = pytest.mark.slow

SYSTEM = "system"
CUT = {"type": "timeout", "attributes": {"timeout": 0}, "toxicity": 1.0}


# ---- the fault proxy -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def toxiproxy() -> Iterator[ToxiproxyAPI]:
    """The Toxiproxy at $TOXIPROXY_URL, or `rabbitry faultproxy` started for this module."""
    with faultproxy_api() as api:
        yield api


class Routes:
    """One proxy per (observer, Redis server): how each observer's Redis calls reach a server,
    and what cuts one observer from one server."""

    def __init__(self, api: ToxiproxyAPI, observers: list[str], servers: list[str]) -> None:
        self.api = api
        self._tag = uuid.uuid4().hex[:8]
        self._proxies: dict[tuple[str, str], tuple[str, str]] = {}  # -> (name, listen)
        self.cuts: set[tuple[str, str]] = set()
        self.refused: set[tuple[str, str]] = set()
        for observer in observers:
            for server in servers:
                name = f"fo-{self._tag}-{observer}->{server}"
                made = api.create_proxy(name, "127.0.0.1:0", server)
                self._proxies[(observer, server)] = (name, made["listen"])

    def address(self, observer: str, server: str) -> str:
        return self._proxies[(observer, server)][1]

    def cut(self, observer: str, server: str) -> None:
        """Every byte between `observer` and `server` dropped, both ways, silently."""
        name = self._proxies[(observer, server)][0]
        for stream in ("upstream", "downstream"):
            self.api.add_toxic(name, {**CUT, "name": f"cut-{stream}", "stream": stream})
        self.cuts.add((observer, server))

    def for_observer(self, observer: str) -> dict[str, str]:
        """{server: the proxy address} for one observer: its shell's `redis_addresses`."""
        return {srv: addr for (obs, srv), (_n, addr) in self._proxies.items() if obs == observer}

    def refuse(self, observer: str, server: str) -> None:
        """The proxy goes away: `observer`'s connections to `server` close, new ones are
        refused (a REJECT rule), while the other observers still reach it."""
        self.api.set_enabled(self._proxies[(observer, server)][0], False)
        self.refused.add((observer, server))

    def heal(self) -> None:
        for observer, server in sorted(self.refused):
            with contextlib.suppress(Exception):
                self.api.set_enabled(self._proxies[(observer, server)][0], True)
        self.refused.clear()
        for observer, server in sorted(self.cuts):
            name = self._proxies[(observer, server)][0]
            for stream in ("upstream", "downstream"):
                with contextlib.suppress(Exception):
                    self.api.delete_toxic(name, f"cut-{stream}")
        self.cuts.clear()

    def close(self) -> None:
        for name, _ in self._proxies.values():
            with contextlib.suppress(Exception):
                self.api.delete_proxy(name)


# ---- the shells, with their Redis calls routed per observer --------------------------------


class CrashPoint:
    """Freezes the first RCS that reaches the armed point ("invalidate": it has just published
    invalidate; "promote": REPLICAOF NO ONE has just succeeded), so the test can kill it there.
    The frozen thread waits for `release`; by then its process is dead and whatever it returns
    is dropped."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.armed: str | None = None
        self.hit = threading.Event()
        self.release = threading.Event()
        self.victim: Any = None
        self.server: str | None = None  # what the victim was promoting / invalidating

    def reached(self, point: str, shell: Any, server: str) -> None:
        with self._lock:
            if self.armed != point:
                return
            self.armed = None
            self.victim, self.server = shell.actor_ref, server
        self.hit.set()
        self.release.wait(30)


class _Routed:
    """Mixin: a shell whose Redis calls go to `routes.address(observer, server)`."""

    observer: str
    routes: Routes | None
    crash: CrashPoint | None
    promoted: list[str]

    def _via(self, server: str) -> str:
        return self.routes.address(self.observer, server) if self.routes is not None else server

    def _promote(self, server: str) -> None:
        redis_ops.promote(self._via(server), timeout=failover_shell.REDIS_TIMEOUT)
        if self.crash is not None:
            self.crash.reached("promote", self, server)

    def _make_replica(self, server: str, master: str) -> None:
        redis_ops.make_replica(self._via(server), master, timeout=failover_shell.REDIS_TIMEOUT)

    def _perform_one(self, effect: Any) -> None:
        kind = type(effect)
        shell: Any = self
        if kind is Promote:
            self.promoted.append(effect.server)
            shell._submit(
                lambda: shell._redis_call(effect.request_id, self._promote, effect.server)
            )
        elif kind is MakeReplica:
            shell._submit(
                lambda: shell._redis_call(
                    effect.request_id, self._make_replica, effect.server, effect.master
                )
            )
        else:
            super()._perform_one(effect)  # type: ignore[misc]
            body = getattr(effect, "body", None)
            if kind is Publish and self.crash is not None and body.get("type") == "invalidate":
                self.crash.reached("invalidate", self, body["server"])


class RoutedServer(_Routed, ConfigurationServer):
    def __init__(self, *args: Any, routes: Routes | None, crash: CrashPoint | None, **kw: Any):
        node = kw["node"]
        kw["redis_addresses"] = routes.for_observer(node) if routes is not None else None
        super().__init__(*args, **kw)
        self.observer, self.routes, self.crash, self.promoted = self.node, routes, crash, []


class RoutedClient(_Routed, ConfigurationClient):
    def __init__(self, *args: Any, routes: Routes | None, **kw: Any) -> None:
        client_id = args[2]
        kw["redis_addresses"] = routes.for_observer(client_id) if routes is not None else None
        super().__init__(*args, **kw)
        self.observer, self.routes, self.crash, self.promoted = self.client_id, routes, None, []


# ---- watching the master files ---------------------------------------------------------------


class FileWatch:
    """Samples every client's master file every `period` s on a thread, for the whole test."""

    def __init__(self, paths: dict[str, Path], period: float = 0.002) -> None:
        self._files = {c: RedisMasterFile(p, SYSTEM) for c, p in paths.items()}
        self.period = period
        self.samples = 0
        self.violations: list[dict[str, str | None]] = []
        self._history: dict[str, list[str | None]] = {c: [] for c in paths}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="file-watch", daemon=True)
        self._thread.start()

    def _snapshot(self) -> dict[str, str | None]:
        return {c: f.read() for c, f in self._files.items()}

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            first = self._snapshot()
            with self._lock:
                self.samples += 1
                for c, value in first.items():
                    seen = self._history[c]
                    if not seen or seen[-1] != value:
                        seen.append(value)
            if len({v for v in first.values() if v}) > 1 and self._snapshot() == first:
                with self._lock:
                    self.violations.append(first)

    def mark(self) -> None:
        """Forget the history so far: each file's history starts again at its current value."""
        with self._lock:
            for c, value in self._snapshot().items():
                self._history[c][:] = [value]

    def history(self, client: str) -> list[str | None]:
        """The values `client`'s file went through since the last mark (None: empty)."""
        with self._lock:
            return list(self._history[client])

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def assert_clean(self) -> None:
        with self._lock:
            violations = list(self.violations)
        assert not violations, f"two master files named different masters: {violations}"

    def check(self, at_least: int = 10) -> None:
        """No two files named different masters at one moment; and the watch did watch.

        A fast test can end before a starved watch thread has run `at_least` times, so this
        waits for the samples (and for two more, so the final state is seen too) rather than
        counting what a fixed time gave; only a watch thread that died or hangs fails it.
        """
        with self._lock:
            wanted = max(at_least, self.samples + 2)
        try:
            wait_until(
                lambda: self.samples >= wanted, f"the file watch to take {wanted} samples", 5
            )
        finally:
            self.stop()
        self.assert_clean()


# ---- a failover set with its faults --------------------------------------------------------


class FailoverSet:
    servers: list[RedisServer]
    master: RedisServer
    replicas: list[RedisServer]
    files: dict[str, RedisMasterFile]
    clients: dict[str, Any]
    candidates: list[Any]
    api: ToxiproxyAPI
    routes: Routes | None
    watch: FileWatch
    crash: CrashPoint
    bus_proxies: dict[str, str]

    @property
    def rcs(self) -> Any:
        return self.candidates[0]

    def wait(self, predicate: Callable[[], Any], what: str, timeout: float) -> Any:
        """wait_until, failing at once if the file watch saw two masters meanwhile."""

        def check() -> Any:
            self.watch.assert_clean()
            return predicate()

        return wait_until(check, what, timeout)

    def names(self) -> set[str | None]:
        return {f.read() for f in self.files.values()}

    def status(self, ref: Any = None) -> dict[str, Any]:
        return (ref or self.rcs).proxy().status().get(timeout=5)

    def notes(self, ref: Any = None) -> list[str]:
        return list(self.status(ref)["notifications"])

    def cancelled(self, ref: Any = None) -> list[str]:
        return [n for n in self.notes(ref) if "master switch cancelled" in n]

    def actives(self) -> list[Any]:
        return [r for r in self.candidates if r.is_alive() and self.status(r).get("active")]


@pytest.fixture
def failover_set(
    redis_servers: Callable[..., list[RedisServer]], toxiproxy: ToxiproxyAPI, tmp_path: Path
) -> Iterator[Callable[..., FailoverSet]]:
    """`failover_set(replicas=1, clients=("rcc-1", "rcc-2"), **options, **rcs_options)`: a
    master and its replicas (real processes), the RCCs, then the RCS candidates, with the
    files watched from the start. Options:

    - `redis_bus`: the bus is a redis-server (else memory://);
    - `cut_bus`: these parties (client ids, "rcs-0") reach that broker through their own
      proxy, `s.bus_proxies[party]`; `bus_down_at_start`: those proxies start disabled;
    - `candidates` > 1: RCS candidates "rcs-0", "rcs-1", ... with Gossip electors (memory bus);
    - `routed`: Redis calls go through per-observer proxies, `s.routes`;
    - `prepare(s)`: called once servers and files exist, before any shell starts."""
    sets: list[FailoverSet] = []
    refs: list[Any] = []
    buses: list[Bus] = []
    cleanup: list[Callable[[], Any]] = []

    def make(
        replicas: int = 1,
        clients: tuple[str, ...] = ("rcc-1", "rcc-2"),
        *,
        redis_bus: bool = False,
        cut_bus: tuple[str, ...] = (),
        bus_down_at_start: bool = False,
        candidates: int = 1,
        routed: bool = True,
        prepare: Callable[[FailoverSet], Any] | None = None,
        **rcs: Any,
    ) -> FailoverSet:
        s = FailoverSet()
        s.api = toxiproxy
        sets.append(s)
        s.servers = redis_servers(1 + replicas, "--repl-diskless-sync-delay", "0")
        s.master, *s.replicas = s.servers
        names = [x.address for x in s.servers]
        for replica in s.replicas:
            redis_ops.make_replica(replica.address, s.master.address)
        for replica in s.replicas:
            wait_until(lambda r=replica: link_up(r, s.master), "replication link up", 15)
        rcs_names = [f"rcs-{i}" for i in range(candidates)]
        s.routes = Routes(toxiproxy, [*rcs_names, *clients], names) if routed else None
        if s.routes is not None:
            cleanup.append(s.routes.close)
        exchange = f"fo-{uuid.uuid4().hex[:8]}"
        s.bus_proxies = {}
        if redis_bus:
            (broker,) = redis_servers(1)
            bus_url = broker.url
        else:
            bus_url = f"memory://failover-{exchange}"
        s.files = {c: RedisMasterFile(tmp_path / f"{c}.master", SYSTEM) for c in clients}
        s.watch = FileWatch({c: f.path for c, f in s.files.items()})
        cleanup.append(s.watch.stop)
        s.crash = CrashPoint()
        s.clients = {}
        if prepare is not None:
            prepare(s)

        def bus_of(party: str) -> str | Bus:
            """The bus URL, or for a party in `cut_bus` a bus through its own proxy."""
            if party not in cut_bus:
                return bus_url
            name = f"fo-{exchange}-bus-{party}"
            proxy = toxiproxy.create_proxy(name, "127.0.0.1:0", f"127.0.0.1:{broker.port}")
            cleanup.append(lambda: toxiproxy.delete_proxy(name))
            s.bus_proxies[party] = name
            if bus_down_at_start:
                toxiproxy.set_enabled(name, False)
            bus = connect_bus(
                f"redis://{proxy['listen']}/0",
                party,
                exchange=exchange,
                reconnect_max=0.5,
                connect_timeout=None if bus_down_at_start else 10,
            )
            buses.append(bus)
            return bus

        for c in clients:
            bus = bus_of(c)
            ref = RoutedClient.start(
                bus, SYSTEM, c, s.files[c].path, routes=s.routes, exchange=exchange, **FAST_RCC
            )
            refs.append(ref)
            s.clients[c] = ref
        for c, ref in s.clients.items():
            if c not in cut_bus or not bus_down_at_start:
                wait_until(
                    lambda ref=ref: ref.proxy().status().get(timeout=5)["connected"],
                    f"{c} to reach the bus",
                    15,
                )
        electors: list[Any] = [None] * candidates
        if candidates > 1:
            from monitors.gossip import Gossip

            assert not redis_bus, "the election tests run on one memory bus"
            electors = [
                Gossip.start(bus_url, f"n{i}@h", heartbeat_interval=0.2, interval=0.5)
                for i in range(candidates)
            ]
            refs.extend(electors)
        s.candidates = []
        for i, node in enumerate(rcs_names):
            ref = RoutedServer.start(
                bus_of(node),
                SYSTEM,
                names,
                list(clients),
                node=node,
                elector=electors[i],
                routes=s.routes,
                crash=s.crash,
                exchange=exchange,
                **{**FAST_RCS, **rcs},
            )
            refs.append(ref)
            s.candidates.append(ref)
        return s

    try:
        yield make
    finally:
        for s in sets:
            s.crash.release.set()  # a frozen RCS thread must not outlive the test
        for ref in reversed(refs):
            with contextlib.suppress(Exception):
                if ref.is_alive():
                    ref.stop()
        for bus in buses:
            with contextlib.suppress(Exception):
                bus.close()
        for fn in reversed(cleanup):
            with contextlib.suppress(Exception):
                fn()


def link_up(replica: RedisServer, master: RedisServer) -> bool:
    info = redis_ops.replication_info(replica.address) or {}
    return (
        info.get("role") == "slave"
        and info.get("master_address") == master.address
        and info.get("master_link_status") == "up"
    )


def role(server: RedisServer) -> str | None:
    info = redis_ops.replication_info(server.address)
    return info["role"] if info is not None else None


def settled(s: FailoverSet, master: RedisServer) -> bool:
    """`master` is the only master, every other server its replica with the link up."""
    return role(master) == "master" and all(link_up(x, master) for x in s.servers if x != master)


# ---- the tests -------------------------------------------------------------------------------


@pytest.mark.redis
def test_a_client_cut_from_the_bus_blocks_the_switch_until_it_is_back(failover_set) -> None:
    s = failover_set(redis_bus=True, cut_bus=("rcc-2",), routed=False)
    old, new = s.master, s.replicas[0]
    s.wait(lambda: s.names() == {old.address}, "every file to name the master", 15)
    s.watch.mark()
    s.api.set_enabled(s.bus_proxies["rcc-2"], False)
    s.wait(
        lambda: not s.clients["rcc-2"].proxy().status().get(timeout=5)["connected"],
        "rcc-2 to lose the bus",
        15,
    )
    old.stop(kill=True)
    s.wait(lambda: len(s.cancelled()) >= 2, "two rounds cancelled for want of rcc-2", 20)
    assert all("no pong from ['rcc-2']" in n for n in s.cancelled()), s.cancelled()
    assert role(new) == "slave", "a replica was promoted while rcc-2 could not be asked"
    assert s.files["rcc-1"].read() == old.address  # never asked to invalidate: still the old
    assert s.files["rcc-2"].read() == old.address  # cut off: it knows nothing of the outage

    s.api.set_enabled(s.bus_proxies["rcc-2"], True)
    s.wait(lambda: s.names() == {new.address}, "the switch after healing", 20)
    assert role(new) == "master"
    for c in s.files:  # the watch samples on its own thread: it may be a moment behind
        s.wait(
            lambda c=c: (
                s.watch.history(c)[0] == old.address and s.watch.history(c)[-1] == new.address
            ),
            f"{c}'s history to end at the new master",
            5,
        )

    # the old master returns (empty, as a master): the RCS makes it a replica of the new one
    old.start("--repl-diskless-sync-delay", "0")
    s.wait(lambda: settled(s, new), "the old master to replicate the new one", 20)
    assert s.names() == {new.address}
    s.watch.check()


@pytest.mark.redis
def test_a_client_whose_bus_comes_up_late_announces_itself(failover_set) -> None:
    """rcc-2 starts (empty file) while the broker is unreachable for it; once its bus
    connects it says client_started and gets the master at once, not at the RCS's next
    periodic reconfigure (30 s here). Before the fix in failover/shell.py the core believed
    itself connected from the start, ignored the bus_up, and waited for that reconfigure."""
    s = failover_set(
        redis_bus=True,
        cut_bus=("rcc-2",),
        bus_down_at_start=True,
        routed=False,
        reconfigure_interval=30.0,
    )
    master = s.master
    s.wait(lambda: s.files["rcc-1"].read() == master.address, "rcc-1 to name the master", 15)
    s.wait(lambda: s.status()["redis_master_available"], "the RCS to watch the master", 15)
    assert s.files["rcc-2"].read() is None
    assert not s.clients["rcc-2"].proxy().status().get(timeout=5)["connected"]
    s.api.set_enabled(s.bus_proxies["rcc-2"], True)
    s.wait(lambda: s.names() == {master.address}, "rcc-2 to get the master once connected", 10)
    s.watch.check()


@pytest.mark.redis
def test_an_rcs_starting_on_a_real_broker_asks_the_clients_first(failover_set) -> None:
    """Two servers are masters (a switch made the replica the master; the old one came back
    as a master) and the files name the new one. An RCS starting on a Redis bus must take the
    workers' word from its census; the servers alone cannot say which master is right. Before
    the fixes in failover/shell.py and server_core.py its census ping always went out before
    its bus had connected, was dropped, and the RCS fell back to the servers, found two
    masters and reported "Redis master not determined yet" until a second census."""

    def two_masters(s: FailoverSet) -> None:
        redis_ops.promote(s.replicas[0].address)
        for f in s.files.values():
            f.write(s.replicas[0].address)

    s = failover_set(redis_bus=True, routed=False, prepare=two_masters)
    old, new = s.master, s.replicas[0]
    s.watch.mark()
    s.wait(lambda: s.status()["redis_master"] == new.address, "the RCS to pick the files' one", 15)
    s.wait(lambda: settled(s, new), "the old master to replicate the new one", 20)
    assert not [n for n in s.notes() if "not determined" in n], s.notes()
    for c in s.files:
        assert s.watch.history(c) == [new.address], f"{c}'s file changed"
    assert role(old) == "slave"
    s.watch.check()


def test_a_client_that_still_sees_the_master_refuses_to_invalidate_it(failover_set) -> None:
    """The RCS and rcc-2 lose the master, rcc-1 still reaches it: rcc-2 empties its file and
    answers, rcc-1 refuses, the round is cancelled and rcc-2 gets the master back."""
    s = failover_set()
    master, replica = s.master, s.replicas[0]
    s.wait(lambda: s.names() == {master.address}, "every file to name the master", 15)
    s.watch.mark()
    assert s.routes is not None
    s.routes.cut("rcs-0", master.address)
    s.routes.cut("rcc-2", master.address)
    s.wait(lambda: len(s.cancelled()) >= 2, "two rounds cancelled", 25)
    for note in s.cancelled():
        assert "no client_invalidated from ['rcc-1']" in note, note
    assert role(replica) == "slave", "a replica was promoted while rcc-1 still used the master"
    assert None in s.watch.history("rcc-2"), "rcc-2 never acted on an invalidate"
    assert s.watch.history("rcc-1") == [master.address], "rcc-1 gave up a master it reaches"
    # each cancelled round gives rcc-2 the master back
    s.wait(lambda: s.files["rcc-2"].read() == master.address, "rcc-2 to get it back", 10)

    s.routes.heal()
    s.wait(lambda: s.status()["redis_master_available"], "the RCS to see the master", 15)
    s.wait(lambda: s.names() == {master.address}, "every file to name the master", 10)
    assert settled(s, master)
    s.watch.check()


def test_a_split_between_the_rcs_and_the_master_causes_no_switch(failover_set) -> None:
    """Only the RCS loses the master; every client still reaches it and refuses to let it go:
    no file is ever emptied and nothing is promoted."""
    s = failover_set()
    master, replica = s.master, s.replicas[0]
    s.wait(lambda: s.names() == {master.address}, "every file to name the master", 15)
    s.watch.mark()
    assert s.routes is not None
    s.routes.cut("rcs-0", master.address)
    s.wait(lambda: len(s.cancelled()) >= 2, "two rounds cancelled", 25)
    for note in s.cancelled():
        assert "no client_invalidated from ['rcc-1', 'rcc-2']" in note, note
    assert role(replica) == "slave", "a replica was promoted while the clients used the master"
    for c in s.files:
        assert s.watch.history(c) == [master.address], f"{c}'s file changed"

    s.routes.heal()
    s.wait(lambda: s.status()["redis_master_available"], "the RCS to see the master", 15)
    assert s.names() == {master.address}
    assert settled(s, master)
    s.watch.check()


# ---- refused, or no answer (issue 20.1) -------------------------------------------------------


def _lines(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    """The failover log lines containing `text`, each with its fields (the cores' details)."""
    return [
        f"{r.getMessage()} {getattr(r, 'fields', '')}"
        for r in caplog.records
        if text in r.getMessage()
    ]


def test_a_killed_master_is_switched_without_the_retries(failover_set, caplog) -> None:
    """SIGKILL: the RCS's watch connection closes, its check is refused, and the round starts
    at once; every client still checks the master itself (refused too) before it lets go."""
    caplog.set_level(logging.INFO, logger="failover")
    s = failover_set(routed=False, master_retries=50)  # the retries alone would take 10 s
    master, replica = s.master, s.replicas[0]
    s.wait(lambda: s.names() == {master.address}, "every file to name the master", 15)
    s.watch.mark()
    master.stop(kill=True)
    s.wait(lambda: s.names() == {replica.address}, "every file to name the replica", 8)
    assert _lines(caplog, "the master closed our connection")
    assert _lines(caplog, "master check refused")
    invalidated = _lines(caplog, "RCC: invalidating the master")
    assert len(invalidated) == 2 and all("refused" in line for line in invalidated), invalidated
    for c in s.files:
        s.wait(
            lambda c=c: s.watch.history(c) == [master.address, None, replica.address],
            f"{c}'s file to go from the master through empty to the replica",
            5,
        )
    s.watch.check()


def test_a_sigstopped_master_keeps_the_deliberate_checks(failover_set, caplog) -> None:
    """SIGSTOP: nothing refuses and no connection closes; the master is switched only after
    master_retries failed checks, and the clients' own checks time out (no answer)."""
    caplog.set_level(logging.INFO, logger="failover")
    s = failover_set(routed=False)
    master, replica = s.master, s.replicas[0]
    s.wait(lambda: s.names() == {master.address}, "every file to name the master", 15)
    assert master.proc is not None
    master.proc.send_signal(signal.SIGSTOP)
    try:
        s.wait(lambda: s.names() == {replica.address}, "every file to name the replica", 20)
    finally:
        master.proc.send_signal(signal.SIGCONT)
    assert not _lines(caplog, "master check refused")
    assert not _lines(caplog, "the master closed our connection")
    failed = _lines(caplog, "RCS: master check failed")
    assert len(failed) >= FAST_RCS["master_retries"], failed
    invalidated = _lines(caplog, "RCC: invalidating the master")
    assert invalidated and all("no answer" in line for line in invalidated), invalidated
    s.watch.check()


def test_a_master_refusing_the_rcs_alone_causes_no_switch(failover_set, caplog) -> None:
    """The master refuses the RCS's connections (its proxy goes away) but serves the clients:
    the refusal is believed at once, and every client refuses to invalidate a master it still
    reaches. No file changes, nothing is promoted."""
    caplog.set_level(logging.INFO, logger="failover")
    s = failover_set()
    master, replica = s.master, s.replicas[0]
    s.wait(lambda: s.names() == {master.address}, "every file to name the master", 15)
    s.watch.mark()
    assert s.routes is not None
    s.routes.refuse("rcs-0", master.address)
    s.wait(lambda: len(s.cancelled()) >= 1, "a round cancelled", 15)
    assert _lines(caplog, "master check refused")
    # Each client checks the master itself and refuses. (On a machine so loaded that a
    # client's own check of the live master takes over the shell's 1 s Redis timeout, that
    # client sees "no answer" and lets go; the other one still blocks the switch.)
    assert _lines(caplog, "ignoring invalidate")
    assert role(replica) == "slave", "a replica was promoted while the clients used the master"
    for c in s.files:
        assert replica.address not in s.watch.history(c), f"{c}'s file named the replica"

    s.routes.heal()
    s.wait(lambda: s.status()["redis_master_available"], "the RCS to see the master", 15)
    assert s.names() == {master.address} and settled(s, master)
    s.watch.check()


@pytest.mark.parametrize(
    ("point", "old_back_first"),
    [("invalidate", False), ("promote", False), ("promote", True)],
    ids=["after-invalidate", "after-promote", "after-promote-old-master-back"],
)
def test_the_active_rcs_killed_mid_switch_the_standby_finishes_it(
    failover_set, point: str, old_back_first: bool
) -> None:
    """Two candidates elected through gossip; the master dies; the active RCS is killed right
    after it published invalidate, or right after its REPLICAOF NO ONE took effect. The standby
    is elected with a higher term and finishes the switch: it adopts a promotion already made
    rather than make a second one. If the old master is back before the standby takes over,
    the standby keeps it (the switch is called off) and demotes the stray promotion. In the
    end exactly one server is a master, every other one its replica, and every file names it."""
    s = failover_set(replicas=2, candidates=2, routed=False, takeover_after=2.5)
    old = s.master
    first = s.wait(lambda: s.actives() if len(s.actives()) == 1 else None, "one active", 20)[0]
    s.wait(lambda: s.names() == {old.address}, "every file to name the master", 15)
    term = s.status(first)["term"]
    s.watch.mark()

    s.crash.armed = point
    old.stop(kill=True)
    assert s.crash.hit.wait(20), f"the active RCS never reached {point}"
    assert s.crash.victim is first
    supervisors.exit(first, "kill")
    s.crash.release.set()
    assert not first.is_alive()
    promoted = s.crash.server
    if point == "promote":
        assert promoted is not None and promoted != old.address
        assert redis_ops.is_master(promoted) is True
        assert s.names() == {None}, "a promotion before every file was emptied"
    else:
        assert promoted == old.address  # what the invalidate named
        # the clients act on the invalidate the dead RCS sent: every file is emptied
        s.wait(lambda: s.names() == {None}, "the clients to empty their files", 10)
    if old_back_first:
        old.start("--repl-diskless-sync-delay", "0")  # two masters now: old and promoted

    (other,) = [r for r in s.candidates if r is not first]
    s.wait(lambda: s.actives() == [other], "the standby to take over", 20)
    assert s.status(other)["term"] > term
    s.wait(lambda: None not in s.names() and len(s.names()) == 1, "the files to agree", 20)
    (new_address,) = s.names()
    new = next(x for x in s.servers if x.address == new_address)
    if old_back_first:
        assert new is old, "the standby moved the workers away from a master that was back"
    else:
        assert new is not old
        live = [x for x in s.servers if x.alive]
        s.wait(
            lambda: [x.address for x in live if role(x) == "master"] == [new_address],
            "exactly one master among the live servers",
            15,
        )
        old.start("--repl-diskless-sync-delay", "0")
    if point == "promote":
        assert other.proxy().promoted.get(timeout=5) == [], "the standby promoted again"
        if not old_back_first:
            assert new_address == promoted, "the standby promoted another replica"

    s.wait(lambda: settled(s, new), "one master, every other server its replica", 20)
    assert s.names() == {new_address}
    for c in s.files:
        history = s.watch.history(c)
        assert history[0] == old.address and history[-1] == new_address, history
    s.watch.check()


def test_the_file_watch_sees_two_masters_named_at_once(tmp_path: Path) -> None:
    """The watch itself: a switch through empty files is clean; two names at once are not."""
    files = {c: RedisMasterFile(tmp_path / f"{c}.master", SYSTEM) for c in ("a", "b")}
    watch = FileWatch({c: f.path for c, f in files.items()})
    try:
        for value in ("127.0.0.1:1", None, "127.0.0.1:2"):
            for f in files.values():
                f.write(value)
            # the watch may not have sampled yet: an empty history is "not yet", not an error
            wait_until(lambda v=value: watch.history("b")[-1:] == [v], "the watch to see it", 5)
        watch.assert_clean()
        files["a"].write("127.0.0.1:3")
        wait_until(lambda: watch.violations, "the watch to see two masters", 5)
        assert watch.violations[0] == {"a": "127.0.0.1:3", "b": "127.0.0.1:2"}
        with pytest.raises(AssertionError, match="different masters"):
            watch.assert_clean()
    finally:
        watch.stop()
