"""SingletonCore, driven by hand: the acceptor's rules, and bad input dropped, never raised."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from monitors.effects import Log, Send
from rabbitry.singleton.core import SingletonCore
from rabbitry.singleton.effects import PersistTokens, StartInstance

MEMBERS = ["a@h", "b@h", "c@h"]


def acceptor(**kw: Any) -> SingletonCore:
    core = SingletonCore("a@h", lease=2.0, members=MEMBERS, **kw)
    core.start(0.0)
    return core


def acquire(token: int, round_: int = 1, renew: bool = False) -> dict[str, Any]:
    return {
        "v": 1,
        "t": "acquire",
        "key": "k",
        "token": token,
        "round": round_,
        "lease": 2.0,
        "renew": renew,
    }


def answer(effects: list[Any]) -> dict[str, Any]:
    return next(e.msg for e in effects if isinstance(e, Send) and e.msg["t"] == "ack")


def test_one_holder_at_a_time_until_its_grant_runs_out() -> None:
    core = acceptor()
    first = core.receive("b@h", acquire(1), 0.0)
    assert answer(first)["ok"] and any(isinstance(e, PersistTokens) for e in first)
    assert not answer(core.receive("c@h", acquire(2), 1.0))["ok"]  # b's grant is live
    assert answer(core.receive("c@h", acquire(2), 2.5))["ok"]  # ran out at 2.0


def test_a_new_holder_needs_a_token_above_every_token_granted() -> None:
    core = acceptor()
    assert answer(core.receive("b@h", acquire(5), 0.0))["ok"]
    assert not answer(core.receive("c@h", acquire(5), 3.0))["ok"]
    assert answer(core.receive("c@h", acquire(6), 3.0))["ok"]


def test_a_restarted_acceptor_grants_nothing_for_a_lease() -> None:
    core = SingletonCore("a@h", lease=2.0, members=MEMBERS, max_token=9, restarted=True)
    core.start(10.0)
    assert not answer(core.receive("b@h", acquire(10), 11.0))["ok"]
    assert answer(core.receive("b@h", acquire(10), 12.5))["ok"]


def test_a_majority_starts_the_instance_from_the_send_time() -> None:
    core = acceptor()
    core.want("k", 0.0)
    effects = core.timer("try:k", 0.0, "k")  # asks b and c, and itself
    assert [e.node for e in effects if isinstance(e, Send)] == ["b@h", "c@h"]
    ack = {"v": 1, "t": "ack", "key": "k", "round": 1, "ok": True, "max_token": 1}
    started = core.receive("b@h", ack, 0.3)  # the answer comes late; the lease runs from 0.0
    start = next(e for e in started if isinstance(e, StartInstance))
    assert start.token == 1 and start.expires_in < 2.0 - 0.3


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5) | st.floats(),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "v",
                        "t",
                        "key",
                        "token",
                        "round",
                        "lease",
                        "ok",
                        "max_token",
                        "q",
                        "info",
                        "renew",
                    ]
                ),
                inner,
                max_size=6,
            )
        ),
        max_leaves=12,
    )
)
def test_any_input_is_dropped_or_handled_never_raised(msg: Any) -> None:
    core = acceptor()
    core.want("k", 0.0)
    effects = core.receive("b@h", msg, 1.0)
    assert all(not isinstance(e, Log) or e.text for e in effects)


_ANY = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4)


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(["acquire", "ack", "release", "free", "held", "whereis", "where"]),
    st.dictionaries(
        st.sampled_from(
            [
                "key",
                "token",
                "round",
                "lease",
                "ok",
                "max_token",
                "q",
                "left",
                "holder",
                "confirmed",
                "info",
                "renew",
            ]
        ),
        _ANY,
        max_size=8,
    ),
)
def test_well_typed_heads_with_any_fields_never_raise(kind: str, fields: dict[str, Any]) -> None:
    core = acceptor()
    core.want("k", 0.0)
    core.timer("try:k", 0.0, "k")
    core.whereis("k", 0.0)
    for sender in ("b@h", "c@h", "x@h"):
        core.receive(sender, {"v": 1, "t": kind, "key": "k", "round": 1, "q": 1, **fields}, 0.5)
    core.timer("query:1", 1.0, 1)


def test_a_holder_that_finds_another_holder_stops_and_reports_the_conflict() -> None:
    """A global name's holder that was cut off and found another node holding the name on
    its next renewal stops its instance and reports the conflict (the losing process is then
    told ("global_name_conflict", name), as Erlang's global does)."""
    from rabbitry.singleton.effects import Conflict, StopInstance

    core = acceptor()
    core.want("g", 0.0, info={"name": "rabbitry.global.g"})
    core.timer("try:g", 0.0, "g")
    yes = {"v": 1, "t": "ack", "key": "g", "round": 1, "ok": True, "max_token": 1}
    assert any(isinstance(e, StartInstance) for e in core.receive("b@h", yes, 0.1))
    renewal = core.timer("try:g", 0.5, "g")
    round_ = next(e.msg["round"] for e in renewal if isinstance(e, Send))
    no = {
        "v": 1,
        "t": "ack",
        "key": "g",
        "round": round_,
        "ok": False,
        "max_token": 4,
        "holder": "c@h",
        "left": 1.5,
        "confirmed": True,
    }
    core.receive("b@h", no, 0.6)
    effects = core.receive("c@h", no, 0.6)
    assert any(isinstance(e, StopInstance) for e in effects)
    assert Conflict("g", "c@h") in effects


def test_a_grant_that_comes_after_its_round_was_lost_is_given_back() -> None:
    """A candidate that lost its round (here to the acceptors' other grants) gets a yes late:
    it gives that grant back at once. Kept, it would outlive the candidate there and make
    that acceptor refuse the real holder's renewals, whose older token is no match for it."""
    core = acceptor()
    core.want("k", 0.0)
    core.timer("try:k", 0.0, "k")  # round 1, token 1; our own acceptor said yes
    no = {"v": 1, "t": "ack", "key": "k", "round": 1, "ok": False, "max_token": 1}
    no_b = {**no, "holder": "b@h", "left": 2.0, "confirmed": False}
    core.receive("b@h", no_b, 0.1)
    core.receive("c@h", no_b, 0.1)  # two noes of three: the round is lost
    late = core.receive("c@h", {**no, "ok": True, "token": 1}, 0.2)  # c's yes, too late
    assert [(e.node, e.msg["t"], e.msg["token"]) for e in late if isinstance(e, Send)] == [
        ("c@h", "release", 1)
    ]
    # an answer without the token (an older node's) changes nothing, as before
    assert core.receive("c@h", {**no, "ok": True}, 0.3) == []


def test_a_late_grant_of_the_token_we_hold_is_kept() -> None:
    core = acceptor()
    core.want("k", 0.0)
    core.timer("try:k", 0.0, "k")
    yes = {"v": 1, "t": "ack", "key": "k", "round": 1, "ok": True, "max_token": 1, "token": 1}
    core.receive("b@h", yes, 0.1)  # a majority with our own: held, token 1
    assert core.claims["k"].phase == "held"
    assert not [e for e in core.receive("c@h", yes, 0.2) if isinstance(e, Send)]


def test_an_acceptor_answers_with_the_token_asked_for() -> None:
    assert answer(acceptor().receive("b@h", acquire(4), 0.0))["token"] == 4


def test_a_live_grant_of_an_unconfirmed_candidate_does_not_make_the_key_taken() -> None:
    """Three registering at once can each lose a round to another's grant: the key is taken
    only once a refusing acceptor's grant is confirmed (its holder said it won)."""
    core = acceptor()
    core.want("k", 0.0)
    core.timer("try:k", 0.0, "k")
    no = {"v": 1, "t": "ack", "key": "k", "round": 1, "ok": False, "max_token": 1}
    core.receive("b@h", {**no, "holder": "b@h", "left": 2.0, "confirmed": False}, 0.1)
    core.receive("c@h", {**no, "holder": "c@h", "left": 2.0, "confirmed": False}, 0.1)
    claim = core.claims["k"]
    assert claim.phase == "idle" and claim.holder_seen is not None and claim.taken_by is None
    core.timer("try:k", 1.0, "k")  # asks again
    taken = {**no, "round": claim.round, "holder": "b@h", "left": 1.5, "confirmed": True}
    core.receive("b@h", taken, 1.1)
    core.receive("c@h", taken, 1.1)
    assert claim.phase == "idle" and claim.taken_by == "b@h"


def test_a_holder_that_asks_afresh_with_its_own_token_is_refused() -> None:
    """A node that restarted before its last grant reached its disc asks afresh (no renew)
    with the token it held: granted, it would start a second instance with that token (the
    simulator's seed 94, 5 nodes, autoheal). Its renewal of that token, and a newer token,
    are granted."""
    core = acceptor()
    assert answer(core.receive("b@h", acquire(3), 0.0))["ok"]
    again = answer(core.receive("b@h", acquire(3, round_=2), 0.5))
    assert not again["ok"] and again["max_token"] == 3
    assert answer(core.receive("b@h", acquire(3, round_=3, renew=True), 0.6))["ok"]
    assert answer(core.receive("b@h", acquire(4, round_=4), 0.7))["ok"]
    # once its grant ran out here too: the same token is still no new instance
    assert not answer(core.receive("b@h", acquire(4, round_=5), 5.0))["ok"]
