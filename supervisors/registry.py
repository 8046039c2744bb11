"""pykka's ActorRegistry, made cheap to leave, and registration of Processes.

A Process is registered at start, as a pykka actor is: a user coming from pykka expects
`ActorRegistry.get_by_class()` and `broadcast()` to find their actors. A PooledProcess is not
(`register_in_actor_registry = False`), because registration costs a lock and an entry per
process, which a pooled process is meant to save; `supervisors.processes()` lists them all.
pykka keeps every started actor in `ActorRegistry._actor_refs`, a list: each unregister scans
it, so stopping n actors costs O(n^2) (seconds for 10,000). Two things make it cheap:

- `RefTable` replaces that list with an insertion-ordered dict that answers the same calls
  pykka makes on it (append, remove, `in`, iteration, `[:]`, `reversed`), each in O(1) but
  the copies. It is installed when supervisors is imported; refs already registered stay.
  A ref registered twice is held once (pykka's list would hold it twice).
- A Process class with `register_in_actor_registry = True` (the default for Process, not for
  PooledProcess) is registered at start, as a pykka actor is, so `ActorRegistry.get_by_class()`, `broadcast()` and `stop_all()` see it. Any
  Process in the registry, by that flag or by hand (`ActorRegistry.register(ref)`), is
  unregistered when it ends, however it ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pykka import ActorRegistry


class RefTable:
    """The list-like calls pykka's ActorRegistry makes on its `_actor_refs`, in O(1)."""

    __slots__ = ("_refs",)

    def __init__(self, refs: Any = ()) -> None:
        self._refs: dict[Any, None] = dict.fromkeys(refs)

    def append(self, ref: Any) -> None:
        self._refs[ref] = None

    def remove(self, ref: Any) -> None:
        try:
            del self._refs[ref]
        except KeyError:
            raise ValueError(f"{ref!r} is not registered") from None

    def discard(self, ref: Any) -> bool:
        """Remove `ref` if present; True if it was."""
        return self._refs.pop(ref, 0) is None

    def __contains__(self, ref: object) -> bool:
        return ref in self._refs

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._refs))

    def __reversed__(self) -> Iterator[Any]:
        return reversed(list(self._refs))

    def __len__(self) -> int:
        return len(self._refs)

    def __getitem__(self, index: Any) -> Any:
        return list(self._refs)[index]

    def __repr__(self) -> str:
        return f"RefTable({list(self._refs)!r})"


def install() -> RefTable:
    """Put a RefTable in pykka's ActorRegistry (once); return it."""
    with ActorRegistry._actor_refs_lock:
        current = ActorRegistry._actor_refs
        if isinstance(current, RefTable):
            return current
        table = RefTable(current)
        # pykka types the table as a list; a RefTable is the list operations pykka uses
        ActorRegistry._actor_refs = table  # type: ignore[assignment]
        return table


TABLE = install()


def leave(ref: Any) -> None:
    """Unregister `ref` if it is registered: O(1), and silent when it is not."""
    if ref in TABLE:
        with ActorRegistry._actor_refs_lock:
            TABLE.discard(ref)
