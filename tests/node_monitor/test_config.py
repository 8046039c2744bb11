"""partition_handling: every accepted form, and clear errors with key paths."""

from __future__ import annotations

from typing import Any

import pytest

from monitors.node_monitor import PartitionHandling, PartitionHandlingError


@pytest.mark.parametrize("mode", ["ignore", "pause_minority", "autoheal"])
def test_simple_modes(mode: str) -> None:
    ph = PartitionHandling.parse(mode)
    assert ph == PartitionHandling(mode)
    assert ph.to_config() == mode


def test_default_is_ignore() -> None:
    assert PartitionHandling.parse(None) == PartitionHandling() == PartitionHandling("ignore")


def test_pause_if_all_down() -> None:
    ph = PartitionHandling.parse(
        {"pause_if_all_down": {"nodes": ["a@h", "b@h"], "recover": "autoheal"}}
    )
    assert ph == PartitionHandling("pause_if_all_down", nodes=("a@h", "b@h"), recover="autoheal")
    assert ph.autoheal and ph.pauses
    assert PartitionHandling.parse(ph.to_config()) == ph
    # recover defaults to ignore
    assert PartitionHandling.parse({"pause_if_all_down": {"nodes": ["a@h"]}}).recover == "ignore"


def test_flags() -> None:
    assert PartitionHandling("autoheal").autoheal and not PartitionHandling("autoheal").pauses
    assert (
        PartitionHandling("pause_minority").pauses
        and not PartitionHandling("pause_minority").autoheal
    )
    assert not PartitionHandling("pause_if_all_down", nodes=["a@h"]).autoheal
    assert PartitionHandling("pause_if_all_down", nodes=["a@h"]).nodes == ("a@h",)


@pytest.mark.parametrize(
    ("value", "where", "message"),
    [
        ("pause_majority", "partition_handling", "did you mean 'pause_minority'"),
        ("pause_if_all_down", "partition_handling", "needs its nodes"),
        (3, "partition_handling", "expected ignore, pause_minority"),
        ({"autoheal": {}}, "partition_handling", "single key pause_if_all_down"),
        ({"pause_if_all_down": ["a@h"]}, "partition_handling.pause_if_all_down", "expected {nodes"),
        ({"pause_if_all_down": {}}, "partition_handling.pause_if_all_down.nodes", "missing"),
        (
            {"pause_if_all_down": {"nodes": "a@h"}},
            "partition_handling.pause_if_all_down.nodes",
            "a list",
        ),
        (
            {"pause_if_all_down": {"nodes": []}},
            "partition_handling.pause_if_all_down.nodes",
            "at least one",
        ),
        (
            {"pause_if_all_down": {"nodes": ["a@h", "b"]}},
            "partition_handling.pause_if_all_down.nodes[1]",
            "name@host",
        ),
        (
            {"pause_if_all_down": {"nodes": ["a@h"], "recover": "heal"}},
            "partition_handling.pause_if_all_down.recover",
            "ignore or autoheal",
        ),
        (
            {"pause_if_all_down": {"nodes": ["a@h"], "recovr": "ignore"}},
            "partition_handling.pause_if_all_down.recovr",
            "did you mean 'recover'",
        ),
    ],
)
def test_errors_name_the_key_path(value: Any, where: str, message: str) -> None:
    with pytest.raises(PartitionHandlingError, match=message) as info:
        PartitionHandling.parse(value)
    assert info.value.where == where
    assert str(info.value).startswith(where + ":")


def test_errors_follow_the_callers_key_path() -> None:
    with pytest.raises(PartitionHandlingError) as info:
        PartitionHandling.parse(
            {"pause_if_all_down": {"nodes": [1]}}, where="node.partition_handling"
        )
    assert info.value.where == "node.partition_handling.pause_if_all_down.nodes[0]"


def test_constructor_validates_too() -> None:
    with pytest.raises(PartitionHandlingError, match="belong to pause_if_all_down"):
        PartitionHandling("pause_minority", nodes=("a@h",))
    with pytest.raises(PartitionHandlingError):
        PartitionHandling("sometimes")
