"""PooledProcess and its pool: what a pool makes hard, and the pool's own behaviour.

The Process semantics themselves are checked by the supervisor_SUITE port and test_process.py,
which run against both classes (conftest.py's `process_kind`). Here: a kill while the handler
runs on a pool thread, an exit signal racing a message, links across the two classes, a stop
from within a handler, 10,000 crashes at once under one_for_all, fairness, growth, the
blocked-handler warning, bad input, stopping the pool, and a tree file naming a PooledProcess.
"""

from __future__ import annotations

import contextlib
import logging
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pykka import ActorDeadError

from supervisors import (
    ChildSpec,
    Down,
    Exit,
    PooledProcess,
    Process,
    Supervisor,
    SupFlags,
    configure_pool,
    exit,
    exit_reason,
    pool_settings,
    start_tree,
    stop_pool,
)
from supervisors.pool import the_pool
from tests.supervisors.helpers import TIMEOUT, Probe, wait_dead
from tests.waiting import wait_until


class Echo(PooledProcess):
    """Answers, counts, crashes, blocks or stops itself on request."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self.args = (args, kwargs)
        self.seen: list[Any] = []
        self.trap_exit = bool(kwargs.get("trap_exit"))
        self.stopped: threading.Event | None = kwargs.get("stopped")

    def on_stop(self) -> None:
        if self.stopped is not None:
            self.stopped.set()

    def on_receive(self, message: Any) -> Any:
        if message == "die":
            raise RuntimeError("asked to die")
        if isinstance(message, tuple) and message[0] == "block":
            message[1].set()  # the handler is running now
            message[2].wait(TIMEOUT)
            return "unblocked"
        if message == "stop-self":
            self.stop()  # as pykka's Actor.stop(): queued behind what is already there
            return "stopping"
        if message == "seen":
            return list(self.seen)
        if message == "thread":
            return threading.current_thread().name
        self.seen.append(message)
        return message


class Threaded(Process):
    """The thread-per-process side of a link."""

    def __init__(self, trap: bool = False) -> None:
        super().__init__()
        self.trap_exit = trap
        self.seen: list[Any] = []

    def on_receive(self, message: Any) -> Any:
        if message == "seen":
            return list(self.seen)
        if message == "die":
            raise RuntimeError("threaded died")
        self.seen.append(message)
        return None


@pytest.fixture
def small_pool() -> Iterator[None]:
    """A 2-thread pool with short thresholds, then back to the defaults."""
    saved = pool_settings()
    stop_pool()
    configure_pool(2, max_size=4, grow_after=0.05, block_warning=0.2, idle_timeout=0.5)
    try:
        yield
    finally:
        stop_pool()
        configure_pool(
            saved.size,
            max_size=saved.max_size,
            grow_after=saved.grow_after,
            block_warning=saved.block_warning,
            idle_timeout=saved.idle_timeout,
        )


def test_runs_on_the_pool_and_answers_asks_tells_and_proxies() -> None:
    ref = Echo.start()
    ref.tell("a")
    assert ref.ask("b") == "b"
    assert ref.proxy().seen.get(timeout=TIMEOUT) == ["a", "b"]
    assert ref.ask("thread").startswith("supervisors-pool-")
    ref.stop()
    assert exit_reason(ref) == "normal"


def test_a_process_with_no_messages_holds_no_thread() -> None:
    refs = [Echo.start() for _ in range(200)]
    threads = threading.active_count()
    assert threads < 100, "200 idle PooledProcesses must not mean 200 threads"
    for ref in refs:
        ref.stop(block=False)
    for ref in refs:
        wait_dead(ref)


def test_kill_while_the_handler_runs_on_a_pool_thread_frees_nothing_twice() -> None:
    """The killed process is dead at once; its pool thread finishes the handler, discards the
    reply, and goes back to work; other processes keep being served meanwhile."""
    running, release = threading.Event(), threading.Event()
    victim = Echo.start()
    other = Echo.start()
    busy = victim.ask(("block", running, release), block=False)
    assert running.wait(TIMEOUT)
    queued = victim.ask("never", block=False)
    exit(victim, "kill")
    assert exit_reason(victim) == "killed"
    for future in (busy, queued):
        with pytest.raises(ActorDeadError):
            future.get(timeout=TIMEOUT)
    assert other.ask("still served", timeout=TIMEOUT) == "still served"
    release.set()
    wait_until(lambda: all(slot.proc is None or slot.proc is not victim for slot in _slots()))
    with pytest.raises(ActorDeadError):
        victim.ask("after", timeout=TIMEOUT)
    assert other.ask("seen", timeout=TIMEOUT) == ["still served"]


def _slots() -> list[Any]:
    return list(the_pool()._slots)


@pytest.mark.parametrize("trap", [False, True])
def test_an_exit_signal_racing_messages_ends_the_process_once(trap: bool) -> None:
    """Two threads: one floods messages (asks), one sends "shutdown". Every ask is answered or
    refused with ActorDeadError, none hangs; on_stop runs once; a trapping process sees Exit
    among its messages, a plain one ends at the signal."""
    for _ in range(50):
        stopped = threading.Event()
        ref = Echo.start(trap_exit=trap, stopped=stopped)
        futures: list[Any] = []

        def send(ref: Any = ref, futures: list[Any] = futures) -> None:
            futures.extend(ref.ask(i, block=False) for i in range(40))

        flood = threading.Thread(target=send)
        flood.start()
        exit(ref, "shutdown")
        flood.join(TIMEOUT)
        answered = 0
        for future in futures:
            try:
                future.get(timeout=TIMEOUT)
                answered += 1
            except ActorDeadError:
                pass
        if trap:
            assert ref.is_alive()
            wait_until(lambda ref=ref: any(type(m) is Exit for m in ref.ask("seen")))
            ref.stop()
        else:
            assert wait_dead(ref) == "shutdown"
            assert stopped.is_set()
        assert answered <= 40


@pytest.mark.parametrize("crasher", ["pooled", "threaded"])
def test_links_between_a_process_and_a_pooled_process(crasher: str) -> None:
    pooled = Echo.start(trap_exit=True)
    threaded = Threaded.start(trap=True)
    probe = Probe()
    probe.call(lambda p: p.link(pooled))
    pooled.proxy().link(threaded).get(timeout=TIMEOUT)
    watch = probe.monitor(threaded)
    if crasher == "pooled":
        pooled.proxy().trap_exit.get()  # sync
        pooled.tell("die")
        wait_until(lambda: any(type(m) is Exit for m in threaded.ask("seen")), "Exit in threaded")
        [seen] = [m for m in threaded.ask("seen") if type(m) is Exit]
        assert seen.sender.actor_urn == pooled.actor_urn
        assert isinstance(seen.reason, RuntimeError)
        assert isinstance(probe.wait_exit(pooled), RuntimeError)
    else:
        threaded.tell("die")
        wait_until(lambda: any(type(m) is Exit for m in pooled.ask("seen")), "Exit in pooled")
        [seen] = [m for m in pooled.ask("seen") if type(m) is Exit]
        assert seen.sender.actor_urn == threaded.actor_urn
        assert probe.wait_down(watch) is not None


def test_a_non_trapping_pooled_process_dies_with_its_threaded_link() -> None:
    pooled = Echo.start()
    threaded = Threaded.start()
    pooled.proxy().link(threaded).get(timeout=TIMEOUT)
    probe = Probe()
    watch = probe.monitor(pooled)
    threaded.tell("die")
    reason = probe.wait_down(watch)
    assert isinstance(reason, RuntimeError) and str(reason) == "threaded died"


def test_a_pooled_process_monitors_a_threaded_one_and_back() -> None:
    pooled = Echo.start()
    threaded = Threaded.start()
    pooled.proxy().monitor(threaded).get(timeout=TIMEOUT)
    threaded.proxy().monitor(pooled).get(timeout=TIMEOUT)
    threaded.stop()
    wait_until(lambda: any(type(m) is Down for m in pooled.ask("seen")), "Down in pooled")
    [down] = [m for m in pooled.ask("seen") if type(m) is Down]
    assert down.reason == "normal"


def test_stop_from_within_its_own_handler() -> None:
    stopped = threading.Event()
    ref = Echo.start(stopped=stopped)
    assert ref.ask("stop-self") == "stopping"
    assert wait_dead(ref) == "normal"
    assert stopped.is_set()


def test_a_handler_stops_another_pooled_process_and_waits() -> None:
    """A blocking stop() from a pool thread needs another pool thread to run the target."""
    target_stopped = threading.Event()
    target = Echo.start(stopped=target_stopped)

    class Stopper(PooledProcess):
        def on_receive(self, message: Any) -> Any:
            return message.stop(block=True, timeout=TIMEOUT)

    stopper = Stopper.start()
    assert stopper.ask(target, timeout=TIMEOUT) is True
    assert target_stopped.is_set()
    stopper.stop()


@pytest.mark.slow
def test_ten_thousand_children_crash_at_once_under_one_for_all(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every child raises at the same moment: the supervisor restarts the whole group once
    (the other crashes belong to children it has already replaced) and ends up with 10,000
    fresh children."""
    # 10,000 crash tracebacks and 30,000 reports are not the subject; formatting them is most
    # of the cost.
    caplog.set_level(logging.CRITICAL, logger="pykka")
    caplog.set_level(logging.CRITICAL, logger="supervisors.report")
    n = 10_000
    specs = [ChildSpec(i, Echo, shutdown="brutal_kill") for i in range(n)]
    sup = Supervisor.start(SupFlags("one_for_all", 1, 3600), specs)
    try:
        proxy = sup.proxy()
        before = [info.ref for info in proxy.which_children().get(timeout=60)]
        for ref in before:  # as fast as we can; the first crash already stops the others
            with contextlib.suppress(ActorDeadError):
                ref.tell("die")
        for ref in before:
            wait_dead(ref, 60)
        after = wait_until(
            lambda: _all_replaced(proxy, before), "every child restarted", timeout=120
        )
        assert sup.is_alive()
        assert len(after) == n
        assert proxy.count_children().get(timeout=60)["active"] == n
        assert after[-1].ask("ping", timeout=TIMEOUT) == "ping"
    finally:
        sup.stop(timeout=120)


def _all_replaced(proxy: Any, before: list[Any]) -> list[Any] | None:
    refs = [info.ref for info in proxy.which_children().get(timeout=60)]
    old = {ref.actor_urn for ref in before}
    fresh = [r for r in refs if hasattr(r, "actor_urn") and r.actor_urn not in old]
    return fresh if len(fresh) == len(before) and all(r.is_alive() for r in fresh) else None


# ------------------------------------------------------------------------------ the pool


class Spinner(PooledProcess):
    """Always busy: every message sends itself another."""

    def on_receive(self, message: Any) -> Any:
        if message == "spin":
            self.actor_ref.tell("spin")
        return None


def test_an_always_busy_process_does_not_starve_others(small_pool: None) -> None:
    spinners = [Spinner.start() for _ in range(4)]  # more spinners than threads
    for spinner in spinners:
        spinner.tell("spin")
    others = [Echo.start() for _ in range(5)]
    for i, ref in enumerate(others):
        assert ref.ask(i, timeout=TIMEOUT) == i
    for spinner in spinners:
        spinner.stop()


def test_all_threads_blocked_grows_the_pool_and_logs_the_holders_once(
    small_pool: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="supervisors.pool")
    release = threading.Event()
    blockers = [Echo.start() for _ in range(2)]
    futures = []
    for ref in blockers:
        running = threading.Event()
        futures.append(ref.ask(("block", running, release), block=False))
        assert running.wait(TIMEOUT)
    waiting = [Echo.start() for _ in range(3)]
    try:
        # Both threads are held; these wait until the pool adds threads.
        assert [ref.ask(i, timeout=TIMEOUT) for i, ref in enumerate(waiting)] == [0, 1, 2]
        assert the_pool().threads > 2
        grow = [r for r in caplog.records if "all 2 threads busy" in r.getMessage()]
        assert len(grow) == 1, "logged once per saturation"
        for ref in blockers:
            assert str(ref.actor_urn) in grow[0].getMessage()
    finally:
        release.set()
    assert [f.get(timeout=TIMEOUT) for f in futures] == ["unblocked", "unblocked"]


def test_a_blocked_handler_is_named_once_with_its_class_and_stack(
    small_pool: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="supervisors.pool")
    running, release = threading.Event(), threading.Event()
    ref = Echo.start()
    future = ref.ask(("block", running, release), block=False)
    assert running.wait(TIMEOUT)

    def warnings() -> list[logging.LogRecord]:
        return [r for r in caplog.records if "has blocked pool thread" in r.getMessage()]

    wait_until(warnings, "the blocked-handler warning")
    threading.Event().wait(0.5)  # the subject: no second warning for the same block
    release.set()
    assert future.get(timeout=TIMEOUT) == "unblocked"
    [warning] = warnings()
    text = warning.getMessage()
    assert "test_pooled.Echo" in text
    assert "message[2].wait(TIMEOUT)" in text, "the stack it is blocked in"
    # A new block of the same process is a new warning.
    running, release = threading.Event(), threading.Event()
    future = ref.ask(("block", running, release), block=False)
    wait_until(lambda: len(warnings()) == 2, "a second warning for a second block")
    release.set()
    future.get(timeout=TIMEOUT)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "4"])
def test_a_pool_size_that_is_not_a_positive_integer_is_refused(bad: Any) -> None:
    with pytest.raises(ValueError, match="pool size must be a positive integer"):
        configure_pool(bad)
    with pytest.raises(ValueError, match="pool max_size must be a positive integer"):
        configure_pool(max_size=bad)


def test_a_throughput_of_zero_or_less_is_refused() -> None:
    with pytest.raises(ValueError, match=r"Bad\.throughput must be a positive integer; got 0"):

        class Bad(PooledProcess):
            throughput = 0

    class Later(PooledProcess):
        pass

    Later.throughput = -2
    with pytest.raises(ValueError, match=r"Later\.throughput must be a positive integer"):
        Later.start()


def test_configure_pool_while_running_says_to_stop_it_first() -> None:
    ref = Echo.start()
    assert ref.ask("x") == "x"
    with pytest.raises(RuntimeError, match="stop_pool"):
        configure_pool(4)
    ref.stop()


def test_stop_pool_ends_its_threads_and_the_next_message_starts_it_again() -> None:
    ref = Echo.start()
    assert ref.ask("x") == "x"
    workers = [slot.thread for slot in _slots()]
    assert stop_pool(TIMEOUT)
    assert not [t for t in workers if t is not None and t.is_alive()]
    assert ref.ask("y", timeout=TIMEOUT) == "y"
    ref.stop()


def test_a_tree_file_names_a_pooled_process_like_any_other(tmp_path: Path) -> None:
    path = tmp_path / "tree.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            supervisor:
              strategy: one_for_one
              children:
                - {{id: pooled, start: "{__name__}:Echo", args: [1], kwargs: {{k: v}}}}
            """
        )
    )
    root = start_tree(path)
    try:
        [info] = root.proxy().which_children().get(timeout=TIMEOUT)
        assert isinstance(info.ref.actor_inbox, type(Echo.start().actor_inbox))
        assert info.ref.proxy().args.get(timeout=TIMEOUT) == ((1,), {"k": "v"})
    finally:
        root.stop()
