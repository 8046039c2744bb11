"""The singleton series of /metrics, from a node's GET /singletons answer."""

from __future__ import annotations

from prometheus_client.core import Metric

from rabbitry.observe.gather import Gathered
from rabbitry.observe.metrics import NodeCollector


def _series(families: list[Metric]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in families
        for sample in family.samples
    }


def test_holder_token_held_and_starts() -> None:
    answer = {
        "node": "a@h",
        "singletons": {
            "scheduler": {"node": "b@h", "token": 7, "expires": 1.0},
            "compactor": {"node": None, "token": None, "expires": None},
        },
        "held_here": [],
        "max_token": 7,
        "moves": 2,
    }
    collector = NodeCollector.__new__(NodeCollector)
    got = _series(list(collector._singletons(Gathered(results={"singletons": answer}))))
    assert (
        got[("rabbitry_singleton_holder_info", (("holder", "b@h"), ("singleton", "scheduler")))]
        == 1
    )
    assert (
        got[("rabbitry_singleton_holder_info", (("holder", ""), ("singleton", "compactor")))] == 1
    )
    assert got[("rabbitry_singleton_held", (("singleton", "scheduler"),))] == 0
    assert got[("rabbitry_singleton_token", (("singleton", "scheduler"),))] == 7
    assert ("rabbitry_singleton_token", (("singleton", "compactor"),)) not in got
    assert got[("rabbitry_singleton_starts_total", ())] == 2


def test_nothing_without_the_service() -> None:
    collector = NodeCollector.__new__(NodeCollector)
    assert list(collector._singletons(Gathered())) == []
