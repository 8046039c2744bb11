"""A simulated Erlang distribution layer (net_kernel + dist connections over TCP).

What it models, and why each part is there:

- One connection per node pair, set up by a handshake that takes `handshake_hops` one-way
  latencies and needs both link directions up the whole time, both nodes running (not
  frozen) and no reconnect ban on either side. A failed setup is silent, as in Erlang
  (connection_setup_failed is not a nodedown). A handshake to a peer that still holds an
  older connection replaces it: that peer first gets nodedown(connection_closed), then nodeup,
  so a core never sees two nodeups in a row.
- Each side holds its own view of the connection (its side is open or closed), because the
  two sides of a real TCP connection find out about failures at different times.
- Frames are delivered in order per connection and direction, each after a latency drawn from
  the seeded RNG, and only to a receiver that still holds that connection. What a cut does
  to the frames of a connection that outlives it depends on `NetConfig.lossy`:
  - False (the default, as TCP does under Erlang distribution): frames sent while the
    direction is cut wait in the sender's buffer and go out in order when it heals; frames
    already in flight arrive. No gap without a nodedown, which Erlang guarantees.
  - True: a frame is lost if its direction is cut when it is sent or at any moment before it
    arrives (a cut bumps the direction's epoch). This is harsher than Erlang (a gap in a live
    connection): it tests whether a core recovers from lost messages by itself.
  `Network.lossy_links` makes chosen directions lossy in the same way, the others not (an
  adversarial driver's lossy executor links beside a TCP-like core).
- `Network.connect_timeouts` gives chosen node pairs a connect_timeout of their own (see
  NetConfig.connect_timeout), the others keep the NetConfig's.
- `Network.side_traffic(name, msg)`: a message it says yes to is side traffic: it takes no
  place in its connection's order, does not count as a tick and starts no handshake (it is
  dropped if there is no connection or handshake under way) (an adversarial driver's
  executor-caused core messages: see tests/sim/adversarial.py for why).
- `Network.refused_names`: every handshake from or to such a name is refused, as the dist
  layer refuses a process whose name or role conflicts with the cluster's (monitors/dist):
  it never gets a link, so nothing it sends reaches a core.
- Ticks are not simulated frame by frame (they would dominate the event count). Each node
  ticks at instants phase + k*net_ticktime/4. A receiving side only needs to know when its
  incoming stream stopped (direction cut, sender crashed, frozen or closed its side): it then
  gets one timeout event. With tick_model "rabbitry" (the default, as monitors/dist/ticks.py)
  it comes exactly net_ticktime after the last reception (a frame or the sender's last
  tick); with "erlang" it comes at the 5th check of the receiver's ticker after the last
  reception (detection takes 3/4 to 5/4 of net_ticktime). If the stream comes back before
  the next tick would arrive after that, the timeout is cancelled.
- A side that times out closes the connection with nodedown(net_tick_timeout) and sends a
  FIN; if the reverse direction is up the other side gets nodedown(connection_closed).
  A crashed node's sockets are closed by its OS: peers get connection_closed after one
  latency if the link from it is up. Otherwise they time out, unless (not lossy) the link
  heals first and the waiting FIN gets through.
- Disconnect: the node gets nodedown(disconnect) at once, the peer connection_closed, and the
  node refuses a new connection with that peer (either way) until the ban ends.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.sim.engine import NetConfig, Sim, SimNode

_MSG = "msg"
_SIDE = "side"  # a message that is side traffic (Network.side_traffic)
_FIN = "fin"
_encode = json.JSONEncoder(allow_nan=False).encode  # what the wire format accepts
_decode = json.JSONDecoder().decode


_SCALARS = frozenset((str, int, bool, type(None)))


def wire_copy(x: Any) -> Any:
    """What `x` becomes after a JSON round trip (tuples arrive as lists, anything JSON cannot
    carry raises), computed several times faster than one for the plain types messages are
    made of; anything else goes through json itself."""
    t = type(x)
    if t in _SCALARS:
        return x
    if t is dict:
        out = {}
        for k, v in x.items():
            if type(k) is not str:
                return _decode(_encode(x))  # json's own key conversions
            out[k] = v if type(v) in _SCALARS else wire_copy(v)
        return out
    if t is list or t is tuple:
        return [v if type(v) in _SCALARS else wire_copy(v) for v in x]
    if t is float and math.isfinite(x):
        return x
    return _decode(_encode(x))


class Conn:
    """One dist connection; per-side state is keyed by node name."""

    __slots__ = (
        "a",
        "alive_in",
        "alive_since",
        "b",
        "fifo",
        "held",
        "id",
        "last_rx",
        "open",
        "opened",
        "to_at",
        "to_gen",
    )

    def __init__(self, cid: int, a: str, b: str, now: float) -> None:
        self.id = cid
        self.a = a
        self.b = b
        self.opened = now
        self.open = {a: True, b: True}
        self.alive_in = {a: True, b: True}  # receiver -> its incoming stream is flowing
        self.alive_since = {a: now, b: now}
        self.last_rx = {a: now, b: now}  # receiver -> last frame processed
        self.fifo = {a: now, b: now}  # receiver -> latest scheduled arrival (keeps order)
        self.to_gen = {a: 0, b: 0}  # receiver -> generation of its pending tick timeout
        self.to_at: dict[str, float | None] = {a: None, b: None}
        self.held: dict[str, list[tuple[str, Any]]] = {a: [], b: []}  # receiver -> frames

    def other(self, name: str) -> str:
        return self.b if name == self.a else self.a

    def __repr__(self) -> str:
        return f"Conn#{self.id}({self.a}<->{self.b})"


class _Pending:
    """A handshake in progress and the frames waiting for it (auto-connect)."""

    __slots__ = (
        "aborted",
        "doomed",
        "ep",
        "inc_i",
        "inc_t",
        "initiator",
        "key",
        "queue",
        "started",
        "target",
    )

    def __init__(
        self, key: tuple[str, str], i: SimNode, t: SimNode, ep: tuple[int, int], now: float
    ):
        self.key = key
        self.started = now
        self.doomed = False  # it met a cut: it fails when connect_timeout is up
        self.initiator = i
        self.target = t
        self.inc_i = i.incarnation
        self.inc_t = t.incarnation
        self.ep = ep
        self.queue: list[tuple[str, str, str, Any]] = []
        self.aborted = False


class Network:
    """Links (per direction), connections, handshakes and ticks for one Sim."""

    def __init__(self, sim: Sim, cfg: NetConfig) -> None:
        self.sim = sim
        self.cfg = cfg
        self.ticktime = cfg.net_ticktime
        self.tick_interval = cfg.net_ticktime / 4
        self.lat_lo, self.lat_hi = cfg.latency
        self.lossy = cfg.lossy
        self.cuts: dict[tuple[str, str], int] = {}  # direction -> nesting count (> 0: cut)
        self.epoch: dict[tuple[str, str], int] = {}  # direction -> number of cuts so far
        self.pending: dict[tuple[str, str], _Pending] = {}
        self._cid = 0
        self.lossy_links: set[tuple[str, str]] = set()  # directions lossy whatever cfg.lossy
        self.connect_timeouts: dict[tuple[str, str], float] = {}  # sorted pair -> seconds
        self.refused_names: set[str] = set()  # the dist layer refuses their handshakes
        self.side_traffic: Callable[[str, Any], bool] | None = None

    def _lossy(self, src: str, dst: str) -> bool:
        return self.lossy or (src, dst) in self.lossy_links

    def _connect_timeout(self, key: tuple[str, str]) -> float:
        return self.connect_timeouts.get(key, self.cfg.connect_timeout)

    # ---- links (faults) ----------------------------------------------------------------------

    def link_up(self, src: str, dst: str) -> bool:
        return (src, dst) not in self.cuts

    def cut(self, src: str, dst: str) -> None:
        """Cut the direction src -> dst. Cuts nest: each cut needs its own heal."""
        k = (src, dst)
        n = self.cuts.get(k, 0) + 1
        self.cuts[k] = n
        if n == 1:
            self.epoch[k] = self.epoch.get(k, 0) + 1
            self.sim.record(None, "cut", f"{src} -> {dst}")
            self._pair_changed(src, dst)
            self.sim._changed()

    def heal(self, src: str, dst: str) -> None:
        k = (src, dst)
        n = self.cuts.get(k, 0)
        if n <= 0:
            return
        if n > 1:
            self.cuts[k] = n - 1
            return
        del self.cuts[k]
        self.sim.record(None, "heal", f"{src} -> {dst}")
        self._pair_changed(src, dst)
        self._flush_held(src, dst)
        self.sim._changed()

    def heal_all(self) -> None:
        for src, dst in sorted(self.cuts):
            self.cuts[(src, dst)] = 1
            self.heal(src, dst)

    def _pair_changed(self, a: str, b: str) -> None:
        na, nb = self.sim.nodes[a], self.sim.nodes[b]
        c1, c2 = na.conns.get(b), nb.conns.get(a)
        if c1 is not None:
            self._refresh(c1)
        if c2 is not None and c2 is not c1:
            self._refresh(c2)

    def _flush_held(self, src: str, dst: str) -> None:
        """TCP retransmits what waited in src's buffer while src -> dst was cut."""
        for conn in (self.sim.nodes[src].conns.get(dst), self.sim.nodes[dst].conns.get(src)):
            if conn is not None and conn.held[dst]:
                frames, conn.held[dst] = conn.held[dst], []
                for kind, payload in frames:
                    self._transmit(conn, src, dst, kind, payload)

    # ---- ground truth, for invariants -----------------------------------------------------------

    def connected(self, a: str, b: str) -> bool:
        """Both sides hold the same open connection."""
        c = self.sim.nodes[a].conns.get(b)
        return c is not None and self.sim.nodes[b].conns.get(a) is c

    def healthy(self, a: str, b: str) -> bool:
        """Connected, and frames flow both ways right now (no cut, both nodes running)."""
        na, nb = self.sim.nodes[a], self.sim.nodes[b]
        c = na.conns.get(b)
        return (
            c is not None
            and nb.conns.get(a) is c
            and not na.frozen
            and not nb.frozen
            and (a, b) not in self.cuts
            and (b, a) not in self.cuts
        )

    # ---- ticks ----------------------------------------------------------------------------------

    def _tick_le(self, name: str, t: float) -> float:
        """The node's last tick instant at or before t."""
        ph = self.sim.nodes[name].tick_phase
        q = self.tick_interval
        return ph + math.floor((t - ph) / q) * q

    def _tick_ge(self, name: str, t: float) -> float:
        ph = self.sim.nodes[name].tick_phase
        q = self.tick_interval
        return ph + math.ceil((t - ph) / q) * q

    def _tick_gt(self, name: str, t: float) -> float:
        return self._tick_le(name, t) + self.tick_interval

    def _stream_alive(self, conn: Conn, src: str, dst: str) -> bool:
        s = self.sim.nodes[src]
        return conn.open[src] and s.alive and not s.frozen and (src, dst) not in self.cuts

    def _refresh(self, conn: Conn) -> None:
        """Re-derive whether each open side still receives anything; arm or cancel timeouts."""
        for src, dst in ((conn.a, conn.b), (conn.b, conn.a)):
            if not conn.open[dst]:
                continue
            alive = self._stream_alive(conn, src, dst)
            if alive == conn.alive_in[dst]:
                continue
            conn.alive_in[dst] = alive
            if alive:
                conn.alive_since[dst] = self.sim.now
                at = conn.to_at[dst]
                if at is not None and self._tick_ge(src, self.sim.now) <= at:
                    conn.to_gen[dst] += 1
                    conn.to_at[dst] = None
            else:
                self._arm_timeout(conn, src, dst)

    def _arm_timeout(self, conn: Conn, src: str, dst: str) -> None:
        """The stream src -> dst has stopped: when does dst's ticker give up on it?"""
        now = self.sim.now
        last = max(conn.last_rx[dst], conn.opened)
        tick = self._tick_le(src, now)
        if tick >= conn.alive_since[dst]:
            last = max(last, tick)
        conn.last_rx[dst] = last  # remember the last virtual tick as a reception
        if self.cfg.tick_model == "erlang":
            at = self._tick_gt(dst, last) + self.ticktime
        else:
            at = last + self.ticktime
        at = max(at, now)
        conn.to_gen[dst] += 1
        conn.to_at[dst] = at
        node = self.sim.nodes[dst]
        self.sim._push(
            at,
            self.sim._node_event,
            (node, node.incarnation, self._tick_timeout, (conn, dst, conn.to_gen[dst])),
        )

    def _tick_timeout(self, conn: Conn, dst: str, gen: int) -> None:
        if conn.to_gen[dst] != gen:
            return
        conn.to_at[dst] = None
        node = self.sim.nodes[dst]
        peer = conn.other(dst)
        if node.conns.get(peer) is conn:
            self._close_side(node, peer, conn, "net_tick_timeout")

    # ---- frames -------------------------------------------------------------------------------

    def _transmit(self, conn: Conn, src: str, dst: str, kind: str, payload: Any) -> None:
        sim = self.sim
        k = (src, dst)
        if k in self.cuts:
            if self._lossy(src, dst):
                sim.trace.append((sim.now, src, "lost", (dst, payload)))
            else:
                conn.held[dst].append((kind, payload))
            return
        t = sim.now + sim.uniform_at(self.lat_lo, self.lat_hi, src, dst)
        if kind == _MSG and self.side_traffic is not None and self.side_traffic(*payload):
            kind = _SIDE  # keeps no place in the connection's order
        else:
            t = max(t, conn.fifo[dst])
            conn.fifo[dst] = t
        sim._push(
            t, self._arrive, (conn, src, sim.nodes[dst], self.epoch.get(k, 0), (kind, payload))
        )

    def _arrive(
        self, conn: Conn, src: str, dnode: SimNode, ep: int, frame: tuple[str, Any]
    ) -> None:
        kind, payload = frame
        if self._lossy(src, dnode.name) and self.epoch.get((src, dnode.name), 0) != ep:
            self.sim.trace.append((self.sim.now, src, "lost", (dnode.name, payload)))
            return
        if not dnode.alive or dnode.conns.get(src) is not conn:
            return  # nobody reads this socket any more
        if dnode.frozen:
            dnode.backlog.append((self._process, (conn, src, dnode, kind, payload)))
            return
        self._process(conn, src, dnode, kind, payload)

    def _process(self, conn: Conn, src: str, dnode: SimNode, kind: str, payload: Any) -> None:
        dst = dnode.name
        if dnode.conns.get(src) is not conn:
            return
        if kind == _SIDE:  # not a tick
            self.sim.deliver(dnode, src, *payload)
            return
        conn.last_rx[dst] = self.sim.now
        if conn.to_at[dst] is not None:  # data counts as a tick
            if conn.alive_in[dst]:
                conn.to_gen[dst] += 1
                conn.to_at[dst] = None
            else:
                self._arm_timeout(conn, src, dst)
        if kind == _FIN:
            self._close_side(dnode, src, conn, "connection_closed")
        else:
            name, msg = payload
            self.sim.deliver(dnode, src, name, msg)

    def send(self, snode: SimNode, dst: str, name: str, msg: Any) -> None:
        """Send `msg` to `name` on `dst`, connecting first if needed (auto-connect)."""
        if self.cfg.json_frames:
            msg = wire_copy(msg)
        conn = snode.conns.get(dst)
        if conn is not None:
            self._transmit(conn, snode.name, dst, _MSG, (name, msg))
            return
        key = (snode.name, dst) if snode.name < dst else (dst, snode.name)
        p = self._live_pending(key)
        if p is None and not (self.side_traffic is not None and self.side_traffic(name, msg)):
            p = self._start_handshake(snode, dst)
        if p is None:
            self.sim.trace.append((self.sim.now, snode.name, "lost", (dst, msg)))
            return
        p.queue.append((snode.name, dst, name, msg))

    # ---- connection set-up and tear-down ------------------------------------------------------

    def _banned(self, node: SimNode, peer: str) -> bool:
        return node.bans.get(peer, -1.0) > self.sim.now

    def connect(self, node: SimNode, peer: str) -> None:
        """net_adm:ping: start a handshake unless connected or one is under way."""
        if peer == node.name or peer in node.conns or peer not in self.sim.nodes:
            return
        key = (node.name, peer) if node.name < peer else (peer, node.name)
        if self._live_pending(key) is None:
            self._start_handshake(node, peer)

    def _live_pending(self, key: tuple[str, str]) -> _Pending | None:
        """The handshake under way for this pair, unless it is doomed (a side restarted since
        it began, or a Disconnect aborted it): a new attempt then replaces it."""
        p = self.pending.get(key)
        if p is None or p.aborted:
            return None
        if p.initiator.incarnation != p.inc_i or p.target.incarnation != p.inc_t:
            return None
        return p

    def _start_handshake(self, node: SimNode, peer: str) -> _Pending | None:
        sim = self.sim
        pn = sim.nodes[peer]
        if self._banned(node, peer) or self._banned(pn, node.name):
            sim.record(node, "refused", f"{peer} (reconnect ban)")
            return None
        if self.refused_names and {node.name, peer} & self.refused_names:
            sim.record(node, "refused", f"{peer} (name or role conflict)")
            return None
        key = (node.name, peer) if node.name < peer else (peer, node.name)
        ep = (self.epoch.get((node.name, peer), 0), self.epoch.get((peer, node.name), 0))
        p = _Pending(key, node, pn, ep, sim.now)
        self.pending[key] = p
        hops = range(self.cfg.handshake_hops)
        dur = sum(sim.uniform_at(self.lat_lo, self.lat_hi, "hs", node.name, peer, i) for i in hops)
        timeout = self._connect_timeout(key)
        if timeout > 0 and not (self.link_up(node.name, peer) and self.link_up(peer, node.name)):
            p.doomed = True  # the SYN (or the reply) is dropped: wait for the timeout
            dur = timeout
        sim._push(sim.now + dur, self._handshake_done, (p,))
        sim.record(node, "connect", peer)
        return p

    def _handshake_done(self, p: _Pending) -> None:
        sim = self.sim
        i, t = p.initiator, p.target
        a, b = i.name, t.name
        cut = p.ep != (self.epoch.get((a, b), 0), self.epoch.get((b, a), 0)) or not (
            self.link_up(a, b) and self.link_up(b, a)
        )
        timeout = self._connect_timeout(p.key)
        wait = p.started + timeout - sim.now
        if cut and not p.aborted and timeout > 0 and wait > 1e-9:
            # It met a cut on the way: the attempt hangs until its timeout.
            p.doomed = True
            sim._push(sim.now + wait, self._handshake_done, (p,))
            return
        if self.pending.get(p.key) is p:
            del self.pending[p.key]
        ok = (
            not p.doomed
            and not p.aborted
            and i.alive
            and t.alive
            and not i.frozen
            and not t.frozen
            and i.incarnation == p.inc_i
            and t.incarnation == p.inc_t
            and p.ep == (self.epoch.get((a, b), 0), self.epoch.get((b, a), 0))
            and (a, b) not in self.cuts
            and (b, a) not in self.cuts
            and not self._banned(i, b)
            and not self._banned(t, a)
        )
        if not ok:
            sim.record(i, "setup_failed", b)
            return
        for x, y in ((t, a), (i, b)):  # the acceptor drops a stale connection first
            old = x.conns.get(y)
            if old is not None:
                self._close_side(x, y, old, "connection_closed")
        self._cid += 1
        conn = Conn(self._cid, a, b, sim.now)
        i.conns[b] = conn
        t.conns[a] = conn
        sim.record(i, "connected", f"{b} conn#{conn.id}")
        sim.post(t, 0.0, sim.node_event, t, True, a, i.creation)
        sim.post(i, 0.0, sim.node_event, i, True, b, t.creation)
        for src, dst, name, msg in p.queue:
            self._transmit(conn, src, dst, _MSG, (name, msg))
        sim._changed()

    def _close_side(
        self, node: SimNode, peer: str, conn: Conn, reason: str, notify: bool = True
    ) -> None:
        """`node` closes its side: FIN to the peer, and (if alive) nodedown to its cores."""
        sim = self.sim
        del node.conns[peer]
        me = node.name
        conn.open[me] = False
        conn.to_gen[me] += 1
        conn.to_at[me] = None
        sim.record(node, "close", f"{peer} conn#{conn.id} {reason}")
        self._transmit(conn, me, peer, _FIN, None)
        self._refresh(conn)
        if notify:
            sim.post(node, 0.0, sim.node_event, node, False, peer, reason)
        sim._changed()

    def disconnect(self, node: SimNode, peer: str, ban: float) -> None:
        """erlang:disconnect_node plus a reconnect ban of `ban` seconds."""
        if ban > 0:
            node.bans[peer] = max(node.bans.get(peer, -1.0), self.sim.now + ban)
        key = (node.name, peer) if node.name < peer else (peer, node.name)
        p = self.pending.get(key)
        if p is not None:
            p.aborted = True
        conn = node.conns.get(peer)
        if conn is not None:
            self._close_side(node, peer, conn, "disconnect")

    # ---- node faults ------------------------------------------------------------------------------

    def node_crashed(self, node: SimNode) -> None:
        for peer, conn in sorted(node.conns.items()):
            self._close_side(node, peer, conn, "crashed", notify=False)

    def node_frozen(self, node: SimNode) -> None:
        for _, conn in sorted(node.conns.items()):
            self._refresh(conn)

    def node_thawed(self, node: SimNode) -> None:
        for _, conn in sorted(node.conns.items()):
            self._refresh(conn)
