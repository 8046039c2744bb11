"""A cheap bound on the nesting depth of JSON text, checked before `json.loads`.

Why: Python's JSON decoder recurses per nesting level, so `[[[[...]]]]` 100,000 deep raises
RecursionError (a traceback, not a protocol error) wherever a peer's bytes are decoded. Text
with fewer brackets than the limit cannot be too deep, so the common case costs two
`str.count` calls; only text with many brackets is scanned (strings skipped).
"""

from __future__ import annotations

import re

MAX_DEPTH = 200  # far above any message we send, far below the interpreter's recursion limit

_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


def json_depth_exceeds(text: str, limit: int = MAX_DEPTH) -> bool:
    """True if the JSON `text` nests arrays and objects deeper than `limit`."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            if depth > limit:
                return True
        elif token in ("]", "}"):
            depth -= 1
    return False


def check_json_depth(text: str, limit: int = MAX_DEPTH) -> None:
    """Raise ValueError if `text` nests deeper than `limit`."""
    if json_depth_exceeds(text, limit):
        raise ValueError(f"JSON nested deeper than {limit} levels")
