"""A few seeded random fault schedules through the pump: a smoke test of the properties the
simulator (tests/sim) checks at scale. A failure prints the seed."""

from __future__ import annotations

import random

import pytest

from monitors.node_monitor import PartitionHandling
from monitors.node_monitor.partitions import majority
from tests.node_monitor.pump import Pump


def schedule(seed: int, mode: PartitionHandling | str) -> Pump:
    rnd = random.Random(seed)
    names = [f"{chr(97 + i)}@h" for i in range(rnd.randint(3, 6))]
    p = Pump(names, mode, detect=rnd.choice([0.1, 0.5]), app_delay=rnd.choice([0.05, 0.3]))
    p.run(2)
    for _ in range(rnd.randint(1, 8)):
        a, b = rnd.sample(names, 2)
        act = rnd.random()
        if act < 0.55:
            p.cut(a, b)
        elif act < 0.75:
            p.heal(a, b)
        elif act < 0.85:
            p.isolate(a)
        elif act < 0.92:
            p.restart(a)
        else:
            p.heal_all()
        p.run(rnd.choice([0.05, 0.3, 1.0, 3.0]))
    p.run(15)
    return p


@pytest.mark.parametrize("seed", range(15))
def test_pause_minority_runs_only_a_connected_majority_and_heals(seed: int) -> None:
    p = schedule(seed, "pause_minority")
    serving = p.serving()
    assert not serving or majority(serving, p.names), f"seed {seed}"
    assert all(p.connected(x, y) for x in serving for y in serving if x < y), f"seed {seed}"
    p.heal_all()
    p.run(60)
    assert p.serving() == set(p.names), f"seed {seed}"
    assert sorted(p.timers) == [(n, "keepalive") for n in p.names], f"seed {seed}"


@pytest.mark.parametrize("seed", range(15))
@pytest.mark.parametrize("mode", ["ignore", "autoheal"])
def test_cut_links_do_not_flap_and_everything_reconnects(seed: int, mode: str) -> None:
    p = schedule(seed, mode)
    ups = len(p.logged("node up"))
    p.run(60)
    assert len(p.logged("node up")) == ups, f"seed {seed}: links flap while the fault lasts"
    p.heal_all()
    p.run(60)
    n = len(p.names)
    assert p.serving() == set(p.names) and len(p.conn) == n * (n - 1) // 2, f"seed {seed}"
    if mode == "autoheal":
        assert all(p.status(x)["partitions"] == [] for x in p.names), f"seed {seed}"
    assert sorted(p.timers) == [(x, "keepalive") for x in p.names], f"seed {seed}"
