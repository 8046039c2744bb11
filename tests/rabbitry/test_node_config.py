"""The node config file: every key checked, with file/key-path errors like tree files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rabbitry.node_config import (
    DEFAULT_NET_TICKTIME,
    Address,
    NodeConfigError,
    load_node_config,
)
from supervisors import ConfigError


def _cookie(tmp_path: Path, mode: int = 0o600, text: str = "secret-cookie-0123456789") -> Path:
    path = tmp_path / "cookie"
    path.write_text(text + "\n")
    os.chmod(path, mode)
    return path


def _write(tmp_path: Path, body: str, name: str = "node.yaml") -> Path:
    path = tmp_path / name
    path.write_text(body)
    return path


def _minimal(extra: str = "") -> str:
    return "node: a@127.0.0.1\nlisten: 127.0.0.1:7001\ncookie_file: ./cookie\n" + extra


def test_a_full_config_loads(tmp_path: Path) -> None:
    _cookie(tmp_path)
    (tmp_path / "tree.yaml").write_text(
        "supervisor:\n  children:\n    - id: w\n      start: 'rabbitry.examples_workers:Idle'\n"
    )
    path = _write(
        tmp_path,
        _minimal(
            "data_dir: ./data/a\n"
            "net_ticktime: 1s\n"
            "cluster:\n  nodes:\n"
            "    a@127.0.0.1: 127.0.0.1:7001\n"
            "    b@127.0.0.1: 127.0.0.1:7002\n"
            "    c@127.0.0.1: 127.0.0.1:17003\n"
            "bus: redis://127.0.0.1:6379/0\n"
            "control: 127.0.0.1:7101\n"
            "tree: ./tree.yaml\n"
            "alarms: {memory_high_watermark: 0.5, disk_free_limit: 1GiB}\n"
        ),
    )
    config = load_node_config(path)
    assert config.node == "a@127.0.0.1"
    assert config.listen == Address("127.0.0.1", 7001)
    assert config.cookie == b"secret-cookie-0123456789"
    assert config.data_dir == tmp_path / "data" / "a"
    assert config.net_ticktime == 1.0
    # the node itself may be listed (one list for every node) but is not its own peer
    assert config.peers == {
        "b@127.0.0.1": Address("127.0.0.1", 7002),
        "c@127.0.0.1": Address("127.0.0.1", 17003),
    }
    assert config.cluster_nodes == ["a@127.0.0.1", "b@127.0.0.1", "c@127.0.0.1"]
    assert config.bus == "redis://127.0.0.1:6379/0"
    assert config.control == Address("127.0.0.1", 7101)
    assert config.tree is not None and [c.id for c in config.tree.children] == ["w"]
    assert config.alarms.memory_high_watermark == 0.5
    assert config.alarms.disk_free_limit == 2**30


def test_defaults(tmp_path: Path) -> None:
    _cookie(tmp_path)
    config = load_node_config(_write(tmp_path, _minimal()))
    assert config.net_ticktime == DEFAULT_NET_TICKTIME
    assert config.peers == {}
    assert config.bus is None and config.control is None and config.tree is None
    assert config.data_dir == tmp_path / "data" / "a@127.0.0.1"


def test_toml_works_too(tmp_path: Path) -> None:
    _cookie(tmp_path)
    path = _write(
        tmp_path,
        'node = "a@127.0.0.1"\nlisten = "127.0.0.1:0"\ncookie = "inline-cookie-0123456789"\n'
        '[cluster.nodes]\n"b@127.0.0.1" = "127.0.0.1:7002"\n',
        "node.toml",
    )
    config = load_node_config(path)
    assert config.cookie == b"inline-cookie-0123456789"
    assert config.listen.port == 0
    assert list(config.peers) == ["b@127.0.0.1"]


@pytest.mark.parametrize(
    ("body", "key_path", "fragment"),
    [
        ("listen: 127.0.0.1:7001\ncookie: 0123456789abcdef\n", "node", "missing"),
        ("node: nohost\nlisten: 127.0.0.1:1\ncookie: 0123456789abcdef\n", "node", "name@host"),
        ("node: a@h\nlisten: 7001\ncookie: 0123456789abcdef\n", "listen", "host:port"),
        ("node: a@h\nlisten: h:99999\ncookie: 0123456789abcdef\n", "listen", "host:port"),
        ("node: a@h\nlisten: h:1\n", "cookie_file", "got neither"),
        (
            "node: a@h\nlisten: h:1\ncookie: 0123456789abcdef\ncookie_file: ./cookie\n",
            "cookie_file",
            "got both",
        ),
        (
            "node: a@h\nlisten: h:1\ncookie: 0123456789abcdef\nnet_tiktime: 1s\n",
            "net_tiktime",
            "did you mean",
        ),
        (
            "node: a@h\nlisten: h:1\ncookie: 0123456789abcdef\nnet_ticktime: 0\n",
            "net_ticktime",
            "> 0",
        ),
        ("node: a@h\nlisten: h:1\ncookie: 0123456789abcdef\ncluster: [a]\n", "cluster", "mapping"),
        (
            "node: a@h\nlisten: h:1\ncookie: 0123456789abcdef\ncluster: {nodes: {b@h: 7002}}\n",
            "cluster.nodes.b@h",
            "host:port",
        ),
        (
            "node: a@h\nlisten: h:1\ncookie: 0123456789abcdef\ncluster: {nodes: {bogus: 'h:2'}}\n",
            "cluster.nodes.bogus",
            "name@host",
        ),
        ("node: a@h\nlisten: h:1\ncookie: 0123456789abcdef\nbus: kafka://x\n", "bus", "redis://"),
        (
            "node: a@h\nlisten: h:1\ncookie: 0123456789abcdef\ncontrol: 10.0.0.1:7101\n",
            "control",
            "loopback",
        ),
        (
            "node: a@h\nlisten: h:1\ncookie: 0123456789abcdef\nalarms: {memory_high_watermark: 2}\n",
            "alarms.memory_high_watermark",
            "fraction",
        ),
        (
            "node: a@h\nlisten: h:1\ncookie: 0123456789abcdef\nalarms: {disk_free_limit: lots}\n",
            "alarms.disk_free_limit",
            "50MB",
        ),
    ],
)
def test_mistakes_name_the_key_path(
    tmp_path: Path, body: str, key_path: str, fragment: str
) -> None:
    path = _write(tmp_path, body)
    with pytest.raises(NodeConfigError) as caught:
        load_node_config(path)
    error = caught.value
    assert isinstance(error, ConfigError)
    assert error.file == str(path)
    assert error.key_path == key_path
    assert fragment in str(error)
    assert str(error).startswith(f"{path}: {key_path}: ")


def test_a_cookie_file_others_can_read_is_refused_with_the_fix(tmp_path: Path) -> None:
    cookie = _cookie(tmp_path, mode=0o644)
    with pytest.raises(NodeConfigError, match=r"mode 0644.*chmod 600") as caught:
        load_node_config(_write(tmp_path, _minimal()))
    assert caught.value.key_path == "cookie_file"
    assert str(cookie) in str(caught.value)


def test_a_missing_cookie_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(NodeConfigError, match=r"cannot read .*cookie"):
        load_node_config(_write(tmp_path, _minimal()))


def test_errors_carry_the_yaml_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "node: a@h\nlisten: h:1\ncookie: 0123456789abcdef\n\nbus: nope\n")
    with pytest.raises(NodeConfigError) as caught:
        load_node_config(path)
    assert caught.value.line == 5


def test_partition_handling_forms(tmp_path: Path) -> None:
    from monitors.node_monitor.config import PartitionHandling

    path = _write(
        tmp_path,
        "node: a@h\nlisten: h:1\ncookie: 0123456789abcdef\npartition_handling:\n"
        "  pause_if_all_down: {nodes: [b@h], recover: autoheal}\n",
    )
    config = load_node_config(path)
    assert config.partition_handling == PartitionHandling(
        "pause_if_all_down", nodes=("b@h",), recover="autoheal"
    )
    path = _write(
        tmp_path,
        "node: a@h\nlisten: h:1\ncookie: 0123456789abcdef\npartition_handling: pause_minority\n",
    )
    assert load_node_config(path).partition_handling.mode == "pause_minority"


@pytest.mark.parametrize(
    ("value", "key_path"),
    [
        ("pause_minorty", "partition_handling"),
        ("pause_if_all_down", "partition_handling"),
        (
            "{pause_if_all_down: {nodes: [], recover: ignore}}",
            "partition_handling.pause_if_all_down.nodes",
        ),
        (
            "{pause_if_all_down: {nodes: [b@h], recover: retry}}",
            "partition_handling.pause_if_all_down.recover",
        ),
    ],
)
def test_partition_handling_mistakes(tmp_path: Path, value: str, key_path: str) -> None:
    path = _write(
        tmp_path, f"node: a@h\nlisten: h:1\ncookie: 0123456789abcdef\npartition_handling: {value}\n"
    )
    with pytest.raises(NodeConfigError) as caught:
        load_node_config(path)
    assert caught.value.key_path == key_path
    assert caught.value.line == 4


def test_a_bad_tree_file_reports_the_tree_file(tmp_path: Path) -> None:
    (tmp_path / "tree.yaml").write_text("supervisor:\n  strategy: sometimes\n")
    path = _write(tmp_path, "node: a@h\nlisten: h:1\ncookie: 0123456789abcdef\ntree: ./tree.yaml\n")
    with pytest.raises(ConfigError) as caught:
        load_node_config(path)
    assert caught.value.file.endswith("tree.yaml")
    assert caught.value.key_path == "supervisor.strategy"


def test_the_gossip_section(tmp_path: Path) -> None:
    _cookie(tmp_path)
    config = load_node_config(_write(tmp_path, _minimal("bus: memory://x\n")))
    assert config.gossip.exchange == "rabbitry" and config.gossip.heartbeat_interval == 2.0
    body = _minimal(
        "bus: redis://127.0.0.1:6379/0\ngossip:\n  exchange: ours\n  heartbeat_interval: 500ms\n"
        "  interval: 2s\n  mingle_timeout: 250ms\n  without_mingle: true\n"
    )
    gossip = load_node_config(_write(tmp_path, body)).gossip
    assert (gossip.exchange, gossip.heartbeat_interval, gossip.interval) == ("ours", 0.5, 2.0)
    assert gossip.mingle_timeout == 0.25 and gossip.without_mingle and not gossip.without_gossip


@pytest.mark.parametrize(
    ("extra", "key_path", "fragment"),
    [
        ("gossip:\n  interval: 2s\n", "gossip", "bus"),
        ("bus: memory://x\ngossip: 3\n", "gossip", "a mapping"),
        ("bus: memory://x\ngossip:\n  intervall: 2s\n", "gossip.intervall", "interval"),
        (
            "bus: memory://x\ngossip:\n  without_gossip: yes please\n",
            "gossip.without_gossip",
            "true or false",
        ),
        ("bus: memory://x\ngossip:\n  interval: 0s\n", "gossip.interval", ""),
    ],
)
def test_gossip_mistakes(tmp_path: Path, extra: str, key_path: str, fragment: str) -> None:
    _cookie(tmp_path)
    with pytest.raises(NodeConfigError) as caught:
        load_node_config(_write(tmp_path, _minimal(extra)))
    assert caught.value.key_path == key_path
    assert fragment in str(caught.value)


def test_the_mnesia_section(tmp_path: Path) -> None:
    _cookie(tmp_path)
    assert load_node_config(_write(tmp_path, _minimal())).mnesia is None  # no store
    config = load_node_config(_write(tmp_path, _minimal("mnesia: {}\n")))
    assert config.mnesia is not None
    assert config.mnesia.merge_for(config.partition_handling) == "none"  # ignore: stay split
    assert (config.mnesia.fsync, config.mnesia.force_load) == ("commit", False)
    body = _minimal(
        "partition_handling: pause_minority\nmnesia:\n  fsync: 1s\n  force_load: true\n"
        "  load_timeout: 5s\n  extra_db_nodes: [b@127.0.0.1]\n"
    )
    config = load_node_config(_write(tmp_path, body))
    options = config.mnesia
    assert options is not None and options.merge_for(config.partition_handling) == "autoheal"
    assert (options.fsync, options.force_load, options.load_timeout) == (1.0, True, 5.0)
    assert options.extra_db_nodes == ("b@127.0.0.1",)
    config = load_node_config(_write(tmp_path, _minimal("mnesia: {merge: lww}\n")))
    assert config.mnesia is not None and config.mnesia.merge_for(config.partition_handling) == "lww"


@pytest.mark.parametrize(
    ("extra", "key_path", "fragment"),
    [
        ("mnesia: 3\n", "mnesia", "a mapping"),
        ("mnesia: {merge: newest}\n", "mnesia.merge", "autoheal"),
        ("mnesia: {fsync: sometimes}\n", "mnesia.fsync", "commit, none"),
        ("mnesia: {force_load: 1}\n", "mnesia.force_load", "true or false"),
        ("mnesia: {extra_db_nodes: [b]}\n", "mnesia.extra_db_nodes", "name@host"),
        ("mnesia: {mergee: lww}\n", "mnesia.mergee", "merge"),
    ],
)
def test_mnesia_mistakes(tmp_path: Path, extra: str, key_path: str, fragment: str) -> None:
    _cookie(tmp_path)
    with pytest.raises(NodeConfigError) as caught:
        load_node_config(_write(tmp_path, _minimal(extra)))
    assert caught.value.key_path == key_path
    assert fragment in str(caught.value)


# ---------------------------------------------------------------- role: ephemeral

_CORE_SEEDS = "cluster:\n  nodes:\n    b@127.0.0.1: 127.0.0.1:7002\n"


def test_an_ephemeral_node_and_a_core_node_with_forget_ephemeral_after(tmp_path: Path) -> None:
    _cookie(tmp_path)
    eph = load_node_config(_write(tmp_path, _minimal("role: ephemeral\n" + _CORE_SEEDS)))
    assert eph.role == "ephemeral" and list(eph.peers) == ["b@127.0.0.1"]
    body = _minimal(_CORE_SEEDS + "  forget_ephemeral_after: 5s\n")
    core = load_node_config(_write(tmp_path, body, "core.yaml"))
    assert core.role == "core" and core.forget_ephemeral_after == 5.0
    assert load_node_config(_write(tmp_path, _minimal(), "d.yaml")).forget_ephemeral_after == 30


@pytest.mark.parametrize(
    ("body", "key_path", "fragment"),
    [
        (_minimal("role: hidden\n"), "role", "core (the default) or ephemeral"),
        (
            _minimal("role: ephemeral\n" + _CORE_SEEDS + "  forget_ephemeral_after: 5s\n"),
            "cluster.forget_ephemeral_after",
            "the core nodes forget ephemeral members",
        ),
        (_minimal("role: ephemeral\n"), "cluster.nodes", "at least one core member"),
        (
            _minimal("role: ephemeral\ncluster:\n  nodes:\n    a@127.0.0.1: 127.0.0.1:7001\n"),
            "cluster.nodes.a@127.0.0.1",
            "cannot also be listed as a core member",
        ),
        (
            _minimal(
                "role: ephemeral\n"
                + _CORE_SEEDS
                + "partition_handling: {pause_if_all_down: {nodes: [x@127.0.0.1]}}\n"
            ),
            "partition_handling.pause_if_all_down.nodes[0]",
            "a core member listed in cluster.nodes",
        ),
        (
            _minimal("role: ephemeral\n" + _CORE_SEEDS + "mnesia: {}\n"),
            "mnesia",
            "it holds no disc copies",
        ),
        (
            _minimal(_CORE_SEEDS + "  forget_ephemeral_after: soon\n"),
            "cluster.forget_ephemeral_after",
            "",
        ),
    ],
)
def test_ephemeral_mistakes_name_the_key_path(
    tmp_path: Path, body: str, key_path: str, fragment: str
) -> None:
    _cookie(tmp_path)
    path = _write(tmp_path, body)
    with pytest.raises(NodeConfigError) as caught:
        load_node_config(path)
    assert caught.value.key_path == key_path
    assert fragment in str(caught.value)


def test_node_start_exits_2_on_an_unknown_role(tmp_path: Path) -> None:
    import subprocess
    import sys

    _cookie(tmp_path)
    path = _write(tmp_path, _minimal("role: executor\n"))
    done = subprocess.run(
        [sys.executable, "-m", "rabbitry", "node", "start", "--config", str(path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "role: expected core (the default) or ephemeral; got 'executor'" in done.stderr


def test_an_inline_cookie_in_a_readable_file_is_warned_about(tmp_path: Path, caplog) -> None:
    body = "node: a@127.0.0.1\nlisten: 127.0.0.1:7001\ncookie: inline-cookie-0123456789\n"
    path = _write(tmp_path, body)
    os.chmod(path, 0o644)
    assert load_node_config(path).cookie == b"inline-cookie-0123456789"
    (line,) = [
        r.getMessage() for r in caplog.records if "holds the cookie inline" in r.getMessage()
    ]
    assert "mode 0644" in line and "chmod 600" in line and "inline-cookie" not in line
    caplog.clear()
    os.chmod(path, 0o600)
    load_node_config(path)
    assert not [r for r in caplog.records if "holds the cookie inline" in r.getMessage()]


def test_a_bad_bus_url_never_shows_its_password(tmp_path: Path) -> None:
    from monitors.bus.urls import parse_bus_url

    _cookie(tmp_path)
    path = _write(tmp_path, _minimal("bus: redix://user:hunter2secret@host:6379/0\n"))
    with pytest.raises(NodeConfigError) as caught:
        load_node_config(path)
    assert "hunter2secret" not in str(caught.value) and "user:***@host" in str(caught.value)
    with pytest.raises(ValueError) as bad:
        parse_bus_url("redis://user:hunter2secret@host:99999/0")
    assert "hunter2secret" not in str(bad.value) and "***" in str(bad.value)
