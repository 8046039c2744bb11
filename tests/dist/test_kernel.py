"""NetKernels on real sockets, two or three in this process: send, call, connect, disconnect,
monitor_nodes, simultaneous connects, creations, ticks."""

from __future__ import annotations

import logging
import socket
import threading
import time

import pytest

from monitors.dist import (
    BadNodeName,
    DistTimeout,
    FrameTooLarge,
    Message,
    NetKernel,
    NodeDown,
    NodeUnreachable,
    NodeUp,
    RemoteCallError,
)
from monitors.dist.frames import TICK, FrameDecoder
from monitors.dist.handshake import Connector, Established
from supervisors import ChildSpec, Supervisor, SupFlags, exit_reason
from tests.dist.helpers import COOKIE, Echo, Probe, mesh, wait_until

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def pair(make_kernel):
    a, b = make_kernel("a"), make_kernel("b")
    mesh(a, b)
    return a, b


def test_send_delivers_a_message_naming_the_sender_node(pair):
    a, b = pair
    probe = Probe()
    b.register("inbox", probe.ref)
    a.send(b.node, "inbox", {"hello": [1, 2], "t": (3, 4)})
    message = probe.wait_type(Message)
    assert message == Message(a.node, {"hello": [1, 2], "t": [3, 4]})


def test_messages_arrive_in_order(pair):
    a, b = pair
    probe = Probe()
    b.register("inbox", probe.ref)
    for i in range(2000):
        a.send(b.node, "inbox", {"i": i})
    wait_until(lambda: len(probe.messages(Message)) == 2000, "all messages")
    assert [m.msg["i"] for m in probe.messages(Message)] == list(range(2000))


def test_send_many_keeps_order_and_leaves_out_only_the_bad_message(pair):
    a, b = pair
    probe = Probe()
    b.register("inbox", probe.ref)
    a.send_many(b.node, "inbox", [{"i": 0}, {"i": 1}])  # not connected yet: one by one
    assert a.connect(b.node)
    with pytest.raises(TypeError, match="JSON"):  # connected: one write, the bad one left out
        a.send_many(b.node, "inbox", [{"i": 2}, {"o": object()}, {"i": 3}])
    a.send_many(b.node, "inbox", [{"i": i} for i in range(4, 50)])
    wait_until(lambda: len(probe.messages(Message)) == 50, "50 messages")
    assert [m.msg["i"] for m in probe.messages(Message)] == list(range(50))
    assert {m.node for m in probe.messages(Message)} == {a.node}


def test_call_returns_what_on_receive_returns(pair):
    a, b = pair
    b.register("echo", Echo.start())
    assert a.call(b.node, "echo", {"op": "echo", "x": 1}) == {
        "node": a.node,
        "msg": {"op": "echo", "x": 1},
    }


def test_call_timeout_names_node_name_and_timeout_and_drops_the_late_reply(pair):
    a, b = pair
    b.register("echo", Echo.start())
    with pytest.raises(DistTimeout) as info:
        a.call(b.node, "echo", {"op": "sleep", "s": 0.3}, timeout=0.05)
    assert str(info.value) == f"call to 'echo' on {b.node} got no reply within 0.05 s"
    assert (info.value.node, info.value.name, info.value.timeout) == (b.node, "echo", 0.05)
    # The late reply is dropped; the next call gets its own reply.
    assert a.call(b.node, "echo", {"op": "echo"})["msg"] == {"op": "echo"}


def test_call_errors_from_the_remote_side(pair):
    a, b = pair
    echo = Echo.start()
    b.register("echo", echo)
    with pytest.raises(RemoteCallError, match="noproc") as info:
        a.call(b.node, "nobody", {})
    assert info.value.kind == "noproc" and "nobody" in str(info.value)
    with pytest.raises(RemoteCallError) as info:
        a.call(b.node, "echo", {"op": "bad_reply"})
    assert info.value.kind == "bad_reply"
    with pytest.raises(RemoteCallError) as info:
        a.call(b.node, "echo", {"op": "raise", "text": "bad"})
    assert info.value.kind == "exception"
    assert info.value.detail == "ValueError('bad')"
    # As in a local ask, the handler's exception ended the process.
    wait_until(lambda: exit_reason(echo) is not None, "echo to end")
    with pytest.raises(RemoteCallError, match="noproc"):
        a.call(b.node, "echo", {"op": "echo"})


def test_bad_messages_raise_at_the_caller(pair):
    a, b = pair
    with pytest.raises(TypeError, match="must be a dict"):
        a.send(b.node, "x", ["not", "a", "dict"])
    with pytest.raises(TypeError, match="JSON"):
        a.send(b.node, "x", {"o": object()})
    with pytest.raises(FrameTooLarge, match="limit"):
        a.send(b.node, "x", {"big": "x" * (1 << 20)})
    with pytest.raises(BadNodeName):
        a.send("nonode", "x", {})


def test_send_auto_connects_and_keeps_order(pair):
    a, b = pair
    probe = Probe()
    b.register("inbox", probe.ref)
    assert a.nodes() == []
    for i in range(100):  # the first ones are queued while the connection is set up
        a.send(b.node, "inbox", {"i": i})
    wait_until(lambda: len(probe.messages(Message)) == 100, "100 messages")
    assert [m.msg["i"] for m in probe.messages(Message)] == list(range(100))
    assert a.nodes() == [b.node] and b.nodes() == [a.node]


def test_call_auto_connects(pair):
    a, b = pair
    b.register("echo", Echo.start())
    assert a.call(b.node, "echo", {"op": "echo"})["node"] == a.node
    assert a.nodes() == [b.node]


def test_unreachable_nodes(make_kernel, caplog):
    a = make_kernel("a")
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    a.set_address("gone@127.0.0.1", f"127.0.0.1:{port}")
    caplog.set_level(logging.DEBUG, "monitors.dist")
    a.send("gone@127.0.0.1", "x", {})  # dropped, never raises
    a.send("unknown@127.0.0.1", "x", {})
    assert a.connect("gone@127.0.0.1") is False
    assert a.connect("unknown@127.0.0.1") is False
    with pytest.raises(NodeUnreachable, match="could not connect"):
        a.call("gone@127.0.0.1", "x", {}, timeout=2)
    with pytest.raises(NodeUnreachable, match="no address"):
        a.call("unknown@127.0.0.1", "x", {})
    assert any("send to 'x' on unknown@127.0.0.1 dropped" in r.getMessage() for r in caplog.records)


def test_connect_is_a_ping(pair):
    a, b = pair
    assert a.connect(b.node) is True
    assert a.connect(b.node) is True
    assert a.connect(a.node) is True
    assert a.nodes() == [b.node]
    assert a.peer_creation(b.node) == b.creation
    assert b.peer_creation(a.node) == a.creation
    assert a.peer_creation("c@127.0.0.1") is None


def test_disconnect_then_ban_then_reconnect(make_kernel):
    a, b = make_kernel("a", disconnect_ban=0.5), make_kernel("b")
    mesh(a, b)
    pa, pb = Probe(), Probe()
    a.monitor_nodes(pa.ref)
    b.monitor_nodes(pb.ref)
    assert a.connect(b.node)
    assert a.disconnect(b.node) is True
    assert pa.wait_type(NodeDown) == NodeDown(b.node, "disconnect")
    assert pb.wait_type(NodeDown) == NodeDown(a.node, "connection_closed")
    banned_at = time.monotonic()
    assert a.connect(b.node) is False  # banned, our way
    assert b.connect(a.node) is False  # and theirs: a refuses b while the ban lasts
    with pytest.raises(NodeUnreachable, match="banned"):
        a.call(b.node, "x", {})
    assert a.disconnect(b.node) is False  # not connected; restarts the ban
    wait_until(lambda: a.connect(b.node), "reconnect after the ban")
    assert time.monotonic() - banned_at >= 0.5
    assert a.nodes() == [b.node]


def test_monitor_nodes_delivers_node_up_and_down_in_order(make_kernel):
    a, b, c = make_kernel("a"), make_kernel("b"), make_kernel("c")
    mesh(a, b, c)
    probe = Probe()
    a.monitor_nodes(probe.ref)
    assert a.connect(b.node) and a.connect(c.node)
    wait_until(lambda: len(probe.messages(NodeUp)) == 2, "two NodeUps")
    assert set(probe.messages(NodeUp)) == {NodeUp(b.node, b.creation), NodeUp(c.node, c.creation)}
    c.actor_ref.stop()
    assert probe.wait_type(NodeDown) == NodeDown(c.node, "connection_closed")
    a.demonitor_nodes(probe.ref)
    b.actor_ref.stop()
    wait_until(lambda: a.nodes() == [], "b to go")
    time.sleep(0.05)
    assert len(probe.messages(NodeDown)) == 1


def test_simultaneous_connects_end_with_one_connection_per_pair(make_kernel):
    for round_ in range(15):
        a, b = make_kernel(f"a{round_}"), make_kernel(f"b{round_}")
        mesh(a, b)
        pa, pb = Probe(), Probe()
        a.monitor_nodes(pa.ref)
        b.monitor_nodes(pb.ref)
        barrier = threading.Barrier(2)
        results = {}

        def go(kernel, peer, key, barrier=barrier, results=results):
            barrier.wait()
            results[key] = kernel.connect(peer.node)

        threads = [
            threading.Thread(target=go, args=(a, b, "a")),
            threading.Thread(target=go, args=(b, a, "b")),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert results == {"a": True, "b": True}
        assert a.nodes() == [b.node] and b.nodes() == [a.node]
        # One TCP connection: one side accepted it, the other opened it.
        assert a._conns[b.node].outgoing != b._conns[a.node].outgoing
        time.sleep(0.05)
        assert pa.messages(NodeDown) == [] and pb.messages(NodeDown) == []
        assert pa.messages(NodeUp) == [NodeUp(b.node, b.creation)]
        assert pb.messages(NodeUp) == [NodeUp(a.node, a.creation)]
        a.actor_ref.stop()
        b.actor_ref.stop()


def test_a_restarted_node_comes_back_with_a_new_creation(make_kernel):
    a, b = make_kernel("a"), make_kernel("b")
    mesh(a, b)
    probe = Probe()
    a.monitor_nodes(probe.ref)
    assert a.connect(b.node)
    old = b.creation
    b.actor_ref.stop()
    assert probe.wait_type(NodeDown) == NodeDown(b.node, "connection_closed")
    b2 = make_kernel("b")
    mesh(a, b2)
    assert a.connect(b.node)
    assert b2.creation != old
    assert a.peer_creation(b.node) == b2.creation
    wait_until(lambda: len(probe.messages(NodeUp)) == 2, "the second NodeUp")
    assert probe.messages(NodeUp) == [NodeUp(b.node, old), NodeUp(b.node, b2.creation)]


def test_a_restarted_node_replaces_a_connection_we_still_think_is_up(make_kernel):
    a = make_kernel("a")
    probe = Probe()
    a.monitor_nodes(probe.ref)
    first = _fake_peer(a, "x@127.0.0.1", creation=1)
    wait_until(lambda: a.nodes() == ["x@127.0.0.1"], "x to connect")
    second = _fake_peer(a, "x@127.0.0.1", creation=2)  # x "restarted" before a noticed
    wait_until(lambda: a.peer_creation("x@127.0.0.1") == 2, "the new incarnation")
    assert probe.wait_type(NodeDown) == NodeDown("x@127.0.0.1", "connection_closed")
    while data := first.recv(4096):  # a ping (name_check.py) and ticks, then a closed it
        assert b"pong" not in data
    first.close()
    second.close()


def test_a_peer_that_hangs_up_before_confirming_gives_connection_setup_failed(make_kernel):
    a = make_kernel("a")
    probe = Probe()
    a.monitor_nodes(probe.ref)
    sock = _fake_peer(a, "x@127.0.0.1", confirm=False)
    assert probe.wait_type(NodeUp).node == "x@127.0.0.1"
    sock.close()
    assert probe.wait_type(NodeDown) == NodeDown("x@127.0.0.1", "connection_setup_failed")


def test_a_silent_peer_gives_net_tick_timeout(make_kernel):
    a = make_kernel("a", net_ticktime=0.4)
    probe = Probe()
    a.monitor_nodes(probe.ref)
    sock = _fake_peer(a, "x@127.0.0.1")  # authenticates, then never sends a byte
    probe.wait_type(NodeUp)
    started = time.monotonic()
    down = probe.wait_type(NodeDown, timeout=5)
    assert down == NodeDown("x@127.0.0.1", "net_tick_timeout")
    assert time.monotonic() - started < 3  # only "it did not hang"
    # a ticked meanwhile: every net_ticktime/4 with nothing else to send.
    data = b""
    while True:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    assert data.count(TICK) >= 1
    sock.close()


def test_a_peer_that_ticks_stays_up(make_kernel):
    a, b = make_kernel("a", net_ticktime=0.4), make_kernel("b", net_ticktime=0.4)
    mesh(a, b)
    probe = Probe()
    a.monitor_nodes(probe.ref)
    assert a.connect(b.node)
    time.sleep(1.5)  # several net_ticktimes of idleness
    assert a.nodes() == [b.node] and probe.messages(NodeDown) == []


def test_send_and_call_to_our_own_node(make_kernel):
    a = make_kernel("a")
    probe = Probe()
    a.register("inbox", probe.ref)
    a.register("echo", Echo.start())
    a.send(a.node, "inbox", {"t": (1,)})
    assert probe.wait_type(Message) == Message(a.node, {"t": [1]})
    assert a.call(a.node, "echo", {"op": "echo"}) == {"node": a.node, "msg": {"op": "echo"}}
    with pytest.raises(RemoteCallError, match="noproc"):
        a.call(a.node, "nobody", {})
    with pytest.raises(DistTimeout):
        a.call(a.node, "echo", {"op": "sleep", "s": 0.2}, timeout=0.01)


def test_register_rules(make_kernel):
    a = make_kernel("a")
    one, two = Echo.start(), Echo.start()
    a.register("w", one)
    a.register("w", one)  # the same process again: fine
    with pytest.raises(ValueError, match="already registered"):
        a.register("w", two)
    assert a.whereis("w") is one and a.registered() == ["w"]
    one.stop()
    assert a.whereis("w") is None
    a.register("w", two)  # the old holder is dead: the name is free
    assert a.unregister("w") is True and a.unregister("w") is False
    with pytest.raises(ValueError, match="reserved"):
        a.register("urn:x", two)
    with pytest.raises(TypeError, match="local Process"):
        a.register("r", a.remote_ref("b@127.0.0.1", "w"))


def test_constructor_errors_say_what_was_expected():
    with pytest.raises(BadNodeName, match="name@host"):
        NetKernel.start("nohost", cookie="c")
    with pytest.raises(ValueError, match="cookie"):
        NetKernel.start("a@127.0.0.1", cookie="")
    with pytest.raises(ValueError, match="host:port"):
        NetKernel.start("a@127.0.0.1", "7001", cookie="c")
    with pytest.raises(ValueError, match="net_ticktime"):
        NetKernel.start("a@127.0.0.1", cookie="c", net_ticktime=0)
    with pytest.raises(ValueError, match="address of b@h"):
        NetKernel.start("a@127.0.0.1", cookie="c", peers={"b@h": "nowhere"})


def test_a_port_in_use_is_reported_with_the_address(make_kernel):
    a = make_kernel("a")
    with pytest.raises(OSError, match=f"cannot listen on {a.address}"):
        NetKernel.start("b@127.0.0.1", a.address, cookie="c")


def test_stop_closes_the_listener_and_the_connections(pair):
    a, b = pair
    probe = Probe()
    b.monitor_nodes(probe.ref)
    assert a.connect(b.node)
    host, port = a.address.split(":")
    a.actor_ref.stop()
    assert probe.wait_type(NodeDown).node == a.node
    with pytest.raises(OSError):
        socket.create_connection((host, int(port)), timeout=1).close()


def test_a_net_kernel_in_a_supervision_tree(make_kernel):
    b = make_kernel("b")
    spec = ChildSpec(
        "dist", (NetKernel, ["a@127.0.0.1", "127.0.0.1:0", COOKIE], {"peers": {b.node: b.address}})
    )
    sup = Supervisor.start(SupFlags(), [spec])
    (child,) = sup.proxy().which_children().get()
    a = NetKernel.of(child.ref)
    assert a.connect(b.node)
    sup.stop()
    wait_until(lambda: b.nodes() == [], "a to go when its supervisor stops")


# --------------------------------------------------------------------------- a fake peer


def _fake_peer(
    kernel: NetKernel, node: str, creation: int = 7, confirm: bool = True
) -> socket.socket:
    """A raw socket that does the handshake as `node` (with the pure core) and then does
    whatever the test makes it do. `confirm=False` leaves out the confirming tick."""
    host, port = kernel.address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    core = Connector(COOKIE, node, creation, kernel.node, nonce=b"\x05" * 32)
    core.start()
    while True:
        step = core.feed(sock.recv(4096))
        if step.out and (confirm or step.verdict is None):
            sock.sendall(step.out)
        if step.verdict is not None:
            assert isinstance(step.verdict, Established), step.verdict
            return sock


def test_fake_peer_helper_gets_frames(make_kernel):
    a = make_kernel("a")
    sock = _fake_peer(a, "x@127.0.0.1")
    probe = Probe()
    a.register("inbox", probe.ref)
    wait_until(lambda: a.nodes() == ["x@127.0.0.1"], "x to be up")
    a.send("x@127.0.0.1", "somebody", {"k": 1})
    decoder = FrameDecoder()
    frames: list = []
    while not [f for f in frames if f]:
        frames += decoder.feed(sock.recv(4096))
    assert [f for f in frames if f] == [{"v": 1, "t": "send", "to": "somebody", "m": {"k": 1}}]
    sock.close()
