"""Proxies and toxics as plain data, with Toxiproxy's validation, defaults and JSON field order.

Kept free of I/O so that the HTTP layer can validate a whole request (or a whole /populate
list) before anything is bound or changed, as Toxiproxy does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

VERSION = "2.12.0"

TOXIC_DEFAULTS: dict[str, dict[str, int]] = {
    "latency": {"latency": 0, "jitter": 0},
    "bandwidth": {"rate": 0},
    "slow_close": {"delay": 0},
    "timeout": {"timeout": 0},
    "reset_peer": {"timeout": 0},
    "slicer": {"average_size": 0, "size_variation": 0, "delay": 0},
    "limit_data": {"bytes": 0},
}
"""Every toxic type with its attributes (all integers) and their zero defaults."""

STREAMS = ("upstream", "downstream")


class ApiError(Exception):
    """An API failure carrying Toxiproxy's status code and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Toxic:
    """One toxic: its type decides the behaviour, its attributes the amounts."""

    name: str
    type: str
    stream: str
    toxicity: float
    attributes: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        """Toxiproxy's field order: attributes, name, type, stream, toxicity."""
        return {
            "attributes": dict(self.attributes),
            "name": self.name,
            "type": self.type,
            "stream": self.stream,
            "toxicity": self.toxicity,
        }


@dataclass
class ProxySpec:
    """A proxy's configuration as requested (listen may still have port 0)."""

    name: str
    listen: str
    upstream: str
    enabled: bool = True
    toxics: list[Toxic] = field(default_factory=list)


def _int_attr(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ApiError(400, f"bad request body: attribute {key} must be an integer")
    return int(value)


def parse_attributes(kind: str, raw: Any, base: dict[str, int] | None = None) -> dict[str, int]:
    """Merge `raw` attributes over `base` (or the type's defaults); unknown keys are ignored."""
    attrs = dict(base if base is not None else TOXIC_DEFAULTS[kind])
    if raw is None:
        return attrs
    if not isinstance(raw, dict):
        raise ApiError(400, "bad request body: attributes must be an object")
    for key, value in raw.items():
        if key in attrs:
            attrs[key] = _int_attr(value, key)
    return attrs


def parse_toxicity(raw: Any) -> float:
    """Toxicity is a float32 in Toxiproxy; anything not a number is a bad body."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise ApiError(400, "bad request body: toxicity must be a number")
    return float(raw)


def parse_toxic(body: Any) -> Toxic:
    """Validate a toxic creation body, filling in stream, toxicity and name defaults."""
    if not isinstance(body, dict):
        raise ApiError(400, "bad request body: expected a JSON object")
    stream = body.get("stream") or "downstream"
    if not isinstance(stream, str) or stream.lower() not in STREAMS:
        raise ApiError(400, "stream was invalid, can be either upstream or downstream")
    stream = stream.lower()
    kind = body.get("type")
    if not isinstance(kind, str) or kind not in TOXIC_DEFAULTS:
        raise ApiError(400, "invalid toxic type")
    toxicity = parse_toxicity(body["toxicity"]) if "toxicity" in body else 1.0
    name = body.get("name") or f"{kind}_{stream}"
    if not isinstance(name, str):
        raise ApiError(400, "bad request body: name must be a string")
    return Toxic(name, kind, stream, toxicity, parse_attributes(kind, body.get("attributes")))


def parse_proxy(body: Any, where: str = "") -> ProxySpec:
    """Validate a proxy creation body: name and upstream are required, listen defaults."""
    if not isinstance(body, dict):
        raise ApiError(400, "bad request body: expected a JSON object")
    for key in ("name", "upstream"):
        if not body.get(key):
            raise ApiError(400, f"missing required field: {key}{where}")
        if not isinstance(body[key], str):
            raise ApiError(400, f"bad request body: {key} must be a string")
    listen = body.get("listen") or "localhost:0"
    if not isinstance(listen, str):
        raise ApiError(400, "bad request body: listen must be a string")
    enabled = body.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ApiError(400, "bad request body: enabled must be a boolean")
    split_hostport(listen)
    split_hostport(body["upstream"])
    return ProxySpec(body["name"], listen, body["upstream"], enabled)


def split_hostport(address: str) -> tuple[str, int]:
    """'host:port' (host may be empty or [v6]) to a tuple; a bad address is a 400."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ApiError(400, f"bad request body: invalid address {address!r}")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)
