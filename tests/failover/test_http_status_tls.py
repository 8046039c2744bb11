"""The RCS status page over HTTPS (a node's `tls:` files): served with the certificate, a
plain HTTP request is told to use https://, and a client with another CA is refused."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request

import pytest

from failover.http_status import StatusServer
from monitors.tls import TlsContexts, TlsFiles, https_client_context
from rabbitry.tls_gen import generate, make_ca, write_cert


def test_status_page_over_https(tmp_path):
    _, (files,) = generate(tmp_path, ["rcs@127.0.0.1"])
    tls = TlsContexts(TlsFiles(files.certfile, files.keyfile, files.cafile))
    server = StatusServer(
        "127.0.0.1",
        0,
        lambda: {"redis_master": "127.0.0.1:6380"},
        lambda: False,
        tls=tls.https_server,
    ).start()
    try:
        host, port = server.address
        url = f"https://{host}:{port}/.json"
        with urllib.request.urlopen(url, context=https_client_context(files.cafile)) as response:
            assert json.loads(response.read())["redis_master"] == "127.0.0.1:6380"
        with pytest.raises(urllib.error.HTTPError) as plain:
            urllib.request.urlopen(f"http://{host}:{port}/.json", timeout=5)
        assert plain.value.code == 400 and "serves HTTPS" in plain.value.read().decode()
        write_cert(tmp_path / "other.pem", make_ca("another").cert)
        with pytest.raises(urllib.error.URLError) as wrong:
            urllib.request.urlopen(url, context=https_client_context(tmp_path / "other.pem"))
        assert isinstance(wrong.value.reason, ssl.SSLCertVerificationError)
    finally:
        server.close()
