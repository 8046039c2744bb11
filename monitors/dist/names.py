"""Node names (`name@host`), listen/peer addresses (`host:port`), registered names, creation.

Validated at the edges (NetKernel's constructor, connect/send/call) so that a typo in a config
file fails at once with what was expected, rather than as a connection that never comes up.
"""

from __future__ import annotations

import re
import secrets

__all__ = [
    "BadAddress",
    "BadNodeName",
    "format_address",
    "new_creation",
    "parse_address",
    "validate_node",
    "validate_registered_name",
]

MAX_NAME = 255  # Erlang's limit on an atom, and so on a node name
# Erlang accepts more in the name part; we keep to what is safe in file names, URLs and logs.
_NODE = re.compile(r"(?P<name>[A-Za-z0-9_.\-]+)@(?P<host>[A-Za-z0-9_.\-]+|\[[0-9A-Fa-f:.]+\])")
URN_PREFIX = "urn:"  # registered names may not look like process identities (see remote.py)


class BadNodeName(ValueError):
    """A node name that is not `name@host`."""


class BadAddress(ValueError):
    """An address that is not `host:port`."""


def validate_node(node: object, what: str = "node name") -> str:
    """Return `node` if it is a valid `name@host`; raise BadNodeName saying what is wrong."""
    if not isinstance(node, str):
        raise BadNodeName(f"{what}: expected a string 'name@host'; got {node!r}")
    if len(node) > MAX_NAME:
        raise BadNodeName(f"{what}: longer than {MAX_NAME} characters: {node[:40]!r}...")
    if _NODE.fullmatch(node) is None:
        raise BadNodeName(
            f"{what}: expected 'name@host' (letters, digits, '_', '-', '.' on each side of one "
            f"'@', e.g. 'a@127.0.0.1'); got {node!r}"
        )
    return node


def validate_registered_name(name: object) -> str:
    """Return `name` if it can be registered: a non-empty string, not starting with 'urn:'."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"registered name: expected a non-empty string; got {name!r}")
    if len(name) > MAX_NAME:
        raise ValueError(f"registered name: longer than {MAX_NAME} characters: {name[:40]!r}...")
    if name.startswith(URN_PREFIX):
        raise ValueError(
            f"registered name: names starting with {URN_PREFIX!r} are reserved for process "
            f"identities; got {name!r}"
        )
    return name


def parse_address(address: object, what: str = "address") -> tuple[str, int]:
    """Parse `host:port` (IPv6 as `[::1]:7001`) into (host, port); port 0 means any free port."""
    if not isinstance(address, str):
        raise BadAddress(f"{what}: expected a string 'host:port'; got {address!r}")
    host, sep, port_text = address.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise BadAddress(f"{what}: expected 'host:port' (e.g. '127.0.0.1:7001'); got {address!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise BadAddress(f"{what}: port must be 0..65535; got {port} in {address!r}")
    return host, port


def format_address(host: str, port: int) -> str:
    """The `host:port` form of an address (brackets around an IPv6 host)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def new_creation() -> int:
    """A fresh creation id (1..2**32-1), as Erlang's `creation`: distinct per node start, so a
    restarted node is told apart from its previous incarnation. Random rather than a counter:
    a node keeps no state between starts, and a clash is a 1 in 4 billion chance."""
    return secrets.randbelow(2**32 - 1) + 1
