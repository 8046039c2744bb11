"""Which node a certificate names.

A URI SAN `rabbitry://name@host` names exactly that node, and a certificate with one is
accepted for no other. A certificate without one names every node on its host, through a DNS
or IP SAN equal to the host part of the node name (docs/tls.md). The SANs are handled in
the shape `ssl.SSLObject.getpeercert()` gives them: (("DNS", "h"), ("IP Address", "1.2.3.4"),
("URI", "rabbitry://a@h"), ...), so the check is the same for a peer and for our own file.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

URI_SCHEME = "rabbitry://"

San = tuple[tuple[str, str], ...]


def node_uris(san: Iterable[tuple[str, str]]) -> list[str]:
    """The node names of the certificate's rabbitry:// URI SANs."""
    return [v[len(URI_SCHEME) :] for k, v in san if k == "URI" and v.startswith(URI_SCHEME)]


def _same_host(a: str, b: str) -> bool:
    try:
        return ipaddress.ip_address(a.strip("[]")) == ipaddress.ip_address(b.strip("[]"))
    except ValueError:
        return a.rstrip(".").lower() == b.rstrip(".").lower()


def san_names_node(san: Iterable[tuple[str, str]], node: str) -> bool:
    """True if a certificate with these SANs may act as `node` (name@host)."""
    san = tuple(san)
    uris = node_uris(san)
    if uris:
        return node in uris
    host = node.partition("@")[2]
    return any(k in ("DNS", "IP Address") and _same_host(v, host) for k, v in san)


def describe_san(san: Iterable[tuple[str, str]]) -> str:
    """The names a certificate carries, for an error message."""
    names = [f"{'IP' if k == 'IP Address' else k}:{v}" for k, v in san]
    return ", ".join(names) if names else "no subject alternative names"


def peer_san(cert: dict[str, Any] | None) -> San:
    """The SANs of a peer certificate as `getpeercert()` returns it (empty if none)."""
    if not cert:
        return ()
    return tuple((str(k), str(v)) for k, v in cert.get("subjectAltName", ()))
