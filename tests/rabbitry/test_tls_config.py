"""The `tls:` section and `rabbitry tls gen`: every bad input exits 2 naming the key path and
the reason; a good section loads; control may leave loopback only with TLS; short cookies are
refused with the way to make a good one."""

from __future__ import annotations

import datetime
import os
import stat
from pathlib import Path

import pytest

from rabbitry.cli import main
from rabbitry.node_config import NodeConfigError, load_node_config
from rabbitry.tls_gen import generate, load_ca, make_ca, make_cert, write_cert, write_key

NODE = "a@127.0.0.1"
COOKIE_LINE = "cookie: 0123456789abcdef0123\n"


@pytest.fixture(scope="module")
def tls_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tls")
    assert main(["tls", "gen", "--out", str(out), NODE, "b@127.0.0.1"]) == 0
    return out


def _config(tmp_path: Path, tls: dict[str, str] | None, extra: str = "") -> Path:
    body = f"node: {NODE}\nlisten: 127.0.0.1:0\n{COOKIE_LINE}{extra}"
    if tls is not None:
        body += "tls:\n" + "".join(f"  {k}: {v}\n" for k, v in tls.items())
    path = tmp_path / "node.yaml"
    path.write_text(body)
    return path


def _good(tls_dir: Path) -> dict[str, str]:
    return {
        "certfile": str(tls_dir / "a.pem"),
        "keyfile": str(tls_dir / "a-key.pem"),
        "cafile": str(tls_dir / "ca.pem"),
    }


def test_tls_gen_writes_a_ca_and_node_files_with_private_keys(tls_dir, capsys):
    for name in ("ca.pem", "a.pem", "b.pem"):
        assert (tls_dir / name).read_bytes().startswith(b"-----BEGIN CERTIFICATE-----")
    for name in ("ca-key.pem", "a-key.pem", "b-key.pem"):
        assert stat.S_IMODE((tls_dir / name).stat().st_mode) == 0o600
    # Again: the CA is reused, and the tls: lines are printed.
    assert main(["tls", "gen", "--out", str(tls_dir), "c@10.0.0.7"]) == 0
    out = capsys.readouterr().out
    assert "reused the CA" in out and "tls:\n  certfile: " in out and "c-key.pem" in out
    assert main(["tls", "gen", "--out", str(tls_dir), "nohost"]) == 2


def test_a_good_tls_section_loads_and_opens_control_to_any_address(tls_dir, tmp_path):
    extra = "control: 0.0.0.0:0\nmetrics: 0.0.0.0:0\n"
    config = load_node_config(_config(tmp_path, _good(tls_dir), extra))
    assert config.tls is not None and config.tls.certfile == tls_dir / "a.pem"
    assert str(config.control) == "0.0.0.0:0" and str(config.metrics) == "0.0.0.0:0"


@pytest.mark.parametrize("key", ["control", "metrics"])
def test_without_tls_control_and_metrics_stay_on_loopback_saying_tls_opens_them(tmp_path, key):
    with pytest.raises(NodeConfigError, match=rf"{key}: .*add a `tls:` section"):
        load_node_config(_config(tmp_path, None, f"{key}: 0.0.0.0:7101\n"))


def _bad_files(tls_dir: Path, tmp_path: Path) -> dict[str, tuple[dict[str, str], str, str]]:
    good = _good(tls_dir)
    open_key = tmp_path / "open-key.pem"
    open_key.write_bytes((tls_dir / "a-key.pem").read_bytes())
    os.chmod(open_key, 0o644)
    ca = load_ca(tls_dir)
    assert ca is not None
    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=10)
    key, cert = make_cert(ca, NODE, not_before=past, not_after=past + datetime.timedelta(days=1))
    write_key(tmp_path / "expired-key.pem", key)
    write_cert(tmp_path / "expired.pem", cert)
    key, cert = make_cert(make_ca(), "z@10.9.9.9")
    write_cert(tmp_path / "other.pem", cert)
    write_key(tmp_path / "other-key.pem", key)
    return {
        "missing": (
            {**good, "certfile": str(tmp_path / "nope.pem")},
            "tls.certfile",
            "cannot read",
        ),
        "open key": ({**good, "keyfile": str(open_key)}, "tls.keyfile", "chmod 600"),
        "key of another cert": (
            {**good, "keyfile": str(tls_dir / "b-key.pem")},
            "tls.keyfile",
            "is not the private key",
        ),
        "expired": (
            {
                **good,
                "certfile": str(tmp_path / "expired.pem"),
                "keyfile": str(tmp_path / "expired-key.pem"),
            },
            "tls.certfile",
            "not now",
        ),
        "another node's cert": (
            {
                **good,
                "certfile": str(tmp_path / "other.pem"),
                "keyfile": str(tmp_path / "other-key.pem"),
            },
            "tls.certfile",
            "does not name a@127.0.0.1",
        ),
        "b's cert": (
            {**good, "certfile": str(tls_dir / "b.pem"), "keyfile": str(tls_dir / "b-key.pem")},
            "tls.certfile",
            "URI:rabbitry://b@127.0.0.1",
        ),
        "no CA": (
            {**good, "cafile": str(tls_dir / "a-key.pem")},
            "tls.cafile",
            "no PEM certificate",
        ),
        "missing key": (
            {k: v for k, v in good.items() if k != "keyfile"},
            "tls.keyfile",
            "missing",
        ),
    }


def test_each_bad_tls_input_exits_2_with_the_key_path_and_reason(tls_dir, tmp_path, capsys):
    for case, (tls, key, reason) in _bad_files(tls_dir, tmp_path).items():
        path = _config(tmp_path, tls)
        assert main(["node", "start", "--config", str(path)]) == 2, case
        err = capsys.readouterr().err
        assert f"{key}:" in err and reason in err, (case, err)


def test_a_short_cookie_is_refused_saying_how_to_make_one(tmp_path):
    path = tmp_path / "node.yaml"
    path.write_text(f"node: {NODE}\nlisten: 127.0.0.1:0\ncookie: short-secret\n")
    with pytest.raises(NodeConfigError) as info:
        load_node_config(path)
    text = str(info.value)
    assert "at least 16 bytes" in text and "/dev/urandom" in text
    assert "short-secret" not in text  # never the cookie itself


def test_a_cookie_of_the_wrong_type_is_not_shown(tmp_path):
    path = tmp_path / "node.yaml"
    path.write_text(f"node: {NODE}\nlisten: 127.0.0.1:0\ncookie: 9876543210123456789\n")
    with pytest.raises(NodeConfigError) as info:
        load_node_config(path)
    assert "cookie" in str(info.value) and "9876543210123456789" not in str(info.value)


def test_a_host_certificate_names_every_node_of_its_host(tls_dir, tmp_path, capsys):
    assert main(["tls", "gen", "--out", str(tls_dir), "--host", "127.0.0.1"]) == 0
    assert "host-127.0.0.1.pem" in capsys.readouterr().out
    files = {
        "certfile": str(tls_dir / "host-127.0.0.1.pem"),
        "keyfile": str(tls_dir / "host-127.0.0.1-key.pem"),
        "cafile": str(tls_dir / "ca.pem"),
    }
    assert load_node_config(_config(tmp_path, files)).tls is not None  # a@127.0.0.1
    path = tmp_path / "other.yaml"
    path.write_text(
        f"node: spark-1-2@10.0.0.5\nlisten: 127.0.0.1:0\n{COOKIE_LINE}tls:\n"
        + "".join(f"  {k}: {v}\n" for k, v in files.items())
    )
    with pytest.raises(NodeConfigError, match=r"does not name spark-1-2@10\.0\.0\.5"):
        load_node_config(path)


def test_https_control_on_loopback_checks_the_ca_but_not_the_host_name(tmp_path):
    """A Spark task reaches its executor's node on 127.0.0.1, whose certificate names the
    worker host's outside name: the CA is checked, the host name cannot be."""
    from monitors.tls import TlsContexts, TlsFiles
    from rabbitry.control import ControlClient, ControlError, ControlServer

    _, (files,) = generate(tmp_path / "pki", [], hosts=["10.9.9.9"])
    tls = TlsContexts(TlsFiles(files.certfile, files.keyfile, files.cafile))
    cookie = b"0123456789abcdef-cookie"
    routes = {("GET", "/status"): lambda _body: {"ok": True}}
    ref = ControlServer.start("127.0.0.1", 0, cookie, routes, tls=tls.https_server)
    try:
        host, port = ref.proxy().get_address().get(timeout=10)
        assert ControlClient(host, port, cookie, cafile=files.cafile).status() == {"ok": True}
        write_cert(tmp_path / "other.pem", make_ca("another").cert)
        with pytest.raises(ControlError, match="--cacert"):
            ControlClient(host, port, cookie, cafile=tmp_path / "other.pem").status()
    finally:
        ref.stop()


def test_tls_revoke_writes_a_crl_that_tls_crlfile_loads(tls_dir: Path, tmp_path: Path, capsys):
    assert main(["tls", "revoke", "--out", str(tls_dir), str(tls_dir / "b.pem")]) == 0
    out = capsys.readouterr().out
    assert f"crlfile: {tls_dir / 'crl.pem'}" in out and "revokes 1 certificate" in out
    crl = str(tls_dir / "crl.pem")
    config = load_node_config(_config(tmp_path, {**_good(tls_dir), "crlfile": crl}))
    assert config.tls is not None and config.tls.crlfile is not None
    (tmp_path / "crl.pem").write_text("not a CRL\n")
    with pytest.raises(NodeConfigError, match=r"tls\.crlfile.*no PEM CRL"):
        load_node_config(_config(tmp_path, {**_good(tls_dir), "crlfile": "crl.pem"}))
    assert main(["tls", "revoke", "--out", str(tmp_path), str(tls_dir / "b.pem")]) == 1
