"""Connect attempts are bounded by connect_timeout, and a down peer's failures are logged with
back-off (issue 14 part 2, issue 15 "links come back at once")."""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import time

import pytest

from tests.waiting import wait_until


def _refusing_port() -> tuple[socket.socket, int]:
    """A bound, non-listening socket: connects to its port are refused, and nobody else can
    take the port while we hold it."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    return s, s.getsockname()[1]


def _blackhole() -> tuple[list[socket.socket], int]:
    """A listener whose accept queue is full and never drained: Linux drops further SYNs, so a
    connect to it hangs as it does across an iptables DROP rule."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    held = [listener]
    for _ in range(8):  # fill the queue until a connect gets no answer
        c = socket.socket()
        c.setblocking(False)
        held.append(c)
        with contextlib.suppress(BlockingIOError):
            c.connect(("127.0.0.1", port))
        if not select.select([], [c], [], 0.3)[1]:
            return held, port
    raise AssertionError("could not fill the accept queue of a listen(0) socket")


def test_a_ten_second_outage_is_five_log_lines(make_kernel, caplog) -> None:
    """Two connect attempts a second for 10 s (the node monitor's ping plus a send's
    auto-connect) used to be 20 INFO lines; now the first failure, one line per back-off step
    with a count, and the recovery."""
    a, b = make_kernel("a"), make_kernel("b")
    closed, port = _refusing_port()
    now = [1000.0]
    a._retries.clock = lambda: now[0]  # virtual time for the back-off; the sockets are real
    a.set_address(b.node, f"127.0.0.1:{port}")
    caplog.set_level(logging.INFO, "monitors.dist")
    try:
        for _ in range(20):
            assert a.connect(b.node) is False
            now[0] += 0.5
    finally:
        closed.close()
    a.set_address(b.node, b.address)
    assert a.connect(b.node) is True

    def lines() -> list[str]:
        return [
            m
            for r in list(caplog.records)
            if r.name == "monitors.dist"
            and (m := r.getMessage()).startswith(f"dist {a.node}:")
            and b.node in m
        ]

    # connect() returns once the connection is published; its log line follows at once
    wait_until(lambda: any("node up" in m for m in lines()), "the node up line")
    found = lines()
    assert len(found) == 5, "\n".join(found)
    assert "cannot connect" in found[0] and "Connection refused" in found[0]
    assert "still failing: 2 more failed attempts, 3 in 1 s" in found[1]
    assert "still failing: 8 more failed attempts, 15 in 7 s" in found[3]
    assert "node up" in found[4] and "after 20 failed attempts over 10.0 s" in found[4]


def test_a_connect_into_a_cut_gives_up_within_connect_timeout(make_kernel) -> None:
    a = make_kernel("a", connect_timeout=0.5)
    held, port = _blackhole()
    try:
        a.set_address("b@127.0.0.1", f"127.0.0.1:{port}")
        t0 = time.monotonic()
        assert a.connect("b@127.0.0.1") is False
        took = time.monotonic() - t0
    finally:
        for s in held:
            s.close()
    # the old bound was handshake_timeout (5 s) for the TCP connect alone
    assert took < 3.0, f"the attempt took {took:.2f} s"


def test_connect_timeout_must_be_positive(make_kernel) -> None:
    with pytest.raises(ValueError, match="connect_timeout must be seconds > 0"):
        make_kernel("a", connect_timeout=0)
