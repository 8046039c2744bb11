"""Failed cookie handshakes are rate-limited per source address (FailureGate, pure, and the
NetKernel that uses it): one log line per back-off step, refused meanwhile, served again
after."""

from __future__ import annotations

import logging

import pytest

from monitors.dist.gate import FailureGate
from tests.dist.helpers import Echo, mesh, wait_until

pytestmark = pytest.mark.timeout(60)


def test_gate_counts_doubles_caps_and_forgets():
    gate = FailureGate(free=2, initial=1.0, maximum=4.0, forget_after=100.0, max_keys=2)
    assert gate.failed("x", 0.0) == (1, 0.0)
    assert gate.failed("x", 1.0) == (2, 0.0)
    assert gate.blocked_for("x", 1.0) == 0.0
    assert gate.failed("x", 2.0) == (3, 1.0)
    assert gate.blocked_for("x", 2.5) == 0.5
    assert [gate.failed("x", t)[1] for t in (3.0, 4.0, 5.0)] == [2.0, 4.0, 4.0]
    assert gate.failed("x", 200.0) == (1, 0.0)  # quiet for longer than forget_after
    gate.failed("y", 201.0)
    gate.failed("z", 202.0)  # the table is bounded: the oldest key goes
    assert len(gate) == 2 and gate.blocked_for("x", 202.0) == 0.0
    gate.succeeded("z")
    assert len(gate) == 1
    with pytest.raises(ValueError):
        FailureGate(initial=0)


def test_wrong_cookies_back_off_the_address_with_a_line_per_step(make_kernel, caplog):
    caplog.set_level(logging.DEBUG, "monitors.dist")
    a = make_kernel("a", cookie_gate=FailureGate(free=2, initial=0.5, maximum=1.0))
    a.register("echo", Echo.start())
    guesser = make_kernel("guesser", cookie="a guess")
    mesh(a, guesser)
    steps = lambda: [  # noqa: E731
        r.getMessage() for r in caplog.records if "failed cookie handshakes from" in r.getMessage()
    ]
    for _ in range(3):
        assert guesser.connect(a.node) is False
    line = wait_until(steps, "a back-off line")[0]
    assert "3 failed cookie handshakes from 127.0.0.1" in line and "for 0.5 s" in line
    assert "a guess" not in caplog.text  # never the cookie
    # During the back-off the address is turned away before any handshake...
    before = len([r for r in caplog.records if "backing off for" in r.getMessage()])
    assert guesser.connect(a.node) is False
    assert len([r for r in caplog.records if "backing off for" in r.getMessage()]) > before
    # ... and once it is over, a peer with the cookie from that address is served.
    friend = make_kernel("friend")
    mesh(a, friend)
    wait_until(lambda: friend.connect(a.node, timeout=1), "served after the back-off")
    assert friend.call(a.node, "echo", {"op": "echo"})["node"] == friend.node
