"""The one timer thread behind Process.send_after (supervisors/timers.py)."""

from __future__ import annotations

import os
import threading
import time
import warnings

from supervisors import timers
from tests.waiting import wait_until


def _timer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == timers.THREAD_NAME]


def test_timers_fire_in_order_of_their_time_on_one_thread() -> None:
    fired: list[int] = []
    done = threading.Event()

    def note(timer: timers.SendAfterTimer, n: int) -> None:
        fired.append(n)
        if len(fired) == 50:
            done.set()

    # armed in reverse: the heap, not the arming order, decides
    armed = [timers.start_timer(0.002 * (50 - i), note, (50 - i,)) for i in range(50)]
    assert done.wait(10)
    assert fired == sorted(fired)
    assert len(_timer_threads()) == 1
    assert not any(t.is_alive() for t in armed)


def test_cancelled_timer_never_fires_and_join_returns() -> None:
    fired: list[str] = []
    late = timers.start_timer(30, lambda t, m: fired.append(m), ("late",))
    soon = timers.start_timer(0.01, lambda t, m: fired.append(m), ("soon",))
    assert late.is_alive()
    late.cancel()
    late.join(1)
    assert not late.is_alive()
    soon.join(10)
    assert fired == ["soon"]


def test_many_cancelled_timers_are_compacted_away() -> None:
    before = timers.pending_timers()
    armed = [timers.start_timer(60, lambda t: None) for _ in range(1000)]
    assert timers.pending_timers() == before + 1000
    for t in armed:
        t.cancel()
    assert timers.pending_timers() == before
    assert len(timers._service._heap) < 600  # compacted, not 1,000 dead entries waiting 60 s


def test_a_failing_callback_does_not_stop_the_thread() -> None:
    got = threading.Event()

    def boom(timer: timers.SendAfterTimer) -> None:
        raise RuntimeError("boom")

    timers.start_timer(0, boom)
    timers.start_timer(0.01, lambda t: got.set())
    assert got.wait(10)


def test_an_earlier_timer_wakes_a_thread_waiting_on_a_later_one() -> None:
    timers.start_timer(30, lambda t: None).cancel()
    long = timers.start_timer(20, lambda t: None)
    got = threading.Event()
    t0 = time.monotonic()
    timers.start_timer(0.01, lambda t: got.set())
    assert got.wait(10)
    assert time.monotonic() - t0 < 10  # not after the 20 s one
    long.cancel()


def test_a_forked_child_gets_a_timer_thread_of_its_own() -> None:
    timers.start_timer(30, lambda t: None).cancel()  # the parent's thread exists
    read, write = os.pipe()
    with (
        warnings.catch_warnings()
    ):  # 3.12+ warns of fork() beside threads; the child only uses ours
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: the parent's heap and thread are gone; a new timer still fires
        ok = threading.Event()
        timers.start_timer(0.01, lambda t: ok.set())
        os.write(write, b"1" if ok.wait(5) and timers.pending_timers() == 0 else b"0")
        os._exit(0)
    os.close(write)
    try:
        assert os.read(read, 1) == b"1"
    finally:
        os.close(read)
        os.waitpid(pid, 0)


def test_process_timers_share_the_thread() -> None:
    from supervisors import Process

    class Sleeper(Process):
        def on_receive(self, message: object) -> object:
            return self.send_after(30, "x")

    refs = [Sleeper.start() for _ in range(20)]
    armed = [r.ask("arm") for r in refs]
    assert len(_timer_threads()) == 1
    for r in refs:
        r.stop()
    wait_until(lambda: not any(t.is_alive() for t in armed), "timers cancelled with their owners")
