"""The simulation engine: virtual time, one event heap, one seeded RNG, nodes hosting cores.

Why it looks like this: every protocol in rabbitry is a pure core (events in, effects out), so
the simulator only has to (1) decide *when* each event reaches which core and (2) perform the
effects. Doing both from a single heap ordered by (virtual time, sequence number), with all
randomness drawn from one `random.Random(seed)`, makes a run a pure function of its seed and
its fault schedule: a failing schedule replays exactly.

`Sim(keyed=True)` draws each number from a source named by what it is for instead (a node's
creation, tick phase, autoheal weight and app delays from that node's own stream; a frame's
latency and a handshake's duration from a hash of its link and the instant), so that traffic
of some nodes does not shift the draws of the others. tests/sim/adversarial.py needs that to
run a schedule with and without its executors and compare the core's decisions exactly.

The engine knows the effects every networked core uses (monitors/effects.py). A core kind
(`CoreKind`) adds handlers for its own effects by class name, so the engine never imports a
core. The dist semantics (connections, ticks, cuts) live in `network.py`.
"""

from __future__ import annotations

import heapq
import random
import zlib
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from monitors.effects import CancelTimer, Connect, Disconnect, Log, Send, SetTimer
from tests.sim.network import Network

if TYPE_CHECKING:
    from tests.sim.network import Conn

EffectHandler = Callable[["Sim", "SimNode", str, Any], None]


class SimError(Exception):
    """A core did something the simulator cannot perform (unknown effect, bad target)."""


@dataclass(frozen=True)
class NetConfig:
    """Knobs of the simulated dist layer (see network.py for what each one models)."""

    net_ticktime: float = 1.0
    latency: tuple[float, float] = (0.001, 0.005)  # one-way, per frame, uniform
    handshake_hops: int = 4  # one-way trips a dist handshake takes
    tick_model: str = "rabbitry"  # "rabbitry": down after exactly net_ticktime; or "erlang"
    lossy: bool = False  # frames sent across a cut are lost even if the connection survives
    json_frames: bool = True  # round-trip every remote message through JSON, as the wire does
    # > 0: a handshake that meets a cut (at its start or on the way) fails only this long after
    # it began, as a TCP connect whose SYN was dropped does (NetKernel's connect_timeout), and
    # until then no other attempt for the pair starts. 0: it fails as soon as it would finish.
    connect_timeout: float = 0.0


class CoreKind(Protocol):
    """One kind of core hosted on every node under the registered name `name`.

    `build` makes a fresh core for a (re)booted node, typically from `node.disk`, which survives
    crashes. `handlers` maps effect class names (beyond the common ones) to functions
    `(sim, node, core_name, effect)`. A core that has `nodeup`/`nodedown` methods is subscribed
    to the dist layer's node events (net_kernel:monitor_nodes).
    """

    name: str

    def build(self, sim: Sim, node: SimNode) -> Any: ...

    def handlers(self) -> dict[str, EffectHandler]: ...


class Observer(Protocol):
    """Told about every step, so invariants can be checked as the run goes."""

    def after_step(self, sim: Sim, node: SimNode) -> None: ...

    def after_change(self, sim: Sim) -> None: ...


class SimNode:
    """A simulated node: an Erlang VM with its registered cores, connections and disk."""

    __slots__ = (
        "alive",
        "backlog",
        "bans",
        "booted_at",
        "conns",
        "cores",
        "creation",
        "disk",
        "frozen",
        "incarnation",
        "log",
        "name",
        "state",
        "tick_phase",
        "timers",
    )

    def __init__(self, name: str) -> None:
        self.name = name
        self.alive = False
        self.frozen = False
        self.creation = 0
        self.incarnation = 0  # bumped on crash/restart: events of an older life are dropped
        self.booted_at = 0.0
        self.tick_phase = 0.0
        self.cores: dict[str, Any] = {}
        self.conns: dict[str, Conn] = {}  # peer -> the connection this node holds open
        self.bans: dict[str, float] = {}  # peer -> virtual time the reconnect ban ends
        self.timers: dict[tuple[str, str], int] = {}  # (core, key) -> live token
        self.backlog: list[tuple[Callable[..., None], tuple[Any, ...]]] = []  # while frozen
        self.log: deque[tuple[float, int, str, dict[str, Any]]] = deque(maxlen=500)
        self.disk: dict[str, Any] = {}  # survives crashes (a core kind's files)
        self.state: dict[str, Any] = {}  # volatile, per life (e.g. the app state)

    def __repr__(self) -> str:
        return f"SimNode({self.name})"


class Sim:
    """The deterministic simulator. Everything happens through `self._push` and `self.rng`."""

    def __init__(
        self,
        seed: int,
        net: NetConfig | None = None,
        trace_len: int | None = 200,
        keyed: bool = False,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.keyed = keyed  # see the module docstring
        self._streams: dict[str, random.Random] = {}
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0
        self._token = 0
        self.nodes: dict[str, SimNode] = {}
        self.kinds: list[CoreKind] = []
        self._kind_handlers: dict[str, dict[str, EffectHandler]] = {}
        self._subscribed: dict[str, bool] = {}  # core name -> has nodeup/nodedown
        self.observers: list[Observer] = []
        # called after each effect a core returned is performed (node, effect); it may crash
        # the node, which then performs none of the effects that follow (a crash mid-event)
        self.effect_hook: Callable[[SimNode, Any], None] | None = None
        self.steps = 0  # core invocations, the unit of "events" in invariants
        self.core_steps: dict[str, int] = {}  # the same, per core name
        self.timer_fires: list[tuple[float, str, str, str]] = []  # only while recording
        self.record_timers = False
        self.trace: deque[tuple[float, str, str, Any]] | list[tuple[float, str, str, Any]]
        self.trace = [] if trace_len is None else deque(maxlen=trace_len)
        self.net: Network = Network(self, net or NetConfig())
        self._common: dict[type, Callable[[SimNode, str, Any], None]] = {
            Send: self._eff_send,
            SetTimer: self._eff_set_timer,
            CancelTimer: self._eff_cancel_timer,
            Connect: self._eff_connect,
            Disconnect: self._eff_disconnect,
            Log: self._eff_log,
        }

    # ---- set-up -------------------------------------------------------------------------

    def add_kind(self, kind: CoreKind) -> None:
        """Host a core of this kind on every node (registered as `kind.name`)."""
        self.kinds.append(kind)
        self._kind_handlers[kind.name] = dict(kind.handlers())

    def add_node(self, name: str) -> SimNode:
        node = SimNode(name)
        self.nodes[name] = node
        return node

    def add_observer(self, obs: Observer) -> None:
        self.observers.append(obs)

    # ---- randomness ------------------------------------------------------------------------

    def stream(self, key: str) -> random.Random:
        """Where draws for `key` (a node name) come from: the one RNG, or (keyed) its own."""
        if not self.keyed:
            return self.rng
        r = self._streams.get(key)
        if r is None:
            r = self._streams[key] = random.Random(f"{self.seed}/{key}")
        return r

    def uniform_at(self, lo: float, hi: float, *key: Any) -> float:
        """A draw for something that happens now (a frame's latency, a handshake hop): the one
        RNG, or (keyed) a hash of `key` and the current time, so that no other draw shifts it."""
        if not self.keyed:
            return self.rng.uniform(lo, hi)
        h = zlib.crc32("/".join(map(str, (self.seed, *key, repr(self.now)))).encode())
        return lo + (hi - lo) * (h / 2**32)

    # ---- the event loop -----------------------------------------------------------------

    def _push(self, t: float, fn: Callable[..., None], args: tuple[Any, ...]) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, fn, args))

    def at(self, t: float, fn: Callable[..., None], *args: Any) -> None:
        """Run `fn(*args)` at virtual time `t` (faults, checks); ties run in push order."""
        self._push(max(t, self.now), fn, args)

    def post(self, node: SimNode, delay: float, fn: Callable[..., None], *args: Any) -> None:
        """Run `fn(*args)` on `node` after `delay`, unless it has crashed since; a frozen node
        keeps it in its backlog until thawed."""
        self._push(self.now + delay, self._node_event, (node, node.incarnation, fn, args))

    def _node_event(
        self, node: SimNode, inc: int, fn: Callable[..., None], args: tuple[Any, ...]
    ) -> None:
        if node.incarnation != inc:
            return
        if node.frozen:
            node.backlog.append((fn, args))
            return
        fn(*args)

    def run_until(self, t_end: float) -> None:
        """Process every event due at or before `t_end`, then set the clock to `t_end`."""
        heap = self._heap
        pop = heapq.heappop
        while heap and heap[0][0] <= t_end:
            t, _, fn, args = pop(heap)
            self.now = t
            fn(*args)
        self.now = max(self.now, t_end)

    def run_for(self, d: float) -> None:
        self.run_until(self.now + d)

    # ---- node lifecycle (also used as faults) ---------------------------------------------

    def boot(self, *names: str) -> None:
        """Start (or restart) nodes: new creation, fresh cores built from disk. Several names
        boot at the same instant: all are up before any core starts (so their first
        messages can connect to each other)."""
        nodes = [self.nodes[n] for n in names]
        for node in nodes:
            if node.alive:
                raise SimError(f"{node.name} is already running")
            node.alive = True
            node.frozen = False
            node.incarnation += 1
            rng = self.stream(node.name)
            node.creation = rng.randrange(1, 2**31)
            node.booted_at = self.now
            node.tick_phase = rng.uniform(0.0, self.net.tick_interval)
            node.state = {}
            node.timers = {}
            node.bans = {}
            node.backlog = []
        for node in nodes:
            node.cores = {kind.name: kind.build(self, node) for kind in self.kinds}
            for kind in self.kinds:
                if kind.name not in self._subscribed:
                    self._subscribed[kind.name] = hasattr(node.cores[kind.name], "nodeup")
            self.record(node, "boot", f"creation={node.creation}")
        for node in nodes:
            for kind in self.kinds:
                core = node.cores[kind.name]
                self._invoke(node, kind.name, core.start(self.now), "start", None)
        self._changed()

    def crash(self, name: str) -> None:
        """Kill the node (kill -9): its timers and cores vanish, peers see its sockets close."""
        node = self.nodes[name]
        if not node.alive:
            return
        node.alive = False
        node.frozen = False
        node.incarnation += 1
        node.cores = {}
        node.timers = {}
        node.backlog = []
        node.state = {}
        self.record(node, "crash", "")
        self.net.node_crashed(node)
        self._changed()

    def restart(self, name: str) -> None:
        self.crash(name)
        self.boot(name)

    def freeze(self, name: str) -> None:
        """SIGSTOP: the node processes nothing; what reaches it waits in its backlog."""
        node = self.nodes[name]
        if not node.alive or node.frozen:
            return
        node.frozen = True
        self.record(node, "freeze", "")
        self.net.node_frozen(node)
        self._changed()

    def thaw(self, name: str) -> None:
        """SIGCONT: replay the backlog in arrival order, at the current time."""
        node = self.nodes[name]
        if not node.alive or not node.frozen:
            return
        node.frozen = False
        backlog, node.backlog = node.backlog, []
        self.record(node, "thaw", f"backlog={len(backlog)}")
        for fn, args in backlog:
            self._push(self.now, self._node_event, (node, node.incarnation, fn, args))
        self.net.node_thawed(node)
        self._changed()

    # ---- calling cores --------------------------------------------------------------------

    def call(self, node: SimNode, cname: str, what: str, detail: Any, effects: Any) -> None:
        """Record one core invocation (its return value is `effects`) and perform them."""
        self._invoke(node, cname, effects, what, detail)

    def _invoke(self, node: SimNode, cname: str, effects: Any, what: str, detail: Any) -> None:
        self.steps += 1
        self.core_steps[cname] = self.core_steps.get(cname, 0) + 1
        self.trace.append((self.now, node.name, what, detail))
        if effects:
            common = self._common
            incarnation = node.incarnation
            for eff in effects:
                handler = common.get(type(eff))
                if handler is not None:
                    handler(node, cname, eff)
                else:
                    self._kind_effect(node, cname, eff)
                if self.effect_hook is not None:
                    self.effect_hook(node, eff)
                    if node.incarnation != incarnation:
                        break  # the hook crashed the node: it performs nothing more
        for obs in self.observers:
            obs.after_step(self, node)

    def _kind_effect(self, node: SimNode, cname: str, eff: Any) -> None:
        handler = self._kind_handlers.get(cname, {}).get(type(eff).__name__)
        if handler is None:
            raise SimError(f"{node.name}/{cname}: no handler for effect {eff!r}")
        handler(self, node, cname, eff)

    def deliver(self, node: SimNode, sender: str, name: str, msg: Any) -> None:
        """A message reached `name` on `node` (dropped silently if nothing is registered)."""
        core = node.cores.get(name)
        if core is None:
            self.record(node, "drop", f"no process {name!r}: {msg!r}")
            return
        self._invoke(node, name, core.receive(sender, msg, self.now), "recv", (sender, msg))

    def node_event(self, node: SimNode, up: bool, peer: str, info: Any) -> None:
        """nodeup(peer, creation) / nodedown(peer, reason) to every subscribed core."""
        for cname, core in list(node.cores.items()):
            if not self._subscribed.get(cname):
                continue
            if up:
                effects = core.nodeup(peer, info, self.now)
                self._invoke(node, cname, effects, "nodeup", (peer, info))
            else:
                effects = core.nodedown(peer, info, self.now)
                self._invoke(node, cname, effects, "nodedown", (peer, info))

    def _changed(self) -> None:
        """Connectivity or liveness changed: observers re-evaluate what depends on it."""
        for obs in self.observers:
            obs.after_change(self)

    # ---- common effects ----------------------------------------------------------------------

    def _eff_send(self, node: SimNode, cname: str, e: Send) -> None:
        if e.node == node.name:
            self.post(node, 0.0, self.deliver, node, node.name, e.name, e.msg)
        elif e.node not in self.nodes:
            self.record(node, "drop", f"send to unknown node {e.node}")
        else:
            self.net.send(node, e.node, e.name, e.msg)

    def _eff_set_timer(self, node: SimNode, cname: str, e: SetTimer) -> None:
        self._token += 1
        token = self._token
        node.timers[(cname, e.key)] = token
        self.post(node, max(e.after, 0.0), self._fire_timer, node, cname, e.key, token, e.data)

    def _eff_cancel_timer(self, node: SimNode, cname: str, e: CancelTimer) -> None:
        node.timers.pop((cname, e.key), None)

    def _fire_timer(self, node: SimNode, cname: str, key: str, token: int, data: Any) -> None:
        if node.timers.get((cname, key)) != token:
            return  # replaced or cancelled
        del node.timers[(cname, key)]
        if self.record_timers:
            self.timer_fires.append((self.now, node.name, key, cname))
        core = node.cores[cname]
        self._invoke(node, cname, core.timer(key, self.now, data), "timer", key)

    def _eff_connect(self, node: SimNode, cname: str, e: Connect) -> None:
        self.net.connect(node, e.node)

    def _eff_disconnect(self, node: SimNode, cname: str, e: Disconnect) -> None:
        self.net.disconnect(node, e.node, e.ban)

    def _eff_log(self, node: SimNode, cname: str, e: Log) -> None:
        node.log.append((self.now, e.level, e.text, e.fields))
        self.trace.append((self.now, node.name, "log", e.text))

    # ---- tracing ----------------------------------------------------------------------------

    def record(self, node: SimNode | None, what: str, detail: Any) -> None:
        self.trace.append((self.now, node.name if node else "-", what, detail))

    def format_trace(self, last: int | None = None) -> str:
        """The trace (or its last `last` entries) as readable lines with virtual times."""
        entries: Iterable[tuple[float, str, str, Any]] = self.trace
        if last is not None:
            entries = list(self.trace)[-last:]
        return "\n".join(format_entry(e) for e in entries)


def format_entry(entry: tuple[float, str, str, Any]) -> str:
    t, node, what, detail = entry
    if isinstance(detail, tuple) and len(detail) == 2 and what in ("recv", "nodeup", "nodedown"):
        detail = (
            f"{detail[0]} {detail[1]!r}" if what != "recv" else f"from {detail[0]}: {detail[1]}"
        )
    return f"{t:10.4f}  {node:<8} {what:<9} {detail}"
