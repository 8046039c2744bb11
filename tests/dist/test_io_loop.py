"""The kernel's one I/O loop (ioloop.py): no thread per connection, and a peer that stops
reading (a frozen, SIGSTOPped node) blocks neither the loop nor the other peers, only the
senders past its queue's limit, until ticks call it down and free them."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from monitors.dist import NodeDown, NodeUp
from monitors.dist.frames import TICK
from tests.dist.helpers import Echo, Probe, fake_peer, mesh, wait_until

pytestmark = pytest.mark.timeout(60)


def _dist_threads() -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("dist-"))


def test_forty_connections_cost_no_thread_each(make_kernel):
    a = make_kernel("a")
    peers = [fake_peer(a, f"x{i}@127.0.0.1") for i in range(40)]
    wait_until(lambda: len(a.nodes()) == 40, "all 40 peers up")
    mine = [name for name in _dist_threads() if name.endswith(a.node)]
    # The listener (handshakes) and the I/O loop (reads, writes, ticks): nothing per peer.
    assert mine == [f"dist-io {a.node}", f"dist-listener {a.node}"]
    for sock in peers:
        sock.close()
    wait_until(lambda: a.nodes() == [], "all 40 peers down")


def test_a_peer_that_stops_reading_blocks_only_senders_past_its_limit(make_kernel):
    a = make_kernel("a", net_ticktime=1.0, max_queue=256 * 1024)
    b = make_kernel("b", net_ticktime=1.0)
    mesh(a, b)
    b.register("echo", Echo.start())
    a.register("echo", Echo.start())
    probe = Probe()
    a.monitor_nodes(probe.ref)
    frozen = fake_peer(a, "frozen@127.0.0.1")  # never reads, never ticks: SIGSTOPped
    probe.wait_type(NodeUp, "frozen up")
    assert a.connect(b.node)

    blob = "x" * 200_000
    sent = [0]
    done = threading.Event()

    def flood() -> None:  # send() waits once the queue holds max_queue: a busy dist port
        while not done.is_set() and "frozen@127.0.0.1" in a.nodes():
            a.send("frozen@127.0.0.1", "anyone", {"blob": blob})
            sent[0] += 1
        done.set()

    flooder = threading.Thread(target=flood, daemon=True)
    flooder.start()
    # The queue fills (the socket buffers first), and then the sender waits ...
    wait_until(lambda: a._conns["frozen@127.0.0.1"].queued >= 256 * 1024, "a full queue")
    # ... while the loop serves the other peer both ways, and a send that does not wait
    # (a reply, a signal, a tick) still goes into the frozen peer's queue.
    assert a.call(b.node, "echo", {"op": "echo"}) == {"node": a.node, "msg": {"op": "echo"}}
    assert b.call(a.node, "echo", {"op": "echo"}) == {"node": b.node, "msg": {"op": "echo"}}
    conn = a._conns["frozen@127.0.0.1"]
    conn.write(b"\x00\x00\x00\x00", block=False)
    # A waiting sender adds its frame only once the queue is below the limit.
    assert conn.queued < 256 * 1024 + len(blob) + 100
    # Silent for net_ticktime: down, and the waiting sender is let go.
    down = probe.wait_for(lambda m: isinstance(m, NodeDown), "frozen down")
    assert down == NodeDown("frozen@127.0.0.1", "net_tick_timeout")
    assert done.wait(10), "the sender still waits after the peer went down"
    assert sent[0] >= 1 and a.nodes() == [b.node]
    frozen.close()


def test_kernels_sharing_one_loop_keep_their_own_ticks_and_stops(make_kernel):
    """A swarm process's members share one loop: each connection ticks for its own kernel,
    a frozen peer is called down for the kernel that holds it, and a kernel that stops
    closes only its own connections while the loop serves the others on."""
    from monitors.dist.ioloop import IoLoop

    loop = IoLoop("shared")
    loop.start()
    try:
        core = make_kernel("core", net_ticktime=1.0)
        x = make_kernel("x", net_ticktime=1.0, io_loop=loop)
        y = make_kernel("y", net_ticktime=1.0, io_loop=loop)
        mesh(core, x, y)
        core.register("echo", Echo.start())
        assert x.connect(core.node) and y.connect(core.node)
        # no loop of their own: the shared loop's thread serves both
        assert not [n for n in _dist_threads() if n in (f"dist-io {x.node}", f"dist-io {y.node}")]
        wait_until(lambda: len(loop) == 2, "x-core and y-core on the shared loop")
        probe = Probe()
        y.monitor_nodes(probe.ref)
        frozen = fake_peer(y, "frozen@127.0.0.1")  # never ticks: y alone must call it down
        probe.wait_type(NodeUp, "frozen up at y")
        probe.wait_type(NodeDown, "y calls the silent peer down by its ticks", timeout=10)
        assert core.node in x.nodes() and core.node in y.nodes()
        x.actor_ref.stop(timeout=10)
        wait_until(lambda: x.node not in core.nodes(), "core sees x go")
        assert core.node in y.nodes()
        assert y.call(core.node, "echo", {"op": "echo"}, timeout=5)["node"] == y.node
        assert loop.thread.is_alive()
        frozen.close()
    finally:
        loop.stop()


def test_both_ends_of_a_connection_send_small_frames_at_once(make_kernel):
    """TCP_NODELAY on the dialed socket as on the accepted one (Erlang's dist_nodelay). The
    dialer's side lacked it: a frame sent while the one before was unacknowledged waited for
    the peer's delayed ACK, 40 ms, and a parallel commit ran at 45 tx/s instead of 320."""
    a = make_kernel("a")
    b = make_kernel("b")
    mesh(a, b)
    assert a.connect(b.node)
    wait_until(lambda: a.node in b.nodes(), "b to see a")
    ends = {"dialed": a._conns[b.node], "accepted": b._conns[a.node]}
    assert ends["dialed"].outgoing and not ends["accepted"].outgoing
    for where, conn in ends.items():
        assert conn.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY), where


def test_a_peer_whose_ticks_wait_unread_is_not_called_down(make_kernel, monkeypatch):
    """A starved loop (a swarm's thousand connections, the GIL) reads late; a peer whose
    ticks sit in our socket is not silent, and is not called down for our lateness. A peer
    that sends nothing still is, within net_ticktime."""
    a = make_kernel("a", net_ticktime=1.0)
    late = fake_peer(a, "late@127.0.0.1")
    quiet = fake_peer(a, "quiet@127.0.0.1")
    wait_until(lambda: len(a.nodes()) == 2, "both peers up")
    conn = a._conns["late@127.0.0.1"]

    def starved() -> bool:  # the loop gets to this connection but never reads it
        time.sleep(0.01)
        return True

    monkeypatch.setattr(conn, "readable", starved)
    late.sendall(TICK)  # waits in a's socket from now on
    wait_until(lambda: "quiet@127.0.0.1" not in a.nodes(), "the quiet peer called down", 5)
    assert "late@127.0.0.1" in a.nodes()  # silent as long, but its tick waits unread
    monkeypatch.undo()
    late.close()
    quiet.close()
    wait_until(lambda: a.nodes() == [], "the late peer gone once it closes")
