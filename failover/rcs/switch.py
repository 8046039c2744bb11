"""Switch: after a completed round, choose the new master, promote it, and announce it.

A part of ConfigurationServerCore (failover/server_core.py). Entered only once every client
answered the round under our token (round.py), or at once without clients. It asks every
server for its state (`start`), then, in this order:

- the old master is a master again: keep it (the clients get it back);
- another master carries on the old master's data (a previous RCS died mid-switch): adopt
  it rather than promote a second one (`continues` says what "carries on" means);
- otherwise promote the reachable replica of the old master with the largest replication
  offset, ties in configured order (as Sentinel does; Beetle took the first configured);
- no replica: the old master is made a master again, or kept if it was last seen as one.

`finish` makes the new master ours, announces it, and hands the other servers to replicas.py.
Reads and changes RcsState; calls replicas.py.
"""

from __future__ import annotations

from failover.effects import (
    CancelTimer,
    FailoverEffect,
    Log,
    Promote,
    ServerInfo,
    SetMaster,
    SetTimer,
)
from failover.rcs.replicas import Replicas
from failover.rcs.state import (
    PROMOTE,
    PROMOTING,
    SWITCH,
    SWITCHING,
    TIMER_REDIS,
    TIMER_WATCH,
    WATCHING,
    RcsState,
)


class Switch:
    """The switch of a completed round over one RcsState."""

    def __init__(self, s: RcsState, replicas: Replicas) -> None:
        self.s = s
        self.replicas = replicas

    def start(self, now: float) -> list[FailoverEffect]:
        """Every client stopped using the old master: ask the servers where things stand."""
        s = self.s
        s.phase = SWITCHING
        s.round_token = None
        return [s.query(SWITCH), SetTimer(TIMER_REDIS, s.redis_timeout)]

    def on_answer(self, infos: dict[str, ServerInfo | None], now: float) -> list[FailoverEffect]:
        """The servers' state for the switch (RcsState.query(SWITCH))."""
        return [CancelTimer(TIMER_REDIS), *self._choose(infos, now)]

    def _choose(self, infos: dict[str, ServerInfo | None], now: float) -> list[FailoverEffect]:
        s = self.s
        old = s.master
        assert old is not None
        oi = infos[old]
        if oi is not None and oi.is_master:
            head = Log.info("RCS: the master is back; keeping it", master=old)
            return [head, *self.finish(old, infos, now)]
        adopt = [
            x
            for x in s.servers
            if x != old
            and x not in s.retired
            and (i := infos[x]) is not None
            and i.is_master
            and self.continues(i, old)
        ]
        if adopt:
            new = s.best(adopt, infos)
            s.retired.update(x for x in adopt if x != new)
            head = Log.warning(
                "RCS: a master is already there (an earlier switch); adopting it", master=new
            )
            return [head, *self.finish(new, infos, now)]
        candidates = [
            x for x in s.servers if x != old and (i := infos[x]) is not None and i.replica_of(old)
        ]
        if candidates:
            return self.promote(s.best(candidates, infos), now)
        out = s.notify(
            f"Redis master could not be switched, no slave available to become new master, "
            f"promoting old master '{old}'"
        )
        if oi is not None:  # reachable, but a replica: make it a master again
            return out + self.promote(old, now)
        if s.last_role.get(old, "master") == "master":
            return out + self.finish(old, infos, now, available=False)
        # last seen as a replica: announcing it would send the workers' writes to a replica
        return out + self.abort(now, f"'{old}' was last seen as a replica")

    def continues(self, info: ServerInfo, old: str) -> bool:
        """Whether a master carries on the old master's data: a replica promoted by an earlier
        RCS keeps the old replication id as its replid2, and has at least the data the old
        master had at our last good check. A server that restarted empty (a new id), or from
        an old RDB of its days as a replica (the old id, but an offset from back then), has
        not; adopting it would lose the data, and wipe the old master when that one came back
        as its replica. Without ids (unknown, or the simulator), any master qualifies."""
        known = self.s.replids.get(old, "")
        if not known or not info.replid:
            return True
        same_history = known in (info.replid, info.replid2)
        return same_history and info.offset >= self.s.master_offsets.get(old, 0)

    def promote(self, server: str, now: float) -> list[FailoverEffect]:
        s = self.s
        req = s.next_req()
        s.pending = (req, PROMOTE)
        s.promoting = server
        s.phase = PROMOTING
        info = s.infos.get(server)
        return [
            Log.warning(
                "RCS: promoting", server=server, offset=info.offset if info is not None else None
            ),
            Promote(req, server),
            SetTimer(TIMER_REDIS, s.redis_timeout),
        ]

    def promoted(self, request_id: int, ok: bool, now: float) -> list[FailoverEffect]:
        """The answer to Promote(request_id) (a late or foreign answer is dropped)."""
        s = self.s
        if not s.active or s.pending != (request_id, PROMOTE):
            return []
        target = s.promoting
        assert target is not None
        if ok:
            return self.finish(target, dict(s.infos), now)
        return self.abort(now, f"promoting '{target}' failed")

    def redis_timeout(self, now: float) -> list[FailoverEffect]:
        """No answer to the switch's query or to Promote in time."""
        return self.abort(now, "no answer from Redis in time")

    def finish(
        self,
        new: str,
        infos: dict[str, ServerInfo | None],
        now: float,
        *,
        available: bool = True,
    ) -> list[FailoverEffect]:
        """`new` is the master: announce it, watch it, make the others its replicas."""
        s = self.s
        old = s.master
        out: list[FailoverEffect] = [CancelTimer(TIMER_REDIS)]
        if new != old:
            if old is not None:
                s.retired.add(old)
                began = s.unavailable_since if s.unavailable_since is not None else now
                s.switches += 1
                s.last_switch = {"from": old, "to": new, "at": now, "took": now - began}
            s.retired.discard(new)
            out += s.notify(f"Setting redis master to '{new}' (was '{old}')")
        s.master = new
        s.master_available = available
        if available:
            s.unavailable_since = None
            prev = infos.get(new)
            infos = {**infos, new: ServerInfo("master", None, prev.offset if prev else 0)}
            s.infos = infos
        s.phase = WATCHING
        s.retries = 0
        s.fast = True
        s.pending = None
        s.promoting = None
        return [
            *out,
            SetMaster(new),
            *s.announce(now),
            SetTimer(TIMER_WATCH, s.master_retry_interval),
            *(s.watch(new) if available else []),
            *(self.replicas.reconcile(infos, now) if available else []),
        ]

    def abort(self, now: float, why: str) -> list[FailoverEffect]:
        """The switch could not be done; the clients' files stay empty until the master
        passes a check again (then it is announced) or the next round."""
        s = self.s
        s.phase = WATCHING
        s.retries = 0
        s.master_available = False
        s.pending = None
        s.promoting = None
        return [
            CancelTimer(TIMER_REDIS),
            *s.notify(f"Redis master switch failed: {why}"),
            SetTimer(TIMER_WATCH, s.master_retry_interval),
        ]
