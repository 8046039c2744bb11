"""Revocation (issue 25): `tls.crlfile`, a CRL from the cluster CA made by `rabbitry tls
revoke`, is checked on every new dist connection and re-read on a reload (SIGHUP)."""

from __future__ import annotations

import logging

import pytest

from monitors.tls import TlsContexts, TlsFiles
from rabbitry.tls_gen import generate, revoke
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
    revoked = lambda: [  # noqa: E731
        r for r in caplog.records if "revoked" in r.getMessage() and a.node in r.getMessage()
    ]
    # x is revoked while a runs: the CRL file changed, so a's next handshake uses it. (x
    # retries until a has seen its certificate: under load an attempt may time out first.)
    revoke(root, [files["x"].certfile])
    wait_until(lambda: x.connect(a.node, timeout=2) is False and revoked(), "x refused")
    assert x.node not in a.nodes()
    # b is revoked, and a re-reads its files as on SIGHUP: b's next connection is refused.
    seen = len(revoked())
    revoke(root, [files["b"].certfile])
    assert tls_a.reload() is True
    a.disconnect(b.node)
    wait_until(lambda: b.node not in a.nodes(), "b gone")
    wait_until(lambda: not b.connect(a.node, timeout=2) and len(revoked()) > seen, "b refused")
    assert b.node not in a.nodes()
