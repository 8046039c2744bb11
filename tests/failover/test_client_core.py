"""ConfigurationClientCore (the RCC): Beetle's client tests in our words, plus terms.

Beetle's names (test/beetle/redis_configuration_client_test.rb at dfb99a1c) are kept where a
test ports one. `Rig` plays the shell: it answers ReadMasterFile and QueryRedis, and feeds the
RCS's messages with tokens of our choosing.
"""

from __future__ import annotations

from typing import Any

import pytest

from failover import messages as m
from failover.client_core import TIMER_HEARTBEAT, ConfigurationClientCore
from failover.effects import (
    CancelTimer,
    Log,
    Publish,
    QueryRedis,
    ReadMasterFile,
    ServerInfo,
    SetTimer,
    WriteMasterFile,
)

R1, R2 = "r1:6379", "r2:6379"
SYS = "sys"
MASTER = ServerInfo("master", None, 5)
SLAVE = ServerInfo("slave", R2, 5)


class Rig:
    def __init__(self, file: str | None = None, **kw: Any) -> None:
        self.core = ConfigurationClientCore(SYS, "c1", **kw)
        self.now = 0.0
        self.out: list[Any] = self.core.start(0.0)
        self.start_effects = self.out
        self.file = file
        self.writes: list[str | None] = []

    def run(self, effects: list[Any]) -> list[Any]:
        self.out = effects
        for e in effects:
            if isinstance(e, WriteMasterFile):
                self.file = e.server
                self.writes.append(e.server)
        return effects

    def read(self, content: str | None = None) -> list[Any]:
        return self.run(self.core.master_file_read(content or self.file, self.now))

    def of(self, cls: type) -> list[Any]:
        return [e for e in self.out if isinstance(e, cls)]

    def sent(self, name: str) -> list[dict[str, Any]]:
        return [e.body for e in self.of(Publish) if e.body["type"] == name]

    def answer(self, infos: dict[str, ServerInfo | None]) -> list[Any]:
        (q,) = self.of(QueryRedis)
        assert set(q.servers) <= set(infos)
        return self.run(self.core.redis_info(q.request_id, infos, self.now))

    def msg(self, name: str, token: m.Token, sender: str = "rcs", **fields: Any) -> list[Any]:
        body = m.build(SYS, name, sender, token, **fields)
        return self.run(self.core.receive(m.routing_key(SYS, name), body, self.now))


def started(file: str | None = R1, infos: dict[str, ServerInfo | None] | None = None) -> Rig:
    rig = Rig(file)
    rig.read()
    if file is not None:
        rig.answer({file: MASTER} if infos is None else infos)
    return rig


# ==================================================================== start-up


def test_start_sends_client_started_reads_the_file_and_arms_the_heartbeat() -> None:
    rig = Rig()
    (pub, read, timer) = rig.start_effects
    assert pub.routing_key == "failover.sys.client_started"
    assert pub.body["sender"] == "c1" and (pub.body["term"], pub.body["token"]) == (0, 0)
    assert read == ReadMasterFile()
    assert timer == SetTimer(TIMER_HEARTBEAT, 5.0)


def test_should_keep_the_master_file_if_its_master_is_a_master() -> None:
    rig = Rig(R1)
    rig.read()
    (q,) = rig.of(QueryRedis)
    assert q.servers == (R1,)
    rig.answer({R1: MASTER})
    assert rig.writes == [] and rig.core.master == R1


def test_should_clear_the_master_file_if_the_master_is_a_slave() -> None:
    rig = started(R1, {R1: SLAVE})
    assert rig.writes == [None] and rig.core.master is None


def test_should_clear_the_master_file_if_the_master_is_unavailable() -> None:
    rig = started(R1, {R1: None})
    assert rig.writes == [None]


def test_an_empty_master_file_waits_for_reconfigure_and_garbage_is_emptied() -> None:
    rig = Rig(None)
    rig.read()
    assert not rig.of(QueryRedis) and rig.writes == []
    rig2 = Rig("not an address")
    rig2.read()
    assert rig2.writes == [None]
    rig3 = Rig("   ")
    rig3.read()
    assert rig3.writes == [] and rig3.core.master is None


def test_a_file_read_answered_after_a_reconfigure_is_ignored() -> None:
    rig = Rig(R1)
    rig.msg(m.RECONFIGURE, (1, 1), server=R2)
    rig.read(R1)
    assert rig.core.master == R2 and rig.of(Log) and not rig.of(QueryRedis)


def test_a_start_check_overtaken_by_a_reconfigure_is_dropped() -> None:
    rig = Rig(R1)
    rig.read()
    (q,) = rig.of(QueryRedis)
    rig.msg(m.RECONFIGURE, (1, 1), server=R2)
    rig.run(rig.core.redis_info(q.request_id, {R1: None}, 0.0))
    assert rig.file == R2 and rig.writes == [R2]


# ==================================================================== ping


def test_ping_is_answered_with_a_pong_with_the_same_token() -> None:
    rig = started()
    rig.msg(m.PING, (1, 7))
    (pong,) = rig.sent(m.PONG)
    assert m.token_of(pong) == (1, 7) and pong["sender"] == "c1" and pong["master"] == R1


def test_should_ignore_outdated_ping_messages() -> None:
    rig = started()
    rig.msg(m.PING, (1, 7))
    rig.msg(m.PING, (1, 6))
    assert not rig.sent(m.PONG)


# ==================================================================== invalidate


def test_invalidate_clears_the_file_and_answers_when_the_master_is_down() -> None:
    rig = started()
    rig.msg(m.INVALIDATE, (1, 8), server=R1)
    (q,) = rig.of(QueryRedis)
    assert q.servers == (R1,)
    rig.answer({R1: None})
    assert rig.writes == [None]
    (ans,) = rig.sent(m.CLIENT_INVALIDATED)
    assert m.token_of(ans) == (1, 8)
    i_write = next(i for i, e in enumerate(rig.out) if isinstance(e, WriteMasterFile))
    i_pub = next(i for i, e in enumerate(rig.out) if isinstance(e, Publish))
    assert i_write < i_pub  # the file is empty before the RCS hears about it


def test_should_ignore_invalidate_messages_when_current_master_is_still_a_master() -> None:
    rig = started()
    rig.msg(m.INVALIDATE, (1, 8), server=R1)
    rig.answer({R1: MASTER})
    assert rig.writes == [] and not rig.sent(m.CLIENT_INVALIDATED)


def test_invalidate_is_refused_while_our_file_names_another_live_master() -> None:
    rig = started(R2, {R2: MASTER})
    rig.msg(m.INVALIDATE, (1, 8), server=R1)
    (q,) = rig.of(QueryRedis)
    assert q.servers == (R1, R2)
    rig.answer({R1: None, R2: MASTER})
    assert not rig.sent(m.CLIENT_INVALIDATED) and rig.file == R2


def test_invalidate_with_an_empty_file_still_checks_the_named_master() -> None:
    """A file emptied by an earlier, cancelled round must not make this client agree to a
    switch away from a master it can still use."""
    rig = started(None)
    rig.msg(m.INVALIDATE, (1, 8), server=R1)
    rig.answer({R1: MASTER})
    assert not rig.sent(m.CLIENT_INVALIDATED)
    rig.msg(m.INVALIDATE, (1, 9), server=R1)
    rig.answer({R1: SLAVE})
    assert rig.sent(m.CLIENT_INVALIDATED) and rig.writes == []  # nothing to empty


def test_should_ignore_outdated_invalidate_messages() -> None:
    rig = started()
    rig.msg(m.PING, (1, 9))
    rig.msg(m.INVALIDATE, (1, 8), server=R1)
    assert not rig.of(QueryRedis)


def test_an_invalidate_check_overtaken_by_a_newer_message_is_dropped() -> None:
    rig = started()
    rig.msg(m.INVALIDATE, (1, 8), server=R1)
    (q,) = rig.of(QueryRedis)
    rig.msg(m.PING, (1, 9))  # a new round began while we were checking
    rig.run(rig.core.redis_info(q.request_id, {R1: None}, 0.0))
    assert rig.writes == [] and not rig.sent(m.CLIENT_INVALIDATED)


# ==================================================================== reconfigure


def test_reconfigure_writes_the_file_if_it_differs() -> None:
    rig = started()
    rig.msg(m.RECONFIGURE, (1, 3), server=R2)
    assert rig.writes == [R2] and rig.core.master == R2
    rig.msg(m.RECONFIGURE, (1, 4), server=R2)
    assert rig.writes == [R2]


def test_should_ignore_outdated_reconfigure_messages() -> None:
    rig = started()
    rig.msg(m.RECONFIGURE, (1, 5), server=R1)
    rig.msg(m.RECONFIGURE, (1, 4), server=R2)
    assert rig.writes == [] and rig.core.master == R1


# ==================================================================== terms


def test_tokens_compare_as_term_then_counter() -> None:
    rig = started()
    rig.msg(m.PING, (1, 1_700_000_000_000))
    rig.msg(m.RECONFIGURE, (2, 1), server=R2)  # a newer RCS, with a small counter
    assert rig.file == R2
    rig.msg(m.RECONFIGURE, (1, 1_700_000_000_001), server=R1)  # the older one, too late
    assert rig.file == R2 and rig.core.max_token == (2, 1)


def test_a_new_term_is_followed_by_a_heartbeat_at_once() -> None:
    rig = started()
    rig.msg(m.PING, (3, 1))
    (hb,) = rig.sent(m.HEARTBEAT)
    assert (hb["term"], hb["token"]) == (3, 1) and hb["master"] == R1
    rig.msg(m.PING, (3, 2))
    assert not rig.sent(m.HEARTBEAT)


def test_outdated_messages_are_answered_with_a_heartbeat_at_most_once_a_second() -> None:
    rig = started()
    rig.msg(m.PING, (3, 1))
    rig.msg(m.INVALIDATE, (2, 99), sender="old-rcs", server=R1)
    (hb,) = rig.sent(m.HEARTBEAT)
    assert hb["term"] == 3  # tells the old RCS that a newer one exists
    rig.now = 0.5
    rig.msg(m.PING, (2, 100), sender="old-rcs")
    assert not rig.sent(m.HEARTBEAT)
    rig.now = 1.0
    rig.msg(m.PING, (2, 101), sender="old-rcs")
    assert rig.sent(m.HEARTBEAT)


def test_heartbeats_carry_the_highest_token_and_the_master() -> None:
    rig = started()
    rig.msg(m.PING, (4, 2))
    rig.run(rig.core.timer(TIMER_HEARTBEAT, 5.0))
    assert SetTimer(TIMER_HEARTBEAT, 5.0) in rig.out
    (hb,) = rig.sent(m.HEARTBEAT)
    assert (hb["term"], hb["token"], hb["master"]) == (4, 2, R1)
    rig.run(rig.core.bus_down(6.0))
    rig.run(rig.core.timer(TIMER_HEARTBEAT, 10.0))
    assert not rig.sent(m.HEARTBEAT)  # nobody would get it


def test_a_bus_reconnect_sends_client_started_again() -> None:
    rig = started()
    rig.run(rig.core.bus_down(1.0))
    rig.run(rig.core.bus_up(2.0))
    assert rig.sent(m.CLIENT_STARTED)
    assert rig.core.bus_up(3.0) == []


def test_other_clients_messages_and_notifications_are_ignored() -> None:
    rig = started()
    assert rig.msg(m.HEARTBEAT, (9, 9), sender="c2", master=R2) == []
    assert rig.msg(m.SYSTEM_NOTIFICATION, (9, 9), message="hello") == []
    assert rig.core.max_token == m.NO_TOKEN


def test_bad_messages_are_dropped_with_a_log() -> None:
    rig = started()
    out = rig.core.receive("failover.sys.ping", {"v": 1, "type": "ping"}, 0.0)
    assert len(out) == 1 and isinstance(out[0], Log) and "dropped" in out[0].text


def test_stop_cancels_the_heartbeat_and_ignores_late_answers() -> None:
    rig = started()
    rig.msg(m.INVALIDATE, (1, 8), server=R1)
    (q,) = rig.of(QueryRedis)
    assert rig.core.stop(1.0) == [CancelTimer(TIMER_HEARTBEAT)]
    assert rig.core.redis_info(q.request_id, {R1: None}, 1.0) == []
    assert rig.core.timer(TIMER_HEARTBEAT, 5.0) == []


def test_bad_client_configuration() -> None:
    with pytest.raises(ValueError, match="client id"):
        ConfigurationClientCore(SYS, "")
    with pytest.raises(ValueError, match="no spaces"):
        ConfigurationClientCore(SYS, "a b")
    with pytest.raises(ValueError, match="heartbeat_interval"):
        ConfigurationClientCore(SYS, "c1", heartbeat_interval=0)


def test_server_info_from_redis_info() -> None:
    replica = ServerInfo.from_info(
        {
            "role": "slave",
            "master_host": "10.0.0.1",
            "master_port": 6379,
            "master_link_status": "down",
            "slave_repl_offset": "123",
        }
    )
    assert replica == ServerInfo("slave", "10.0.0.1:6379", 123, False)
    master = ServerInfo.from_info({"role": "master", "master_repl_offset": 77})
    assert master.is_master and master.offset == 77
    normalised = ServerInfo.from_info(
        {"role": "slave", "master_address": "[::1]:6379", "slave_repl_offset": None}
    )
    assert normalised.replica_of("[::1]:6379") and normalised.offset == 0
    assert ServerInfo("replica", R1).role == "slave"


def test_an_invalidate_before_the_file_is_read_empties_the_file() -> None:
    """The file's content is unknown yet: it may name the invalidated master, so it is
    emptied (never left naming a master the RCS is switching away from), and the late read
    is ignored."""
    rig = Rig(R1)
    rig.msg(m.INVALIDATE, (1, 8), server=R1)
    rig.answer({R1: None})
    assert rig.writes == [None] and rig.sent(m.CLIENT_INVALIDATED)
    rig.read(R1)
    assert not rig.of(QueryRedis) and rig.file is None
