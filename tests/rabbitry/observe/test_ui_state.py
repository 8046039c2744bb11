"""The page's reading of who cannot see whom, and its login bookkeeping, from given views."""

from __future__ import annotations

from typing import Any

from rabbitry.ui.login import Logins
from rabbitry.ui.state import cut_links, members

A, B, C = "a@h", "b@h", "c@h"
CORE = [A, B, C]


def view(connected: list[str], paused: bool = False, running: list[str] | None = None) -> Any:
    status = {"paused": paused, "running": running or [], "alarms": {}, "partitions": []}
    return {"status": status, "connected": connected, "net_ticktime": 1.0}


def test_a_partial_partition_is_seen_through_the_member_that_sees_both() -> None:
    """a and c cut, b sees both; the page on a hears b: a cannot see c, who is alive."""
    views = {A: view([B]), B: view([A, C])}
    assert cut_links(CORE, views) == [{"node": A, "cannot_see": [C], "paused": False}]


def test_a_member_nobody_reaches_is_down_not_a_partition() -> None:
    """c stopped (or cut off from everyone we hear): nothing proves it alive."""
    views = {A: view([B]), B: view([A])}
    assert cut_links(CORE, views) == []


def test_a_paused_node_cannot_see_the_members_it_is_cut_from() -> None:
    views = {C: view([], paused=True)}
    assert cut_links(CORE, views) == [{"node": C, "cannot_see": [A, B], "paused": True}]


def test_member_states() -> None:
    views = {C: view([], paused=True)}
    rows = members(C, CORE, ["x@h"], status=views[C]["status"], views=views, up=set())
    assert [(r["name"], r["role"], r["state"]) for r in rows] == [
        (A, "core", "down"),
        (B, "core", "down"),
        (C, "core", "paused"),
        ("x@h", "ephemeral", "down"),
    ]


def test_tokens_expire_and_work_once_and_sessions_expire() -> None:
    now = [0.0]
    logins = Logins(token_ttl=60, session_ttl=3600, clock=lambda: now[0])
    token = logins.new_token()
    late = logins.new_token()
    session = logins.redeem(token)
    assert session is not None and logins.valid(session)
    assert logins.redeem(token) is None  # used
    now[0] = 61
    assert logins.redeem(late) is None  # expired
    assert logins.valid(session)
    now[0] = 3601
    assert not logins.valid(session)
    assert not logins.valid(None) and not logins.valid("forged")
