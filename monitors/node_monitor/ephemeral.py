"""EphemeralMonitorCore: the node monitor of an ephemeral node (a Spark executor, say).

An ephemeral node attaches to the core of a cluster, as an Erlang hidden node, a Partisan
client or a member without Akka SBR's `role` does (docs/membership.md). It has the same
interface as NodeMonitorCore (fed events with the current time, returns effects) and is built
instead of it when the node's config says `role: ephemeral`.

Decisions worth knowing before reading the code:
- It connects to core members only: the seeds from its config (or `rabbitry cluster join`)
  and the members the core announces. It never opens a connection to another ephemeral node:
  it sends no Connect for one, and it answers nobody but core members (a message sent to one
  through NetKernel may still open a link, as with Erlang's hidden nodes).
- It never counts. It sends no view, takes no part in partial-partition checks or autoheal,
  and the core keeps it out of all/disc/running (core.py). Its own status names the core in
  all/disc/running and itself in `ephemeral`.
- It follows the core, decided from its own links and the records core members send it:
  - pause_minority: run while it reaches a strict majority of the core, one of them running;
  - pause_if_all_down: while it reaches a listed node, and a running core member;
  - ignore, autoheal: while it reaches the running core member it follows (the least name
    when it starts). When that member stops its application (an autoheal loser restarting, a
    pause) or its link goes, the ephemeral node stops its application too, and starts it
    again with a running member it reaches: it restarts with the side it was on.
  Its application is held at boot until that holds, in every mode: a fresh executor must not
  run before it knows it is on the side that runs.
- The core's size is the union of its seeds and of every member a core member's list has
  named, less the members the others agree are gone: every other current member that sent a
  list omits it, and at least two do (one, if it has only one other). Larger is the safe
  side of a majority: one member's list never drops another member (a core node that ran
  `rabbitry cluster leave` lists itself alone, and must not shrink the core to itself; nor
  may the first list to reach a fresh executor), a member that one current list still
  names stays, and the lists of members that went count no more. A member's own word that it
  left (`left` in its records: the members of the cluster it left) drops it at once, and its
  list counts no more; those members become seeds. An executor attached to a member that left
  moves to the rest.
- It runs the core's partition handling, not its own: core records carry the core's mode
  (`mode`), and a different local setting is logged once (DESIGN).
- It never writes the cluster files: it has no membership of its own to keep. Leaving (or a
  graceful stop) tells the core, which forgets it at once; otherwise the core forgets it
  `forget_ephemeral_after` seconds after its links went.
- Cut off from every core member it keeps trying each ping round (1 s, jittered by half either
  way, doubling to 4 s while it reaches no core member), and says so in its log once
  per back-off step (1, 2, 4 ... 60 s, monitors/retry_log.py), not each round.
"""

from __future__ import annotations

import zlib
from typing import Any

from monitors.effects import Connect, Log, Send
from monitors.node_monitor import decision
from monitors.node_monitor.config import PartitionHandling
from monitors.node_monitor.effects import NodeMonitorEffect, PauseApp
from monitors.node_monitor.messages import MAX_LIST, MAX_NAME, VERSION, problem
from monitors.node_monitor.partitions import majority
from monitors.node_monitor.status import ClusterStatus
from monitors.retry_log import RetryBackoff

TIMER_PING = "ping_core"
TIMER_KEEPALIVE = "keepalive"
PING_BACKOFF_MAX = 4.0  # cut off from the whole core: ping rounds at most 4x apart
ALONE_LOG_MAX = 60.0  # the longest back-off between two "cannot reach the core" lines

ROLE_CORE = "core"
ROLE_EPHEMERAL = "ephemeral"
ROLES = (ROLE_CORE, ROLE_EPHEMERAL)


def core_from_lists(lists: dict[str, frozenset[str]], seeds: set[str]) -> set[str]:
    """The core from `seeds` (the configured seeds and every member a list ever named) and
    the member lists core members sent: their union (a seed is a member until the core agrees
    it is not: the first list to reach a fresh executor may come from a node that left, and a
    newer list may omit a member the older one named), then, until nothing changes, drop the
    members the others
    agree are gone: every other current member that sent a list omits it, and at least two
    such lists do (one if it has a single other member). One member's list thus never drops
    another member, nor do the first lists to reach a fresh executor while the others are
    still silent, and the lists of members that went count no more. A round drops every
    member it finds at once (no name goes first), and never the whole core: lists that each
    name only their sender (one member left, the other forgot it) say nothing of which of
    them is the cluster."""
    core = set(seeds).union(*lists.values())
    while True:
        gone = {m for m in core if _agreed_gone(m, core, lists)}
        if not gone or gone == core:
            return core
        core -= gone


def _agreed_gone(member: str, core: set[str], lists: dict[str, frozenset[str]]) -> bool:
    others = core - {member}
    said = [lists[o] for o in others if o in lists]
    if any(member in listed for listed in said):
        return False
    return len(said) >= min(2, len(others)) > 0


class EphemeralMonitorCore:
    """The monitor of one ephemeral node. Every public method returns the effects to perform."""

    NAME = "rabbit_node_monitor"
    role = ROLE_EPHEMERAL
    hold_app = True  # read by the simulator: the application starts held

    def __init__(
        self,
        node: str,
        creation: int,
        seeds: list[str] | tuple[str, ...] | set[str],
        config: PartitionHandling | None = None,
        *,
        down_ping_interval: float = 1.0,
        keepalive_interval: float = 10.0,
        **_ignored: Any,
    ) -> None:
        self.node = node
        self.creation = creation
        self.config = config or PartitionHandling()
        self.down_ping_interval = down_ping_interval
        self.keepalive_interval = keepalive_interval
        self._seeds: set[str] = set(seeds) - {node}
        self._lists: dict[str, frozenset[str]] = {}  # core member -> the members it listed
        # every member some list named: a newer list that omits one does not make it unheard of
        # (it goes when the others agree, core_from_lists), or one member's word would do it
        self._named: set[str] = set()
        self._disc: set[str] = set()
        self._not_core: set[str] = set()  # seeds that said they are ephemeral
        self._left_members: dict[str, int] = {}  # members that said they left -> creation
        # core_members(), kept until one of its inputs (seeds, lists, named, not_core,
        # left_members) changes: a member's start asked for it some 85 times, 0.2 ms each
        self._core_cache: frozenset[str] | None = None
        self._up: dict[str, int] = {}  # dist connections: node -> creation
        self._guids: dict[str, int] = {}  # creation each core member's monitor announced
        self._greeted: set[str] = set()
        self._running: set[str] = set()  # core members whose application runs
        self._follow: str | None = None  # ignore/autoheal: the member whose side we are on
        self._restart = False  # our side went: stop, then start with a running member
        self._paused = True
        self._ever_resumed = False  # the first resume is the application's start
        self._app = "stopped"  # held at boot: running|stopping|stopped|starting
        self._alarms: frozenset[str] = frozenset()
        self._timers: set[str] = set()
        self._started = False
        self._left = False
        self._local_config = self.config  # what our own config said; the core's wins
        self._mode_told = False
        # "cannot reach the core": once per back-off step, as the dist connect loop logs
        self._alone = RetryBackoff(max_step=ALONE_LOG_MAX)
        self._alone_checked: float | None = None
        self._ping_rounds = 0  # ping rounds in a row that reached no core member (back-off)
        self._ping_seq = 0  # ping rounds armed: the jitter's seed

    # ======================================================================= queries

    @property
    def paused(self) -> bool:
        return self._paused

    def core_members(self) -> set[str]:
        """The core as far as this node knows: the lists core members sent (or the seeds),
        less the members every other current member's list omits (see the docstring)."""
        if self._core_cache is None:
            left = self._left_members
            lists = {s: listed for s, listed in self._lists.items() if s not in left}
            known = self._seeds | self._named
            core = core_from_lists(lists, known) - self._not_core - set(left) - {self.node}
            self._core_cache = frozenset(core)
        return set(self._core_cache)

    def status(self) -> dict[str, Any]:
        """The same keys as a core node's status; all/disc/running name core members."""
        core = self.core_members()
        return {
            "node": self.node,
            "all": sorted(core),
            "disc": sorted(self._disc & core),
            "running": sorted(self._running & core),
            "partitions": [],
            "paused": self._paused,
            "alarms": {self.node: sorted(self._alarms)} if self._alarms else {},
            "ephemeral": [self.node],
        }

    def cluster_status(self) -> ClusterStatus:
        core = self.core_members()
        return ClusterStatus(
            all=tuple(core), disc=tuple(self._disc & core), running=tuple(self._running & core)
        )

    def ephemeral_members(self) -> tuple[list[str], list[str]]:
        """(up, down) ephemeral members this node knows: itself, on an ephemeral node."""
        return [self.node], []

    # ======================================================================= events

    def start(self, now: float) -> list[NodeMonitorEffect]:
        if self._started:
            return [Log.warning("node monitor: start called twice; ignored")]
        self._started = True
        out: list[NodeMonitorEffect] = [
            Log.info(
                "node monitor started as an ephemeral member",
                node=self.node,
                partition_handling=self.config.to_config(),
                seeds=sorted(self._seeds),
            ),
            PauseApp("held at boot until this ephemeral node reaches the core"),
        ]
        self._app = "stopping"
        out += [Connect(n) for n in sorted(self.core_members())]
        return out + self._settle(now)

    def nodeup(self, node: str, creation: int, now: float) -> list[NodeMonitorEffect]:
        if node == self.node:
            return []
        prev = self._up.get(node)
        self._up[node] = creation
        out: list[NodeMonitorEffect] = []
        if prev is not None and prev != creation:
            out += self._lost(node)
        if node not in self.core_members() and node not in self._seeds:
            return out  # not core (another ephemeral node's message, a stranger): no talk
        out.append(Log.info("core member up", node=node))
        out.append(self._send(node, "node_up", **self._record()))
        return out + self._settle(now)

    def nodedown(self, node: str, reason: str, now: float) -> list[NodeMonitorEffect]:
        if node == self.node or node not in self._up:
            return []
        del self._up[node]
        out: list[NodeMonitorEffect] = []
        if node in self.core_members():
            out.append(Log.warning("core member down", node=node, reason=reason))
        out += self._lost(node)
        return out + self._settle(now)

    def receive(self, sender: str, msg: Any, now: float) -> list[NodeMonitorEffect]:
        bad = problem(msg)
        if bad:
            return [Log.warning("node monitor: dropped a bad message", sender=sender, problem=bad)]
        t = msg["t"]
        if sender == self.node or sender not in self._up:
            return []  # a late message from a link that went: its nodedown said it all
        if t in ("node_up", "announce", "keepalive") and "node" in msg:
            out = self._on_record(sender, msg, reply=t == "node_up")
        elif t == "app_down" and sender in self._greeted:
            out = self._stopped_running(sender)
        else:
            return []  # views, autoheal, partial partitions: core business, not ours
        return out + self._settle(now)

    def timer(self, key: str, now: float, data: Any = None) -> list[NodeMonitorEffect]:
        if key not in self._timers:
            return []
        self._timers.discard(key)
        out: list[NodeMonitorEffect] = []
        if key == TIMER_PING:
            out += [Connect(n) for n in sorted(self._down_core())]
        elif key == TIMER_KEEPALIVE:
            for n in sorted(self._reach()):
                out.append(self._send(n, "keepalive", **self._record()))
        return out + self._settle(now)

    def app_stopped(self, now: float) -> list[NodeMonitorEffect]:
        self._app = "stopped"
        out: list[NodeMonitorEffect] = []
        if self._restart:
            self._restart = False
            out.append(Log.info("application stopped: it starts again with a running member"))
        self._follow = None
        out += self._tell_core()
        return out + self._settle(now)

    def app_started(self, now: float) -> list[NodeMonitorEffect]:
        self._app = "running"
        return self._tell_core() + self._settle(now)

    def set_weight(self, n: int) -> None:
        """No autoheal weight: an ephemeral node is never part of the winner's choice."""

    def joined_cluster(self, node: str, disc: bool, now: float) -> list[NodeMonitorEffect]:
        """`rabbitry cluster join` on an ephemeral node: attach to `node` (a core member);
        its members come with its announce. Nothing is persisted."""
        if node == self.node:
            return []
        self._left = False
        self._seeds.add(node)
        self._core_cache = None
        out: list[NodeMonitorEffect] = [Log.info("attaching to a core member", node=node)]
        if node in self._up:
            out.append(self._send(node, "node_up", **self._record()))
        else:
            out.append(Connect(node))
        return out + self._settle(now)

    def left_cluster(self, node: str, now: float) -> list[NodeMonitorEffect]:
        """Leave (also on a graceful stop): the core members are told and forget us at once.
        For another node's name it is nothing to us: the core keeps its own membership."""
        if node != self.node:
            return []
        out: list[NodeMonitorEffect] = [
            self._send(n, "left_cluster", node=self.node) for n in sorted(self._reach())
        ]
        out.append(Log.info("left the core: no longer attached"))
        self._left = True
        self._seeds.clear()
        self._lists.clear()
        self._named.clear()
        self._left_members.clear()
        self._core_cache = None
        self._running.clear()
        self._greeted.clear()
        return out + self._settle(now)

    def set_alarm(self, resource: str, active: bool, now: float) -> list[NodeMonitorEffect]:
        """Kept for this node's status only: an ephemeral node's alarms do not block the core."""
        if not isinstance(resource, str) or not 0 < len(resource) <= MAX_NAME:
            return [Log.warning("set_alarm: bad resource name", resource=repr(resource)[:80])]
        mine = set(self._alarms)
        (mine.add if active else mine.discard)(resource)
        if frozenset(mine) == self._alarms:
            return []
        self._alarms = frozenset(mine)
        log = Log.warning if active else Log.info
        return [log("alarm " + ("set" if active else "cleared"), resource=resource)]

    # ======================================================================= messages

    def _on_record(self, sender: str, m: dict[str, Any], reply: bool) -> list[NodeMonitorEffect]:
        if m["node"] != sender:
            return [
                Log.warning("node monitor: dropped a record naming another node", sender=sender)
            ]
        if m.get("role", ROLE_CORE) != ROLE_CORE:
            if sender in self._seeds and sender not in self._not_core:
                self._not_core.add(sender)
                self._core_cache = None
                return [
                    Log.error(
                        "a seed says it is ephemeral: cluster.nodes of an ephemeral node must "
                        "name core members",
                        node=sender,
                    )
                ]
            return []
        out: list[NodeMonitorEffect] = []
        old = self._guids.get(sender)
        if old is not None and old != m["creation"]:
            out += self._lost(sender)  # it restarted: whatever we ran with it is gone
        self._guids[sender] = m["creation"]
        self._greeted.add(sender)
        if m["disc"]:
            self._disc.add(sender)
        else:
            self._disc.discard(sender)
        out += self._left_word(sender, m)
        members = m.get("members")
        if isinstance(members, list) and 0 < len(members) <= MAX_LIST and not self._left:
            new = frozenset(members)
            self._lists[sender] = new  # one member's word: it drops nobody (core_members)
            self._named |= new - {self.node}
            self._core_cache = None
            out += [Connect(n) for n in sorted(new - set(self._up) - {self.node})]
        out += self._follow_mode(sender, m.get("mode"))
        if m["running"]:
            self._running.add(sender)
        else:
            out += self._stopped_running(sender)
        if reply:
            out.append(self._send(sender, "announce", **self._record()))
        return out

    def _left_word(self, sender: str, m: dict[str, Any]) -> list[NodeMonitorEffect]:
        """`left` in a core member's record: its own word that it left the cluster of those
        members. It is no member of ours then (while this incarnation says so), and they are
        where the rest of our cluster is."""
        left = m.get("left")
        if not left or self._left:
            if self._left_members.pop(sender, None) is not None:  # joined again (or restarted)
                self._core_cache = None
            return []
        out: list[NodeMonitorEffect] = []
        if self._left_members.get(sender) != m["creation"]:
            out.append(Log.info("a core member left the cluster", node=sender, rest=left))
        self._left_members[sender] = m["creation"]
        self._seeds.update(set(left) - {self.node})
        self._core_cache = None
        return out + [Connect(n) for n in sorted(set(left) - set(self._up) - {self.node})]

    def _stopped_running(self, sender: str) -> list[NodeMonitorEffect]:
        self._running.discard(sender)
        if self._follow == sender:
            self._follow = None
            if self._app != "stopped":
                self._restart = True
                return [Log.info("the core member we follow stopped its application", node=sender)]
        return []

    def _follow_mode(self, sender: str, mode: Any) -> list[NodeMonitorEffect]:
        """The core's partition handling wins over ours; a different local one is said once."""
        if mode is None:
            return []
        try:
            core_mode = PartitionHandling.parse(mode, f"{sender}'s partition_handling")
        except ValueError as exc:
            return [
                Log.warning(
                    "node monitor: dropped a bad partition mode",
                    sender=sender,
                    problem=str(exc)[:200],
                )
            ]
        out: list[NodeMonitorEffect] = []
        if core_mode != self._local_config and not self._mode_told:
            self._mode_told = True
            out.append(
                Log.warning(
                    "this ephemeral node's partition_handling differs from the core's; it "
                    "follows the core's",
                    local=self._local_config.to_config(),
                    core=core_mode.to_config(),
                    core_member=sender,
                )
            )
        self.config = core_mode
        return out

    def _lost(self, node: str) -> list[NodeMonitorEffect]:
        """The link to `node` went or it restarted."""
        self._greeted.discard(node)
        self._guids.pop(node, None)
        return self._stopped_running(node)

    # ======================================================================= the decision

    def _settle(self, now: float) -> list[NodeMonitorEffect]:
        return self._decide() + self._alone_log(now) + self._ensure_timers()

    def _reach(self) -> set[str]:
        return set(self._up) & self.core_members()

    def _down_core(self) -> set[str]:
        if self._left:
            return set()
        return self.core_members() - set(self._up)

    def _may_run(self) -> tuple[bool, str]:
        core = self.core_members()
        reach = self._reach() & self._greeted
        running = reach & self._running
        mode = self.config.mode
        if self._left or not core:
            return False, "not attached to any core member"
        if mode == "pause_minority":
            if not majority(reach, core):
                return False, (
                    f"pause_minority: {len(reach)} of {len(core)} core members reachable, "
                    "not a strict majority"
                )
            return bool(running), "pause_minority: no reachable core member runs"
        if mode == "pause_if_all_down":
            listed = set(self.config.nodes) & core
            if listed and not reach & listed:
                return False, "pause_if_all_down: none of the listed core nodes is reachable"
            return bool(running), "pause_if_all_down: no reachable core member runs"
        # ignore, autoheal: follow one running member, restart when its side goes
        if self._follow is not None and self._follow not in core:
            self._follow = None  # it left the cluster: move to the remaining core
            self._restart = self._app != "stopped"
        if self._restart:
            return False, "restarting with the core: the member we followed stopped or went"
        if self._follow is None and running:
            self._follow = min(running)
        if self._follow is None:
            return False, f"{mode}: no running core member reachable"
        return True, ""

    def _decide(self) -> list[NodeMonitorEffect]:
        run, why = self._may_run()
        if run != self._paused:
            return []
        self._paused = not run
        if not run:
            self._app, out = decision.pause(self._app, self.node, why)
        else:
            following = self._follow or ""
            first, self._ever_resumed = not self._ever_resumed, True
            self._app, out = decision.resume(
                self._app, self.node, "the core runs", first=first, following=following
            )
        return out

    def _alone_log(self, now: float) -> list[NodeMonitorEffect]:
        """While no core member is reachable: one line per back-off step (monitors/retry_log),
        counted in ping rounds; then one line when the core is reached again."""
        if self._reach() or self._left:
            report = self._alone.success("core", now)
            if report is None:
                return []
            return [Log.info("reached the core" + report.suffix(), **report.fields())]
        if self._alone_checked == now:
            return []  # one attempt per instant (a ping round), however many events came
        self._alone_checked = now
        report = self._alone.failure("core", now)
        if report is None:
            return []
        return [
            Log.warning(
                "ephemeral node cannot reach any core member" + report.suffix(),
                seeds=sorted(self.core_members()),
                **report.fields(),
            )
        ]

    def _ensure_timers(self) -> list[NodeMonitorEffect]:
        ping = self._started and bool(self._down_core())
        wanted = {
            # the delay is drawn only when the timer is armed (once per ping round)
            TIMER_PING: (
                ping,
                self._ping_after() if ping and TIMER_PING not in self._timers else 0,
            ),
            TIMER_KEEPALIVE: (self._started, self.keepalive_interval),
        }
        return decision.sync_timers(self._timers, wanted)

    def _ping_after(self) -> float:
        """The next ping round: down_ping_interval, times a jitter in [0.5, 1.5) so that the
        executors a core member's restart cut off all at once do not come back in step against
        its handshake limit; while no core member is reachable, doubled each round up to 4x.
        The jitter is a hash of the name, creation and round (a pure core draws no random)."""
        alone = not self._reach() and not self._left
        self._ping_rounds = self._ping_rounds + 1 if alone else 0
        backoff = min(2.0 ** max(self._ping_rounds - 1, 0), PING_BACKOFF_MAX)
        seed = f"{self.node}/{self.creation}/{self._ping_seq}".encode()
        self._ping_seq += 1
        jitter = 0.5 + zlib.crc32(seed) / 2**32
        return self.down_ping_interval * backoff * jitter

    # ======================================================================= helpers

    def _record(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "disc": False,
            "creation": self.creation,
            "running": self._app in ("running", "stopping"),
            "down": None,
            "alarms": sorted(self._alarms),
            "role": ROLE_EPHEMERAL,
        }

    def _tell_core(self) -> list[NodeMonitorEffect]:
        return [self._send(n, "announce", **self._record()) for n in sorted(self._reach())]

    def _send(self, to: str, t: str, **fields: Any) -> Send:
        return Send(
            to,
            self.NAME,
            {"v": VERSION, "t": t, "c": self.creation, "role": ROLE_EPHEMERAL, **fields},
        )
