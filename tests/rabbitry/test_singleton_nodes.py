"""Cluster singletons on real node processes: three core nodes run the same tree, whose
`scheduler` child (an OS process, examples/singleton/leased_writer.py) appends "token time"
to one shared file while its lease is valid. Across a SIGKILL of the holder's node, a SIGSTOP
of it (its child keeps running and must stop acting on its own), and a graceful stop (a
handover), no two tokens' write intervals may overlap, tokens only grow, and the singleton
runs again on another node.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rabbitry.testing.cluster import ClusterFactory
from rabbitry.testing.netns import unavailable
from rabbitry.testing.singleton_log import Spans, overlaps, write_spans
from tests.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

WRITER = Path(__file__).resolve().parents[2] / "examples" / "singleton" / "leased_writer.py"
NET_TICKTIME = 1.0  # the lease is 2 x this: 2 s


def _tree(root: Path, out: Path) -> Path:
    tree = root / "singleton-tree.yaml"
    tree.write_text(
        "supervisor:\n"
        "  children:\n"
        "    - id: scheduler\n"
        f"      command: [{sys.executable!r}, {str(WRITER)!r}, {str(out)!r}]\n"
        "      singleton: true\n"
        "      shutdown: 2s\n"
    )
    return tree


def _intervals(out: Path) -> Spans:
    return write_spans(out)


def assert_no_overlap(out: Path) -> Spans:
    spans = write_spans(out)
    bad = overlaps(spans)
    assert not bad, f"two instances acted at once: {bad} ({sorted(spans.items())})"
    return spans


def holder(cluster: Any, asker: str) -> tuple[str | None, int | None]:
    try:
        st = cluster.client(asker, timeout=5).request("GET", "/singletons")
    except Exception:
        return None, None
    entry = st["singletons"].get("scheduler") or {}
    return entry.get("node"), entry.get("token")


def wait_new_holder(
    cluster: Any, asker: str, old_token: int, timeout: float = 30.0
) -> tuple[str, int]:
    found: dict[str, Any] = {}

    def moved() -> bool:
        node, token = holder(cluster, asker)
        if node and token and token > old_token:
            found.update(node=node, token=token)
            return True
        return False

    try:
        wait_until(moved, timeout=timeout, poll=0.05, what=f"a token above {old_token}")
    except AssertionError:
        raise AssertionError(
            f"no scheduler above token {old_token}:\n{_diagnosis(cluster)}"
        ) from None
    return found["node"], found["token"]


def _diagnosis(cluster: Any) -> str:
    lines = [cluster.describe()]
    for name in ("a", "b", "c"):
        with contextlib.suppress(Exception):
            st = cluster.client(name, timeout=2).request("GET", "/singletons")
            lines.append(f"{name} /singletons: {st}")
        with contextlib.suppress(Exception):
            logged = [x for x in cluster.proc(name).stderr() if "singleton" in x or "app" in x]
            lines += [f"  {name}: {x}" for x in logged[-25:]]
    return "\n".join(lines)


def wait_writing(out: Path, token: int, timeout: float = 15.0) -> None:
    what = f"token {token} writing"
    wait_until(lambda: token in _intervals(out), timeout=timeout, poll=0.05, what=what)


@pytest.fixture(scope="module")
def singleton_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One three-node cluster for the module: each test leaves it whole again."""
    root = tmp_path_factory.mktemp("singleton")
    out = root / "writes.log"
    factory = ClusterFactory(root)
    try:
        cluster = factory(3, "pause_minority", NET_TICKTIME, tree=_tree(root, out))
        cluster.out = out
        yield cluster
    finally:
        factory.close()


def _short(name: str) -> str:
    return name.split("@", 1)[0]


def test_one_instance_then_sigkill_of_its_node_moves_it(singleton_cluster: Any) -> None:
    c = singleton_cluster
    first, token = wait_new_holder(c, "a", 0)
    wait_writing(c.out, token)
    other = next(n for n in ("a", "b", "c") if n != _short(first))
    c.kill(_short(first))
    node, token2 = wait_new_holder(c, other, token)
    assert node != first
    wait_writing(c.out, token2)
    assert_no_overlap(c.out)
    c.restart(_short(first))
    c.wait_until_formed(timeout=30)


def test_sigstop_of_its_node_the_child_stops_acting_at_the_lease_end(
    singleton_cluster: Any,
) -> None:
    c = singleton_cluster
    first, token = wait_new_holder(c, "a", 0)
    wait_writing(c.out, token)
    other = next(n for n in ("a", "b", "c") if n != _short(first))
    c.stop(_short(first))  # the node freezes; its OS child runs on and reads the lease file
    try:
        node, token2 = wait_new_holder(c, other, token)
        assert node != first
        wait_writing(c.out, token2)
        spans = assert_no_overlap(c.out)
        assert spans[token][1] < spans[token2][0]
    finally:
        c.cont(_short(first))
    c.wait_until_formed(timeout=30)

    def thawed_holds_nothing() -> bool:
        st = c.client(_short(first), timeout=5).request("GET", "/singletons")
        return "scheduler" not in st["held_here"]

    wait_until(
        thawed_holds_nothing, timeout=15, poll=0.05, what="the thawed node to stop its instance"
    )
    assert_no_overlap(c.out)


def test_graceful_stop_hands_it_over(singleton_cluster: Any) -> None:
    c = singleton_cluster
    first, token = wait_new_holder(c, "a", 0)
    wait_writing(c.out, token)
    other = next(n for n in ("a", "b", "c") if n != _short(first))
    c.restart(_short(first))  # SIGTERM: the guard stops the child and releases the lease
    _, token2 = wait_new_holder(c, other, token)
    wait_writing(c.out, token2)
    assert_no_overlap(c.out)
    c.wait_until_formed(timeout=30)
    st = c.client(other).request("GET", "/singletons")
    assert st["singletons"]["scheduler"]["token"] >= token2


def test_cli_and_metrics_say_where_it_runs(singleton_cluster: Any) -> None:
    c = singleton_cluster
    node, token = wait_new_holder(c, "a", 0)
    url = c.client("a").url
    cookie = c.root / "cookie"
    cmd = [sys.executable, "-m", "rabbitry", "cluster", "singletons", "--control"]
    text = subprocess.run(
        [*cmd, url, "--cookie-file", str(cookie)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert text.returncode == 0, text.stderr
    assert "scheduler" in text.stdout and node in text.stdout, text.stdout
    raw = subprocess.run(
        [*cmd, url, "--cookie-file", str(cookie), "--json"],
        capture_output=True,
        check=False,
        text=True,
        timeout=60,
    )
    answer = json.loads(raw.stdout)
    assert answer["singletons"]["scheduler"]["node"] == node
    assert answer["singletons"]["scheduler"]["token"] >= token


def test_a_partition_that_leaves_the_holder_in_the_minority(tmp_path: Path) -> None:
    """Network namespaces, cuts by iptables: the holder's node alone on one side. Its child
    stops acting when its lease runs out (the node also pauses: pause_minority), the majority
    starts a new instance, and no two write intervals overlap, before or after the heal."""
    why = unavailable()
    if why:
        pytest.skip(why)
    out = tmp_path / "writes.log"
    factory = ClusterFactory(tmp_path)
    try:
        c = factory(3, "pause_minority", NET_TICKTIME, tree=_tree(tmp_path, out), network="netns")
        first, token = wait_new_holder(c, "a", 0)
        wait_writing(out, token)
        others = [n for n in ("a", "b", "c") if n != _short(first)]
        c.partition([_short(first)], others)
        _, token2 = wait_new_holder(c, others[0], token)
        wait_writing(out, token2)
        assert_no_overlap(out)
        c.heal()
        c.wait_until_formed(timeout=60)
        assert_no_overlap(out)
    finally:
        factory.close()
