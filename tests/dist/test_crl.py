"""Revocation (issue 25): `tls.crlfile`, a CRL from the cluster CA made by `rabbitry tls
revoke`, is checked on every new dist connection and re-read on a reload (SIGHUP)."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from monitors.tls import TlsContexts, TlsFileError, TlsFiles
from rabbitry.tls_gen import generate, make_ca, revoke, write_cert, write_key
from tests.dist.helpers import Echo, mesh, wait_until

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    root = tmp_path_factory.mktemp("crl")
    _, written = generate(root, ["a@127.0.0.1", "b@127.0.0.1", "x@127.0.0.1"])
    crl, serials = revoke(root, [])  # an empty CRL to start from
    assert serials == []
    return root, {f.node.partition("@")[0]: f for f in written}, crl


def _tls(pki, name: str) -> TlsContexts:
    _root, files, crl = pki
    f = files[name]

    return TlsContexts(TlsFiles(f.certfile, f.keyfile, f.cafile, crl), f.node)


def test_a_revoked_certificate_is_refused_on_connect_and_after_a_reload(make_kernel, pki, caplog):
    caplog.set_level(logging.INFO, "monitors")
    root, files, _crl = pki
    tls_a = _tls(pki, "a")
    a = make_kernel("a", tls=tls_a)
    a.register("echo", Echo.start())
    b = make_kernel("b", tls=_tls(pki, "b"))
    x = make_kernel("x", tls=_tls(pki, "x"))
    mesh(a, b, x)
    assert b.connect(a.node, timeout=5)
    # x is revoked while a runs: the CRL file changed, so a's next handshake uses it.
    revoke(root, [files["x"].certfile])
    assert not x.connect(a.node, timeout=2)
    assert wait_until(
        lambda: [r for r in caplog.records if "revoked" in r.getMessage()], "the refusal line"
    )
    assert x.node not in a.nodes()
    # b is revoked, and a re-reads its files as on SIGHUP: b's next connection is refused.
    revoke(root, [files["b"].certfile])
    assert tls_a.reload() is True
    a.disconnect(b.node)
    wait_until(lambda: b.node not in a.nodes(), "b gone")
    assert not b.connect(a.node, timeout=2)
    assert b.node not in a.nodes()


def test_a_crl_from_another_ca_is_refused(tmp_path, pki):
    _root, files, _ = pki
    other = make_ca("another CA")
    (tmp_path / "other").mkdir()
    write_cert(tmp_path / "other" / "ca.pem", other.cert)
    write_key(tmp_path / "other" / "ca-key.pem", other.key)
    foreign, _ = revoke(tmp_path / "other", [])
    f = files["a"]

    with pytest.raises(TlsFileError, match="not signed by the CA"):
        TlsContexts(dataclasses.replace(TlsFiles(f.certfile, f.keyfile, f.cafile), crlfile=foreign))
