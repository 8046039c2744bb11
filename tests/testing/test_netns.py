"""network="netns": each node in its own network namespace, faults by iptables rules.

The cluster cases need root, `ip` and `iptables` and skip, saying why, elsewhere. The chaos
suite runs partitions_SUITE in this mode too (tests/chaos/conftest.py).
"""

from __future__ import annotations

import shutil

import pytest

from rabbitry.testing import netns
from rabbitry.testing.cluster import ClusterFactory, node_name
from rabbitry.testing.netns import NetnsError, NetnsNet, leftovers, our_prefix

A, B, C = (node_name(i) for i in range(3))
WHY = netns.unavailable()


def test_without_iptables_it_fails_with_one_clear_line(monkeypatch, tmp_path) -> None:
    real = shutil.which
    monkeypatch.setattr(netns.shutil, "which", lambda t: None if t == "iptables" else real(t))
    if netns.os.geteuid() != 0:
        pytest.skip("not root: the message is about root instead (checked below)")
    with pytest.raises(NetnsError) as info:
        ClusterFactory(tmp_path)(3, network="netns")
    text = str(info.value)
    assert "\n" not in text and "iptables" in text and "apt-get install" in text


def test_without_root_it_fails_with_one_clear_line(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    with pytest.raises(NetnsError) as info:
        ClusterFactory(tmp_path)(3, network="netns")
    assert str(info.value) == (
        'network="netns" needs root (it makes namespaces, a bridge and iptables rules)'
    )


def test_a_bad_network_name_is_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="network: expected one of"):
        ClusterFactory(tmp_path)(1, network="docker", wait=False)


@pytest.mark.skipif(WHY is not None, reason=WHY or "")
def test_namespaces_and_bridge_go_with_the_net() -> None:
    net = NetnsNet(2)
    net.make()
    try:
        made = leftovers(our_prefix())
        assert any(m.startswith("netns ") for m in made) and any(
            m == f"link {net.bridge}" for m in made
        )
        net.drop(0, 1)
        net.heal()
    finally:
        net.remove()
    assert leftovers(our_prefix()) == []


@pytest.mark.slow
@pytest.mark.skipif(WHY is not None, reason=WHY or "")
def test_partition_one_way_cut_and_heal_by_iptables(cluster) -> None:
    c = cluster(3, partition_handling="pause_minority", network="netns")
    assert c.network == "netns"
    c.partition(["c"], ["a", "b"])
    c.wait_for(lambda: c.paused("c") and c.running("a") == [A, B], 20, "c paused, a b run")
    c.heal()
    c.wait_for(
        lambda: all(c.running(n) == [A, B, C] and not c.paused(n) for n in c.nodes),
        30,
        "healed",
    )
    c.cut("a", "b", oneway=True)  # a's packets to b dropped: b's ticker gives up on a
    c.wait_for(lambda: A not in c.running("b"), 20, "b sees a go")
    c.heal()
    c.wait_for(
        lambda: all(c.running(n) == [A, B, C] and not c.paused(n) for n in c.nodes),
        30,
        "healed again",
    )
