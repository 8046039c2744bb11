"""NetKernel.block and unblock: fault injection for nodes whose peers' addresses a test does not
control (Spark executors). A block cuts the link both ways and refuses reconnects until its time
is up; unblock ends it early."""

from __future__ import annotations

import pytest

from tests.waiting import wait_until


def test_a_block_cuts_the_link_until_unblocked(make_kernel) -> None:
    a, b = make_kernel("a"), make_kernel("b")
    a.set_address(b.node, b.address)
    b.set_address(a.node, a.address)
    assert a.connect(b.node) is True
    assert a.block([b.node, a.node], 600) == [b.node]  # itself is skipped
    wait_until(lambda: b.node not in a.nodes() and a.node not in b.nodes(), "the link to drop")
    assert a.connect(b.node) is False  # refused for the rest of the block
    assert a.unblock([a.node]) == []  # never blocked
    assert a.unblock() == [b.node]
    assert a.connect(b.node) is True
    wait_until(lambda: a.node in b.nodes(), "b to see a again")


def test_block_needs_a_positive_duration(make_kernel) -> None:
    a = make_kernel("a")
    with pytest.raises(ValueError, match="seconds must be a number > 0"):
        a.block(["b@127.0.0.1"], 0)
