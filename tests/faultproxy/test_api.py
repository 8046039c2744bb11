"""The HTTP API: status codes, error bodies and JSON shapes, through toxiproxy-python and raw
requests (for what the client does not expose)."""

from __future__ import annotations

import socket

import pytest
import requests
from toxiproxy import Toxiproxy
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists

from tests.faultproxy.conftest import FaultProxyThread


def test_version_and_empty_listing(client: Toxiproxy, api: str) -> None:
    assert client.running()
    assert client.version() == b'{"version": "2.12.0"}\n'
    assert client.proxies() == {}
    assert requests.get(f"{api}/proxies").json() == {}


def test_create_returns_201_with_bound_port_and_field_order(api: str, echo: str) -> None:
    r = requests.post(
        f"{api}/proxies", json={"name": "a", "upstream": echo, "listen": "127.0.0.1:0"}
    )
    assert r.status_code == 201
    body = r.json()
    assert list(body) == ["name", "listen", "upstream", "enabled", "toxics"]
    assert body["enabled"] is True and body["toxics"] == []
    assert not body["listen"].endswith(":0")
    again = requests.post(f"{api}/proxies", json={"name": "a", "upstream": echo})
    assert again.status_code == 409
    assert again.text == '{"error": "proxy already exists", "status": 409}\n'


def test_client_errors_map_to_its_exceptions(client: Toxiproxy, echo: str) -> None:
    proxy = client.create(upstream=echo, name="p")
    with pytest.raises(ProxyExists):
        client.create(upstream=echo, name="p")
    with pytest.raises(InvalidToxic):
        proxy.add_toxic(type="nosuch")
    with pytest.raises(InvalidToxic):
        proxy.add_toxic(type="latency", stream="sideways")
    proxy.add_toxic(type="latency", attributes={"latency": 5})
    with pytest.raises(ProxyExists):
        proxy.add_toxic(type="latency", attributes={"latency": 5})
    with pytest.raises(NotFound):
        proxy.destroy_toxic("nosuch")
    assert proxy.destroy()
    with pytest.raises(NotFound):
        proxy.destroy()


def test_error_bodies_and_statuses(api: str, echo: str) -> None:
    r = requests.post(f"{api}/proxies", json={"upstream": echo})
    assert (r.status_code, r.json()) == (
        400,
        {"error": "missing required field: name", "status": 400},
    )
    r = requests.post(f"{api}/proxies", json={"name": "x"})
    assert r.json()["error"] == "missing required field: upstream"
    r = requests.post(f"{api}/proxies", data=b"{not json")
    assert r.status_code == 400 and r.json()["error"].startswith("bad request body: ")
    assert requests.get(f"{api}/proxies/nope").json() == {"error": "proxy not found", "status": 404}
    requests.post(f"{api}/proxies", json={"name": "x", "upstream": echo}).raise_for_status()
    r = requests.get(f"{api}/proxies/x/toxics/nope")
    assert (r.status_code, r.json()["error"]) == (404, "toxic not found")
    r = requests.post(f"{api}/proxies/x/toxics", json={"type": "bogus"})
    assert (r.status_code, r.json()["error"]) == (400, "invalid toxic type")
    r = requests.post(f"{api}/proxies/x/toxics", json={"type": "latency", "stream": "both"})
    assert r.json()["error"] == "stream was invalid, can be either upstream or downstream"
    r = requests.get(f"{api}/version", headers={"User-Agent": "Mozilla/5.0"})
    assert r.status_code == 403


def test_toxic_crud(api: str, echo: str) -> None:
    requests.post(f"{api}/proxies", json={"name": "x", "upstream": echo}).raise_for_status()
    r = requests.post(
        f"{api}/proxies/x/toxics", json={"type": "latency", "attributes": {"latency": 7}}
    )
    assert r.status_code == 200
    body = r.json()
    assert list(body) == ["attributes", "name", "type", "stream", "toxicity"]
    assert body == {
        "attributes": {"latency": 7, "jitter": 0},
        "name": "latency_downstream",
        "type": "latency",
        "stream": "downstream",
        "toxicity": 1.0,
    }
    r = requests.post(
        f"{api}/proxies/x/toxics", json={"type": "slicer", "stream": "UpStream", "name": "s"}
    )
    assert r.json()["stream"] == "upstream"
    listed = requests.get(f"{api}/proxies/x/toxics").json()
    assert [t["name"] for t in listed] == ["s", "latency_downstream"]  # upstream first
    r = requests.patch(
        f"{api}/proxies/x/toxics/latency_downstream",
        json={"attributes": {"jitter": 3}, "toxicity": 0.5},
    )
    assert r.status_code == 200
    assert r.json()["attributes"] == {"latency": 7, "jitter": 3} and r.json()["toxicity"] == 0.5
    assert requests.delete(f"{api}/proxies/x/toxics/s").status_code == 204
    assert requests.get(f"{api}/proxies/x").json()["toxics"][0]["name"] == "latency_downstream"
    assert requests.delete(f"{api}/proxies/x").status_code == 204
    assert requests.get(f"{api}/proxies").json() == {}


def test_populate_semantics(api: str, echo: str, sink: str) -> None:
    r = requests.post(f"{api}/populate", json=[])
    assert (r.status_code, r.json()) == (201, {"proxies": None})
    r = requests.post(f"{api}/populate", json=[{"name": "a", "upstream": echo}, {"name": "b"}])
    assert r.status_code == 400
    assert r.json() == {
        "error": "missing required field: upstream at proxy 2",
        "status": 400,
        "proxies": [],
    }
    assert requests.get(f"{api}/proxies").json() == {}  # validated before anything is created
    r = requests.post(
        f"{api}/populate", json=[{"name": "a", "upstream": echo}, {"name": "b", "upstream": echo}]
    )
    assert r.status_code == 201
    first = {p["name"]: p["listen"] for p in r.json()["proxies"]}
    requests.post(f"{api}/proxies/a/toxics", json={"type": "latency"}).raise_for_status()
    r = requests.post(
        f"{api}/populate", json=[{"name": "a", "upstream": echo}, {"name": "b", "upstream": sink}]
    )
    after = {p["name"]: p for p in r.json()["proxies"]}
    assert after["a"]["listen"] == first["a"] and after["a"]["toxics"]  # unchanged, kept
    assert after["b"]["upstream"] == sink  # replaced


def test_reset_reenables_and_clears_toxics(client: Toxiproxy, api: str, echo: str) -> None:
    proxy = client.create(upstream=echo, name="r")
    proxy.add_toxic(type="latency", attributes={"latency": 5})
    proxy.disable()
    assert requests.get(f"{api}/proxies/r").json()["enabled"] is False
    assert requests.post(f"{api}/reset").status_code == 204
    state = requests.get(f"{api}/proxies/r").json()
    assert state["enabled"] is True and state["toxics"] == []


def test_update_proxy_moves_listener(api: str, echo: str, sink: str) -> None:
    requests.post(f"{api}/proxies", json={"name": "m", "upstream": echo}).raise_for_status()
    r = requests.patch(f"{api}/proxies/m", json={"upstream": sink})
    assert r.status_code == 200 and r.json()["upstream"] == sink and r.json()["enabled"]
    r = requests.post(f"{api}/proxies/m", json={"enabled": False})
    assert r.json()["enabled"] is False


def test_bind_failure_is_500(api: str, echo: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = requests.post(
            f"{api}/proxies", json={"name": "b", "upstream": echo, "listen": f"127.0.0.1:{port}"}
        )
    assert r.status_code == 500 and "listen tcp" in r.json()["error"]
    assert requests.get(f"{api}/proxies").json() == {}


@pytest.mark.parametrize(
    "raw",
    [
        b"garbage\r\n\r\n",
        b"GET / HTTP/1.1\r\nContent-Length: nope\r\n\r\n",
        b"POST /proxies HTTP/1.1\r\nContent-Length: 3\r\n\r\n\xff\xfe\x00",
        b"GET /proxies HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"GET /proxies/a/b/c/d/e HTTP/1.1\r\n\r\n",
        b"PUT /version HTTP/1.1\r\n\r\n",
        b"\x00\x01\x02",
    ],
)
def test_bad_http_never_crashes(fp: FaultProxyThread, api: str, raw: bytes) -> None:
    with socket.create_connection(("127.0.0.1", fp.server.port), timeout=5) as sock:
        sock.sendall(raw)
        sock.shutdown(socket.SHUT_WR)
        reply = b""
        while data := sock.recv(4096):
            reply += data
    if reply:
        status = int(reply.split(b" ", 2)[1])
        assert 400 <= status < 500
    assert requests.get(f"{api}/version").status_code == 200


def test_bad_field_types_are_400(api: str, echo: str) -> None:
    requests.post(f"{api}/proxies", json={"name": "x", "upstream": echo}).raise_for_status()
    for body in (
        {"type": "latency", "attributes": {"latency": "slow"}},
        {"type": "latency", "attributes": [1]},
        {"type": "latency", "toxicity": "high"},
        [1, 2],
    ):
        r = requests.post(f"{api}/proxies/x/toxics", json=body)
        assert r.status_code == 400, body
        assert r.json()["error"].startswith("bad request body")
    r = requests.post(f"{api}/proxies", json={"name": "y", "upstream": "no-port"})
    assert r.status_code == 400
    r = requests.patch(f"{api}/proxies/x", json={"enabled": "yes"})
    assert r.status_code == 400
    assert requests.get(f"{api}/proxies/x").json()["enabled"] is True
