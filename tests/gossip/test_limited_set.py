"""LimitedSet: Celery's test_LimitedSet cases in our words, then what we do differently: wall-clock
stamps (Celery #4300), stamps from the future, merging, the wire helpers, the memory bound
(Celery #3086), and a model-based hypothesis test of every operation."""

from __future__ import annotations

import copy
import json
import pickle
import time
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from monitors.gossip.limited_set import LimitedSet

HOUR = 3600.0
T0 = 1_700_000_000.0  # a wall-clock time; tests pass `now` so nothing depends on the real clock


def heap_bound_holds(s: LimitedSet) -> bool:
    """The memory bound: dead heap entries are at most max_heap_percent_overload % of live."""
    return len(s._heap) * 100 <= len(s) * (100 + s.max_heap_percent_overload)


def stamps(s: LimitedSet) -> list[float]:
    d = s.as_dict()
    return [d[item] for item in s]


# -- Celery's cases ----------------------------------------------------------------------------------


def test_add_evicts_the_oldest_at_maxlen() -> None:
    s = LimitedSet(maxlen=2)
    s.add("foo", now=T0)
    s.add("bar", now=T0 + 1)
    assert "foo" in s
    assert "bar" in s
    s.add("baz", now=T0 + 2)
    assert "foo" not in s
    assert "bar" in s
    assert "baz" in s

    s = LimitedSet(maxlen=10)
    for i in range(150):
        s.add(i)
    assert len(s) == 10
    assert list(s) == list(range(140, 150))
    assert heap_bound_holds(s)


def test_purge_enforces_both_bounds() -> None:
    s = LimitedSet(maxlen=10)
    for i in range(10):
        s.add(i)
    s.maxlen = 2  # takes effect at once (Celery waits for the next purge)
    assert len(s) == 2
    s.purge()
    assert list(s) == [8, 9]

    # all expired
    s = LimitedSet(maxlen=10, expires=1)
    for i in range(10):
        s.add(i, now=T0)
    s.purge(now=T0 + 100)
    assert len(s) == 0

    # none expired, and `now` may be a callable
    s = LimitedSet(maxlen=None, expires=1)
    for i in range(10):
        s.add(i, now=T0)
    s.purge(now=lambda: T0 - 100)
    assert len(s) == 10
    s.maxlen = 2
    assert len(s) == 2

    # expired entries go only down to minlen, oldest first
    s = LimitedSet(maxlen=10, minlen=10, expires=1)
    for i in range(20):
        s.add(i, now=T0 + i / 100)
    s.minlen = 3
    s.purge(now=T0 + 3)
    assert len(s) == 3
    assert list(s) == [17, 18, 19]
    assert heap_bound_holds(s)


def test_pickleable() -> None:
    s = LimitedSet(maxlen=2)
    s.add("foo")
    s.add("bar")
    copied = pickle.loads(pickle.dumps(s))
    assert copied == s
    assert list(copied) == list(s)
    assert (copied.maxlen, copied.expires, copied.minlen) == (2, 0, 0)


def test_iter_is_oldest_first() -> None:
    s = LimitedSet(maxlen=3)
    items = ["foo", "bar", "baz", "xaz"]
    for item in items:
        s.add(item)  # default stamps: equal ones keep insertion order
    assert list(s) == items[1:]


def test_repr() -> None:
    s = LimitedSet(maxlen=2, expires=5.0, minlen=1)
    s.add("foo")
    s.add("bar")
    assert repr(s) == "<LimitedSet(2): maxlen=2, expires=5.0, minlen=1>"


def test_discard() -> None:
    s = LimitedSet(maxlen=2)
    s.add("foo")
    s.discard("foo")
    assert "foo" not in s
    assert len(s) == 0
    assert s._heap == []
    s.discard("foo")  # absent: no error


def test_clear() -> None:
    s = LimitedSet(maxlen=2)
    s.add("foo")
    s.add("bar")
    assert len(s) == 2
    s.clear()
    assert not s
    assert s.maxlen == 2
    s.add("baz")
    assert list(s) == ["baz"]


def test_update_from_sets_dicts_and_iterables() -> None:
    s1 = LimitedSet(maxlen=2)
    s1.add("foo", now=T0)
    s1.add("bar", now=T0 + 1)
    s2 = LimitedSet(maxlen=2)
    s2.update(s1, now=T0 + 2)
    assert list(s2) == ["foo", "bar"]
    s2.update(["bla"], now=T0 + 3)
    assert list(s2) == ["bar", "bla"]
    s2.update(["do", "re"], now=T0 + 4)
    assert sorted(s2) == ["do", "re"]

    a, b = LimitedSet(maxlen=10), LimitedSet(maxlen=10)
    for i in range(12):
        a.add(i, now=T0 + i)
        b.add(i * i, now=T0 + i + 0.5)
    via_sets, via_dicts, via_internal = (LimitedSet(maxlen=10) for _ in range(3))
    now = T0 + 20
    via_sets.update(a, now=now)
    via_sets.update(b, now=now)
    via_dicts.update(a.as_dict(), now=now)
    via_dicts.update(b.as_dict(), now=now)
    via_internal.update(a._data, now=now)  # Celery's revoke code ships `_data` as is
    via_internal.update(b._data, now=now)
    assert via_sets == via_dicts == via_internal
    assert len(via_sets) == 10
    b.update(via_dicts, now=now)
    via_dicts.update(b, now=now)
    assert b == via_dicts


def test_iterable_and_ordering() -> None:
    s = LimitedSet(maxlen=35, expires=None)
    for stamp, i in enumerate(reversed(range(15)), start=1):
        s.add(i, now=float(stamp))
    assert list(s) == list(reversed(range(15)))


def test_pop_and_ordering_again() -> None:
    s = LimitedSet(maxlen=5)
    for i in range(10):
        s.add(i)
    assert [s.pop() for _ in range(5)] == [5, 6, 7, 8, 9]
    assert s.pop() is None
    assert s.pop(default="empty") == "empty"


def test_as_dict() -> None:
    s = LimitedSet(maxlen=2)
    s.add("foo", now=T0)
    assert isinstance(s.as_dict(), Mapping)
    assert s.as_dict() == {"foo": T0}


def test_re_adding_keeps_a_small_heap_exact() -> None:
    s = LimitedSet(maxlen=2)
    for _ in range(3):
        s.add("foo")
    assert len(s) == 1
    assert len(s._heap) == 1


def test_re_adding_keeps_a_big_heap_bounded() -> None:
    s = LimitedSet(maxlen=1000)
    for i in range(2000):
        s.add(i)
    assert len(s) == 1000
    for _ in range(1000):
        s.add("foo")
    assert len(s._heap) <= 1150
    for _ in range(1000):
        s.add("foo")
    assert len(s._heap) <= 1150


# -- arguments -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"maxlen": 1, "minlen": 2},
        {"maxlen": -1},
        {"minlen": -1},
        {"minlen": 1},  # Celery's rule: a minlen needs a maxlen at least as big
        {"expires": -1},
        {"expires": float("nan")},
    ],
)
def test_bad_bounds_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        LimitedSet(**kwargs)


def test_none_means_off_and_floats_are_not_sizes() -> None:
    s = LimitedSet(maxlen=None, expires=None, minlen=None)
    assert (s.maxlen, s.expires, s.minlen) == (0, 0, 0)
    with pytest.raises(TypeError):
        LimitedSet(maxlen=2.5)  # type: ignore[arg-type]


def test_setters_validate_and_keep_the_old_value_on_error() -> None:
    s = LimitedSet(maxlen=5, minlen=2)
    with pytest.raises(ValueError):
        s.maxlen = 1
    with pytest.raises(ValueError):
        s.minlen = 6
    with pytest.raises(ValueError):
        s.expires = -3
    assert (s.maxlen, s.minlen, s.expires) == (5, 2, 0)


def test_data_argument_fills_the_set() -> None:
    now = time.time()
    s = LimitedSet(maxlen=3, data={"a": now - 3, "b": now - 2, "c": now - 1, "d": now})
    assert list(s) == ["b", "c", "d"]
    assert list(LimitedSet(data=["x", "y"])) == ["x", "y"]


# -- updates: validation and merging ------------------------------------------------------------


@pytest.mark.parametrize("bad", [1, "1700000000.0", None, True, (), [object()]])
def test_update_refuses_non_float_stamps_and_changes_nothing(bad: object) -> None:
    s = LimitedSet(maxlen=10)
    s.add("kept", now=T0)
    with pytest.raises(ValueError, match="Expecting float timestamp"):
        s.update({"fine": T0 + 1, "bad": bad}, now=T0 + 2)
    assert s.as_dict() == {"kept": T0}


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_update_refuses_non_finite_stamps(bad: float) -> None:
    s = LimitedSet(maxlen=10)
    with pytest.raises(ValueError, match="finite"):
        s.update({"fine": T0, "bad": bad}, now=T0)
    with pytest.raises(ValueError, match="finite"):
        s.update({"bad": (bad, "bad")}, now=T0)
    assert len(s) == 0


def test_add_refuses_a_non_finite_now() -> None:
    s = LimitedSet()
    with pytest.raises(ValueError):
        s.add("x", now=float("nan"))
    assert len(s) == 0


def test_update_accepts_celerys_internal_tuples() -> None:
    s = LimitedSet()
    s.update({"a": (T0, 0, "a"), "b": [T0 + 1, 1, "b"]}, now=T0 + 2)
    assert s.as_dict() == {"a": T0, "b": T0 + 1}


def test_update_refuses_a_string() -> None:
    s = LimitedSet()
    with pytest.raises(TypeError, match="not str"):
        s.update("task-id")
    assert len(s) == 0


def test_update_keeps_the_newer_stamp_of_an_item_on_both_sides() -> None:
    s = LimitedSet(maxlen=10)
    s.add("fresh", now=T0 + 100)
    s.add("stale", now=T0)
    s.update({"fresh": T0 + 50, "stale": T0 + 60}, now=T0 + 200)
    assert s.as_dict() == {"fresh": T0 + 100, "stale": T0 + 60}
    assert list(s) == ["stale", "fresh"]
    # merging is idempotent and commutative
    a = LimitedSet(maxlen=10, data={"x": T0 + 1, "y": T0 + 5})
    b = LimitedSet(maxlen=10, data={"x": T0 + 3, "z": T0 + 2})
    ab, ba = copy.copy(a), copy.copy(b)
    ab.update(b, now=T0 + 10)
    ba.update(a, now=T0 + 10)
    assert ab == ba
    ab.update(b, now=T0 + 10)
    assert ab == ba


def test_update_of_a_generator_that_yields_nothing_is_a_no_op() -> None:
    s = LimitedSet(maxlen=3)
    s.update(item for item in ())
    assert len(s) == 0


def test_a_huge_update_into_an_empty_set_keeps_the_newest() -> None:
    payload = {f"id-{i}": T0 + (i * 7919 % 1000) for i in range(1000)}  # not in time order
    s = LimitedSet(maxlen=100)
    s.update(payload, now=T0 + 1000)
    newest = sorted(payload, key=payload.__getitem__)[-100:]
    assert sorted(s) == sorted(newest)
    assert stamps(s) == sorted(stamps(s))
    assert heap_bound_holds(s)


def test_a_huge_update_into_a_full_set_keeps_the_newest_of_both() -> None:
    s = LimitedSet(maxlen=100)
    local = {f"local-{i}": T0 + 10 * i for i in range(100)}  # 0, 10, ..., 990
    for item, stamp in local.items():
        s.add(item, now=stamp)
    remote = {f"remote-{i}": T0 + 2 * i + 1 for i in range(500)}  # 1, 3, ..., 999
    s.update(remote, now=T0 + 1000)
    newest = sorted({**local, **remote}.items(), key=lambda pair: pair[1])[-100:]
    assert s.as_dict() == dict(newest)
    assert any(item.startswith("local") for item in s)
    assert any(item.startswith("remote") for item in s)


# -- wall-clock stamps: Celery #4300 -------------------------------------------------------------


class Host:
    """A host's two clocks. Its wall clock agrees with the other hosts' (NTP); its monotonic
    clock counts from its own boot, so it differs by the uptime."""

    def __init__(self, uptime: float) -> None:
        self.wall = T0
        self.uptime = uptime

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.uptime += seconds

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(time, "time", lambda: self.wall)
        monkeypatch.setattr(time, "monotonic", lambda: self.uptime)


def test_issue_4300_synced_entries_expire_and_new_revokes_stay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    maxlen, expires = 100, 3 * HOUR
    # The peer has been up for 15 days and revoked a task a minute for 100 minutes.
    peer = Host(uptime=15 * 24 * HOUR)
    peer.install(monkeypatch)
    revoked_there = LimitedSet(maxlen=maxlen, expires=expires)
    for i in range(maxlen):
        revoked_there.add(f"old-{i}")  # default stamps: whatever clock the class reads
        peer.advance(60)
    wire = json.loads(json.dumps(revoked_there.to_wire()))  # mingle's reply, as JSON

    # This node booted an hour ago; its wall clock agrees with the peer's.
    here = Host(uptime=HOUR)
    here.wall = peer.wall
    here.install(monkeypatch)
    revoked = LimitedSet(maxlen=maxlen, expires=expires)
    revoked.update(wire)
    assert len(revoked) == maxlen  # full of the peer's ids, none expired yet
    revoked.add("new")
    # With monotonic stamps the peer's ids would be 14 days "newer" than ours: the new id would
    # be the oldest entry and the cap would evict it at once, and the task would run.
    assert "new" in revoked
    assert "old-0" not in revoked  # the oldest went instead
    assert len(revoked) == maxlen

    # 3 h after the peer's 51st revoke, it and every older one have expired here too.
    here.wall = T0 + 50 * 60 + expires
    revoked.purge()
    assert "old-50" not in revoked
    assert "old-51" in revoked
    assert "new" in revoked
    # And 3 h after the last peer revoke only ours is left (with monotonic stamps, none of the
    # peer's ids would ever expire here).
    here.wall = T0 + (maxlen - 1) * 60 + expires
    revoked.purge()
    assert list(revoked) == ["new"]


def test_a_full_set_drops_expired_entries_before_live_ones() -> None:
    s = LimitedSet(maxlen=5, expires=100)
    s.update({"a": T0, "b": T0 + 10, "c": T0 + 20, "d": T0 + 30, "e": T0 + 40}, now=T0 + 40)
    assert len(s) == 5
    s.add("new", now=T0 + 125)  # a, b and c (stamped at or before T0 + 25) have expired
    assert list(s) == ["d", "e", "new"]


def test_stamps_from_far_in_the_future_are_clamped_to_now() -> None:
    # A peer whose clock is days ahead (or whose stamps are monotonic readings of a host whose
    # uptime beats our epoch) must not pin its entries here or get our new ids evicted: the
    # same failure as #4300, from the other direction.
    now = T0
    s = LimitedSet(maxlen=3, expires=HOUR)
    skew = s.max_future_skew
    s.update({"far": now + 10 * 24 * HOUR, "near": now + skew / 2}, now=now)
    assert s.as_dict() == {"far": now, "near": now + skew / 2}  # within the skew: kept as is
    s.add("mine", now=now + 1)
    s.add("mine2", now=now + 2)
    assert "mine" in s
    assert "mine2" in s
    assert "far" not in s  # it was the oldest
    s.purge(now=now + skew / 2 + HOUR)
    assert len(s) == 0


# -- the wire ------------------------------------------------------------------------------------


def filled(n: int, maxlen: int = 0) -> LimitedSet:
    s = LimitedSet(maxlen=maxlen, expires=HOUR)
    for i in range(n):
        s.add(f"id-{i}", now=T0 + i)
    return s


def test_to_wire_and_from_wire_round_trip_through_json() -> None:
    s = filled(50, maxlen=100)
    text = json.dumps(s.to_wire())
    back = LimitedSet.from_wire(json.loads(text), maxlen=100, expires=HOUR, now=T0 + 60)
    assert back == s
    assert list(back) == list(s)
    assert (back.maxlen, back.expires) == (100, HOUR)


def test_to_wire_limit_keeps_the_newest() -> None:
    s = filled(50)
    assert s.to_wire(limit=3) == {"id-47": T0 + 47, "id-48": T0 + 48, "id-49": T0 + 49}
    assert s.to_wire(limit=0) == {}
    assert s.to_wire(limit=500) == s.as_dict()


def test_only_str_items_go_on_the_wire() -> None:
    s = LimitedSet()
    s.add(42, now=T0)
    for send in (s.to_wire, lambda: list(s.chunks(10)), lambda: s.since(0.0)):
        with pytest.raises(TypeError, match="str"):
            send()


@pytest.mark.parametrize(
    "payload",
    [["id-1", "id-2"], "id-1", None, {"id-1": 1}, {"id-1": "T0"}, {1: T0}, {"id-1": [T0]}],
)
def test_update_from_wire_refuses_anything_but_str_to_float(payload: object) -> None:
    s = filled(2)
    before = s.as_dict()
    with pytest.raises(ValueError):
        s.update_from_wire(payload, now=T0 + 10)
    assert s.as_dict() == before


def test_chunks_are_newest_first_and_cover_the_set() -> None:
    s = filled(10)
    chunks = list(s.chunks(4))
    assert [list(c) for c in chunks] == [
        ["id-9", "id-8", "id-7", "id-6"],
        ["id-5", "id-4", "id-3", "id-2"],
        ["id-1", "id-0"],
    ]
    merged: dict[str, float] = {}
    for chunk in chunks:
        merged.update(chunk)
    assert merged == s.to_wire()
    assert [list(c) for c in s.chunks(4, limit=5)] == [["id-9", "id-8", "id-7", "id-6"], ["id-5"]]
    assert list(LimitedSet().chunks(4)) == []
    with pytest.raises(ValueError):
        s.chunks(0)


def test_chunks_are_a_snapshot() -> None:
    s = filled(10)
    chunks = s.chunks(3)
    first = next(chunks)
    s.clear()
    s.add("later", now=T0 + 99)
    rest = list(chunks)
    assert sum(len(c) for c in [first, *rest]) == 10
    assert all("later" not in c for c in rest)


def test_chunked_sync_rebuilds_the_set_on_the_receiver() -> None:
    s = filled(25, maxlen=25)
    receiver = LimitedSet(maxlen=25, expires=HOUR)
    for chunk in s.chunks(7):
        receiver.update_from_wire(json.loads(json.dumps(chunk)), now=T0 + 30)
    assert receiver == s
    assert list(receiver) == list(s)


def test_since_is_inclusive() -> None:
    s = filled(5)
    assert s.since(T0 + 3) == {"id-3": T0 + 3, "id-4": T0 + 4}
    assert s.since(T0 + 4.5) == {}
    assert s.since(0.0) == s.to_wire()


# -- copies, equality ------------------------------------------------------------------------------


def test_copies_keep_expired_entries_and_tie_order() -> None:
    s = LimitedSet(maxlen=5, expires=1)
    for item in "cab":
        s.add(item, now=T0)  # long expired by the real clock, and all tied
    for twin in (pickle.loads(pickle.dumps(s)), copy.copy(s), copy.deepcopy(s)):
        assert list(twin) == ["c", "a", "b"]
        assert twin.as_dict() == s.as_dict()
        twin.add("d", now=T0)
        assert "d" not in s  # independent
        assert list(twin) == ["c", "a", "b", "d"]


def test_equality_is_about_contents() -> None:
    a = LimitedSet(maxlen=5, data={"x": T0})
    b = LimitedSet(maxlen=50, minlen=3, data={"x": T0})
    assert a == b
    b.add("y", now=T0)
    assert a != b
    assert a != {"x": T0}
    with pytest.raises(TypeError):
        hash(a)


def test_a_backlog_of_expired_entries_goes_in_one_purge() -> None:
    s = filled(1000, maxlen=1000)  # stamped T0 + i, expiring an hour later
    s.purge(now=T0 + HOUR + 500.5)
    assert list(s) == [f"id-{i}" for i in range(501, 1000)]
    assert heap_bound_holds(s)
    s.minlen = 100
    s.purge(now=T0 + 10 * HOUR)  # all expired: the newest minlen stay
    assert list(s) == [f"id-{i}" for i in range(900, 1000)]
    s.add("next", now=T0 + 10 * HOUR)  # one more than minlen: the oldest expired one goes
    assert list(s) == [*(f"id-{i}" for i in range(901, 1000)), "next"]
    assert s.pop() == "id-901"


# -- memory: Celery #3086 ---------------------------------------------------------------------------


def test_expires_alone_keeps_the_set_bounded_without_purge() -> None:
    s = LimitedSet(expires=10)
    for i in range(10_000):
        s.add(i, now=T0 + i)
    assert len(s) <= 11
    assert heap_bound_holds(s)


def test_discard_and_re_add_churn_keeps_the_heap_bounded() -> None:
    s = LimitedSet(maxlen=1000)
    for i in range(1000):
        s.add(i, now=T0 + i)
    for round_ in range(20):
        for i in range(0, 1000, 3):
            s.discard(i)
            assert heap_bound_holds(s)
        for i in range(0, 1000, 3):
            s.add(i, now=T0 + 1000 * (round_ + 1) + i)
        for i in range(1, 1000, 3):
            s.add(i, now=T0 + 1000 * (round_ + 1) + i)  # re-add
            assert heap_bound_holds(s)
    assert len(s) == 1000


def test_len_never_exceeds_maxlen_whatever_the_source() -> None:
    s = LimitedSet(maxlen=50)
    big = filled(200)
    s.update(big, now=T0 + 300)
    assert len(s) == 50
    s.update({f"x-{i}": T0 + 250 + i / 10 for i in range(300)}, now=T0 + 300)
    assert len(s) == 50
    s.update([f"y-{i}" for i in range(300)], now=T0 + 300)
    assert len(s) == 50
    assert list(s) == [f"y-{i}" for i in range(250, 300)]


# -- a model of every operation --------------------------------------------------------------------


class Model:
    """The specification, as slowly and plainly as possible: a dict of item -> (stamp, order)."""

    def __init__(self, maxlen: int, expires: float, minlen: int, skew: float) -> None:
        self.maxlen, self.expires, self.minlen, self.skew = maxlen, expires, minlen, skew
        self.entries: dict[object, tuple[float, int]] = {}
        self.counter = 0

    def _put(self, item: object, stamp: float) -> None:
        self.counter += 1
        self.entries[item] = (stamp, self.counter)

    def ordered(self) -> list[object]:
        return sorted(self.entries, key=self.entries.__getitem__)

    def _bound(self, now: float | None) -> None:
        while self.entries:
            oldest = self.ordered()[0]
            over = self.maxlen and len(self.entries) > self.maxlen
            expired = (
                now is not None
                and self.expires
                and len(self.entries) > self.minlen
                and self.entries[oldest][0] <= now - self.expires
            )
            if not (over or expired):
                return
            del self.entries[oldest]

    def add(self, item: object, now: float) -> None:
        self._put(item, now)
        self._bound(now)

    def merge(self, pairs: list[tuple[object, float]], now: float) -> None:
        if not pairs:
            return  # an empty update does nothing, not even expire (as in Celery)
        for item, sent in pairs:
            stamp = now if sent > now + self.skew else sent
            if item in self.entries and self.entries[item][0] >= stamp:
                continue
            self._put(item, stamp)
        self._bound(now)

    def pop(self) -> object:
        if not self.entries:
            return None
        oldest = self.ordered()[0]
        del self.entries[oldest]
        return oldest


ITEMS = st.integers(0, 40)
# Whole seconds, so that equal stamps (ties) are common.
OFFSETS = st.integers(0, 200).map(float)


class LimitedSetMachine(RuleBasedStateMachine):
    @initialize(
        maxlen=st.integers(0, 30),
        expires=st.sampled_from([0.0, 5.0, 50.0]),
        data=st.data(),
    )
    def setup(self, maxlen: int, expires: float, data: st.DataObject) -> None:
        minlen = data.draw(st.integers(0, maxlen))
        self.s = LimitedSet(maxlen=maxlen, expires=expires, minlen=minlen)
        self.m = Model(maxlen, expires, minlen, self.s.max_future_skew)
        self.now = T0

    def tick(self, dt: float) -> float:
        self.now += dt
        return self.now

    @rule(item=ITEMS, dt=st.integers(0, 5).map(float))
    def add(self, item: int, dt: float) -> None:
        now = self.tick(dt)
        self.s.add(item, now=now)
        self.m.add(item, now)

    @rule(item=ITEMS, back=st.integers(0, 100).map(float))
    def add_in_the_past(self, item: int, back: float) -> None:
        # add() takes `now` at its word, even if it is earlier than stamps already held.
        self.s.add(item, now=self.now - back)
        self.m.add(item, self.now - back)

    @rule(item=ITEMS)
    def discard(self, item: int) -> None:
        self.s.discard(item)
        self.m.entries.pop(item, None)

    @rule()
    def pop(self) -> None:
        assert self.s.pop() == self.m.pop()

    @rule(pairs=st.dictionaries(ITEMS, st.integers(-150, 150).map(float), max_size=60))
    def update_dict(self, pairs: dict[int, float]) -> None:
        # Stamps around now, some beyond the skew allowed (clamped), some long expired.
        payload = {item: self.now + off for item, off in pairs.items()}
        self.s.update(payload, now=self.now)
        self.m.merge(list(payload.items()), self.now)

    @rule(items=st.lists(ITEMS, max_size=60), dt=st.integers(0, 5).map(float))
    def update_items(self, items: list[int], dt: float) -> None:
        now = self.tick(dt)
        self.s.update(items, now=now)
        self.m.merge([(item, now) for item in dict.fromkeys(items)], now)

    @rule(pairs=st.dictionaries(ITEMS, OFFSETS, max_size=60))
    def update_from_other_set(self, pairs: dict[int, float]) -> None:
        other = LimitedSet()
        for item, off in pairs.items():
            other.add(item, now=self.now - off)
        self.s.update(other, now=self.now)
        self.m.merge([(item, other.as_dict()[item]) for item in other], self.now)

    @rule(dt=st.integers(0, 60).map(float))
    def purge(self, dt: float) -> None:
        now = self.tick(dt)
        self.s.purge(now=now)
        self.m._bound(now)

    @precondition(lambda self: self.s.maxlen > 0)
    @rule(data=st.data())
    def lower_maxlen(self, data: st.DataObject) -> None:
        maxlen = data.draw(st.integers(max(self.s.minlen, 1), self.s.maxlen))
        self.s.maxlen = maxlen
        self.m.maxlen = maxlen
        self.m._bound(None)

    @rule()
    def round_trip(self) -> None:
        twin = pickle.loads(pickle.dumps(self.s))
        assert list(twin) == list(self.s)
        assert twin.as_dict() == self.s.as_dict()

    @invariant()
    def matches_the_model(self) -> None:
        assert list(self.s) == self.m.ordered()
        assert self.s.as_dict() == {item: e[0] for item, e in self.m.entries.items()}

    @invariant()
    def bounded(self) -> None:
        if self.s.maxlen:
            assert len(self.s) <= self.s.maxlen
        assert heap_bound_holds(self.s)
        # the heap holds every live entry
        live = {id(e) for e in self.s._data.values()}
        assert live <= {id(e) for e in self.s._heap}
        assert _is_heap(self.s._heap)


def _is_heap(h: list) -> bool:
    return all(h[(i - 1) // 2] <= h[i] for i in range(1, len(h)))


LimitedSetMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None
)
TestLimitedSetModel = LimitedSetMachine.TestCase


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 40),
    st.lists(st.tuples(st.text(max_size=3), st.integers(0, 1000).map(float)), max_size=150),
)
def test_len_is_capped_and_iteration_is_by_stamp(maxlen: int, adds: list) -> None:
    adds.sort(key=lambda pair: pair[1])  # time moves forward (the model test covers the rest)
    s = LimitedSet(maxlen=maxlen)
    for item, stamp in adds:
        s.add(item, now=T0 + stamp)
        assert len(s) <= maxlen
    got = stamps(s)
    assert got == sorted(got)
    # the survivors are the newest: nothing evicted is newer than anything kept
    latest: dict[str, float] = {}
    for item, stamp in adds:
        latest[item] = T0 + stamp
    if len(latest) > len(s) and len(s):
        kept = set(s)
        evicted = [latest[i] for i in latest if i not in kept]
        assert max(evicted) <= min(got)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(max_size=4), st.integers(0, 10**6).map(float), max_size=300))
def test_wire_round_trip_is_exact(payload: dict[str, float]) -> None:
    s = LimitedSet()
    s.update_from_wire(payload, now=T0 + 10**6)
    assert s.to_wire() == payload
    assert json.loads(json.dumps(s.to_wire())) == payload
    assert stamps(s) == sorted(payload.values())
    pieces: dict[str, float] = {}
    newest_first: list[float] = []
    for chunk in s.chunks(17):
        assert len(chunk) <= 17
        pieces.update(chunk)
        newest_first.extend(chunk.values())
    assert pieces == payload
    assert newest_first == sorted(payload.values(), reverse=True)
