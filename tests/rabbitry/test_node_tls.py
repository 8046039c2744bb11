"""Three real nodes over TLS (certificates from `rabbitry tls gen`), behind the fault proxies:
partitions behave as in plain mode, the CLI speaks HTTPS with --cacert, and the CA is rotated
in two steps on the running cluster (SIGHUP) without a nodedown. One cluster for the module."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from monitors.tls import https_client_context
from rabbitry.cli import main
from rabbitry.control import ControlClient
from rabbitry.testing.cluster import (
    COOKIE,
    Cluster,
    ClusterFactory,
    faultproxy_available,
    node_name,
)
from rabbitry.tls_gen import load_ca, make_ca, make_cert, write_cert, write_key

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

A, B, C = (node_name(i) for i in range(3))


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory) -> Cluster:
    if not faultproxy_available():
        pytest.skip("no `python -m rabbitry faultproxy` and no $TOXIPROXY_URL")
    factory = ClusterFactory(tmp_path_factory.mktemp("tls-cluster"))
    try:
        yield factory(
            3, partition_handling="pause_minority", tls=True, config={"metrics": "127.0.0.1:0"}
        )
    finally:
        factory.close()


def _healed(c: Cluster, timeout: float = 30.0) -> None:
    def clear() -> bool:
        return all(
            (st := c.status(n))["running"] == c.nodes and not st["paused"] and not st["partitions"]
            for n in c.nodes
        )

    c.wait_for(clear, timeout, "every node running, none paused, no partitions")


def _control(c: Cluster, node: str) -> str:
    client = c.client(node)
    return f"{client.host}:{client.port}"


def test_cli_over_https_and_a_wrong_cacert_says_what_to_do(tls_cluster, tmp_path, capsys):
    c = tls_cluster
    assert c.cafile is not None
    base = ["cluster", "status", "--cookie-file", str(c.root / "cookie")]
    control = _control(c, "a")
    assert main([*base, "--control", control, "--cacert", str(c.cafile), "--json"]) == 0
    assert A in capsys.readouterr().out
    assert main([*base, "--control", f"https://{control}", "--cacert", str(c.cafile)]) == 0
    capsys.readouterr()

    other = tmp_path / "other-ca.pem"
    write_cert(other, make_ca("not the cluster's CA").cert)
    assert main([*base, "--control", control, "--cacert", str(other)]) == 1
    err = capsys.readouterr().err
    assert "--cacert" in err and "tls.cafile" in err and "certificate" in err

    assert main([*base, "--control", control]) == 1  # plain HTTP to an HTTPS port
    err = capsys.readouterr().err
    assert "https://" in err and "--cacert" in err


def test_cli_reads_the_control_cookie_and_ca_from_the_node_config(tls_cluster, tmp_path, capsys):
    """`--config` alone reaches a TLS node: no CA path, no cookie path (issue 27)."""
    c = tls_cluster
    config = str(c.config_file("a"))
    assert main(["cluster", "status", "--config", config, "--json"]) == 0
    assert A in capsys.readouterr().out
    assert main(["cluster", "ui", "--config", config, "--no-browser"]) == 0
    assert "https://127.0.0.1:" in (out := capsys.readouterr().out) and "/ui/login?token=" in out
    # a flag wins over the file: a CA that is not the cluster's fails the certificate check
    other = tmp_path / "other-ca.pem"
    write_cert(other, make_ca("not the cluster's CA").cert)
    assert main(["cluster", "status", "--config", config, "--cacert", str(other)]) == 1
    assert "certificate" in capsys.readouterr().err


def test_metrics_over_https(tls_cluster):
    c = tls_cluster
    ready = c.proc("b").wait_for(r"^READY .* metrics=(\S+):(\d+)")
    where = f"{ready.group(1)}:{ready.group(2)}"
    context = https_client_context(c.cafile)
    with urllib.request.urlopen(f"https://{where}/metrics", context=context, timeout=10) as got:
        assert b"rabbitry_identity_info" in got.read()
    with pytest.raises(urllib.error.HTTPError) as plain:
        urllib.request.urlopen(f"http://{where}/metrics", timeout=10)
    assert plain.value.code == 400 and b"serves HTTPS" in plain.value.read()


def test_partition_and_heal_over_tls_as_in_plain_mode(tls_cluster):
    c = tls_cluster
    c.partition(["a"], ["b", "c"])
    c.wait_for(lambda: c.paused("a"), 15, "a to pause")
    c.wait_for(lambda: c.running("b") == [B, C] and c.running("c") == [B, C], 15, "b c run")
    assert not c.paused("b") and not c.paused("c")
    c.heal()
    _healed(c)


def _dist_address(c: Cluster, node: str) -> tuple[str, int]:
    ready = c.proc(node).wait_for(r"^READY \S+ (\S+):(\d+) ")
    return ready.group(1), int(ready.group(2))


def _dist_tls_probe(address: tuple[str, int], cert: Path, key: Path, ca: Path) -> bytes:
    """A TLS client with this certificate on the node's dist port: the node's first bytes
    (the cookie challenge, b"RBTD...") once mutual TLS is through; raises if refused."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.load_verify_locations(cafile=str(ca))
    ctx.load_cert_chain(cert, key)
    with socket.create_connection(address, timeout=10) as raw, ctx.wrap_socket(raw) as tls:
        return tls.recv(4)


def _replace(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write a file as an operator's tool should: a temporary beside it, then a rename."""
    tmp = path.with_name(path.name + ".new")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def test_two_step_ca_rotation_without_a_nodedown(tls_cluster, tmp_path):
    c = tls_cluster
    _healed(c)
    tls = c.cafile.parent
    old_ca = c.cafile.read_bytes()
    old = load_ca(tls)
    assert old is not None
    marks = {n: c.proc(n).mark("stderr") for n in c.nodes}
    new = make_ca("the new CA")
    write_cert(tmp_path / "new-ca.pem", new.cert)
    new_ca = (tmp_path / "new-ca.pem").read_bytes()

    def reload_all(generation: int) -> None:
        for n in c.nodes:
            c.proc(n).signal(signal.SIGHUP)
        for n in c.nodes:
            c.proc(n).wait_for(
                rf"tls: loaded .* generation {generation}$", 15, marks[n], stream="stderr"
            )

    # Step 1: every node trusts both CAs.
    _replace(c.cafile, old_ca + new_ca)
    reload_all(2)
    # Step 2: every node gets a certificate of the new CA.
    for n in c.nodes:
        key, cert = make_cert(new, n)
        short = n.partition("@")[0]
        write_key(tmp_path / "k.pem", key)
        _replace(tls / f"{short}-key.pem", (tmp_path / "k.pem").read_bytes(), 0o600)
        write_cert(tmp_path / "c.pem", cert)
        _replace(tls / f"{short}.pem", (tmp_path / "c.pem").read_bytes())
    reload_all(3)
    # Step 3: the old CA is dropped.
    _replace(c.cafile, new_ca)
    reload_all(4)

    # New connections use the new certificate and CA: HTTPS checked against the new CA only,
    # dist accepting a client of the new CA and refusing one of the old.
    clients = {
        n: ControlClient(c.client(n).host, c.client(n).port, COOKIE, cafile=tmp_path / "new-ca.pem")
        for n in c.nodes
    }
    for n in c.nodes:
        assert clients[n].status()["running"] == c.nodes
    for name, ca in (("new", new), ("old", old)):
        key, cert = make_cert(ca, "probe@127.0.0.1")
        write_key(tmp_path / f"{name}-probe-key.pem", key)
        write_cert(tmp_path / f"{name}-probe.pem", cert)
    for n in c.nodes:
        got = _dist_tls_probe(
            _dist_address(c, n),
            tmp_path / "new-probe.pem",
            tmp_path / "new-probe-key.pem",
            tmp_path / "new-ca.pem",
        )
        assert got == b"RBTD"  # through mutual TLS: the cookie challenge
    try:
        got = _dist_tls_probe(
            _dist_address(c, "a"),
            tmp_path / "old-probe.pem",
            tmp_path / "old-probe-key.pem",
            tmp_path / "new-ca.pem",
        )
    except (ssl.SSLError, OSError) as exc:
        got = repr(exc).encode()
    assert got != b"RBTD" and b"unknown ca" in got.lower(), got  # refused with an alert

    # Established links stayed up throughout: no node saw a nodedown.
    for n in c.nodes:
        lines = c.proc(n).stderr()[marks[n] :]
        assert not [x for x in lines if "node down" in x], lines
        assert clients[n].status()["running"] == c.nodes


def test_no_cookie_or_token_in_any_log_status_or_error(tls_cluster, capsys):
    """Run last: the nodes' whole output so far (partitions, rotation, CLI errors)."""
    from rabbitry.control import control_token

    c = tls_cluster
    secrets = [COOKIE.decode(), control_token(COOKIE)]
    base = ["cluster", "status", "--cookie-file", str(c.root / "cookie")]
    main([*base, "--control", _control(c, "a")])  # an error (plain HTTP to HTTPS)
    main([*base, "--control", _control(c, "a"), "--cacert", str(c.cafile), "--json"])
    seen = capsys.readouterr()
    texts = [seen.out, seen.err, repr(c.client("a"))]
    for n in c.nodes:
        texts += c.proc(n).stdout() + c.proc(n).stderr()
    for secret in secrets:
        assert not [t for t in texts if secret in t], secret
