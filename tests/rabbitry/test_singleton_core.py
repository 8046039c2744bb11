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
