"""The effects of SingletonCore beyond the common ones (monitors/effects.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StartInstance:
    """Start the instance of `key` here, with fencing `token`; its lease ends `expires_in`
    seconds from now (the shell turns that into a wall-clock expiry for the child)."""

    key: str
    token: int
    expires_in: float
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RenewInstance:
    """A majority renewed the lease of `key`: it now ends `expires_in` seconds from now."""

    key: str
    token: int
    expires_in: float


@dataclass(frozen=True)
class StopInstance:
    """Stop the instance of `key` now (before its lease ends, or handing it over)."""

    key: str
    token: int
    reason: str


@dataclass(frozen=True)
class PersistTokens:
    """Write the highest token granted (and the longest lease) to disc, fsynced, before the
    effects after it are performed: a restarted acceptor must never grant a smaller token."""

    max_token: int
    lease: float


@dataclass(frozen=True)
class Answer:
    """The answer to whereis query `query`: the live grant with the highest token that a
    majority (or everyone that answered in time) named, or None."""

    query: int
    grant: dict[str, Any] | None


@dataclass(frozen=True)
class Conflict:
    """This node held `key`, and `winner` holds it now: for a global name, the losing process
    is told ("global_name_conflict", name), as Erlang's global does."""

    key: str
    winner: str
