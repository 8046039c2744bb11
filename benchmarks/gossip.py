"""Gossip benchmarks: mingle, elections and steady-state bus load, against Celery in the same run.

1. mingle: a node joining 2, 10 and 50 running peers (Redis and RabbitMQ). Two figures per
   case, medians of several joins: "start" is `Gossip.start(url)` until `wait_mingled` returns
   (it includes connecting the node's own bus), "mingle" is the same with a bus that is
   already connected (the sync alone). Goal: mingle <= 50 ms with 10 peers (and, issue 20
   part 3, with 50). The peers
   heartbeat every 5 s (see PEER_HEARTBEAT); a join that ends by the 1 s timeout instead of
   hearing from every peer is counted and shown.
   Baseline: Celery's mingle, `app.control.inspect(timeout=1.0).hello(hostname, revoked)`
   (celery/worker/consumer/mingle.py), timed against 2 real Celery workers on the same Redis.
   It always waits its full second, so the ratio shows what the early finish buys.
   Same-run baseline for the mingle figure: the same joins with worker-online sent at start,
   before the hello (the order before issue 20.3), patched in and run alternately.
2. election latency with 3 and 10 nodes on Redis: `elect(...)` from one node until it returns
   the winner (median), and with every node asking the same id at once (one winner, checked).
   Goal: <= 50 ms. Baseline for the storm: the protocol before issue 20.3 (acks broadcast,
   every decider broadcasting its result), patched in and run alternately in the same run.
   `--parts election-procs` runs the storm with one node per process, as deployed (every
   node asks at the same wall-clock instant; the figure is until the last has the winner),
   with the previous protocol alternated in the same processes.
3. steady state at the default heartbeat interval (2 s): broker messages published and
   received per node per second with 3 and 10 nodes (both groups run at once, on separate
   exchanges), counted by a probe subscriber and by `bus.stats()`. Reference: Celery's Heart
   sends one worker-heartbeat per interval (0.5/s), so a node should publish ~0.5/s whatever N
   is, and receive ~0.5 x N/s (every heartbeat reaches every node, as in Celery).

All nodes run in this process (one GIL for all: with 50 nodes the figures include the other
49 nodes' work on every message). `--parts mingle-procs` times the same joins with the peers
in processes of their own, as deployed, next to the one-process figure of the same run.
Logs go to a temp file (printed).

Usage: python benchmarks/gossip.py [--quick]
           [--parts mingle,mingle-procs,celery,election,election-procs,load]
           [--redis URL] [--amqp URL] [--peers 2,10,50] [--backends redis,amqp]
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from monitors.bus import Bus, BusMessage, connect_bus
from monitors.gossip import ElectionError, Gossip, elect, wait_mingled

REDIS_URL = "redis://127.0.0.1:6379/0"
AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
GOAL_MS = 50.0
CELERY_REFERENCE_S = 1.01  # Celery 5.7's hello inspect measured earlier on this machine
DEFAULT_HEARTBEAT = 2.0  # the default interval: the steady-state figures are measured at it
# Mingle peers beat slower: 50 nodes in ONE process at 2 s cost 0.6 (Redis) to 0.8 (RabbitMQ) of
# a core in bus threads alone, and that lag (plus the AMQP event-queue TTL, which is the
# heartbeat interval) made peers lose each other before any joiner came. One process per node,
# as deployed, has no such cost. The mingle itself does not depend on the heartbeat.
PEER_HEARTBEAT = 5.0


@dataclass
class Summary:
    """Rows for the table printed at the end."""

    rows: list[tuple[str, str, str]] = field(default_factory=list)

    def add(self, what: str, value: str, versus: str) -> None:
        self.rows.append((what, value, versus))

    def print(self) -> None:
        if not self.rows:
            return
        widths = [max(len(r[i]) for r in [*self.rows, ("figure", "value", "vs")]) for i in (0, 1)]
        print("\nsummary")
        print(f"  {'figure':<{widths[0]}}  {'value':>{widths[1]}}  vs baseline / goal")
        for what, value, versus in self.rows:
            print(f"  {what:<{widths[0]}}  {value:>{widths[1]}}  {versus}")


def reachable(url: str) -> str | None:
    """None if something answers on the URL's host and port, else why not."""
    parts = urlsplit(url)
    port = parts.port or (6379 if parts.scheme == "redis" else 5672)
    try:
        socket.create_connection((parts.hostname or "127.0.0.1", port), timeout=1).close()
    except OSError as exc:
        return f"cannot connect to {parts.hostname}:{port}: {exc}"
    return None


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll until `predicate()` is truthy; raise after `timeout` s (a benchmark must not hang)."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


def alive(ref: Any) -> list[str]:
    return ref.proxy().alive_workers().get(timeout=10)


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


@contextlib.contextmanager
def cluster(url: str, n: int, prefix: str, **options: Any) -> Iterator[tuple[str, list[Any]]]:
    """`n` Gossip nodes on a fresh exchange, formed (everyone sees everyone, mingle over);
    stopped on exit. Yields (exchange, refs)."""
    exchange = f"bench-{uuid.uuid4().hex[:8]}"
    refs: list[Any] = []
    try:
        for i in range(n):
            refs.append(Gossip.start(url, f"{prefix}{i}@bench", exchange=exchange, **options))
        for ref in refs:
            wait_for(lambda r=ref: len(alive(r)) == n - 1, 60, f"{n} nodes to see each other")
        for ref in refs:
            if not wait_mingled(ref, 30):
                raise TimeoutError("a peer did not finish its start-up mingle")
            ref.proxy().register_election_handler("bench", lambda action: None).get(timeout=10)
        yield exchange, refs
    finally:
        for ref in refs:
            with contextlib.suppress(Exception):
                ref.stop()


# ------------------------------------------------------------------------------ 1. mingle


@dataclass
class MingleFigures:
    start_ms: float
    mingle_ms: float
    incomplete: int  # joins that did not end knowing every peer (a timeout, not an early finish)
    online_first_ms: float = 0.0  # the same-run baseline: worker-online before the hello


@contextlib.contextmanager
def online_first() -> Iterator[None]:
    """The start-up order before issue 20.3 part 3, patched in for a same-run baseline: the
    joiner sends worker-online at start, before its hello (so every peer handles the online
    before it answers), not once its mingle is over."""
    from monitors.gossip import gossip_core
    from monitors.gossip.effects import Publish

    cls = gossip_core.GossipCore
    start, online = cls.start, cls._online

    def start_online_first(self: Any, now: float) -> Any:
        out = start(self, now)
        if not self.gossip:
            return out
        return (
            self._filter([Publish("worker.online", self._worker_msg("worker.online", now))]) + out
        )

    cls.start, cls._online = start_online_first, lambda self, now: []  # type: ignore[method-assign]
    try:
        yield
    finally:
        cls.start, cls._online = start, online  # type: ignore[method-assign]


def join_once(url: str, exchange: str, name: str, peers: list[Any], bus: Bus | None) -> float:
    """Start one node, time it until mingled, check it learnt every peer, stop it and wait until
    the peers have forgotten it (a departed joiner in their alive view would make the next
    joiner wait for its reply). Returns seconds, negative if the mingle ended incomplete."""
    spec: str | Bus = bus if bus is not None else url
    begin = time.perf_counter()
    ref = Gossip.start(spec, name, exchange=exchange, heartbeat_interval=PEER_HEARTBEAT)
    try:
        if not wait_mingled(ref, 10):
            raise TimeoutError(f"{name} did not mingle in 10 s")
        elapsed = time.perf_counter() - begin
        complete = len(alive(ref)) == len(peers)
    finally:
        ref.stop()
        if bus is not None:
            bus.close()
    for peer in peers:
        wait_for(lambda p=peer: name not in alive(p), 20, f"the peers to see {name} leave")
    return elapsed if complete else -elapsed


def bench_mingle(url: str, n_peers: int, repeats: int) -> MingleFigures:
    starts: list[float] = []
    mingles: list[float] = []
    baseline: list[float] = []
    incomplete = 0
    with cluster(url, n_peers, "p", heartbeat_interval=PEER_HEARTBEAT) as (exchange, peers):
        for k in range(repeats):
            t = join_once(url, exchange, f"join{k}@bench", peers, None)
            incomplete += t < 0
            starts.append(abs(t))
            for name, into in ((f"mingle{k}@bench", mingles), (f"first{k}@bench", baseline)):
                bus = connect_bus(url, name, exchange=exchange, heartbeat_interval=PEER_HEARTBEAT)
                with online_first() if into is baseline else contextlib.nullcontext():
                    t = join_once(url, exchange, name, peers, bus)
                incomplete += t < 0
                into.append(abs(t))
    return MingleFigures(median_ms(starts), median_ms(mingles), incomplete, median_ms(baseline))


# A peer in a process of its own (mingle-procs): as deployed, one node per process, so the
# peers' work is not serialized behind one GIL. It prints READY once mingled, and stops when
# its stdin closes.
PEER_PROCESS = """
import sys
from monitors.gossip import Gossip, wait_mingled
url, exchange, name, beat = sys.argv[1:5]
ref = Gossip.start(url, name, exchange=exchange, heartbeat_interval=float(beat))
if not wait_mingled(ref, 30):
    sys.exit("did not mingle")
print("READY", flush=True)
sys.stdin.read()
ref.stop()
"""


def wait_or_kill(procs: list[subprocess.Popen[str]]) -> None:
    """Wait up to 10 s for each process to end (told to already), then kill it."""
    for proc in procs:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@contextlib.contextmanager
def node_processes(script: str, argvs: list[list[str]]) -> Iterator[list[subprocess.Popen[str]]]:
    """One `python -c script *argv` per argv, each past its READY line; on exit their stdin is
    closed (their cue to stop) and each is waited for, killed after 10 s."""
    procs: list[subprocess.Popen[str]] = []
    try:
        for argv in argvs:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", script, *argv],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                )
            )  # fmt: skip
        for proc in procs:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "READY":
                raise RuntimeError(f"a node process did not start: {proc.args[3:]}")
        yield procs
    finally:
        for proc in procs:
            with contextlib.suppress(Exception):
                assert proc.stdin is not None
                proc.stdin.close()
        wait_or_kill(procs)


def bench_mingle_processes(url: str, n_peers: int, repeats: int) -> MingleFigures:
    """bench_mingle with n_peers - 1 peers in processes of their own, plus one in this process
    (it watches the joiner leave between joins)."""
    exchange = f"bench-{uuid.uuid4().hex[:8]}"
    argvs = [[url, exchange, f"q{i}@bench", str(PEER_HEARTBEAT)] for i in range(n_peers - 1)]
    with node_processes(PEER_PROCESS, argvs):
        watcher = Gossip.start(
            url, "watcher@bench", exchange=exchange, heartbeat_interval=PEER_HEARTBEAT
        )
        try:
            wait_for(lambda: len(alive(watcher)) == n_peers - 1, 60, "the peers to see each other")
            starts: list[float] = []
            mingles: list[float] = []
            incomplete = 0
            for k in range(repeats):
                t = join_once(url, exchange, f"pjoin{k}@bench", [watcher] * n_peers, None)
                incomplete += t < 0
                starts.append(abs(t))
                bus = connect_bus(
                    url, f"pmingle{k}@bench", exchange=exchange, heartbeat_interval=PEER_HEARTBEAT
                )
                t = join_once(url, exchange, f"pmingle{k}@bench", [watcher] * n_peers, bus)
                incomplete += t < 0
                mingles.append(abs(t))
        finally:
            watcher.stop()
        return MingleFigures(median_ms(starts), median_ms(mingles), incomplete)


# ------------------------------------------------------------------------------ Celery baseline

CELERY_APP = """
from celery import Celery

app = Celery("benchapp", broker={broker!r})
app.conf.control_exchange = {exchange!r}  # our own pidbox: no other worker on this broker answers
app.conf.worker_hijack_root_logger = False
"""


CELERY_WORKER = [sys.executable, "-m", "celery", "-A", "benchapp", "worker", "--pool=solo"]
CELERY_WORKER += ["--without-heartbeat", "--without-gossip", "--without-mingle"]


def bench_celery(broker: str, repeats: int) -> tuple[float | None, str]:
    """Median seconds of Celery's mingle call with 2 workers up, or (None, why not)."""
    try:
        import celery
    except ImportError as exc:
        return None, f"celery not importable ({exc}); pip install 'celery>=5.5,<5.8'"
    tag = uuid.uuid4().hex[:8]
    workdir = Path(tempfile.mkdtemp(prefix="rabbitry-bench-celery-"))
    (workdir / "benchapp.py").write_text(
        textwrap.dedent(CELERY_APP.format(broker=broker, exchange=f"bench{tag}"))
    )
    names = [f"w{i}@bench{tag}" for i in (1, 2)]
    procs: list[subprocess.Popen[bytes]] = []
    env = {**os.environ, "PYTHONPATH": str(workdir)}
    sys.path.insert(0, str(workdir))
    try:
        for name in names:
            log = open(workdir / f"{name.split('@')[0]}.log", "wb")  # noqa: SIM115 - the child's
            procs.append(
                subprocess.Popen(
                    [*CELERY_WORKER, "-n", name, "-l", "warning"],
                    cwd=workdir,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
            log.close()
        import benchapp  # the module generated above

        app = benchapp.app

        def both_answer() -> bool:
            for proc in procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"a celery worker exited with {proc.returncode}")
            replies = app.control.ping(timeout=0.5) or []
            return set(names) <= {name for reply in replies for name in reply}

        wait_for(both_answer, 60, "2 celery workers to answer ping")
        app.control.inspect(timeout=1.0).hello(f"bench@bench{tag}", [])  # warm the connection
        samples = []
        for _ in range(repeats):
            begin = time.perf_counter()
            replies = app.control.inspect(timeout=1.0).hello(f"bench@bench{tag}", []) or {}
            samples.append(time.perf_counter() - begin)
            if set(replies) != set(names):
                return None, f"celery's hello got replies from {sorted(replies)}, not {names}"
        return statistics.median(samples), f"celery {celery.__version__}, 2 workers, {broker}"
    except Exception as exc:
        logs = " | ".join(
            p.read_text(errors="replace")[-300:].strip() for p in workdir.glob("w*.log")
        )
        return None, f"celery could not be run: {exc!r}; worker logs: {logs or '(empty)'}"
    finally:
        sys.path.remove(str(workdir))
        sys.modules.pop("benchapp", None)
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        wait_or_kill(procs)


# ------------------------------------------------------------------------------ 2. elections


@dataclass
class StormCost:
    """What a storm cost this process (all nodes are in it): CPU ms and bus deliveries."""

    cpu_ms: list[float] = field(default_factory=list)
    deliveries: list[int] = field(default_factory=list)

    def add(self, cpu_s: float, deliveries: int) -> None:
        self.cpu_ms.append(cpu_s * 1000)
        self.deliveries.append(deliveries)

    def describe(self) -> str:
        cpu, got = statistics.median(self.cpu_ms), statistics.median(self.deliveries)
        per = cpu * 1000 / got if got else float("nan")
        return f"CPU {cpu:.1f} ms for {got:.0f} deliveries ({per:.0f} us each)"


def received(refs: list[Any]) -> int:
    """Frames every node's bus has taken from the broker so far (heartbeats included)."""
    return sum(ref.proxy().bus.get(timeout=10).stats()["received"] for ref in refs)


def costed_storm(refs: list[Any], eid: str, cost: StormCost) -> float:
    """everyone_asks, with the process's CPU time and the deliveries it took added to `cost`
    (counted once the last node has the winner, so a few stragglers may be left out)."""
    before = received(refs)
    cpu = time.process_time()
    elapsed = everyone_asks(refs, eid)
    cpu = time.process_time() - cpu
    cost.add(cpu, received(refs) - before)
    return elapsed


def bench_election(
    url: str, n: int, samples: int
) -> tuple[float, float, float, StormCost, StormCost]:
    """(median ms of one node asking, median ms of every node asking the same id at once, the
    same storm with the previous protocol patched in: the same-run baseline, and what the
    storms cost in CPU, ours and the previous protocol's)."""
    one: list[float] = []
    everyone: list[float] = []
    legacy: list[float] = []
    ours_cost, legacy_cost = StormCost(), StormCost()
    with cluster(url, n, "e", heartbeat_interval=1.0) as (_, refs):
        for k in range(samples):
            begin = time.perf_counter()
            elect(refs[k % n], f"one-{k}", "bench", None, timeout=10)
            one.append(time.perf_counter() - begin)
        for k in range(max(3, samples // 3)):  # alternate, so that load drift hits both
            everyone.append(costed_storm(refs, f"all-{k}", ours_cost))
            with broadcast_acks():
                legacy.append(costed_storm(refs, f"legacy-{k}", legacy_cost))
    return median_ms(one), median_ms(everyone), median_ms(legacy), ours_cost, legacy_cost


@contextlib.contextmanager
def broadcast_acks() -> Iterator[None]:
    """The election protocol before issue 20.3, patched in for a same-run baseline: every
    proposal is acked, by broadcast, and a candidacy heard does not stand in for an ack (so
    every decider also broadcasts its result). Agreement is the same; only the cost differs."""
    from monitors.gossip import election_core
    from monitors.gossip.effects import Publish

    cls = election_core.ElectionCore
    direct_ack, on_elect = cls._ack, cls.on_elect

    def ack(self: Any, e: Any, p: Any, now: float) -> Any:
        sent = direct_ack(self, e, p, now)
        return Publish(sent.routing_key, sent.body)

    def elect_msg(self: Any, msg: dict[str, Any], now: float, proxy: bool = False) -> list[Any]:
        # decided ids and clients' proposals (issue 26) as today: only acks differ
        if self.results.get(msg["id"]) is not None or msg.get("client"):
            return on_elect(self, msg, now, proxy)
        e = self.pending.setdefault(msg["id"], election_core._Election(msg["id"], now))
        p = election_core.Proposal(
            msg["clock"],
            msg["hostname"],
            msg["pid"],
            msg["candidate"],
            msg["topic"],
            msg.get("action"),
            for_=election_core._member(msg.get("for")),
        )
        e.record(p)
        e.touched = now
        return [ack(self, e, p, now), *self._maybe_decide(e, now)]

    cls._ack, cls.on_elect = ack, elect_msg  # type: ignore[method-assign]
    try:
        yield
    finally:
        cls._ack, cls.on_elect = direct_ack, on_elect  # type: ignore[method-assign]


def everyone_asks(refs: list[Any], eid: str) -> float:
    """Every node asks election `eid` at once; seconds until all have the (one) winner."""
    winners: list[str] = []
    errors: list[Exception] = []

    def ask(ref: Any) -> None:
        try:
            winners.append(elect(ref, eid, "bench", None, timeout=10))
        except ElectionError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=ask, args=(ref,)) for ref in refs]
    begin = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    elapsed = time.perf_counter() - begin
    if errors or len(set(winners)) != 1 or len(winners) != len(refs):
        raise RuntimeError(f"election {eid}: winners {Counter(winners)}, errors {errors}")
    return elapsed


# A node of the storm in a process of its own (election-procs). After READY it reads lines
# "eid at legacy": at wall-clock time `at` it asks election `eid` (with the previous protocol
# patched in when legacy is 1) and prints "DONE eid winner seconds-after-at".
STORM_PROCESS = """
import sys, time
sys.path.insert(0, sys.argv[5])
import gossip as bench
from monitors.gossip import Gossip, elect, wait_mingled
url, exchange, name, beat = sys.argv[1:5]
ref = Gossip.start(url, name, exchange=exchange, heartbeat_interval=float(beat))
if not wait_mingled(ref, 30):
    sys.exit("did not mingle")
print("READY", flush=True)
for line in sys.stdin:
    eid, at, legacy = line.split()
    patch = bench.broadcast_acks() if legacy == "1" else bench.contextlib.nullcontext()
    with patch:
        time.sleep(max(0.0, float(at) - time.time()))
        winner = elect(ref, eid, "bench", None, timeout=10)
        print("DONE", eid, winner, time.time() - float(at), flush=True)
ref.stop()
"""


def bench_election_processes(url: str, n: int, storms: int) -> tuple[float, float]:
    """Every node asks the same id at once, each node in a process of its own (as deployed:
    no GIL shared between nodes); (median ms until the last node has the one winner, the same
    with the previous protocol in the same processes, alternated)."""
    exchange = f"bench-{uuid.uuid4().hex[:8]}"
    here = str(Path(__file__).resolve().parent)
    argvs = [[url, exchange, f"s{i}@bench", "1.0", here] for i in range(n)]
    with node_processes(STORM_PROCESS, argvs) as procs:
        time.sleep(2.5)  # every node alive in every view (heartbeats every 1 s)
        ours: list[float] = []
        legacy: list[float] = []
        for k in range(storms):
            for flag, into in (("0", ours), ("1", legacy)):
                eid, at = f"procs-{flag}-{k}", time.time() + 0.3
                for proc in procs:
                    assert proc.stdin is not None
                    proc.stdin.write(f"{eid} {at!r} {flag}\n")
                    proc.stdin.flush()
                done = [proc.stdout.readline().split() for proc in procs if proc.stdout]
                winners = {d[2] for d in done if len(d) == 4 and d[1] == eid}
                if len(done) != n or len(winners) != 1:
                    raise RuntimeError(f"storm {eid}: answers {done}")
                into.append(max(float(d[3]) for d in done))
        return median_ms(ours), median_ms(legacy)


# ------------------------------------------------------------------------------ 3. load


@dataclass
class Load:
    n: int
    published: float  # per node per second, from the probe
    published_stats: float  # per node per second, from bus.stats() (published + sent)
    received: float  # per node per second, from bus.stats()
    kinds: Counter[str]


class Tally:
    """What a probe subscriber saw: messages by sender and by routing key."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.senders: Counter[str] = Counter()
        self.kinds: Counter[str] = Counter()

    def count(self, message: BusMessage) -> None:
        with self.lock:
            self.senders[message.sender] += 1
            self.kinds[message.routing_key] += 1

    def reset(self) -> None:
        with self.lock:
            self.senders.clear()
            self.kinds.clear()


def bench_load(url: str, sizes: list[int], window: float) -> list[Load]:
    """Every size runs at once on its own exchange; one probe per exchange counts by sender."""
    with contextlib.ExitStack() as stack:
        groups = []
        for n in sizes:
            exchange, refs = stack.enter_context(cluster(url, n, f"l{n}-"))
            tally = Tally()
            probe = stack.enter_context(connect_bus(url, f"probe{n}@bench", exchange=exchange))
            probe.subscribe("#", tally.count)
            groups.append((n, refs, tally))
        time.sleep(DEFAULT_HEARTBEAT)  # let the start-up traffic (online, mingle) pass
        before = {}
        for n, refs, tally in groups:
            tally.reset()
            before[n] = [ref.proxy().bus.get(timeout=10).stats() for ref in refs]
        begin = time.perf_counter()
        time.sleep(window)  # the measurement window: steady state is what we measure
        elapsed = time.perf_counter() - begin
        results = []
        for n, refs, tally in groups:
            after = [ref.proxy().bus.get(timeout=10).stats() for ref in refs]
            with tally.lock:
                published = sum(tally.senders.values()) / n / elapsed
                kinds_now = Counter(tally.kinds)
            out = sum(
                a["published"] + a["sent"] - b["published"] - b["sent"]
                for a, b in zip(after, before[n], strict=True)
            )
            received = sum(
                a["received"] - b["received"] for a, b in zip(after, before[n], strict=True)
            )
            results.append(Load(n, published, out / n / elapsed, received / n / elapsed, kinds_now))
        return results


# ------------------------------------------------------------------------------ main


def run_mingle(args: argparse.Namespace, summary: Summary, celery_s: float, label: str) -> None:
    backends = [("redis", args.redis), ("amqp", args.amqp)]
    for name, url in [b for b in backends if b[0] in args.backends]:
        problem = reachable(url)
        if problem:
            print(f"mingle on {name}: skipped ({problem})")
            continue
        for n in args.peers:
            f = bench_mingle(url, n, args.repeats)
            note = f"  [{f.incomplete} joins ended by the timeout]" if f.incomplete else ""
            print(
                f"mingle on {name}, {n} peers: start {f.start_ms:.1f} ms (incl. bus connect), "
                f"mingle {f.mingle_ms:.1f} ms, with worker-online first (the order before, "
                f"same run) {f.online_first_ms:.1f} ms  [median of {args.repeats}]{note}"
            )
            print(
                f"  ratio mingle/online-first = {f.mingle_ms / f.online_first_ms:.2f}; "
                f"mingle/celery = {f.mingle_ms / 1000 / celery_s:.3f} ({label}); "
                f"mingle/goal = {f.mingle_ms / GOAL_MS:.2f} (goal <= {GOAL_MS:.0f} ms"
                f"{' with 10 and 50 peers' if n not in (10, 50) else ''})"
            )
            summary.add(
                f"mingle {name} {n} peers (start)", f"{f.start_ms:.1f} ms", "incl. bus connect"
            )
            summary.add(
                f"mingle {name} {n} peers",
                f"{f.mingle_ms:.1f} ms",
                f"x{f.mingle_ms / 1000 / celery_s:.3f} of celery; goal {GOAL_MS:.0f} ms",
            )
            summary.add(
                f"mingle {name} {n} peers, online first",
                f"{f.online_first_ms:.1f} ms",
                f"the order before; new order x{f.mingle_ms / f.online_first_ms:.2f}",
            )


def run_mingle_processes(
    args: argparse.Namespace, summary: Summary, celery_s: float, label: str
) -> None:
    problem = reachable(args.redis)
    if problem:
        print(f"mingle with peer processes: skipped ({problem})")
        return
    for n in args.peers:
        in_one = bench_mingle(args.redis, n, args.repeats)
        apart = bench_mingle_processes(args.redis, n, args.repeats)
        print(
            f"mingle on redis, {n} peers: {apart.mingle_ms:.1f} ms with the peers in processes of "
            f"their own, {in_one.mingle_ms:.1f} ms with all in this process (same run)  "
            f"[median of {args.repeats}; incomplete {apart.incomplete}/{in_one.incomplete}]"
        )
        print(
            f"  ratio apart/one-process = {apart.mingle_ms / in_one.mingle_ms:.2f}; "
            f"apart/celery = {apart.mingle_ms / 1000 / celery_s:.3f} ({label}); "
            f"apart/goal = {apart.mingle_ms / GOAL_MS:.2f} (goal <= {GOAL_MS:.0f} ms)"
        )
        summary.add(
            f"mingle redis {n} peers, peer processes",
            f"{apart.mingle_ms:.1f} ms",
            f"one process {in_one.mingle_ms:.1f} ms; goal {GOAL_MS:.0f} ms",
        )


def run_celery(args: argparse.Namespace, summary: Summary) -> tuple[float, str]:
    problem = reachable(args.redis)
    if problem:
        measured, why = None, f"no Redis for the celery workers ({problem})"
    else:
        measured, why = bench_celery(args.redis, args.repeats)
    if measured is None:
        print(f"celery mingle baseline: NOT MEASURED in this run: {why}")
        print(f"  using the reference figure {CELERY_REFERENCE_S:.2f} s (measured earlier)")
        summary.add("celery mingle (hello)", f"{CELERY_REFERENCE_S * 1000:.0f} ms", "reference")
        return CELERY_REFERENCE_S, "vs celery reference, not measured in this run"
    print(f"celery mingle baseline: inspect(timeout=1.0).hello: {measured * 1000:.1f} ms")
    print(f"  [{why}; median of {args.repeats}]")
    summary.add("celery mingle (hello)", f"{measured * 1000:.1f} ms", "baseline, this run")
    return measured, "vs celery measured in this run"


def run_election(args: argparse.Namespace, summary: Summary) -> None:
    problem = reachable(args.redis)
    if problem:
        print(f"elections: skipped ({problem})")
        return
    for n in (3, 10):
        one, everyone, legacy, ours_cost, legacy_cost = bench_election(args.redis, n, args.samples)
        print(
            f"election on redis, {n} nodes: one asks {one:.1f} ms, all {n} ask at once "
            f"{everyone:.1f} ms (previous protocol, same run: {legacy:.1f} ms)  [median]"
            f"  [load average {os.getloadavg()[0]:.2f}]"
        )
        print(
            f"  storm cost in this process: {ours_cost.describe()}; previous protocol "
            f"{legacy_cost.describe()}  [median]"
        )
        print(
            f"  ratio one/goal = {one / GOAL_MS:.2f}, all/goal = {everyone / GOAL_MS:.2f} "
            f"(goal <= {GOAL_MS:.0f} ms), all/previous = {everyone / legacy:.2f}"
        )
        summary.add(f"election redis {n} nodes", f"{one:.1f} ms", f"goal {GOAL_MS:.0f} ms")
        summary.add(
            f"election redis {n} nodes, all ask",
            f"{everyone:.1f} ms",
            f"one winner; previous protocol {legacy:.1f} ms (x{everyone / legacy:.2f})",
        )


def run_election_processes(args: argparse.Namespace, summary: Summary) -> None:
    problem = reachable(args.redis)
    if problem:
        print(f"elections in processes: skipped ({problem})")
        return
    for n in (3, 10):
        everyone, legacy = bench_election_processes(args.redis, n, max(3, args.samples // 3))
        print(
            f"election on redis, {n} nodes in {n} processes: all ask at once {everyone:.1f} ms "
            f"(previous protocol, same processes, alternated: {legacy:.1f} ms)  [median]"
        )
        print(
            f"  ratio all/goal = {everyone / GOAL_MS:.2f} (goal <= {GOAL_MS:.0f} ms), "
            f"all/previous = {everyone / legacy:.2f}"
        )
        summary.add(
            f"election redis {n} procs, all ask",
            f"{everyone:.1f} ms",
            f"one winner; previous protocol {legacy:.1f} ms (x{everyone / legacy:.2f})",
        )


def run_load(args: argparse.Namespace, summary: Summary) -> None:
    problem = reachable(args.redis)
    if problem:
        print(f"steady-state load: skipped ({problem})")
        return
    celery_rate = 1 / DEFAULT_HEARTBEAT
    for load in bench_load(args.redis, [3, 10], args.window):
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(load.kinds.items()))
        print(
            f"steady state on redis, {load.n} nodes, heartbeat {DEFAULT_HEARTBEAT:g} s: per node "
            f"{load.published:.2f} msg/s published (probe; stats {load.published_stats:.2f}), "
            f"{load.received:.2f} msg/s received  [{args.window:g} s window: {kinds}]"
        )
        print(
            f"  ratio published/celery heart = {load.published / celery_rate:.2f} "
            f"(celery: one heartbeat per {DEFAULT_HEARTBEAT:g} s = {celery_rate:.2f}/s, by design, "
            f"not measured); received/(N x 0.5) = {load.received / (load.n * celery_rate):.2f}"
        )
        summary.add(
            f"published/node/s, {load.n} nodes",
            f"{load.published:.2f}",
            f"celery heart {celery_rate:.2f}",
        )
        summary.add(
            f"received/node/s, {load.n} nodes",
            f"{load.received:.2f}",
            f"N x {celery_rate:.2f} = {load.n * celery_rate:.2f}",
        )


PARTS = ("mingle", "mingle-procs", "celery", "election", "election-procs", "load")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer samples (a smoke run)")
    parser.add_argument(
        "--parts",
        default=",".join(p for p in PARTS if not p.endswith("-procs")),  # many processes: opt-in
        help=f"comma-separated, of {', '.join(PARTS)}",
    )
    parser.add_argument("--redis", default=REDIS_URL)
    parser.add_argument("--amqp", default=AMQP_URL)
    parser.add_argument("--peers", default="2,10,50", help="peer counts for the mingle figures")
    parser.add_argument("--backends", default="redis,amqp", help="brokers for the mingle figures")
    args = parser.parse_args()
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    if parts - set(PARTS):
        parser.error(f"unknown parts {sorted(parts - set(PARTS))}; known: {', '.join(PARTS)}")
    args.peers = [int(p) for p in args.peers.split(",")]
    args.backends = {b.strip() for b in args.backends.split(",")}
    args.repeats = 3 if args.quick else 5
    args.samples = 6 if args.quick else 15
    args.window = 6.0 if args.quick else 10.0
    fd, log_path = tempfile.mkstemp(prefix="rabbitry-bench-gossip-", suffix=".log")
    os.close(fd)
    logging.basicConfig(filename=log_path, level=logging.INFO)
    print(f"python {sys.version.split()[0]}, logging INFO and up to {log_path}")
    summary = Summary()
    started = time.perf_counter()
    celery_s, label = CELERY_REFERENCE_S, "vs celery reference, not measured in this run"
    if "celery" in parts:
        celery_s, label = run_celery(args, summary)
    if "mingle" in parts:
        run_mingle(args, summary, celery_s, label)
    if "mingle-procs" in parts:
        run_mingle_processes(args, summary, celery_s, label)
    if "election" in parts:
        run_election(args, summary)
    if "election-procs" in parts:
        run_election_processes(args, summary)
    if "load" in parts:
        run_load(args, summary)
    summary.print()
    print(f"total {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
