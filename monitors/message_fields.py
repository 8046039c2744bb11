"""MessageFields: the one validator of the fields of the JSON messages peers send.

Four message modules check what arrives from the network: the node monitor's
(monitors/node_monitor/messages.py), gossip's (monitors/gossip/wire.py), mnesia_like's and
failover's (messages.py in each). Each names its field types in a small vocabulary of *kinds*
("int", "[str]", "server", ...) and keeps its own head and version rules, but the checking of
a message type's fields is this module's, and so are the texts every one of them gives:

    "<type>: missing field 'k'"          a required field is absent
    "<type>: field 'k': <why>"           a field is there, and its kind's check says why not

A kind is a `Check`: a function of the value that returns None if it is fine, else why not
("expected an integer"). `check(test, why)` makes one from a predicate. A message type's
`MessageFields` looks each field's check up once, when the module is imported (a kind no
vocabulary names is an error then, not a field silently let through), and checks in order:
the required fields, then the optional ones that are present.

This is the lowest layer all four may import (monitors; mnesia_like and failover sit above
it), and it imports nothing: a validator is pure and cheap, and runs on every message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["ANY", "Check", "MessageFields", "check", "not_an_object"]

Check = Callable[[Any], str | None]
"""A field's check: None if the value is fine, else why not (a short text for the log)."""


class _Predicate:
    """A check made of a predicate and the text for a value that fails it. MessageFields
    calls the predicate itself (one call per field, not two: every message pays it)."""

    __slots__ = ("test", "why")

    def __init__(self, test: Callable[[Any], bool], why: str) -> None:
        self.test = test
        self.why = why

    def __call__(self, v: Any) -> str | None:
        return None if self.test(v) else self.why


def check(test: Callable[[Any], bool], why: str) -> Check:
    """The check that says `why` when `test` fails."""
    return _Predicate(test, why)


def _anything(v: Any) -> None:
    return None


ANY: Check = _anything
"""Any value (bounded by the transport's frame limit; checked where it is used)."""

# a plan's entry: (field, predicate or check or None for ANY, the predicate's text or None,
# required)
_Entry = tuple[str, Callable[[Any], Any] | None, str | None, bool]


def not_an_object(body: Any) -> str | None:
    """Every message is a JSON object; what else arrived, if not."""
    if isinstance(body, dict):
        return None
    return f"expected a JSON object, got {type(body).__name__}"


class MessageFields:
    """One message type's fields and their checks, in the order they are checked."""

    __slots__ = ("_plan", "name")

    def __init__(
        self,
        name: str,
        kinds: Mapping[str, Check],
        required: Mapping[str, str],
        optional: Mapping[str, str] | None = None,
    ) -> None:
        """`required` and `optional` map a field to its kind, a key of `kinds`."""
        self.name = name
        plan: list[_Entry] = []
        for fields, must in ((required, True), (optional or {}, False)):
            for key, kind in fields.items():
                if kind not in kinds:
                    raise ValueError(f"{name}: field {key!r} has an unknown kind {kind!r}")
                found = kinds[kind]
                if found is ANY:
                    plan.append((key, None, None, must))
                elif isinstance(found, _Predicate):
                    plan.append((key, found.test, found.why, must))
                else:
                    plan.append((key, found, None, must))
        self._plan = tuple(plan)

    def problem(self, body: Mapping[str, Any]) -> str | None:
        """What is wrong with the fields of `body` (an object of this type), or None."""
        for key, test, why, must in self._plan:
            if key not in body:
                if must:
                    return f"{self.name}: missing field {key!r}"
                continue
            if test is None:  # ANY
                continue
            if why is not None:  # a predicate
                if not test(body[key]):
                    return f"{self.name}: field {key!r}: {why}"
                continue
            bad = test(body[key])
            if bad:
                return f"{self.name}: field {key!r}: {bad}"
        return None
