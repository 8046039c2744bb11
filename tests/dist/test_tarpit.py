"""The tarpit (issue 25): a failed cookie proof costs its own connection time, never another
node's; pending connections cost no thread and have a deadline."""

from __future__ import annotations

import logging
import socket
import threading

import pytest

from monitors.dist.gate import FailureGate
from monitors.dist.tarpit import Tarpit
from tests.dist.helpers import Echo, mesh, wait_until

pytestmark = pytest.mark.timeout(60)


def test_tarpit_buckets_refund_and_double():
    pit = Tarpit(FailureGate(free=0, initial=1.0, maximum=4.0), rate=10.0, burst=3.0)
    assert [pit.take("x", 0.0) for _ in range(4)] == [True, True, True, False]
    assert pit.take("y", 0.0)  # per address
    assert pit.wait("x", 0.0) == pytest.approx(0.1)
    assert pit.take("x", 0.1) and not pit.take("x", 0.1)
    pit.refund("x", 0.1)  # a right proof gives its token back
    assert pit.take("x", 0.1)
    holds = [pit.failed("x", "", t)[1] for t in (1.0, 2.0, 3.0, 4.0)]
    assert holds == [1.0, 2.0, 4.0, 4.0]
    assert pit.failed("x", "b@h", 5.0) == (1, 1.0)  # per (address, claimed name)
    with pytest.raises(ValueError):
        Tarpit(rate=0)


def _raw(kernel) -> socket.socket:
    host, port = kernel.address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=5)


def test_a_wrong_cookie_neighbour_keeps_trying_and_a_right_one_joins_at_once(make_kernel, caplog):
    caplog.set_level(logging.INFO, "monitors.dist")
    a = make_kernel("a")
    a.register("echo", Echo.start())
    stale = make_kernel("stale", cookie="an old cookie")
    mesh(a, stale)
    stop = threading.Event()
    tries = []

    def keep_trying() -> None:
        while not stop.is_set():
            tries.append(stale.connect(a.node, timeout=1))

    guesser = threading.Thread(target=keep_trying, daemon=True)
    guesser.start()
    try:
        lines = lambda: [  # noqa: E731
            r.getMessage() for r in caplog.records if "failed cookie proofs from" in r.getMessage()
        ]
        wait_until(lambda: len(lines()) >= 2, "two back-off steps")
        assert "bad_cookie (1 failed cookie proofs from 127.0.0.1" in lines()[0]
        assert "held 1 s" in lines()[0] and "held 2 s" in lines()[1]
        assert "an old cookie" not in caplog.text  # never the cookie
        # Same address, right cookie, while the stale one is in the tarpit: the first try
        # succeeds (no refusal before the handshake).
        for name in ("friend", "friend2"):
            friend = make_kernel(name)
            mesh(a, friend)
            assert friend.connect(a.node, timeout=2)
            assert friend.call(a.node, "echo", {"op": "echo"})["node"] == friend.node
    finally:
        stop.set()
        guesser.join(10)
    assert len(tries) >= 2 and not any(tries)


def test_silent_sockets_cost_no_thread_and_a_node_still_joins(make_kernel):
    # A long deadline, so that all 200 are pending at once however slowly they connect
    # (test_hostile.py's silent client checks the deadline itself).
    a = make_kernel("a", handshake_timeout=60.0)
    a.register("echo", Echo.start())
    before = threading.active_count()
    silent = [_raw(a) for _ in range(200)]
    try:
        wait_until(lambda: len(a._pending_loop) >= 200, "200 pending connections")
        assert threading.active_count() - before < 10  # a thread per socket would be 200
        friend = make_kernel("friend")
        mesh(a, friend)
        assert friend.connect(a.node, timeout=2)
        assert friend.call(a.node, "echo", {"op": "echo"})["node"] == friend.node
    finally:
        for sock in silent:
            sock.close()
    wait_until(lambda: len(a._pending_loop) == 0, "the closed ones to be dropped")


def test_default_deadline_is_net_ticktime_at_most_seven_seconds(make_kernel):
    assert make_kernel("a", net_ticktime=2.0).handshake_timeout == 2.0
    assert make_kernel("b", net_ticktime=60.0).handshake_timeout == 7.0
