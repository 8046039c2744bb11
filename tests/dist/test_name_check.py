"""One live process per name across hosts (name_check.py): a second process that claims the
name of a node we hold a live link from is refused once the old link answers a ping; a
silent old link is a restart in progress, and the newcomer is let in."""

from __future__ import annotations

import socket
import threading

from monitors.dist import NodeDown, NodeUp
from monitors.dist.handshake import NAME_IN_USE, Acceptor, Connector, Failed, NeedDecision
from tests.dist.helpers import COOKIE, Probe, mesh, wait_until
from tests.dist.test_kernel import _fake_peer


def _refusals() -> tuple[list[str], threading.Event, object]:
    seen: list[str] = []
    done = threading.Event()

    def on_refused(reason: str, line: str) -> None:
        assert reason == "name_in_use"
        seen.append(line.rpartition(" at ")[2])
        done.set()

    return seen, done, on_refused


def test_the_handshake_core_carries_where_the_live_node_runs():
    acceptor = Acceptor(COOKIE, "a@h", 1, nonce=b"\x01" * 32)
    connector = Connector(COOKIE, "b@h", 2, "a@h", nonce=b"\x02" * 32)
    answer = connector.feed(acceptor.start().out).out
    hello = connector.feed(acceptor.feed(answer).out).out
    assert isinstance(acceptor.feed(hello).verdict, NeedDecision)
    refused = acceptor.decide(NAME_IN_USE, "10.0.0.2:7002")
    assert connector.feed(refused.out).verdict == Failed("name_in_use", "10.0.0.2:7002")


def test_a_second_process_of_a_live_name_is_refused_and_the_cluster_is_undisturbed(
    make_kernel,
):
    a, b = make_kernel("a"), make_kernel("b")
    mesh(a, b)
    probe = Probe()
    a.monitor_nodes(probe.ref)
    assert a.connect(b.node)
    seen, done, callback = _refusals()
    twin = make_kernel("b", on_refused=callback)
    twin.set_address(a.node, a.address)
    assert not twin.connect(a.node)
    assert done.wait(5), "the twin was never told its name is taken"
    assert seen == [b.address]
    assert a.nodes() == [b.node] and a.peer_creation(b.node) == b.creation
    assert probe.messages(NodeDown) == []
    assert probe.messages(NodeUp) == [NodeUp(b.node, b.creation)]
    assert a.names.counts() == {"name_in_use": 1}
    assert twin.names.counts() == {"name_in_use": 1}


def test_a_process_that_claims_our_own_name_is_refused(make_kernel):
    b = make_kernel("b")
    host, port = b.address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    core = Connector(COOKIE, b.node, 99, b.node, nonce=b"\x05" * 32)
    step = core.start()
    while step.verdict is None:
        step = core.feed(sock.recv(4096))
        sock.sendall(step.out)
    sock.close()
    assert step.verdict == Failed("name_in_use", b.address)


def test_a_silent_old_link_is_a_restart_and_the_newcomer_is_let_in(make_kernel):
    a = make_kernel("a", name_check_timeout=0.2)
    probe = Probe()
    a.monitor_nodes(probe.ref)
    first = _fake_peer(a, "x@127.0.0.1", creation=1)  # never answers a ping: frozen, gone
    wait_until(lambda: a.nodes() == ["x@127.0.0.1"], "x to connect")
    second = _fake_peer(a, "x@127.0.0.1", creation=2)
    wait_until(lambda: a.peer_creation("x@127.0.0.1") == 2, "the new incarnation")
    assert probe.wait_type(NodeDown) == NodeDown("x@127.0.0.1", "connection_closed")
    assert a.names.counts() == {}
    first.close()
    second.close()


def test_a_refused_node_without_a_callback_backs_off(make_kernel):
    a, b = make_kernel("a"), make_kernel("b")
    mesh(a, b)
    assert a.connect(b.node)
    twin = make_kernel("b")
    twin.set_address(a.node, a.address)
    assert not twin.connect(a.node)
    assert not twin.connect(a.node)  # backing off: not even tried
    assert a.names.counts() == {"name_in_use": 1}


def test_a_role_conflict_is_refused_with_the_reason(make_kernel):
    def check(node: str, role: str) -> str:
        return f"{node} is a core member; it cannot attach as {role}" if role != "core" else ""

    a = make_kernel("a", role_check=check)
    reasons: list[tuple[str, str]] = []
    done = threading.Event()
    x = make_kernel("c", role="ephemeral", on_refused=lambda *r: (reasons.append(r), done.set()))
    x.set_address(a.node, a.address)
    assert not x.connect(a.node)
    assert done.wait(5)
    assert reasons == [
        ("role", "node c@127.0.0.1: c@127.0.0.1 is a core member; it cannot attach as ephemeral")
    ]
    assert a.names.counts() == {"role": 1}
    assert a.nodes() == []


def test_the_connector_checks_the_role_the_acceptor_says(make_kernel):
    flipped = make_kernel("c", role="ephemeral")
    a = make_kernel("a", role_check=lambda node, role: "flipped" if role == "ephemeral" else "")
    a.set_address(flipped.node, flipped.address)
    assert not a.connect(flipped.node)
    assert a.names.counts() == {"role": 1}
    wait_until(lambda: flipped.nodes() == [], "the flipped node to see the link go")
