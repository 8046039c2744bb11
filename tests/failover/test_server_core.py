"""ConfigurationServerCore (the RCS): Beetle's server tests in our words, plus terms, tokens,
promotion order and the fences that make it safer than Beetle.

Beetle's names (test/beetle/redis_configuration_server_test.rb at dfb99a1c) are kept where a
test ports one; `Rig` drives the core the way the shell would: it answers QueryRedis with a
table of ServerInfo, and feeds bus messages with tokens of our choosing.
"""

from __future__ import annotations

from typing import Any

import pytest

from failover import messages as m
from failover.effects import (
    REFUSED,
    CancelTimer,
    Log,
    MakeReplica,
    Notify,
    Promote,
    Publish,
    QueryRedis,
    ServerInfo,
    SetMaster,
    SetTimer,
    WatchServer,
)
from failover.server_core import (
    TIMER_CLIENTS,
    TIMER_RECONFIGURE,
    TIMER_WATCH,
    TIMERS,
    ConfigurationServerCore,
)

R1, R2, R3 = "r1:6379", "r2:6379", "r3:6379"
SERVERS = [R1, R2, R3]
SYS = "sys"


def master(offset: int = 0) -> ServerInfo:
    return ServerInfo("master", None, offset)


def replica(of: str = R1, offset: int = 0) -> ServerInfo:
    return ServerInfo("slave", of, offset)


HEALTHY = {R1: master(10), R2: replica(R1, 8), R3: replica(R1, 9)}
R1_DOWN = {R1: None, R2: replica(R1, 8), R3: replica(R1, 9)}


class Rig:
    """One RCS core, its clock, and what it returned last."""

    def __init__(
        self,
        clients: tuple[str, ...] = ("c1", "c2"),
        *,
        start: bool = True,
        census: bool = True,
        **kw: Any,
    ) -> None:
        kw.setdefault("master", R1)
        kw.setdefault("servers", SERVERS)
        servers = kw.pop("servers")
        self.clients = clients
        self.core = ConfigurationServerCore(SYS, servers, list(clients), **kw)
        self.now = 0.0
        self.out: list[Any] = []
        self.log: list[Any] = []
        if start:
            self.run(self.core.start(self.now))
            if census:
                self.census()

    def census(self, files: dict[str, str] | None = None) -> list[Any]:
        """Answer the activation's ping: every client's master file ("" if empty)."""
        if self.core.phase != "census":
            return self.out
        (ping,) = self.sent(m.PING)
        out: list[Any] = []
        for c in self.clients:
            out += self.msg(m.PONG, c, m.token_of(ping), master=(files or {}).get(c, ""))
        self.out = out
        return out

    def run(self, effects: list[Any]) -> list[Any]:
        self.out = effects
        self.log += effects
        return effects

    def at(self, t: float) -> Rig:
        self.now = t
        return self

    def of(self, cls: type) -> list[Any]:
        return [e for e in self.out if isinstance(e, cls)]

    def sent(self, name: str, effects: list[Any] | None = None) -> list[dict[str, Any]]:
        return [
            e.body
            for e in (self.out if effects is None else effects)
            if isinstance(e, Publish) and e.body["type"] == name
        ]

    def notes(self) -> list[str]:
        return [e.text for e in self.out if isinstance(e, Notify)]

    def answer(self, infos: dict[str, ServerInfo | None]) -> list[Any]:
        (q,) = self.of(QueryRedis)
        return self.run(self.core.redis_info(q.request_id, infos, self.now))

    def tick(self, key: str = TIMER_WATCH, dt: float = 1.0) -> list[Any]:
        self.now += dt
        return self.run(self.core.timer(key, self.now))

    def check(self, infos: dict[str, ServerInfo | None], dt: float = 1.0) -> list[Any]:
        """One watch period: the timer fires, the shell answers."""
        self.tick(TIMER_WATCH, dt)
        return self.answer(infos)

    def msg(self, name: str, sender: str, token: m.Token, **fields: Any) -> list[Any]:
        if name in (m.PONG, m.HEARTBEAT, m.CLIENT_STARTED):
            fields.setdefault("master", "")
        body = m.build(SYS, name, sender, token, **fields)
        return self.run(self.core.receive(m.routing_key(SYS, name), body, self.now))

    def all(self, name: str, token: m.Token, clients: tuple[str, ...] | None = None) -> list[Any]:
        out: list[Any] = []
        for c in self.clients if clients is None else clients:
            out += self.msg(name, c, token)
        self.out = out
        return out

    def confirm(self) -> None:
        """Every client reports our term (as they do right after our first message)."""
        for c in self.clients:
            self.msg(m.HEARTBEAT, c, self.core.token)

    def watching(self, infos: dict[str, ServerInfo | None] | None = None) -> Rig:
        """Answer the start-up query: the core watches R1."""
        self.answer(HEALTHY if infos is None else infos)
        assert self.core.phase == "watching"
        return self

    def fail_master(self, infos: dict[str, ServerInfo | None] = R1_DOWN) -> m.Token:
        """master_retries failed checks: returns the ping token."""
        for _ in range(self.core.master_retries):
            self.check(infos)
        if not self.clients:
            return self.core.token
        (ping,) = self.sent(m.PING)
        return m.token_of(ping)

    def through_invalidation(self, infos: dict[str, ServerInfo | None] = R1_DOWN) -> m.Token:
        tok = self.fail_master(infos)
        self.all(m.PONG, tok)
        (inv,) = self.sent(m.INVALIDATE)
        tok = m.token_of(inv)
        self.all(m.CLIENT_INVALIDATED, tok)
        return tok


# ==================================================================== configuration


def test_fewer_than_two_servers_is_a_configuration_error() -> None:
    with pytest.raises(ValueError, match="at least 2 Redis servers"):
        ConfigurationServerCore(SYS, [R1], ["c1"])
    with pytest.raises(ValueError, match="list of 'host:port'"):
        ConfigurationServerCore(SYS, "r1:6379,r2:6379", ["c1"])


def test_duplicate_servers_or_client_ids_are_configuration_errors() -> None:
    with pytest.raises(ValueError, match=r"listed more than once: \['r1:6379'\]"):
        ConfigurationServerCore(SYS, [R1, R2, R1], ["c1"])
    with pytest.raises(ValueError, match=r"client ids listed more than once: \['c1'\]"):
        ConfigurationServerCore(SYS, [R1, R2], ["c1", "c2", "c1"])


def test_bad_addresses_system_names_and_knobs_are_configuration_errors() -> None:
    with pytest.raises(ValueError, match="no port"):
        ConfigurationServerCore(SYS, [R1, "r2"], [])
    with pytest.raises(ValueError, match="IPv6 host must be in brackets"):
        ConfigurationServerCore(SYS, [R1, "::1:6379"], [])
    with pytest.raises(ValueError, match="system name"):
        ConfigurationServerCore("a.b", [R1, R2], [])
    with pytest.raises(ValueError, match="master_retries"):
        ConfigurationServerCore(SYS, [R1, R2], [], master_retries=0)
    ConfigurationServerCore(SYS, ["[::1]:6379", "[::1]:6380"], [])


def test_a_master_file_naming_an_unconfigured_server_is_ignored_with_a_warning() -> None:
    rig = Rig(master="elsewhere:6379")
    assert any(isinstance(e, Log) and "not configured" in e.text for e in rig.log)
    rig.watching()  # auto-detected instead
    assert rig.core.master == R1


# ==================================================================== the initial master


def test_should_take_the_master_from_the_master_file_if_it_is_a_master() -> None:
    rig = Rig()
    (q,) = rig.of(QueryRedis)
    assert q.servers == tuple(SERVERS)
    rig.watching()
    assert rig.core.master == R1 and rig.core.master_available
    assert SetMaster(R1) in rig.out
    (rec,) = rig.sent(m.RECONFIGURE)
    assert rec["server"] == R1 and rec["sender"] == "rcs"
    assert SetTimer(TIMER_WATCH, 1.0) in rig.out


def test_should_start_master_switch_if_master_in_file_is_slave() -> None:
    rig = Rig(master=R2)
    rig.answer(HEALTHY)  # R2 is a replica of R1
    assert rig.core.phase == "pinging" and rig.core.master == R2
    assert rig.sent(m.PING)
    assert rig.notes() == ["Redis master 'r2:6379' not available"]


def test_should_start_master_switch_if_master_in_file_is_unreachable() -> None:
    rig = Rig()
    rig.answer(R1_DOWN)
    assert rig.core.phase == "pinging" and rig.core.switch_in_progress


def test_should_auto_detect_the_master_when_there_is_no_master_file() -> None:
    rig = Rig(master=None)
    rig.watching()
    assert rig.core.master == R1
    assert rig.core.status()["redis_slaves_available"] == [R2, R3]


@pytest.mark.parametrize(
    ("infos", "why"),
    [
        ({R1: master(), R2: master(), R3: replica()}, "several servers are masters"),
        ({R1: replica(R2), R2: replica(R1), R3: replica()}, "no server is a master"),
        ({R1: master(), R2: replica(), R3: None}, "cannot be reached"),
        ({R1: master(), R2: replica(), R3: replica(R2)}, "not all its replicas"),
    ],
)
def test_no_master_could_be_determined(infos: dict[str, Any], why: str) -> None:
    rig = Rig(master=None)
    rig.answer(infos)
    assert rig.core.phase == "no_master"
    (note,) = rig.notes()
    assert note.startswith("Redis master could not be determined") and why in note
    assert rig.core.status()["no_master_reason"] in note
    rig.tick("detect")  # tries again, and notifies only when the reason changes
    rig.answer(infos)
    assert rig.notes() == [] and rig.core.phase == "no_master"
    rig.tick("detect")
    rig.answer(HEALTHY)
    assert rig.core.phase == "watching" and rig.core.master == R1


def test_other_masters_become_replicas_only_once_the_clients_follow_our_term() -> None:
    rig = Rig(census=False)
    (ping,) = rig.sent(m.PING)
    rig.msg(m.PONG, "c1", m.token_of(ping), master=R1)  # c2 does not answer the census
    rig.tick(TIMER_CLIENTS, 2.0)
    two = {R1: master(10), R2: master(3), R3: replica(R2)}
    rig.watching(two)
    assert not rig.of(MakeReplica)  # c2 has not confirmed our term
    assert R2 in rig.core.retired
    rig.confirm()
    rig.check(two)
    reqs = rig.of(MakeReplica)
    assert [(e.server, e.master) for e in reqs] == [(R2, R1), (R3, R1)]
    assert any("is a master too" in n for n in rig.notes())
    rig.check(two)  # asked already: not again at once
    assert not rig.of(MakeReplica)
    rig.run(rig.core.redis_done(reqs[0].request_id, False, rig.now))  # failed: ask again
    rig.check(two)
    assert [e.server for e in rig.of(MakeReplica)] == [R2]


# ==================================================================== watching


def test_should_check_the_master_every_retry_interval() -> None:
    rig = Rig().watching()
    for _ in range(3):
        rig.check(HEALTHY)
        assert rig.core.retries == 0
    rig.tick()
    assert rig.of(QueryRedis) and SetTimer(TIMER_WATCH, 1.0) in rig.out


def test_should_start_the_invalidation_after_master_retries_failed_checks() -> None:
    rig = Rig().watching()
    rig.check(R1_DOWN)
    rig.check(R1_DOWN)
    assert rig.core.phase == "watching" and rig.core.retries == 2
    assert not rig.core.master_available
    rig.check(R1_DOWN)
    assert rig.core.phase == "pinging"
    assert CancelTimer(TIMER_WATCH) in rig.out
    assert rig.notes() == ["Redis master 'r1:6379' not available"]


def test_a_successful_check_resets_the_failure_count() -> None:
    """Beetle's Ruby watcher never reset it: three blips an hour apart made a switch."""
    rig = Rig().watching()
    for _ in range(5):
        rig.check(R1_DOWN)
        rig.check(R1_DOWN)
        rig.check(HEALTHY)
        assert rig.core.retries == 0 and rig.core.phase == "watching"
    assert rig.sent(m.RECONFIGURE)  # back: announced at once


def test_a_master_that_became_a_replica_counts_as_a_failure() -> None:
    rig = Rig().watching()
    rig.check({R1: replica(R2), R2: master(), R3: replica(R2)})
    assert rig.core.retries == 1


def test_an_unanswered_check_counts_as_a_failure() -> None:
    rig = Rig().watching()
    rig.tick()
    rig.tick()  # the shell never answered the first one
    assert rig.core.retries == 1 and rig.of(QueryRedis)


# ==================================================================== refused or no answer

R1_REFUSED = {R1: REFUSED, R2: replica(R1, 8), R3: replica(R1, 9)}


def test_the_master_is_watched_through_a_connection() -> None:
    rig = Rig().watching()
    assert WatchServer(R1) in rig.log
    rig.check(HEALTHY)
    assert not rig.of(WatchServer)  # held already: not asked for again


def test_a_closed_connection_checks_the_master_at_once() -> None:
    rig = Rig().watching()
    rig.run(rig.core.connection_lost(R1, rig.now + 0.01))
    assert rig.of(QueryRedis)  # now, not at the next tick
    rig.answer(HEALTHY)
    assert not rig.of(WatchServer)  # a live master that closed it: not reopened at once
    assert rig.core.connection_lost(R1, rig.now + 0.02) == []  # one check per connection
    rig.check(HEALTHY, dt=1.5)  # a retry interval later, it is
    assert rig.of(WatchServer) == [WatchServer(R1)]


def test_a_refused_check_starts_the_round_at_once() -> None:
    """The process is gone: the remaining retries would only wait. The clients still answer
    ping and invalidate (each checks the master itself) before anything is promoted."""
    rig = Rig(master_retries=5).watching()
    rig.check(R1_REFUSED)
    assert rig.core.phase == "pinging" and rig.sent(m.PING)
    assert rig.notes() == ["Redis master 'r1:6379' not available"]
    assert WatchServer(None) in rig.out
    assert not rig.of(Promote)


def test_no_answer_keeps_the_deliberate_checks() -> None:
    rig = Rig(master_retries=3).watching()
    rig.check(R1_DOWN)  # None: no answer (hung, or host or link down)
    rig.check(R1_DOWN)
    assert rig.core.phase == "watching" and rig.core.retries == 2 and not rig.sent(m.PING)


def test_after_a_cancelled_round_a_refusal_is_an_ordinary_failure() -> None:
    """A path that refuses the RCS alone: the clients refuse to invalidate, the round is
    cancelled, and then refusals count one by one until the master passes a check."""
    rig = Rig(master_retries=3).watching()
    rig.check(R1_REFUSED)
    rig.tick(TIMER_CLIENTS, 2.0)  # nobody answered: cancelled
    assert rig.core.phase == "watching"
    rig.check(R1_REFUSED)
    assert rig.core.phase == "watching" and rig.core.retries == 1
    rig.check(HEALTHY)
    rig.check(R1_REFUSED)
    assert rig.core.phase == "pinging"  # trusted again after a good check


# ==================================================================== the invalidation round


def test_should_ping_all_clients_with_a_new_token() -> None:
    rig = Rig().watching()
    before = rig.core.token
    tok = rig.fail_master()
    assert tok > before and tok[0] == rig.core.term
    assert SetTimer(TIMER_CLIENTS, 2.0) in rig.out


def test_should_ignore_outdated_pong_messages() -> None:
    rig = Rig().watching()
    tok = rig.fail_master()
    rig.all(m.PONG, (tok[0], tok[1] - 1))
    assert rig.core.phase == "pinging" and not rig.sent(m.INVALIDATE)
    rig.all(m.PONG, tok)
    assert rig.core.phase == "invalidating"


def test_should_reject_pong_messages_from_unknown_ids() -> None:
    rig = Rig().watching()
    tok = rig.fail_master()
    rig.msg(m.PONG, "c1", tok)
    rig.msg(m.PONG, "intruder", tok)
    assert rig.notes() == ["Received pong message from unknown id 'intruder'"]
    assert rig.core.phase == "pinging"
    assert rig.core.status()["unknown_client_ids"] == ["intruder"]


def test_should_send_invalidate_once_every_client_answered_ping() -> None:
    rig = Rig().watching()
    tok = rig.fail_master()
    rig.msg(m.PONG, "c1", tok)
    rig.msg(m.PONG, "c1", tok)  # twice: still one client
    assert not rig.sent(m.INVALIDATE)
    rig.msg(m.PONG, "c2", tok)
    (inv,) = rig.sent(m.INVALIDATE)
    assert inv["server"] == R1 and m.token_of(inv) > tok
    assert rig.out[0] == CancelTimer(TIMER_CLIENTS)
    assert SetTimer(TIMER_CLIENTS, 2.0) in rig.out


def test_should_setup_an_invalidation_timeout() -> None:
    rig = Rig(client_timeout=3.5).watching()
    rig.fail_master()
    assert SetTimer(TIMER_CLIENTS, 3.5) in rig.out


def test_should_continue_watching_after_the_invalidation_timeout_has_expired() -> None:
    rig = Rig().watching()
    tok = rig.fail_master()
    rig.msg(m.PONG, "c2", tok)
    rig.tick(TIMER_CLIENTS, 2.0)
    assert rig.core.phase == "watching" and not rig.core.switch_in_progress
    (note,) = rig.notes()
    assert "cancelled" in note and "['c1']" in note and "answered: ['c2']" in note
    assert SetTimer(TIMER_WATCH, 1.0) in rig.out
    # the clients get their master back (with a newer token), and late answers count for nothing
    (rec,) = rig.sent(m.RECONFIGURE)
    assert rec["server"] == R1 and m.token_of(rec) > tok
    rig.msg(m.PONG, "c1", tok)
    assert rig.core.phase == "watching"
    rig.check(HEALTHY)
    assert rig.core.retries == 0 and rig.core.master == R1


def test_a_cancelled_invalidation_keeps_the_master() -> None:
    rig = Rig().watching()
    tok = rig.fail_master()
    rig.all(m.PONG, tok)
    tok = m.token_of(rig.sent(m.INVALIDATE)[0])
    rig.msg(m.CLIENT_INVALIDATED, "c1", tok)
    rig.tick(TIMER_CLIENTS, 2.0)
    assert "no client_invalidated from ['c2']" in rig.notes()[0]
    assert not [e for e in rig.log if isinstance(e, Promote)]
    assert rig.core.master == R1


def test_should_ignore_outdated_client_invalidated_messages() -> None:
    rig = Rig().watching()
    tok = rig.fail_master()
    rig.all(m.PONG, tok)
    rig.all(m.CLIENT_INVALIDATED, tok)  # the ping's token, not the invalidate's
    assert rig.core.phase == "invalidating"


def test_should_switch_once_every_client_invalidated() -> None:
    rig = Rig().watching()
    rig.through_invalidation()
    assert rig.core.phase == "switching" and rig.of(QueryRedis)
    assert rig.out[0] == CancelTimer(TIMER_CLIENTS)


def test_a_client_invalidated_from_an_unknown_id_does_not_block_the_switch() -> None:
    """Beetle's Ruby added it to the answered set and compared sets for equality, so a stray
    client blocked every switch until the timeout."""
    rig = Rig().watching()
    tok = rig.fail_master()
    rig.all(m.PONG, tok)
    tok = m.token_of(rig.sent(m.INVALIDATE)[0])
    rig.msg(m.CLIENT_INVALIDATED, "stray", tok)
    rig.all(m.CLIENT_INVALIDATED, tok)
    assert rig.core.phase == "switching"


def test_should_switch_the_current_master_immediately_if_there_are_no_clients() -> None:
    rig = Rig(clients=()).watching()
    rig.fail_master()
    assert not rig.sent(m.PING) and rig.core.phase == "switching"
    rig.answer(R1_DOWN)
    (p,) = rig.of(Promote)
    assert p.server == R3


def test_no_reconfigure_is_published_during_a_round() -> None:
    rig = Rig().watching()
    tok = rig.fail_master()
    rig.msg(m.CLIENT_STARTED, "c1", tok)
    assert not rig.sent(m.RECONFIGURE)
    rig.tick(TIMER_RECONFIGURE, 0.1)
    assert rig.out == []


# ==================================================================== the switch


def switched(infos: dict[str, ServerInfo | None], **kw: Any) -> Rig:
    rig = Rig(**kw).watching()
    rig.through_invalidation()
    rig.answer(infos)
    return rig


def test_switch_promotes_the_replica_with_the_largest_offset() -> None:
    rig = switched({R1: None, R2: replica(R1, 50), R3: replica(R1, 40)})
    (p,) = rig.of(Promote)
    assert p.server == R2 and rig.core.phase == "promoting"


def test_switch_breaks_offset_ties_by_configured_order() -> None:
    rig = switched({R1: None, R2: replica(R1, 7), R3: replica(R1, 7)}, servers=[R1, R3, R2])
    assert [p.server for p in rig.of(Promote)] == [R3]


def test_switch_ignores_replicas_of_another_master_and_unreachable_ones() -> None:
    rig = switched({R1: None, R2: None, R3: replica("r9:6379", 99)}, servers=SERVERS)
    assert not rig.of(Promote)
    rig2 = switched({R1: None, R2: None, R3: replica(R1, 1)})
    assert [p.server for p in rig2.of(Promote)] == [R3]


def test_switching_the_master_should_resort_to_the_old_master_if_no_candidate_can_be_found() -> (
    None
):
    rig = switched({R1: None, R2: None, R3: None})
    assert not rig.of(Promote)
    assert any("no slave available" in n and "promoting old master" in n for n in rig.notes())
    (rec,) = rig.sent(m.RECONFIGURE)
    assert rec["server"] == R1
    assert rig.core.master == R1 and not rig.core.master_available
    assert rig.core.phase == "watching"


def test_the_old_master_found_as_a_replica_without_candidates_is_promoted_again() -> None:
    rig = switched({R1: replica(R2), R2: None, R3: None})
    assert [p.server for p in rig.of(Promote)] == [R1]


def test_switch_keeps_the_old_master_if_it_is_back() -> None:
    rig = switched(HEALTHY)
    assert not rig.of(Promote)
    (rec,) = rig.sent(m.RECONFIGURE)
    assert rec["server"] == R1 and rig.core.master_available


def test_switch_adopts_a_master_an_earlier_switch_promoted() -> None:
    """A previous RCS promoted R3 and died before announcing it: finish its switch rather
    than promote a second master."""
    rig = switched({R1: None, R2: replica(R1, 50), R3: master(40)})
    assert not rig.of(Promote)
    assert rig.core.master == R3
    assert rig.sent(m.RECONFIGURE)[0]["server"] == R3


def test_switch_does_not_adopt_a_retired_master() -> None:
    rig = switched({R1: None, R2: replica(R1, 50), R3: replica(R1, 40)})
    rig.run(rig.core.redis_done(rig.of(Promote)[0].request_id, True, rig.now))
    assert rig.core.master == R2 and R1 in rig.core.retired
    # R2 fails in turn while the old R1 is back as a (stale) master, not yet demoted
    infos = {R1: master(10), R2: None, R3: replica(R2, 60)}
    rig.through_invalidation(infos)
    rig.answer(infos)
    assert [p.server for p in rig.of(Promote)] == [R3]


def test_after_a_switch_the_master_is_persisted_announced_and_the_others_follow_it() -> None:
    rig = switched({R1: None, R2: replica(R1, 50), R3: replica(R1, 40)})
    tok = rig.core.token
    (p,) = rig.of(Promote)
    rig.run(rig.core.redis_done(p.request_id, True, rig.now))
    assert SetMaster(R2) in rig.out
    (rec,) = rig.sent(m.RECONFIGURE)
    assert rec["server"] == R2 and m.token_of(rec) == tok  # the invalidation token
    assert "Setting redis master to 'r2:6379' (was 'r1:6379')" in rig.notes()
    assert [(e.server, e.master) for e in rig.of(MakeReplica)] == [(R3, R2)]
    assert rig.core.phase == "watching" and not rig.core.switch_in_progress
    assert SetTimer(TIMER_WATCH, 1.0) in rig.out


def test_the_old_master_becomes_a_replica_when_it_returns() -> None:
    rig = switched({R1: None, R2: replica(R1, 50), R3: replica(R1, 40)})
    rig.run(rig.core.redis_done(rig.of(Promote)[0].request_id, True, rig.now))
    rig.check({R1: master(30), R2: master(51), R3: replica(R2, 51)})
    assert [(e.server, e.master) for e in rig.of(MakeReplica)] == [(R1, R2)]


def test_a_failed_promotion_aborts_and_the_master_is_announced_when_back() -> None:
    rig = switched({R1: None, R2: replica(R1, 50), R3: replica(R1, 40)})
    rig.run(rig.core.redis_done(rig.of(Promote)[0].request_id, False, rig.now))
    assert any("promoting 'r2:6379' failed" in n for n in rig.notes())
    assert rig.core.phase == "watching" and rig.core.master == R1
    assert not rig.sent(m.RECONFIGURE)  # the clients' files stay empty...
    rig.check(HEALTHY)
    assert rig.sent(m.RECONFIGURE)[0]["server"] == R1  # ...until the master is back


def test_a_promotion_the_shell_never_answers_aborts_the_switch() -> None:
    rig = switched({R1: None, R2: replica(R1, 50), R3: replica(R1, 40)})
    rig.tick("redis", 5.0)
    assert rig.core.phase == "watching" and "no answer" in rig.notes()[0]


# ==================================================================== reconfigure for late clients


def test_reconfigure_is_republished_every_reconfigure_interval() -> None:
    rig = Rig(reconfigure_interval=4.0).watching()
    assert SetTimer(TIMER_RECONFIGURE, 4.0) in rig.out
    rig.tick(TIMER_RECONFIGURE, 4.0)
    assert rig.sent(m.RECONFIGURE)[0]["server"] == R1
    assert SetTimer(TIMER_RECONFIGURE, 4.0) in rig.out
    rig.check(R1_DOWN)
    rig.tick(TIMER_RECONFIGURE, 4.0)  # not while the master fails its checks
    assert not rig.sent(m.RECONFIGURE) and SetTimer(TIMER_RECONFIGURE, 4.0) in rig.out


def test_client_started_gets_the_master_at_once() -> None:
    rig = Rig().watching()
    rig.msg(m.CLIENT_STARTED, "c1", m.NO_TOKEN)
    (rec,) = rig.sent(m.RECONFIGURE)
    assert rec["server"] == R1 and m.token_of(rec) == rig.core.token


# ==================================================================== clients: unknown, liveness, status


def test_should_put_a_limit_on_the_number_of_stored_unknown_client_ids() -> None:
    rig = Rig(unknown_max=5).watching()
    for i in range(8):
        rig.msg(m.HEARTBEAT, f"u{i}", m.NO_TOKEN)
    assert rig.core.status()["unknown_client_ids"] == ["u3", "u4", "u5", "u6", "u7"]
    assert Rig().core.unknown_max == 1000


def test_unknown_client_ids_are_notified_once_and_forgotten_after_a_day() -> None:
    rig = Rig().watching()
    rig.msg(m.CLIENT_STARTED, "u1", m.NO_TOKEN)
    assert rig.notes() == ["Received client_started message from unknown id 'u1'"]
    rig.msg(m.HEARTBEAT, "u1", m.NO_TOKEN)
    assert rig.notes() == []
    rig.at(rig.now + 86400.5)
    assert rig.core.status(rig.now)["unknown_client_ids"] == []
    rig.msg(m.HEARTBEAT, "u1", m.NO_TOKEN)
    assert rig.notes() == ["Received heartbeat message from unknown id 'u1'"]


def test_unresponsive_and_unseen_clients() -> None:
    rig = Rig(clients=("c1", "c2", "c3"), census=False, client_dead_interval=60.0)
    rig.msg(m.HEARTBEAT, "c1", m.NO_TOKEN)
    rig.at(30.0).msg(m.HEARTBEAT, "c2", m.NO_TOKEN)
    st = rig.core.status(61.0)
    assert st["unresponsive_clients"] == ["c1"]
    assert st["unseen_client_ids"] == ["c3"]
    assert st["clients"]["c2"]["last_seen_ago"] == 31.0


def test_status_has_beetles_keys() -> None:
    rig = Rig().watching()
    st = rig.core.status()
    for key in (
        "redis_master",
        "redis_master_available",
        "redis_slaves_available",
        "switch_in_progress",
        "configured_client_ids",
        "unknown_client_ids",
        "unresponsive_clients",
        "unseen_client_ids",
    ):
        assert key in st
    assert st["redis_master"] == R1 and st["redis_master_available"] is True
    assert st["configured_client_ids"] == ["c1", "c2"]
    assert st["active"] is True and st["term"] == 1 and st["phase"] == "watching"


# ==================================================================== the accelerated switch


def test_initiate_master_switch_when_the_master_is_down_starts_the_round() -> None:
    rig = Rig().watching()
    rig.check(R1_DOWN)  # one failure of three
    started, effects = rig.core.initiate_master_switch(rig.now)
    rig.run(effects)
    assert started is True and rig.core.phase == "pinging"
    assert rig.notes()[0] == "Master switch initiated"
    started, effects = rig.core.initiate_master_switch(rig.now)
    assert started is True and effects == []  # already switching


def test_initiate_master_switch_when_the_master_is_fine_does_nothing() -> None:
    rig = Rig().watching()
    rig.check(HEALTHY)
    assert rig.core.initiate_master_switch(rig.now) == (False, [])
    standby = Rig(active=False)
    started, _ = standby.core.initiate_master_switch(0.0)
    assert started is False


# ==================================================================== terms and tokens


def test_tokens_carry_the_term_and_grow() -> None:
    rig = Rig(term=7).at(12.5)
    rig.watching()
    (rec,) = rig.sent(m.RECONFIGURE)
    assert rec["term"] == 7
    tok = rig.fail_master()
    assert tok[0] == 7 and tok > m.token_of(rec)


def test_a_restarted_rcs_with_the_same_term_outranks_its_earlier_tokens() -> None:
    """Without elections the term does not change; the counter starts at a millisecond
    timestamp, as Beetle's token did."""
    a = Rig(term=1, start=False).at(100.0)
    a.run(a.core.start(100.0))
    a.census()
    a.watching()
    b = Rig(term=1, start=False).at(160.0)
    b.run(b.core.start(160.0))
    b.census()
    b.watching()
    assert b.sent(m.RECONFIGURE)[0]["token"] > a.fail_master()[1]


def test_a_standby_sends_nothing_but_tracks_clients() -> None:
    rig = Rig(active=False)
    assert rig.out == [] and rig.core.phase == "standby"
    rig.msg(m.HEARTBEAT, "c1", (3, 9), master=R2)
    rig.msg(m.HEARTBEAT, "u9", (3, 9))
    assert rig.out == [] or all(isinstance(e, Log) for e in rig.out)
    st = rig.core.status()
    assert st["unseen_client_ids"] == ["c2"] and st["unknown_client_ids"] == ["u9"]
    assert rig.core.client_masters["c1"] == ((3, 9), R2)
    for key in ("watch", "client_timeout", "reconfigure", "redis", "detect"):
        assert rig.tick(key) == []


def test_activation_needs_a_term_above_every_term_seen() -> None:
    rig = Rig(active=False)
    rig.msg(m.RECONFIGURE, "rcs-a", (4, 100), server=R1)
    rig.run(rig.core.set_active(True, 4, rig.now))
    assert not rig.core.active and rig.of(Log)[0].level >= 40
    rig.run(rig.core.set_active(True, 5, rig.now))
    assert rig.core.active and rig.core.term == 5 and rig.core.phase == "census"
    rig.run(rig.core.set_active(False, 5, rig.now))
    rig.run(rig.core.set_active(True, 5, rig.now))  # a term is used once
    assert not rig.core.active


def test_an_active_rcs_stands_down_on_hearing_a_higher_term() -> None:
    rig = Rig(term=2).watching()
    rig.msg(m.HEARTBEAT, "c1", (3, 1))  # c1 follows a newer RCS
    assert not rig.core.active and rig.core.phase == "standby"
    assert "standing down" in rig.notes()[0]
    assert CancelTimer(TIMER_WATCH) in rig.out
    rig2 = Rig(term=2).watching()
    tok = rig2.fail_master()
    rig2.msg(m.PING, "rcs-b", (3, 1))
    assert not rig2.core.active and not rig2.core.switch_in_progress
    rig2.all(m.PONG, tok)
    assert not rig2.sent(m.INVALIDATE)


def test_deactivation_mid_switch_cancels_the_round() -> None:
    rig = Rig().watching()
    tok = rig.fail_master()
    rig.run(rig.core.set_active(False, 1, rig.now))
    assert CancelTimer(TIMER_CLIENTS) in rig.out and not rig.core.switch_in_progress
    assert rig.all(m.PONG, tok) == []
    rig2 = switched({R1: None, R2: replica(R1, 5), R3: replica(R1, 4)})
    (p,) = rig2.of(Promote)
    rig2.run(rig2.core.set_active(False, 1, rig2.now))
    assert rig2.run(rig2.core.redis_done(p.request_id, True, rig2.now)) == []


def test_activation_finishes_a_switch_the_previous_rcs_left_half_done() -> None:
    """The old RCS promoted R3 and died before its reconfigure: the clients' files are empty,
    R1 is down. The new one runs its own round (the clients are at its term afterwards) and
    adopts R3 instead of promoting a second master."""
    rig = Rig(active=False)
    rig.msg(m.RECONFIGURE, "rcs-a", (1, 50), server=R1)
    rig.run(rig.core.set_active(True, 2, rig.now))
    rig.census()
    half = {R1: None, R2: replica(R1, 40), R3: master(41)}
    rig.answer(half)
    assert rig.core.phase == "pinging" and rig.core.master == R1
    (ping,) = rig.sent(m.PING)
    assert m.token_of(ping)[0] == 2
    rig.all(m.PONG, m.token_of(ping))
    rig.all(m.CLIENT_INVALIDATED, m.token_of(rig.sent(m.INVALIDATE)[0]))
    rig.answer(half)
    assert not rig.of(Promote) and rig.core.master == R3
    assert rig.sent(m.RECONFIGURE)[0]["server"] == R3
    assert [(e.server, e.master) for e in rig.of(MakeReplica)] == [(R2, R3)]


def test_activation_takes_the_master_the_clients_use() -> None:
    """A rebooted standby whose own file is stale: the clients' reports name R2."""
    rig = Rig(active=False, master=R1)
    for c in ("c1", "c2"):
        rig.msg(m.HEARTBEAT, c, (1, 9), master=R2)
    rig.run(rig.core.set_active(True, 2, rig.now))
    rig.census({"c1": R2, "c2": R2})
    rig.answer({R1: replica(R2), R2: master(), R3: replica(R2)})
    assert rig.core.phase == "watching" and rig.core.master == R2


def test_activation_prefers_the_announced_master_over_a_stray_master() -> None:
    """R1 is back and is a master, and so is R3, promoted by a dead RCS before it announced
    it: nobody wrote to R3, while R1 has everything the workers wrote. Keep R1."""
    rig = Rig(active=False)
    rig.msg(m.RECONFIGURE, "rcs-a", (1, 50), server=R1)
    rig.run(rig.core.set_active(True, 2, rig.now))
    rig.census()
    two = {R1: master(100), R2: replica(R1, 90), R3: master(91)}
    rig.answer(two)  # the census confirmed our term: R3 is made a replica at once
    assert rig.core.master == R1 and R3 in rig.core.retired
    assert [(e.server, e.master) for e in rig.of(MakeReplica)] == [(R3, R1)]


def test_activation_asks_every_client_which_master_its_file_names() -> None:
    rig = Rig(census=False, term=4)
    (ping,) = rig.sent(m.PING)
    assert m.token_of(ping)[0] == 4 and rig.core.phase == "census"
    assert SetTimer(TIMER_CLIENTS, 2.0) in rig.out
    rig.msg(m.PONG, "c1", m.token_of(ping), master=R1)
    assert not rig.of(QueryRedis)
    rig.msg(m.PONG, "c2", m.token_of(ping), master=R1)
    assert rig.out[0] == CancelTimer(TIMER_CLIENTS) and rig.of(QueryRedis)


def test_a_fresh_rcs_does_not_announce_an_old_master_that_came_back() -> None:
    """Found by the simulator (seed 247): an RCS booted and elected at once, its own file
    naming R1. R1 had died, R2 was promoted, R1 came back as a master. Deciding from the file
    alone announced R1 and moved the workers off R2. The census asks the workers first."""
    rig = Rig(census=False, master=R1)
    rig.census({"c1": R2, "c2": R2})
    rig.answer({R1: master(100), R2: master(150), R3: replica(R2, 150)})
    assert rig.core.master == R2
    assert rig.sent(m.RECONFIGURE)[0]["server"] == R2
    assert [(e.server, e.master) for e in rig.of(MakeReplica)] == [(R1, R2)]


def test_one_file_naming_a_master_is_enough_when_a_client_does_not_answer() -> None:
    """Files never name two different masters at once, so one that names a master names
    it for everyone."""
    rig = Rig(census=False)
    (ping,) = rig.sent(m.PING)
    rig.msg(m.PONG, "c1", m.token_of(ping), master=R2)
    rig.tick(TIMER_CLIENTS, 2.0)
    rig.answer({R1: replica(R2), R2: master(), R3: replica(R2)})
    assert rig.core.master == R2 and rig.core.phase == "watching"


def test_an_incomplete_census_of_empty_files_trusts_only_unambiguous_servers() -> None:
    """Mid-switch: c1 has emptied its file, c2 cannot be reached and may still use a master
    we cannot know. Neither our own file nor what we heard may decide; the servers alone may,
    and only when exactly one is a master and every other its replica (then c2's file can
    name no other master). Anything less and we wait, and ask the clients again."""
    rig = Rig(census=False)
    (ping,) = rig.sent(m.PING)
    rig.msg(m.PONG, "c1", m.token_of(ping), master="")
    rig.tick(TIMER_CLIENTS, 2.0)
    assert rig.of(QueryRedis)  # the servers are asked
    rig.answer({R1: None, R2: replica(R1), R3: replica(R1)})  # the master is unreachable
    assert rig.core.phase == "no_master"
    assert "no answer from clients ['c2']" in rig.notes()[0]
    rig.tick("detect", 1.0)
    (ping2,) = rig.sent(m.PING)
    assert m.token_of(ping2) > m.token_of(ping)
    rig.msg(m.PONG, "c1", m.token_of(ping2), master="")
    rig.tick(TIMER_CLIENTS, 2.0)
    rig.answer({R1: master(), R2: replica(R1), R3: replica(R1)})  # it is back, alone
    assert rig.core.master == R1 and rig.core.phase == "watching"


def test_a_fresh_set_with_a_client_down_starts_from_the_servers() -> None:
    """A first deployment: every file is empty and one client is not running yet. The
    servers name exactly one master, so the RCS announces it instead of stalling."""
    rig = Rig(census=False)
    (ping,) = rig.sent(m.PING)
    rig.msg(m.PONG, "c1", m.token_of(ping), master="")
    rig.tick(TIMER_CLIENTS, 2.0)
    rig.answer({R1: replica(R2), R2: master(), R3: replica(R2)})
    assert rig.core.master == R2 and rig.core.phase == "watching"


def test_a_watching_rcs_whose_workers_follow_another_master_determines_it_again() -> None:
    """Found by the simulator (seed 45, before the census): a standby activated from stale
    news believed R1 (dead) was the master while the workers had just been moved to R2; when
    R1 came back it announced R1 again. The census now prevents the stale start; this guard
    stays: word from the workers newer than ours, naming another master, makes us look
    again instead of announcing ours."""
    rig = Rig().watching()
    rig.check(R1_DOWN)
    rig.msg(m.HEARTBEAT, "c1", (rig.core.term, rig.core.counter + 5), master=R2)
    rig.check({R1: master(5), R2: master(50), R3: replica(R2)})
    assert not rig.sent(m.RECONFIGURE) and rig.core.phase == "detecting"
    rig.answer({R1: master(5), R2: master(50), R3: replica(R2)})
    assert rig.core.master == R2 and rig.sent(m.RECONFIGURE)[0]["server"] == R2


def test_a_standby_learns_replaced_masters_from_reconfigure() -> None:
    rig = Rig(active=False)
    rig.msg(m.RECONFIGURE, "rcs-a", (1, 5), server=R1)
    rig.msg(m.RECONFIGURE, "rcs-a", (1, 9), server=R2)
    rig.msg(m.RECONFIGURE, "rcs-a", (1, 7), server=R3)  # older than what we know: ignored
    assert rig.core.heard == ((1, 9), R2) and rig.core.retired == {R1}


def test_bus_down_voids_term_confirmation() -> None:
    rig = Rig().watching()
    rig.confirm()
    assert rig.core.term_confirmed(rig.now)
    rig.run(rig.core.bus_down(rig.now))
    assert not rig.core.term_confirmed(rig.now)
    rig.run(rig.core.bus_up(rig.now))
    assert rig.sent(m.RECONFIGURE)  # re-announced after the reconnect
    rig.confirm()
    assert rig.core.term_confirmed(rig.now)
    assert not rig.core.term_confirmed(rig.now + 16.0)  # 3 x the clients' heartbeat


def test_bad_messages_are_dropped_with_a_log() -> None:
    rig = Rig().watching()
    for key, body in [
        ("failover.sys.pong", {"v": 2}),
        ("failover.sys.pong", "not json"),
        ("failover.sys.nope", {}),
        ("failover.other.pong", m.build("other", "pong", "c1", (1, 1), master="")),
        ("failover.sys.pong", m.build(SYS, "ping", "c1", (1, 1))),
        ("failover.sys.pong", {**m.build(SYS, "pong", "c1", (1, 1), master=""), "term": -1}),
        ("failover.sys.reconfigure", m.build(SYS, "reconfigure", "x", (1, 1), server="nope")),
    ]:
        out = rig.core.receive(key, body, rig.now)
        assert len(out) == 1 and isinstance(out[0], Log) and "dropped" in out[0].text


# ==================================================================== the wire


def test_messages_round_trip_and_validate() -> None:
    body = m.build(SYS, m.INVALIDATE, "rcs", (3, 17), server=R2)
    assert body == {
        "v": 1,
        "type": "invalidate",
        "system": "sys",
        "sender": "rcs",
        "term": 3,
        "token": 17,
        "server": R2,
    }
    assert m.problem(m.routing_key(SYS, m.INVALIDATE), body, SYS) is None
    assert m.token_of(body) == (3, 17)
    assert m.pattern(SYS) == "failover.sys.*"
    assert m.name_of("failover.sys.client_invalidated", SYS) == "client_invalidated"
    assert m.name_of("failover.sysx.ping", SYS) is None
    bad = {k: v for k, v in body.items() if k != "server"}
    assert "missing field 'server'" in (m.problem("failover.sys.invalidate", bad, SYS) or "")
    assert m.problem("failover.sys.invalidate", {**body, "v": 9}, SYS)
    assert m.problem("failover.sys.pong", {**body, "type": "pong"}, SYS)


@pytest.mark.parametrize(
    "server", ["h:1", "10.0.0.1:6379", "[::1]:6379", "redis-1.example.com:65535"]
)
def test_server_addresses_accepted(server: str) -> None:
    assert m.check_server(server) == server


@pytest.mark.parametrize(
    "server", ["h", "h:0", "h:65536", ":6379", "a b:1", "::1:6379", "[::1]6379"]
)
def test_server_addresses_refused(server: str) -> None:
    with pytest.raises(ValueError, match="invalid Redis server"):
        m.check_server(server)


def test_every_no_answer_line_says_what_failed() -> None:
    """Issue 27: servers that were never started read "connection refused", a hung one "no
    answer in time", and one that answered its role, in the note a newcomer sees."""
    rig = Rig(census=False)
    (ping,) = rig.sent(m.PING)
    rig.msg(m.PONG, "c1", m.token_of(ping), master="")
    rig.tick(TIMER_CLIENTS, 2.0)
    rig.answer({R1: REFUSED, R2: None, R3: replica(R1)})
    (note,) = rig.notes()
    assert f"{R1}: connection refused" in note
    assert f"{R2}: no answer in time" in note
    assert f"{R3}: slave of {R1}" in note
    rig = Rig(master=None)
    rig.answer({R1: master(), R2: replica(), R3: REFUSED})
    (note,) = rig.notes()
    assert "cannot be reached" in note and f"{R3}: connection refused" in note


def test_a_bus_still_connecting_at_start_is_no_outage() -> None:
    rig = Rig()
    assert rig.run(rig.core.bus_down(rig.now, at_start=True)) == []
    logged = [e.text for e in rig.core.bus_up(rig.now) if isinstance(e, Log)]
    assert logged == ["RCS: bus connected"]
    assert [e.text for e in rig.core.bus_down(rig.now) if isinstance(e, Log)] == [
        "RCS: bus disconnected"
    ]
    assert [e.text for e in rig.core.bus_up(rig.now) if isinstance(e, Log)] == [
        "RCS: bus reconnected"
    ]


def test_the_routing_tables_cover_every_client_message_and_timer() -> None:
    """The facade routes by explicit tables (failover/server_core.py): a client message type
    without a route would raise KeyError on valid input, and a timer no route names would be
    set and never acted on."""
    core = Rig().core
    assert set(core._client_routes) == m.CLIENT_MESSAGES
    assert {key for key, _phase in core._timer_routes} == set(TIMERS)
