"""Replicas: making every other reachable server a replica of the master (Beetle's slave_of!).

A part of ConfigurationServerCore (failover/server_core.py). Fenced: it changes Redis only
while our term is *confirmed* (every configured client reported it within `confirm_window`),
so a deposed RCS cut from the bus, which has not heard of its successor, stops touching Redis
and cannot demote its successor's master. A request that fails is asked again at most every
`replica_retry` s, and its failures log with back-off (monitors/retry_log.py). Reads and
changes RcsState; calls no other part.
"""

from __future__ import annotations

from collections.abc import Mapping

from failover.effects import FailoverEffect, Log, MakeReplica, ServerInfo
from failover.rcs.state import RcsState


class Replicas:
    """MakeReplica requests and their answers over one RcsState."""

    def __init__(self, s: RcsState) -> None:
        self.s = s
        self.replicating: dict[str, tuple[str, float]] = {}  # server -> (master, when asked)
        self.requests: dict[int, str] = {}  # request id -> server

    @property
    def replica_retry(self) -> float:
        return max(5 * self.s.master_retry_interval, self.s.redis_timeout)

    def reconcile(self, infos: Mapping[str, ServerInfo | None], now: float) -> list[FailoverEffect]:
        """Make every other reachable server a replica of the master, only while our term is
        confirmed: a deposed RCS must not demote its successor's master."""
        s = self.s
        master = s.master
        if master is None or not s.term_confirmed(now):
            return []
        out: list[FailoverEffect] = []
        for server in s.servers:
            i = infos.get(server)
            if server == master or i is None or i.replica_of(master):
                continue
            asked = self.replicating.get(server)
            if asked is not None and asked[0] == master and now - asked[1] < self.replica_retry:
                continue
            req = s.next_req()
            self.replicating[server] = (master, now)
            self.requests[req] = server
            if i.is_master:
                s.retired.add(server)
                out += s.notify(
                    f"Redis server '{server}' is a master too: making it a replica of '{master}'"
                )
            else:
                out.append(
                    Log.info("RCS: making a replica follow the master", server=server, was=i.master)
                )
            out.append(MakeReplica(req, server, master))
        return out

    def done(self, request_id: int, ok: bool, now: float) -> list[FailoverEffect] | None:
        """The answer to MakeReplica(request_id), or None if that request is not ours."""
        server = self.requests.pop(request_id, None)
        if server is None:
            return None
        log = self.s.retry_log
        if ok:
            done = log.success(("replica", server), now)
            if done is None:
                return []
            return [Log.info("RCS: making a replica worked", server=server, **done.fields())]
        self.replicating.pop(server, None)
        report = log.failure(("replica", server), now)
        if report is None:
            return []
        return [Log.warning("RCS: making a replica failed", server=server, **report.fields())]
