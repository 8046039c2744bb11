"""LamportClock and TimeTuple: kombu's test_clocks cases in our words, the sort_heap quirks we
fix, thread safety, and properties of the election pick."""

from __future__ import annotations

import copy
import heapq
import pickle
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitors.gossip.clock import LamportClock, TimeTuple

# -- kombu's cases ---------------------------------------------------------------------------------


def test_forward_and_adjust_move_past_every_clock_seen() -> None:
    a, b = LamportClock(), LamportClock()
    a.forward()
    b.forward()
    a.forward()
    a.forward()
    assert a.value == 3
    assert b.adjust(a.value) == a.value + 1  # b was behind: it jumps past a
    before = b.value
    b.forward()
    b.forward()
    assert b.adjust(a.value) == before + 3  # b was ahead: adjust only ticks once more
    assert a.adjust(b.value) == b.value + 1


def test_sort_heap_picks_the_lowest_clock_then_the_lowest_process_id() -> None:
    clock = LamportClock()
    host_a, host_b = "a.example.com.312", "b.example.com.311"
    events: list[tuple[int, str]] = []
    first = (clock.forward(), host_a)
    for event in (first, (clock.forward(), host_b), (clock.forward(), host_a)):
        heapq.heappush(events, event)
    tie_a, tie_b = (30, host_a), (30, host_b)
    heapq.heappush(events, tie_a)
    heapq.heappush(events, tie_b)
    assert clock.sort_heap(events) == first
    assert clock.sort_heap([tie_a, tie_b]) == tie_a
    assert clock.sort_heap([tie_b, tie_a]) == tie_a
    # kombu answers tie_a here: it only looks at the leading run of equal clocks. The event
    # with the lowest clock is `first`, wherever it sits in the list.
    assert clock.sort_heap([tie_a, tie_b, first]) == first


def test_repr_and_str() -> None:
    clock = LamportClock(7)
    assert repr(clock) == "<LamportClock: 7>"
    assert str(clock) == "7"
    stamp = TimeTuple(133, 1.5, "a.1", object())
    assert repr(stamp).startswith("TimeTuple(clock=133, timestamp=1.5, id='a.1', obj=")


def test_pickle_and_copy_keep_the_value_and_give_a_lock_of_its_own() -> None:
    clock = LamportClock(33)
    for twin in (pickle.loads(pickle.dumps(clock)), copy.copy(clock), copy.deepcopy(clock)):
        assert isinstance(twin, LamportClock)
        assert twin.value == 33
        assert twin._lock is not clock._lock
        twin.forward()
        assert clock.value == 33  # the twin is independent
    stamp = TimeTuple(133, 1.5, "a.1", "obj")
    assert pickle.loads(pickle.dumps(stamp)) == stamp
    assert type(pickle.loads(pickle.dumps(stamp))) is TimeTuple


def test_timetuple_orders_by_clock_then_id_else_by_timestamp() -> None:
    t1, t2 = 1000.0, 1300.0
    a = TimeTuple(133, t1, "A", "obj")
    b = TimeTuple(140, t1, "A", "obj")
    assert (a.clock, a.timestamp, a.id, a.obj) == (133, t1, "A", "obj")
    assert a < b
    assert a <= b
    assert b > a
    assert b >= a
    assert TimeTuple(134, t2, "A") > TimeTuple(133, t1, "A")
    assert TimeTuple(134, t1, "B") > TimeTuple(134, t1, "A")  # same clock: the id decides
    assert TimeTuple(133, t2, "A") < TimeTuple(134, t1, "A")  # clocks win over timestamps
    assert TimeTuple(None, t2, "B") > TimeTuple(None, t1, "A")  # no clock: the timestamp
    assert TimeTuple(5, t2, "A") > TimeTuple(None, t1, "B")  # one missing is enough
    assert TimeTuple(134, t1, "A").__lt__(()) is NotImplemented
    assert TimeTuple(134, t1, "A").__ge__((1, 2, 3, 4)) is NotImplemented


def test_timetuple_clock_zero_is_a_clock() -> None:
    # kombu tests truthiness, so a clock of 0 falls back to the timestamp there.
    assert TimeTuple(0, 99.0, "A") < TimeTuple(1, 1.0, "A")


def test_timetuples_sort_in_a_heap() -> None:
    stamps = [TimeTuple(c, 10.0 - c, h) for c, h in [(3, "b"), (1, "z"), (3, "a"), (2, "c")]]
    heap: list[TimeTuple] = []
    for stamp in stamps:
        heapq.heappush(heap, stamp)
    order = [heapq.heappop(heap) for _ in range(len(stamps))]
    assert [(s.clock, s.id) for s in order] == [(1, "z"), (2, "c"), (3, "a"), (3, "b")]


# -- the quirks kombu has and we don't -----------------------------------------------------------


def test_sort_heap_of_one_event_returns_it() -> None:
    # kombu reads h[1] unconditionally: IndexError for a one-node election.
    only = (4, "solo.1", "task", None)
    assert LamportClock().sort_heap([only]) is only


def test_sort_heap_considers_the_last_member_of_a_tie_run() -> None:
    # kombu's pairwise walk collects every member of the run but the last: it answers b.1.
    events = [(5, "c.1"), (5, "b.1"), (5, "a.1"), (9, "0.1")]
    assert LamportClock().sort_heap(events) == (5, "a.1")
    assert LamportClock().sort_heap([(5, "b.1"), (5, "a.1")]) == (5, "a.1")


def test_sort_heap_of_nothing_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="at least one event"):
        LamportClock().sort_heap([])


def test_sort_heap_returns_the_event_itself_with_its_payload() -> None:
    win = (2, "a.1", "task", {"name": "x"})
    events = [(3, "a.1", "task", {"name": "y"}), win, (2, "b.1", "task", {"name": "z"})]
    assert LamportClock().sort_heap(events) is win


def test_sort_heap_never_compares_payloads() -> None:
    # The same candidate may be pushed twice (a duplicated elect); unorderable payloads must
    # not make the pick blow up.
    events = [(1, "a.1", "task", {"x": 1}), (1, "a.1", "task", {"x": 2})]
    assert LamportClock().sort_heap(events) is events[0]


# -- thread safety and properties ------------------------------------------------------------


def test_concurrent_forwards_never_hand_out_the_same_value() -> None:
    clock = LamportClock()
    per_thread, threads = 2000, 8
    seen: list[list[int]] = [[] for _ in range(threads)]
    start = threading.Barrier(threads)

    def work(out: list[int]) -> None:
        start.wait()
        for i in range(per_thread):
            out.append(clock.adjust(i) if i % 3 == 0 else clock.forward())

    workers = [threading.Thread(target=work, args=(seen[i],)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    values = [v for out in seen for v in out]
    assert len(set(values)) == len(values) == per_thread * threads
    assert clock.value == max(values)
    for out in seen:
        assert out == sorted(out)  # each thread sees its own clock only grow


events = st.lists(
    st.tuples(st.integers(0, 5), st.sampled_from(["a.1", "a.2", "b.1", "c.9"]), st.integers()),
    min_size=1,
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(events, st.randoms(use_true_random=False))
def test_sort_heap_is_the_minimum_whatever_the_order(evs: list, rnd) -> None:
    want = min((e[0], e[1]) for e in evs)
    shuffled = evs[:]
    rnd.shuffle(shuffled)
    heap: list = []
    for event in shuffled:
        heapq.heappush(heap, event)
    for candidates in (evs, shuffled, heap):
        got = LamportClock.sort_heap(candidates)
        assert (got[0], got[1]) == want
        assert any(got is e for e in candidates)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10**6), st.lists(st.integers(0, 10**6), max_size=20))
def test_adjust_always_moves_strictly_past_both(start: int, received: list[int]) -> None:
    clock = LamportClock(start)
    for other in received:
        before = clock.value
        now = clock.adjust(other)
        assert now > before
        assert now > other
        assert now == clock.value
