"""rabbitry.swarm.start_members: a member whose start fails is started again, and a member
that never starts ends the swarm (the started ones stopped), without a core."""

from __future__ import annotations

from typing import Any

import pytest

from rabbitry import swarm


class _Config:
    def __init__(self, node: str) -> None:
        self.node = node


def _configs(*names: str) -> Any:
    return [_Config(n) for n in names]


class _Member:
    def __init__(self, name: str) -> None:
        self.name = name
        self.stopped = False

    def running(self) -> bool:
        return True

    def stop(self) -> None:
        self.stopped = True


def _starter(monkeypatch: pytest.MonkeyPatch, failures: dict[str, int]) -> list[_Member]:
    started: list[_Member] = []

    def start(config: Any, io_loop: Any = None) -> _Member:
        if failures.get(config.node, 0) > 0:
            failures[config.node] -= 1
            raise TimeoutError(f"{config.node}: gossip did not start")
        member = _Member(config.node)
        started.append(member)
        return member

    monkeypatch.setattr(swarm.SwarmMember, "start", staticmethod(start))
    monkeypatch.setattr(swarm.time, "sleep", lambda _s: None)  # the pause between tries
    return started


def test_a_start_that_fails_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    failures = {"m1": swarm.START_ATTEMPTS - 1}  # fails on every try but the last
    started = _starter(monkeypatch, failures)
    members = swarm.start_members(_configs("m0", "m1", "m2"))
    assert sorted(m.name for m in members) == ["m0", "m1", "m2"]
    assert failures["m1"] == 0
    assert not any(m.stopped for m in started)


def test_a_member_that_never_starts_ends_the_swarm(monkeypatch: pytest.MonkeyPatch) -> None:
    started = _starter(monkeypatch, {"m1": swarm.START_ATTEMPTS})
    with pytest.raises(TimeoutError, match="m1"):
        swarm.start_members(_configs("m0", "m1", "m2"))
    assert started and all(m.stopped for m in started)  # the others left with it
