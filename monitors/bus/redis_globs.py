"""Redis PSUBSCRIBE globs for AMQP topic patterns, so that Redis delivers a broadcast only to
the nodes whose patterns can match it.

Why: with one PSUBSCRIBE of every broadcast per node, Redis hands each broadcast to all N
nodes, which then filter it; a cluster where N executors heartbeat costs N x N deliveries a
period even when only the three core members listen to heartbeats (issue 26). A glob per
pattern lets the broker do the routing, as AMQP's topic bindings do.

A glob is a superset of its pattern (Redis's `*` matches any characters, dots included, so it
cannot say "exactly one word", and a `#` that stands for zero words takes its dot with it); the
bus still filters every message with the exact topic matcher. Two globs can both match a
channel (say `worker*` and `worker.revoke`), and Redis then delivers the message once per glob:
`GlobSet.owner` names the one glob whose copy is handled, so each message is handled once.
"""

from __future__ import annotations

import re
from functools import lru_cache

_GLOB_SPECIAL = re.compile(r"([\\*?\[\]])")


def glob_for(prefix: str, pattern: str) -> str:
    """The PSUBSCRIBE glob of channel names `prefix + key` for every key `pattern` matches."""
    words = pattern.split(".")
    out = ""
    for i, word in enumerate(words):
        if i and "#" not in (word, words[i - 1]):
            out += "."  # a `#` may stand for zero words: the dot goes with them
        out += "*" if word in ("*", "#") else _GLOB_SPECIAL.sub(r"\\\1", word)
    return _GLOB_SPECIAL.sub(r"\\\1", prefix) + re.sub(r"\*+", "*", out)


@lru_cache(maxsize=256)
def _regex(glob: str) -> re.Pattern[str]:
    """Redis's glob semantics for the globs glob_for makes: `*` and backslash escapes only."""
    parts = re.split(r"(\\.|\*)", glob)
    body = "".join(
        ".*" if p == "*" else re.escape(p[1]) if p.startswith("\\") else re.escape(p)
        for p in parts
        if p
    )
    return re.compile(body, re.DOTALL)


def glob_matches(glob: str, channel: str) -> bool:
    return _regex(glob).fullmatch(channel) is not None


class GlobSet:
    """The globs Redis has confirmed on one connection, in the order of its confirmations (the
    reader thread updates it from the same stream the messages come in, so a message and the
    set it is judged against agree)."""

    def __init__(self) -> None:
        self.active: set[str] = set()

    def confirmed(self, glob: str) -> None:
        self.active.add(glob)

    def dropped(self, glob: str) -> None:
        self.active.discard(glob)

    def clear(self) -> None:
        self.active.clear()

    def owner(self, channel: str) -> str | None:
        """The glob whose copy of a message on `channel` is handled: the least active glob
        that matches it (None: no active glob does, a message from before an unsubscribe)."""
        matching = [g for g in self.active if glob_matches(g, channel)]
        return min(matching) if matching else None
