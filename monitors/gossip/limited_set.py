"""LimitedSet: a set with a size cap and a time to live, whose entries travel between hosts.

The revoked-task ids of a node live in one (maxlen 50 000, expires 3 h, as in Celery's worker
state). Mingle ships the set to a starting node and gossip keeps shipping deltas, so an entry's
stamp is read on a host other than the one that wrote it. That is why stamps are wall-clock
seconds (`time.time()`), not `time.monotonic()`: a monotonic stamp counts from the writer's boot,
and Celery #4300 is what happens when it is compared with another host's clock. A set synced
from a host with a longer uptime never expired on the receiver; once it was full, every newly
revoked id was the "oldest" entry and was evicted the moment it was added, so the revoked tasks
ran. See docs/gossip-structures.md.

Semantics follow Celery's `celery.utils.collections.LimitedSet`; the differences are listed in
the class docstring.
"""

from __future__ import annotations

import heapq
import operator
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from itertools import count, islice
from operator import index
from typing import Any, cast

__all__ = ["LimitedSet"]

# A heap entry: (inserted, sequence number, item). The sequence number breaks ties between equal
# stamps in insertion order, so the heap never compares two items (which may not be comparable).
Entry = tuple[float, int, Hashable]

_INF = float("inf")
_heappush = heapq.heappush
_heappop = heapq.heappop
_ONLY_FLOAT = {float}


class LimitedSet:
    """A set whose members carry the wall-clock time they were added, bounded by `maxlen`
    (the oldest go first) and `expires` (seconds to live); 0 turns either bound off.

    `minlen` is how many entries expiry leaves in place however old they are. The constraint
    `maxlen >= minlen >= 0` is Celery's, so a `minlen` needs a `maxlen`.

    Differences from Celery's class, each on purpose:

    - stamps are `time.time()`, so they mean the same on every host (Celery #4300);
    - `update()` merges: an item already present keeps the newer of its two stamps, so syncing
      is idempotent and commutative and an old sync can never shorten a fresh entry's life;
    - stamps that arrive through `update()` more than `max_future_skew` seconds ahead of local
      time are clamped to now (a peer's clock stepped forward must not pin entries for ever);
      `nan`/`inf` stamps, and anything but floats, are refused with ValueError, and a refused
      mapping changes nothing;
    - `add()` also expires: when the oldest entry has expired it goes, so with `expires` alone
      the set stays bounded without anyone calling `purge()`;
    - `len(s) <= maxlen` after every public call, setting `maxlen` included (Celery #3086), and
      the heap holds at most `max_heap_percent_overload` percent of dead entries;
    - pickling and copying keep every entry exactly (nothing is purged or re-stamped on the way).

    Membership does not check expiry: an expired entry counts as present until something purges
    it. For revoked ids that errs on the safe side; the owner calls `purge()` on a timer.
    Not thread-safe: one actor owns a set.
    """

    #: Rebuild the heap once dead entries (left by re-adds and discards) exceed this percentage
    #: of the live ones. The rebuild is linear, so each dead entry pays for it a constant times.
    max_heap_percent_overload: int = 15

    #: How far ahead of local time a stamp from elsewhere may be before it is clamped to now.
    #: NTP keeps hosts within milliseconds; a minute only forgives a peer that is badly off.
    max_future_skew: float = 60.0

    def __init__(
        self,
        maxlen: int | None = 0,
        expires: float | None = 0,
        data: LimitedSet | Mapping[Hashable, Any] | Iterable[Hashable] | None = None,
        minlen: int | None = 0,
    ) -> None:
        maxlen = _size_arg("maxlen", maxlen)
        minlen = _size_arg("minlen", minlen)
        _check_sizes(maxlen, minlen)
        self._maxlen = maxlen
        self._minlen = minlen
        self._expires = _expires_arg(expires)
        self._data: dict[Hashable, Entry] = {}
        self._heap: list[Entry] = []
        self._seq = count()
        if data:
            self.update(data)

    # -- bounds: properties, so that changing one validates it and takes effect at once ----------

    @property
    def maxlen(self) -> int:
        return self._maxlen

    @maxlen.setter
    def maxlen(self, value: int | None) -> None:
        value = _size_arg("maxlen", value)
        _check_sizes(value, self._minlen)
        self._maxlen = value
        self._trim()

    @property
    def minlen(self) -> int:
        return self._minlen

    @minlen.setter
    def minlen(self, value: int | None) -> None:
        value = _size_arg("minlen", value)
        _check_sizes(self._maxlen, value)
        self._minlen = value

    @property
    def expires(self) -> float:
        return self._expires

    @expires.setter
    def expires(self, value: float | None) -> None:
        # Takes effect at the next add() or purge(): expiring needs the current time.
        self._expires = _expires_arg(value)

    # -- the set ----------------------------------------------------------------------------------

    def add(self, item: Hashable, now: float | None = None) -> None:
        """Add `item` stamped `now` (default: `time.time()`), or re-stamp it if present.

        `now` is taken as the current time: entries that have expired by then go, and then the
        oldest beyond `maxlen`, which can be `item` itself if `now` is older than all the rest.
        """
        now = time.time() if now is None else _finite(now, "now")
        data = self._data
        heap = self._heap
        entry = (now, next(self._seq), item)
        data[item] = entry  # a re-added item's previous heap entry is now dead
        _heappush(heap, entry)  # stamps mostly grow, so this rarely sifts
        # One comparison per add keeps an expiring set bounded even if nobody calls purge().
        expires = self._expires
        if expires and heap[0][0] <= now - expires:
            self._expire(now)
        maxlen = self._maxlen
        if maxlen and len(data) > maxlen:
            # Inline rather than _trim(): evicting one entry per add is the steady state of a
            # full set (the bounds held before this call, so only this entry is over).
            while len(data) > maxlen:
                oldest = _heappop(heap)
                if data.get(oldest[2]) is oldest:
                    del data[oldest[2]]
        if len(heap) > len(data):  # dead entries exist: only then can the heap be overloaded
            self._maybe_compact()

    def discard(self, item: Hashable) -> None:
        """Remove `item` if present. Its heap entry is dropped lazily (or right away if it is
        the oldest), so a discard costs O(1) amortised."""
        entry = self._data.pop(item, None)
        if entry is None:
            return
        heap = self._heap
        if heap[0] is entry:
            _heappop(heap)
        self._maybe_compact()

    def pop(self, default: Any = None) -> Any:
        """Remove and return the oldest item, or `default` when the set is empty."""
        data = self._data
        heap = self._heap
        while heap:
            entry = _heappop(heap)
            item = entry[2]
            if data.get(item) is entry:
                del data[item]
                self._maybe_compact()
                return item
        return default

    def clear(self) -> None:
        """Empty the set; the bounds stay."""
        self._data.clear()
        self._heap.clear()

    def purge(self, now: float | Callable[[], float] | None = None) -> None:
        """Enforce both bounds: drop the oldest entries beyond `maxlen`, then, while more than
        `minlen` remain, those stamped at or before `now - expires`.

        `now` (default: `time.time()`) may be a callable returning the time, as in Celery.
        """
        if now is None:
            now = time.time()
        elif callable(now):
            now = now()
        self._trim()
        if self._expires:
            self._expire(_finite(now, "now"))

    def update(
        self,
        other: LimitedSet | Mapping[Hashable, Any] | Iterable[Hashable],
        now: float | None = None,
    ) -> None:
        """Merge entries from another LimitedSet, from a mapping `{item: stamp}` (a stamp may
        also be a tuple or list whose first element is the stamp, Celery's internal layout), or
        from an iterable of items, which are stamped `now`.

        `now` (default: `time.time()`) is also the time used to clamp stamps from the future and
        to expire. An item present on both sides keeps the newer stamp. A mapping with a bad
        stamp raises ValueError before anything changes.
        """
        if not other:
            return
        now = time.time() if now is None else _finite(now, "now")
        if isinstance(other, LimitedSet):
            # In the other set's order, so that its ties among equal stamps keep their order.
            entries = sorted(other._data.values())
            self._merge([entry[0] for entry in entries], [entry[2] for entry in entries], now)
        elif isinstance(other, Mapping):
            self._merge(_valid_stamps(other), list(other), now)
        elif isinstance(other, (str, bytes, bytearray)):
            # Iterating a string would add its characters: always a mistake, never a sync.
            raise TypeError(
                f"LimitedSet.update() takes a LimitedSet, a mapping or an iterable of items, "
                f"not {type(other).__name__}"
            )
        else:
            items = list(dict.fromkeys(other))  # once each, in order
            self._merge([now] * len(items), items, now)

    # -- the wire ---------------------------------------------------------------------------------

    def to_wire(self, limit: int | None = None) -> dict[str, float]:
        """The set as the JSON object `{item: stamp}` that mingle and gossip send; with `limit`,
        only the `limit` newest entries (the ones a capped receiver would keep anyway).

        Items must be str: JSON would turn any other key into a string and the receiver would
        hold a different item. Expired entries are included; call `purge()` first to leave them
        out. The dict's order carries no meaning: every entry carries its stamp.
        """
        values: Iterable[Entry] = self._data.values()
        if limit is not None:
            limit = _size_arg("limit", limit)
            if limit < len(self._data):
                values = heapq.nlargest(limit, values)
        return _wire_dict(values)

    @classmethod
    def from_wire(
        cls,
        payload: object,
        maxlen: int | None = 0,
        expires: float | None = 0,
        minlen: int | None = 0,
        now: float | None = None,
    ) -> LimitedSet:
        """A new set from a payload received from a peer (see `update_from_wire`)."""
        limited = cls(maxlen=maxlen, expires=expires, minlen=minlen)
        limited.update_from_wire(payload, now=now)
        return limited

    def update_from_wire(self, payload: object, now: float | None = None) -> None:
        """Merge a payload received from a peer: exactly a dict of str items to float stamps.

        Stricter than `update()`: a peer's list or string is refused rather than taken as items,
        and so is a non-str key. Anything wrong raises ValueError and changes nothing.
        """
        if not isinstance(payload, dict):
            raise ValueError(
                f"a LimitedSet on the wire is an object {{item: timestamp}}, "
                f"got {type(payload).__name__}"
            )
        for item, stamp in payload.items():
            if not isinstance(item, str):
                raise ValueError(f"LimitedSet items on the wire are strings, got {item!r}")
            if not isinstance(stamp, float):
                # Celery's internal (stamp, item) pairs are accepted by update(), not here.
                raise ValueError(
                    f"Expecting float timestamp for {item!r}, got type "
                    f"{type(stamp).__name__} with value: {stamp!r}"
                )
        self.update(payload, now=now)

    def chunks(self, size: int, limit: int | None = None) -> Iterator[dict[str, float]]:
        """The set (or its `limit` newest entries) as wire dicts of at most `size` entries each,
        NEWEST FIRST.

        Newest first because a sync may be cut short (a receiver's cap, a lost peer, a timeout):
        what arrives first should be what matters most, and recent revokes are the ones whose
        tasks may still be queued. Order within and across chunks changes nothing for the
        receiver, since every entry carries its own stamp. The entries are taken when this is
        called (and checked to be str), so changing the set while sending is safe.
        """
        size = _size_arg("size", size)
        if size < 1:
            raise ValueError(f"chunk size must be at least 1, got {size}")
        if limit is not None and _size_arg("limit", limit) < len(self._data):
            entries = heapq.nlargest(limit, self._data.values())
        else:
            entries = sorted(self._data.values(), reverse=True)
        _check_wire_items(entries)
        return (
            {cast(str, item): stamp for stamp, _, item in entries[i : i + size]}
            for i in range(0, len(entries), size)
        )

    def since(self, timestamp: float) -> dict[str, float]:
        """The wire dict of entries stamped at or after `timestamp`: a delta for a peer that
        already holds everything older.

        Inclusive on purpose: a peer that asks from the newest stamp it holds gets that entry
        again, which merging ignores, whereas `>` could skip an entry written in the same tick.
        """
        return _wire_dict(entry for entry in self._data.values() if entry[0] >= timestamp)

    def as_dict(self) -> dict[Hashable, float]:
        """`{item: stamp}` for every entry (items of any type; see `to_wire` for sending)."""
        return {item: stamp for stamp, _, item in self._data.values()}

    # -- dunder -----------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, item: object) -> bool:
        return item in self._data

    def __iter__(self) -> Iterator[Hashable]:
        """Oldest first (equal stamps in insertion order), over a snapshot."""
        return iter([entry[2] for entry in sorted(self._data.values())])

    def __eq__(self, other: object) -> bool:
        # Contents only (items and stamps), as in Celery: the bounds are configuration.
        if not isinstance(other, LimitedSet):
            return NotImplemented
        return len(self) == len(other) and self.as_dict() == other.as_dict()

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__}({len(self)}): maxlen={self._maxlen}, "
            f"expires={self._expires}, minlen={self._minlen}>"
        )

    def __getstate__(self) -> dict[str, Any]:
        # Plain values only (the heap's sequence numbers and the counter are rebuilt), oldest
        # first so that ties keep their order.
        return {
            "maxlen": self._maxlen,
            "expires": self._expires,
            "minlen": self._minlen,
            "entries": [(item, stamp) for stamp, _, item in sorted(self._data.values())],
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Not through update(): a copy must hold exactly what the original held, not a set
        # purged or clamped against the time at which it happens to be unpickled.
        self._maxlen = state["maxlen"]
        self._expires = state["expires"]
        self._minlen = state["minlen"]
        self._seq = count()
        seq = self._seq
        self._heap = [(stamp, next(seq), item) for item, stamp in state["entries"]]
        self._data = {entry[2]: entry for entry in self._heap}
        # Already sorted, hence already a heap.

    # -- internals --------------------------------------------------------------------------------

    def _merge(self, stamps: list[float], items: list[Hashable], now: float) -> None:
        """Merge validated stamps (one per item, items distinct), keeping the newer stamp of an
        item on both sides, then enforce the bounds.

        Bulk work is done by C loops (zip, dict, sort) where it can be: a mingle reply of 50 000
        entries is merged in one go instead of 50 000 add() calls.
        """
        if not items:
            return
        limit = now + self.max_future_skew
        if max(stamps) > limit:
            stamps = [now if stamp > limit else stamp for stamp in stamps]
        # zip stops at the end of stamps before drawing from the endless sequence counter.
        entries = list(zip(stamps, self._seq, items, strict=False))
        data = self._data
        heap = self._heap
        if not data:
            # The common case of a starting node: nothing to merge with.
            in_order = False
            maxlen = self._maxlen
            if maxlen and len(entries) > maxlen:
                # Only the newest maxlen can survive the cap: don't index the others at all.
                # (Exact only because the set is empty. Below, an item kept with our own older
                # sequence number on a tie can change which entry is the cut's last.)
                entries.sort()
                del entries[:-maxlen]
                items = [entry[2] for entry in entries]
                in_order = True
            data.update(zip(items, entries, strict=True))
            heap[:] = entries
            # A sorted list is a heap; a wire dict usually comes in time order (ours is).
            if not (in_order or all(map(operator.le, stamps, islice(stamps, 1, None)))):
                heapq.heapify(heap)
        else:
            fresh: list[Entry] = []
            append = fresh.append
            get = data.get
            for entry in entries:
                old = get(entry[2])
                if old is not None and old[0] >= entry[0]:
                    continue  # ours is newer (or the same): keep it
                data[entry[2]] = entry
                append(entry)
            # Pushing m entries costs O(m log n), rebuilding O(n + m): rebuild for big batches,
            # and from the live entries only, which also drops the dead ones.
            if len(fresh) * 8 > len(heap):
                heap[:] = data.values()
                heapq.heapify(heap)
            else:
                for entry in fresh:
                    _heappush(heap, entry)
                self._maybe_compact()
        self._trim()
        if self._expires:
            self._expire(now)

    def _trim(self) -> None:
        """Drop the oldest entries beyond maxlen."""
        maxlen = self._maxlen
        data = self._data
        excess = len(data) - maxlen
        if not maxlen or excess <= 0:
            return
        if excess * 4 > len(data):
            # Many to drop (a big merge into a full set): one sort beats a heappop each. The
            # dict is mostly in time order already, which timsort makes short work of.
            self._rebuild(sorted(data.values())[excess:], ordered=True)
            return
        heap = self._heap
        while excess:
            entry = _heappop(heap)
            item = entry[2]
            if data.get(item) is entry:
                del data[item]
                excess -= 1
        self._maybe_compact()

    def _expire(self, now: float) -> None:
        """Drop entries stamped at or before `now - expires`, oldest first, down to minlen."""
        cutoff = now - self._expires
        minlen = self._minlen
        data = self._data
        heap = self._heap
        # A periodic purge usually finds a few entries to drop, and popping them is cheapest.
        # Past a sixteenth of the set, one linear filter costs less than the remaining pops
        # (each is a sift through the heap), so a backlog is cleared in one go.
        budget = (len(data) >> 4) + 1
        while heap and len(data) > minlen:
            entry = heap[0]
            if entry[0] > cutoff:
                break  # the oldest is still alive, so is every other
            if not budget:
                self._expire_in_bulk(cutoff)
                return
            _heappop(heap)
            item = entry[2]
            if data.get(item) is entry:
                del data[item]
                budget -= 1
        self._maybe_compact()

    def _expire_in_bulk(self, cutoff: float) -> None:
        values = list(self._data.values())
        keep = [entry for entry in values if entry[0] > cutoff]
        if len(keep) < self._minlen:
            # Expiry stops at minlen: the newest minlen stay, expired or not.
            self._rebuild(sorted(values)[-self._minlen :], ordered=True)
        else:
            self._rebuild(keep, ordered=False)

    def _rebuild(self, keep: list[Entry], ordered: bool) -> None:
        """Make `keep` the whole content. In place: callers may hold either in a local."""
        data = self._data
        data.clear()
        data.update(zip([entry[2] for entry in keep], keep, strict=True))
        heap = self._heap
        heap[:] = keep
        if not ordered:
            heapq.heapify(heap)  # a sorted list is a heap already

    def _maybe_compact(self) -> None:
        if len(self._heap) * 100 > len(self._data) * (100 + self.max_heap_percent_overload):
            self._compact()

    def _compact(self) -> None:
        # In place: callers may hold the list in a local.
        heap = self._heap
        heap[:] = self._data.values()
        heapq.heapify(heap)


def _valid_stamps(mapping: Mapping[Hashable, Any]) -> list[float]:
    """The stamps of `{item: stamp}`, in the mapping's order, all checked before anything is
    merged, so that a bad mapping changes nothing."""
    stamps = list(mapping.values())
    # The fast path, all in C: exact floats whose sum is finite (a nan or an infinity makes it
    # nan or infinite; a false alarm from overflow only sends us down the careful path).
    if set(map(type, stamps)) == _ONLY_FLOAT and -_INF < sum(stamps) < _INF:
        return stamps
    checked: list[float] = []
    append = checked.append
    for item, value in mapping.items():
        stamp = value
        if isinstance(value, (tuple, list)) and value:
            stamp = value[0]  # Celery's internal (stamp, ...) layout
        if not isinstance(stamp, float):
            raise ValueError(
                f"Expecting float timestamp for {item!r}, got type "
                f"{type(stamp).__name__} with value: {stamp!r}"
            )
        # A nan would corrupt the heap's order; an infinity would never expire, or always.
        if not -_INF < stamp < _INF:
            raise ValueError(f"Expecting a finite timestamp for {item!r}, got {stamp!r}")
        append(float(stamp))
    return checked


def _wire_dict(entries: Iterable[Entry]) -> dict[str, float]:
    out: dict[str, float] = {}
    for stamp, _, item in entries:
        if not isinstance(item, str):
            raise TypeError(f"only str items can be sent as JSON, got {item!r}")
        out[item] = stamp
    return out


def _check_wire_items(entries: Iterable[Entry]) -> None:
    for _, _, item in entries:
        if not isinstance(item, str):
            raise TypeError(f"only str items can be sent as JSON, got {item!r}")


def _size_arg(name: str, value: int | None) -> int:
    if value is None:
        return 0  # Celery accepts None for "off"
    value = index(value)  # refuses floats and strings with TypeError
    if value < 0:
        raise ValueError(f"{name} must be >= 0 (0 = off), got {value}")
    return value


def _check_sizes(maxlen: int, minlen: int) -> None:
    if not maxlen >= minlen >= 0:
        raise ValueError(
            f"need maxlen >= minlen >= 0 (0 = off), got maxlen={maxlen}, minlen={minlen}"
        )


def _expires_arg(value: float | None) -> float:
    if value is None:
        return 0
    if not value >= 0:  # also refuses nan
        raise ValueError(f"expires must be >= 0 seconds (0 = never), got {value!r}")
    return value


def _finite(value: float, name: str) -> float:
    value = float(value)
    if not -_INF < value < _INF:
        raise ValueError(f"{name} must be a finite number of seconds, got {value!r}")
    return value
