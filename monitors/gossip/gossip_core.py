"""GossipCore: one node's Celery-style gossip, with its mingle and elections, as a pure core.

This is the core an actor shell hosts (one per node, on top of `monitors.bus`). It owns the
node's Lamport clock and revoked set, which mingle, gossip and elections all move, and routes
bus messages to its parts: mingle_core.MingleCore (start-up sync, the hello server) and
election_core.ElectionCore (elections). Itself it does Celery's Gossip and Heart:

- worker-online once the start-up mingle is over, worker-heartbeat every `heartbeat_interval`
  (2 s) with freq, load and counters, worker-offline at stop;
- alive tracking: a worker is alive until `expire_window` (2) x its heartbeat freq after the
  last sign of life *as received here* (our clock, not the sender's: clock drift between hosts
  cannot fake a loss, Celery #5037/#3056), checked every `interval` (5 s); NodeJoined,
  NodeLeft and NodeLost effects;
- revoke broadcasts merged into the revoked LimitedSet (50 000 ids, 3 h);
- every message from another node adjusts the clock; our own messages (echoed by the bus) only
  forward it and are otherwise ignored.

Better than Celery on top of the parts' own improvements:

- heartbeats carry a digest of the revoked set; when a peer's digest differs from ours on two
  heartbeats in a row, one of the two (the one with fewer ids, or the lower name) sends it a
  direct hello, and the two sets converge (a revoke lost around a restart or a cut is not lost
  for ever, as it is in Celery once mingle is over);
- a bus disconnect is an event (`bus_down` / `bus_up`): while down we send nothing, decide no
  election and declare nobody lost (we cannot hear them; that says nothing about them); on
  reconnect every known worker gets a fresh heartbeat window, we announce ourselves again,
  mingle again (what was revoked meanwhile comes back) and resend our election messages.

Clients (issue 26): an executor runs its core with `client=True`. It subscribes to
wire.CLIENT_PATTERNS only, so the broker hands it revokes, election results and the replies to
its own hello, never another node's heartbeat, hello or proposal; its heartbeats say `client`
and reach core members only. A core member keeps the full Celery behaviour with the other core
members and tracks clients as workers, but never waits for one: clients are not in the
elections' alive set, nor in the alive lists a mingle reply names. For each client, exactly one
core member is its *proxy*: the highest of crc32(client, member) over the core members this
member believes alive, itself included (rendezvous hashing: when a member comes or goes, only
the clients it served move). The proxy answers the client's hello, stands for its election
proposals (election_core.py), and pushes it our revoked set when its heartbeat digest keeps
differing. Members whose views differ for a moment may both answer, or neither: two replies
are harmless, and with none the client asks every member (mingle_core.py) and resends its
proposal every `election_retry` s. A core node of the previous release treats a client as a
worker that never acks, so its elections wait for clients until they time out: upgrade the
core members before the executors.

Bad messages (unknown routing key, wrong version, missing or ill-typed fields) are logged and
dropped; nothing raises on input from the bus.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Any

from monitors.effects import CancelTimer, Log, SetTimer
from monitors.gossip import wire
from monitors.gossip.clock import LamportClock
from monitors.gossip.effects import (
    Direct,
    ElectionFailed,
    GossipEffect,
    MingleDone,
    NodeJoined,
    NodeLeft,
    NodeLost,
    Publish,
    Revoked,
)
from monitors.gossip.election_core import TIMER_PREFIX, ElectionCore
from monitors.gossip.limited_set import LimitedSet
from monitors.gossip.mingle_core import TIMER as MINGLE_TIMER
from monitors.gossip.mingle_core import MingleCore, merge

TIMER_HEARTBEAT = "heartbeat"
TIMER_PERIODIC = "periodic"

REVOKES_MAX = 50000  # Celery's REVOKES_MAX
REVOKE_EXPIRES = 10800.0  # Celery's REVOKE_EXPIRES: 3 h
HEARTBEAT_DRIFT_MAX = 16.0  # Celery's drift warning threshold


@dataclass
class Worker:
    """What we know of another node (Celery's events.state.Worker, reduced)."""

    hostname: str
    pid: int
    freq: float
    last_seen: float  # OUR wall clock when we last heard from it
    heartbeats: int = 0
    info: dict[str, Any] = field(default_factory=dict)
    digest: list[int] | None = None
    mismatches: int = 0
    resync_at: float = float("-inf")
    drifting: bool = False
    client: bool = False  # an executor: never waited for (see the module docstring)

    def expires(self, window: float) -> float:
        return self.last_seen + self.freq * window


class GossipCore:
    """See the module docstring. Every public method returns the effects to perform, in order.

    Events in: start, stop, receive(routing_key, body, now, sender=None), timer, bus_down,
    bus_up, set_paused, election, elect, revoke. Effects out: monitors/gossip/effects.py.
    """

    def __init__(
        self,
        node: str,
        pid: int,
        *,
        heartbeat_interval: float = 2.0,
        interval: float = 5.0,
        mingle_timeout: float = 1.0,
        without_mingle: bool = False,
        without_gossip: bool = False,
        revokes_max: int = REVOKES_MAX,
        revoke_expires: float = REVOKE_EXPIRES,
        sync_chunk: int = 1000,
        sync_max: int = REVOKES_MAX,
        election_retry: float = 3.0,
        election_attempts: int = 5,
        expire_window: float = 2.0,
        drift_max: float = HEARTBEAT_DRIFT_MAX,
        resync_backoff: float = 10.0,
        reconnect_grace: float = 5.0,
        utcoffset: float = 0,
        sw_ver: str = "",
        sw_sys: str = "",
        connected: bool = True,
        clock: LamportClock | None = None,
        revoked: LimitedSet | None = None,
        client: bool = False,
    ) -> None:
        self.node = node
        self.client = client
        self.pid = pid
        self.heartbeat_interval = heartbeat_interval
        self.interval = interval
        self.gossip = not without_gossip
        self.expire_window = expire_window
        self.drift_max = drift_max
        self.resync_backoff = resync_backoff
        # after a broker outage the peers reconnect over the bus's jittered backoff (up to its
        # reconnect_max, 5 s): nobody is declared lost before they have had that long
        self.reconnect_grace = reconnect_grace
        self.sync_chunk = max(1, min(sync_chunk, wire.MAX_IDS))
        self.clock = clock if clock is not None else LamportClock()
        self.revoked = (
            revoked
            if revoked is not None
            else LimitedSet(maxlen=revokes_max, expires=revoke_expires)
        )
        self.stamper = wire.Stamper(node, pid, self.clock)
        self.mingle = MingleCore(
            self.stamper,
            self.revoked,
            timeout=mingle_timeout,
            sync_chunk=sync_chunk,
            sync_max=sync_max,
            enabled=not without_mingle,
            client=client,
        )
        self.elections = ElectionCore(
            self.stamper, retry=election_retry, attempts=election_attempts, client=client
        )
        self.workers: dict[str, Worker] = {}
        self.connected = connected
        self.started = False
        self.stopped = False
        self.mingled = False  # a mingle round has finished (or mingle is off)
        self.stats: dict[str, Any] = {"active": 0, "processed": 0, "loadavg": [0.0, 0.0, 0.0]}
        self.static: dict[str, Any] = {
            "utcoffset": utcoffset,
            "sw_ident": "rabbitry",
            "sw_ver": sw_ver[: wire.MAX_NAME],
            "sw_sys": sw_sys[: wire.MAX_NAME],
        }
        self._resend = False
        self._digest_key: tuple[int, int] | None = None
        self._digest: list[int] = [0, 0]
        self._revoked_version = 0
        self._impostors: set[int] = set()

    # ---- queries ---------------------------------------------------------------------------------

    @property
    def paused(self) -> bool:
        return self.elections.paused

    def alive_workers(self, now: float | None = None) -> list[str]:
        """Other nodes we believe alive; with `now`, without those whose window has passed
        (the lost check drops them at its next run)."""
        if now is None:
            return sorted(self.workers)
        window = self.expire_window  # Worker.expires, inlined: every hello asks, per worker
        return sorted(h for h, w in self.workers.items() if now < w.last_seen + w.freq * window)

    def core_alive(self, now: float) -> list[str]:
        """The core members we believe alive (clients left out): whom a mingle names and an
        election waits for."""
        return [h for h in self.alive_workers(now) if not self.workers[h].client]

    def proxy_of(self, client: str, now: float) -> str:
        """The core member that serves `client` (see the module docstring)."""
        members = [*self.core_alive(now), self.node]
        return max(members, key=lambda m: (zlib.crc32(f"{client}|{m}".encode()), m))

    def is_revoked(self, task_id: str) -> bool:
        return task_id in self.revoked

    def status(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "pid": self.pid,
            "clock": self.clock.value,
            "alive": self.alive_workers(),
            "revoked": len(self.revoked),
            "connected": self.connected,
            "client": self.client,
            "mingling": self.mingle.mingling,
            "mingled": self.mingled,
            "elections": self.elections.status(),
        }

    def set_stats(
        self,
        *,
        active: int | None = None,
        processed: int | None = None,
        loadavg: list[float] | tuple[float, ...] | None = None,
    ) -> None:
        """What the next heartbeats report (the shell reads the load; the core reads nothing).

        Values are made wire-safe here: a heartbeat that peers refuse would get us lost."""
        if active is not None:
            self.stats["active"] = max(0, int(active))
        if processed is not None:
            self.stats["processed"] = max(0, int(processed))
        if loadavg is not None:
            self.stats["loadavg"] = [
                round(float(x), 2) if math.isfinite(float(x)) else 0.0 for x in list(loadavg)[:3]
            ]

    # ---- lifecycle -------------------------------------------------------------------------------

    def start(self, now: float) -> list[GossipEffect]:
        """The heartbeat and lost-check timers, then mingle; worker-online when it ends."""
        if self.started:
            return [Log.warning("gossip: start called twice; ignored")]
        self.started = True
        out: list[GossipEffect] = []
        if self.gossip:
            out.append(SetTimer(TIMER_HEARTBEAT, self.heartbeat_interval))
        out.append(SetTimer(TIMER_PERIODIC, self.interval))
        if self.connected:
            out += self._mingle(self.mingle.start(now), now)
        # else: bus_up mingles once the broker is reached; a mingle now would hear nobody
        # and end "all alone" without having synced anything
        return self._filter(out)

    def stop(self, now: float) -> list[GossipEffect]:
        """worker-offline; pending elections we asked for fail; every timer is cancelled."""
        if self.stopped:
            return []
        self.stopped = True
        out: list[GossipEffect] = [*self.elections.stop(now), *self.mingle.stop()]
        if self.gossip and self.started:
            out.append(Publish(wire.OFFLINE, self._worker_msg(wire.OFFLINE, now)))
        out += [CancelTimer(TIMER_HEARTBEAT), CancelTimer(TIMER_PERIODIC)]
        return self._filter(out)

    def bus_down(self, now: float) -> list[GossipEffect]:
        """The bus lost its broker: send nothing, decide nothing, declare nobody lost."""
        if not self.connected:
            return []
        self.connected = False
        out: list[GossipEffect] = [Log.warning("gossip: bus disconnected")]
        out += self.mingle.stop()
        out += self.elections.set_ready(False, now)
        return out

    def bus_up(self, now: float) -> list[GossipEffect]:
        """The bus is back: fresh windows for everyone, announce, mingle again, then resend our
        election messages."""
        if self.connected or self.stopped:
            self.connected = True
            return []
        self.connected = True
        for w in self.workers.values():
            w.last_seen = max(w.last_seen, now + self.reconnect_grace)
            w.mismatches = 0
        out: list[GossipEffect] = [Log.info("gossip: bus reconnected")]
        if not self.started:
            return out
        self._resend = True
        if self.mingle.enabled:
            out += self._mingle(self.mingle.start(now), now)
        else:
            out += self._online(now) + self._ready(now)
        return self._filter(out)

    def set_paused(self, paused: bool, now: float) -> list[GossipEffect]:
        """The node monitor paused (minority) or resumed this node: see election_core."""
        return self._filter(self.elections.set_paused(paused, now))

    # ---- API -------------------------------------------------------------------------------------

    def election(self, eid: str, topic: str, action: Any, now: float) -> list[GossipEffect]:
        """Celery's `election(id, topic, action)`: fire and forget (the result comes as
        ElectionDecided; failure after the default deadline as ElectionFailed)."""
        return self.elect(eid, topic, action, None, now)

    def elect(
        self, eid: str, topic: str, action: Any, timeout: float | None, now: float
    ) -> list[GossipEffect]:
        """The blocking flow's core half: the shell waits for ElectionDecided or ElectionFailed
        for `eid`; the latter comes by `timeout` seconds at the latest."""
        if not self.gossip:
            return [ElectionFailed(eid, "gossip is disabled (without_gossip)")]
        if self.stopped:
            return [ElectionFailed(eid, "stopped")]
        if not isinstance(eid, str) or not 0 < len(eid) <= wire.MAX_NAME:
            return [ElectionFailed(str(eid)[:64], "bad election id")]
        if not isinstance(topic, str) or not 0 < len(topic) <= wire.MAX_TOPIC:
            return [ElectionFailed(eid, f"bad topic {str(topic)[:64]!r}")]
        return self._filter(self.elections.election(eid, topic, action, now, timeout))

    def revoke(self, ids: list[str] | tuple[str, ...], now: float) -> list[GossipEffect]:
        """Revoke task ids here and on every node (a revoke broadcast, chunked)."""
        good = list(dict.fromkeys(i for i in ids if isinstance(i, str) and 0 < len(i) <= 255))
        out: list[GossipEffect] = []
        if len(good) != len(ids):
            out.append(Log.warning("revoke: ignored bad task ids", bad=len(ids) - len(good)))
        if not good:
            return out
        stamps = dict.fromkeys(good, float(now))
        new = merge(self.revoked, stamps, now)
        self._revoked_version += 1
        for chunk in wire.split(stamps, self.sync_chunk, len(stamps)):
            out.append(Publish(wire.REVOKE, self.stamper.stamp(wire.REVOKE, now, ids=chunk)))
        if new:
            out.append(Revoked(tuple(new)))
        return self._filter(out)

    # ---- timers ----------------------------------------------------------------------------------

    def timer(self, key: str, now: float, data: Any = None) -> list[GossipEffect]:
        if self.stopped:
            return []
        if key == TIMER_HEARTBEAT:
            out: list[GossipEffect] = [SetTimer(TIMER_HEARTBEAT, self.heartbeat_interval)]
            if self.connected and self.gossip:
                out.append(Publish(wire.HEARTBEAT, self._worker_msg(wire.HEARTBEAT, now)))
            return out
        if key == TIMER_PERIODIC:
            return self._filter(self._periodic(now))
        if key == MINGLE_TIMER:
            return self._filter(self._mingle(self.mingle.timer(key, now), now))
        if key.startswith(TIMER_PREFIX):
            return self._filter(self.elections.timer(key, now))
        return []

    def _periodic(self, now: float) -> list[GossipEffect]:
        """The lost check (Celery's `periodic`), plus housekeeping."""
        out: list[GossipEffect] = [SetTimer(TIMER_PERIODIC, self.interval)]
        if self.connected:
            for host in [
                h for h, w in self.workers.items() if now >= w.expires(self.expire_window)
            ]:
                out += self._gone(host, now, left=False)
        self.revoked.purge(now)
        out += self.elections.expire(now)
        return out

    # ---- messages --------------------------------------------------------------------------------

    def receive(
        self, routing_key: str, body: Any, now: float, sender: str | None = None
    ) -> list[GossipEffect]:
        """A message from the bus. `sender`, if the bus reports it, must match the body."""
        if self.stopped or not isinstance(routing_key, str):
            return []
        if not routing_key.startswith(("worker.", "mingle.")):
            return []  # not ours (Celery: task events on a fanout broker, #1882)
        bad = wire.problem(routing_key, body)
        if bad is None and sender is not None and sender != body["hostname"]:
            bad = f"sent by {sender[:64]!r} in the name of {body['hostname'][:64]!r}"
        if bad is not None:
            return [Log.warning("gossip: dropped a bad message", routing_key=routing_key, why=bad)]
        host = body["hostname"]
        if host == self.node:
            self.clock.forward()
            if body["pid"] != self.pid and body["pid"] not in self._impostors:
                self._impostors.add(body["pid"])
                return [Log.warning("gossip: another process uses our node name", pid=body["pid"])]
            return []
        self.clock.adjust(body["clock"])
        return self._filter(self._dispatch(routing_key, body, now))

    def _dispatch(self, rk: str, msg: dict[str, Any], now: float) -> list[GossipEffect]:
        if rk == wire.REVOKE:
            new = merge(self.revoked, msg["ids"], now)
            self._revoked_version += 1
            return [Revoked(tuple(new))] if new else []
        if rk == wire.HELLO:
            self._revoked_version += 1
            if self.client:
                return []  # a hello sent to us directly: clients serve no mingle
            if msg.get("client"):
                host = msg["hostname"]
                answer = not msg.get("one") or self.proxy_of(host, now) == self.node
                return self._mingle(self.mingle.on_hello(msg, now, [], reply=answer), now)
            alive = self.core_alive(now)
            return self._mingle(self.mingle.on_hello(msg, now, alive), now)
        if rk == wire.REPLY:
            self._revoked_version += 1
            # a client tracks nobody: it hears no heartbeat that would keep a replier alive
            track = self.gossip and not self.client
            out = self._seen(msg, now, self.heartbeat_interval) if track else []
            if self.client and msg.get("ask") and msg.get("to_pid", self.pid) == self.pid:
                out += self.mingle.resync(msg["hostname"], now)  # our proxy wants our set
            return out + self._mingle(self.mingle.on_reply(msg, now), now)
        if rk == wire.CHUNK:
            self._revoked_version += 1
            alive = self.core_alive(now)
            return self._mingle(self.mingle.on_chunk(msg, now, alive), now)
        if not self.gossip:
            return []
        if rk in (wire.ONLINE, wire.HEARTBEAT):
            return self._on_worker(msg, now) + self.mingle.note_alive(msg["hostname"], now)
        if rk == wire.OFFLINE:
            w = self.workers.get(msg["hostname"])
            if w is None or w.pid != msg["pid"]:
                return []
            return self._gone(msg["hostname"], now, left=True)
        if rk == wire.ELECT:
            proxy = bool(msg.get("client")) and self.proxy_of(msg["hostname"], now) == self.node
            return self.elections.on_elect(msg, now, proxy=proxy)
        if rk == wire.ELECT_ACK:
            return self.elections.on_ack(msg, now)
        return self.elections.on_result(msg, now)  # ELECT_RESULT

    def _on_worker(self, msg: dict[str, Any], now: float) -> list[GossipEffect]:
        out = self._seen(msg, now, float(msg["freq"]))
        w = self.workers[msg["hostname"]]
        w.heartbeats += 1
        w.info = {k: msg[k] for k in ("active", "processed", "loadavg") if k in msg}
        drift = abs(msg["ts"] - now)
        if drift > self.drift_max and not w.drifting:
            out.append(
                Log.warning(
                    "gossip: substantial drift from node; are its and our clocks in sync?",
                    node=w.hostname,
                    drift=round(drift, 3),
                )
            )
        w.drifting = drift > self.drift_max
        if "revoked_digest" in msg:
            out += self._compare_digest(w, msg["revoked_digest"], now)
        return out

    def _seen(self, msg: dict[str, Any], now: float, freq: float) -> list[GossipEffect]:
        """A sign of life from msg's sender: NodeJoined if it is new to us (NodeLost first if
        it is back with another pid: it restarted without a goodbye)."""
        host, pid = msg["hostname"], msg["pid"]
        out: list[GossipEffect] = []
        w = self.workers.get(host)
        if w is not None and w.pid != pid:
            out += self._gone(host, now, left=False)
            w = None
        if w is None:
            w = self.workers[host] = Worker(host, pid, freq, now, client=bool(msg.get("client")))
            out += [Log.info("gossip: node joined the party", node=host), NodeJoined(host)]
            if not w.client:
                out += self.elections.node_joined(host, now)
        w.freq = min(max(freq, 0.1), 3600.0)
        w.last_seen = max(w.last_seen, now)
        return out

    def _gone(self, host: str, now: float, *, left: bool) -> list[GossipEffect]:
        client = self.workers.pop(host).client
        out: list[GossipEffect]
        if left:
            out = [Log.info("gossip: node left", node=host), NodeLeft(host)]
        else:
            out = [Log.info("gossip: missed heartbeat from node", node=host), NodeLost(host)]
        return out if client else out + self.elections.node_gone(host, now)

    # ---- revoked digests (anti-entropy) --------------------------------------------------------------

    def revoked_digest(self, now: float) -> list[int]:
        """[count, crc sum] of our revoked ids (expired ones purged), cached between changes."""
        self.revoked.purge(now)
        key = (len(self.revoked), self._revoked_version)
        if key != self._digest_key:
            self._digest_key = key
            self._digest = wire.digest(self.revoked.to_wire())
        return self._digest

    def _compare_digest(self, w: Worker, theirs: list[int], now: float) -> list[GossipEffect]:
        if self.mingle.mingling or not self.connected:
            return []
        ours = self.revoked_digest(now)
        w.mismatches = w.mismatches + 1 if theirs != ours else 0
        if w.mismatches < 2 or now - w.resync_at < self.resync_backoff:
            return []
        if w.client:  # it cannot start a resync (it hears no heartbeat): its proxy pushes
            if self.proxy_of(w.hostname, now) != self.node:
                return []
            w.mismatches = 0
            w.resync_at = now
            return [
                Log.info("gossip: a client's revoked set differs; pushing ours", node=w.hostname),
                *self.mingle.push(w.hostname, w.pid, now),
            ]
        # One side starts: the one with fewer ids (it lacks some), or the lower name on a tie.
        if (ours[0], self.node) > (theirs[0], w.hostname):
            return []
        w.mismatches = 0
        w.resync_at = now
        return [
            Log.info("gossip: revoked sets differ; resyncing", node=w.hostname),
            *self.mingle.resync(w.hostname, now),
        ]

    # ---- helpers -------------------------------------------------------------------------------------

    def _worker_msg(self, rk: str, now: float) -> dict[str, Any]:
        extra = {"client": True} if self.client else {}
        return self.stamper.stamp(
            rk,
            now,
            freq=self.heartbeat_interval,
            **self.stats,
            **self.static,
            revoked_digest=self.revoked_digest(now),
            **extra,
        )

    def _mingle(self, effects: list[GossipEffect], now: float) -> list[GossipEffect]:
        """Pass mingle's effects on; when a round ends, we announce ourselves and elections
        may start."""
        if not any(isinstance(e, MingleDone) for e in effects):
            return effects
        self.mingled = True
        return list(effects) + self._online(now) + self._ready(now)

    def _online(self, now: float) -> list[GossipEffect]:
        """worker-online, sent once the mingle that follows a start or a reconnect is over.

        Not before the hello: every peer would handle both at once, and with the online
        first each reply waits behind it (with 50 peers in one process that made the mingle
        half as long again, docs/gossip.md). The peers lose nothing by hearing of us later:
        a mingling node cannot propose yet, and our online goes out before our first
        proposal (messages of one sender keep their order), so a decider knows us alive
        before it could wait for us. A node starting at the same moment counts our hello
        and waits for our reply, which also marks us seen."""
        if not self.gossip:
            return []
        return [Publish(wire.ONLINE, self._worker_msg(wire.ONLINE, now))]

    def _ready(self, now: float) -> list[GossipEffect]:
        resend, self._resend = self._resend, False
        ready = self.connected and self.gossip and not self.stopped
        return self.elections.set_ready(ready, now, resend=resend)

    def _filter(self, effects: list[GossipEffect]) -> list[GossipEffect]:
        """While the bus is down nothing can be sent (what matters is resent on reconnect)."""
        if self.connected:
            return effects
        return [e for e in effects if not isinstance(e, (Publish, Direct))]
