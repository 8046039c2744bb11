"""`rabbitry cluster ... --config node.yaml`: the control address, the cookie and the CA come
from the node's config; flags win; a bad or missing config exits 2 naming the key and line.
These need no node: the target is resolved before anything is sent (the real nodes are in
test_node_processes.py and test_node_tls.py)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from rabbitry.cli import main
from rabbitry.cli_target import TargetError, resolve_target

COOKIE = "a-cookie-of-enough-bytes-0123456789"


def _args(**given: object) -> argparse.Namespace:
    values = {"config": None, "control": None, "cacert": None, "cookie_file": None}
    values.update(given)
    return argparse.Namespace(timeout=1.0, **values)


@pytest.fixture
def node_dir(tmp_path: Path) -> Path:
    (tmp_path / "cookie").write_text(COOKIE + "\n")
    os.chmod(tmp_path / "cookie", 0o600)
    (tmp_path / "tls").mkdir()
    (tmp_path / "tls" / "ca.pem").write_text("not read until a request is made\n")
    (tmp_path / "a.yaml").write_text(
        "node: a@127.0.0.1\n"
        "listen: 127.0.0.1:7001\n"
        "cookie_file: ./cookie\n"
        "control: 0.0.0.0:7101\n"
        "tls:\n"
        "  certfile: ./tls/a.pem\n"
        "  keyfile: ./tls/a-key.pem\n"
        "  cafile: ./tls/ca.pem\n"
        "tree: ./no-such-tree.yaml\n"  # the CLI never loads the tree
    )
    return tmp_path


def test_the_config_gives_control_cookie_and_ca(node_dir: Path) -> None:
    target = resolve_target(_args(config=str(node_dir / "a.yaml")))
    assert (target.host, target.port) == ("127.0.0.1", 7101)  # 0.0.0.0 is reached on loopback
    assert target.cookie == COOKIE.encode()
    assert target.https and target.cafile == str(node_dir / "tls" / "ca.pem")


def test_flags_win_over_the_config(node_dir: Path, tmp_path: Path) -> None:
    other = tmp_path / "other-cookie"
    other.write_text("another-cookie-of-enough-bytes\n")
    os.chmod(other, 0o600)
    ca = tmp_path / "other-ca.pem"
    ca.write_text("x\n")
    target = resolve_target(
        _args(
            config=str(node_dir / "a.yaml"),
            control="127.0.0.2:9000",
            cookie_file=str(other),
            cacert=str(ca),
        )
    )
    assert (target.host, target.port) == ("127.0.0.2", 9000)
    assert target.cookie == b"another-cookie-of-enough-bytes"
    assert target.cafile == str(ca)


def test_an_inline_cookie_and_no_tls(tmp_path: Path) -> None:
    config = tmp_path / "b.yaml"
    config.write_text(
        f"node: b@127.0.0.1\nlisten: 127.0.0.1:7002\ncookie: {COOKIE}\ncontrol: 127.0.0.1:7102\n"
    )
    target = resolve_target(_args(config=str(config)))
    assert target.cookie == COOKIE.encode() and not target.https and target.cafile is None


@pytest.mark.parametrize("command", ["status", "ui", "leave", "join", "forget"])
def test_every_cluster_command_takes_config_and_says_so(command: str, capsys) -> None:
    assert main(["cluster", command, "--help"]) == 0
    assert "--config" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, "cannot read the file"),
        ("node: a@127.0.0.1\nlisten: 127.0.0.1:7001\ncookie: x\n", "has no `control:` key"),
        (
            "node: a@127.0.0.1\ncontrol: nowhere\ncookie_file: ./cookie\n",
            'control: expected "host:port"',
        ),
        ("node: a@127.0.0.1\ncontrol: 127.0.0.1:7101\n", "cookie_file"),
        ("node: a@127.0.0.1\ncontrol: 127.0.0.1:7101\ncookie_file: ./gone\n", "cannot read"),
        ("node: a@1\ncontrol: 127.0.0.1:7101\ncookie: xx\ntls: {certfile: a}\n", "tls.cafile"),
        ("node: [unclosed\n", "invalid YAML"),
    ],
)
def test_a_bad_or_missing_config_exits_2_saying_what(
    tmp_path: Path, text: str | None, expected: str, capsys
) -> None:
    config = tmp_path / "node.yaml"
    if text is not None:
        config.write_text(text)
    assert main(["cluster", "status", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert str(config) in err and expected in err, err


def test_a_bad_key_names_its_line(tmp_path: Path, capsys) -> None:
    config = tmp_path / "node.yaml"
    config.write_text("node: a@127.0.0.1\ncookie: abc\ncontrol: 7101\n")
    assert main(["cluster", "status", "--config", str(config)]) == 2
    assert "(line 3)" in capsys.readouterr().err


def test_neither_config_nor_control_exits_2(capsys) -> None:
    assert main(["cluster", "status"]) == 2
    assert "--config" in capsys.readouterr().err


def test_a_resolution_error_is_a_target_error(tmp_path: Path) -> None:
    with pytest.raises(TargetError):
        resolve_target(_args(config=str(tmp_path / "missing.yaml")))
