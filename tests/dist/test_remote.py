"""Links, monitors and exit signals between processes on different nodes."""

from __future__ import annotations

import time
from functools import partial

import pytest

from monitors.dist import Message, RemoteRef
from monitors.dist.remote import reason_from_wire, reason_to_wire
from supervisors import Down, Exit, Process, exit, exit_reason
from tests.dist.helpers import Echo, Probe, mesh, wait_until

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def pair(make_kernel):
    a, b = make_kernel("a"), make_kernel("b")
    mesh(a, b)
    return a, b


def links_of(ref):
    """What the process is linked to now (asked in its own thread)."""
    return ref.proxy().links.get()


def _worker(kernel, name="w", trap_exit=False, probe=None):
    ref = Echo.start(trap_exit=trap_exit, probe=probe)
    kernel.register(name, ref)
    return ref


def test_a_remote_link_fires_noconnection_on_both_sides_when_the_connection_goes(pair):
    a, b = pair
    remote_seen = Probe()
    w = _worker(b, trap_exit=True, probe=remote_seen)
    probe = Probe()
    rref = a.remote_ref(b.node, "w")
    probe.link(rref)
    wait_until(partial(links_of, w), "the link to reach b")
    a.disconnect(b.node)
    assert probe.wait_type(Exit) == Exit(rref, "noconnection")
    # b's side of the link fired too; its sender names the linker by its process identity.
    got = remote_seen.wait_type(Exit)
    assert got.reason == "noconnection"
    assert got.sender == RemoteRef(a.node, probe.ref.actor_urn)
    assert w.proxy().links.get() == []


def test_a_remote_monitor_gives_down_noconnection(pair):
    a, b = pair
    _worker(b)
    probe = Probe()
    rref = a.remote_ref(b.node, "w")
    mid = probe.monitor(rref)
    wait_until(lambda: b._conns[a.node].mon_in, "the monitor to reach b")
    b.disconnect(a.node)  # from the other side this time
    assert probe.wait_type(Down) == Down(mid, rref, "noconnection")


def test_a_remote_crash_reason_crosses_as_its_string_form(pair):
    a, b = pair
    w = _worker(b)
    probe = Probe()
    rref = a.remote_ref(b.node, "w")
    probe.link(rref)
    mid = probe.monitor(rref)
    wait_until(partial(links_of, w), "the link to reach b")
    a.send(b.node, "w", {"op": "raise", "text": "boom"})
    assert probe.wait_type(Exit) == Exit(rref, "ValueError('boom')")
    assert probe.wait_type(Down) == Down(mid, rref, "ValueError('boom')")
    assert a.nodes() == [b.node]  # the connection is unaffected


def test_a_non_trapping_process_dies_with_the_remote_reason(pair):
    a, b = pair
    w = _worker(b)
    local = Probe(trap_exit=False)
    local.link(a.remote_ref(b.node, "w"))
    wait_until(partial(links_of, w), "the link to reach b")
    a.send(b.node, "w", {"op": "exit", "reason": ["shutdown", "bye"]})
    wait_until(lambda: exit_reason(local.ref) is not None, "the local process to end")
    assert exit_reason(local.ref) == ("shutdown", "bye")  # a tuple stays a tuple


def test_normal_exit_crosses_and_does_not_kill_a_non_trapping_process(pair):
    a, b = pair
    w = _worker(b)
    trapping, plain = Probe(), Probe(trap_exit=False)
    rref = a.remote_ref(b.node, "w")
    trapping.link(rref)
    plain.link(rref)
    wait_until(lambda: len(w.proxy().links.get()) == 2, "both links to reach b")
    a.send(b.node, "w", {"op": "exit", "reason": "normal"})
    assert trapping.wait_type(Exit) == Exit(rref, "normal")
    time.sleep(0.05)
    assert exit_reason(plain.ref) is None


def test_a_local_death_reaches_the_remote_linked_process(pair):
    a, b = pair
    seen = Probe()
    w = _worker(b, trap_exit=True, probe=seen)
    local = Probe(trap_exit=False)
    local.link(a.remote_ref(b.node, "w"))
    wait_until(partial(links_of, w), "the link to reach b")
    exit(local.ref, ("shutdown", {"why": "test"}))
    got = seen.wait_type(Exit)
    assert got.reason == ("shutdown", {"why": "test"})
    assert got.sender == RemoteRef(a.node, local.ref.actor_urn)
    assert w.proxy().links.get() == []


def test_monitor_and_link_to_an_unregistered_name_give_noproc(pair):
    a, b = pair
    probe = Probe()
    rref = a.remote_ref(b.node, "nobody")
    mid = probe.monitor(rref)
    assert probe.wait_type(Down) == Down(mid, rref, "noproc")
    probe.link(rref)
    assert probe.wait_type(Exit) == Exit(rref, "noproc")


def test_demonitor_and_unlink_across_nodes(pair):
    a, b = pair
    w = _worker(b)
    probe = Probe()
    rref = a.remote_ref(b.node, "w")
    mid = probe.monitor(rref)
    probe.link(rref)
    wait_until(lambda: w.proxy().links.get() and b._conns[a.node].mon_in, "link and monitor")
    assert probe.demonitor(mid) is True
    probe.unlink(rref)
    wait_until(lambda: not w.proxy().links.get() and not b._conns[a.node].mon_in, "both gone")
    a.send(b.node, "w", {"op": "raise"})
    wait_until(lambda: exit_reason(w) is not None, "w to crash")
    time.sleep(0.1)
    assert probe.messages(Down) == [] and probe.messages(Exit) == []


def test_an_exit_signal_to_a_remote_process(pair):
    a, b = pair
    seen = Probe()
    trapping = _worker(b, "t", trap_exit=True, probe=seen)
    plain = _worker(b, "p")
    probe = Probe()
    probe.run(lambda p: exit(a.remote_ref(b.node, "t"), "stop please"))
    got = seen.wait_type(Exit)
    assert got == Exit(RemoteRef(a.node, probe.ref.actor_urn), "stop please")
    assert exit_reason(trapping) is None
    # The receiver can answer the sender it was told about, by its process identity.
    got.sender.kernel.send(a.node, got.sender.name, {"answer": 1})
    assert probe.wait_type(Message) == Message(b.node, {"answer": 1})
    exit(a.remote_ref(b.node, "p"), "kill")  # from outside any process: no sender
    wait_until(lambda: exit_reason(plain) is not None, "p to be killed")
    assert exit_reason(plain) == "killed"


def test_link_and_monitor_to_an_unreachable_node_give_noconnection(make_kernel):
    a = make_kernel("a")
    probe = Probe()
    rref = a.remote_ref("nowhere@127.0.0.1", "w")
    mid = probe.monitor(rref)
    assert probe.wait_type(Down) == Down(mid, rref, "noconnection")
    probe.link(rref)
    assert probe.wait_type(Exit) == Exit(rref, "noconnection")


def test_remote_ref_tell_and_ask(pair):
    a, b = pair
    probe = Probe()
    b.register("inbox", probe.ref)
    _worker(b)
    a.remote_ref(b.node, "inbox").tell({"k": "v"})
    assert probe.wait_type(Message) == Message(a.node, {"k": "v"})
    assert a.remote_ref(b.node, "w").ask({"op": "echo"})["node"] == a.node
    assert RemoteRef(b.node, "w") == a.remote_ref(b.node, "w")  # the kernel is not compared
    assert a.remote_ref(b.node, "w").actor_urn == f"dist:{b.node}/w"


def test_a_remote_ref_to_our_own_node_is_the_local_process(make_kernel):
    a = make_kernel("a")
    w = _worker(a)
    probe = Probe()
    mid = probe.monitor(a.remote_ref(a.node, "w"))
    w.stop()
    assert probe.wait_type(Down).monitor_id == mid


def test_remote_ref_needs_a_kernel_when_there_are_several(pair):
    with pytest.raises(RuntimeError, match="2 NetKernels"):
        RemoteRef("b@127.0.0.1", "w").tell({})


def test_reasons_on_the_wire():
    cases = [
        ("normal", "normal"),
        (("shutdown", "x"), ("shutdown", "x")),
        (("shutdown", ("nested", 1)), ("shutdown", ("nested", 1))),
        (ValueError("boom"), "ValueError('boom')"),
        (KeyError(), "KeyError"),
        (None, None),
        (42, 42),
        ([1, {"k": (2,)}], [1, {"k": (2,)}]),
        ({"tuple": 1}, {"tuple": 1}),
        ({1: 2}, "{1: 2}"),
        (object, repr(object)),
    ]
    for reason, back in cases:
        assert reason_from_wire(reason_to_wire(reason)) == back


class _Linker(Process):
    """Links to a RemoteRef in on_start and records what happens, to check that a link
    made while starting also crosses."""

    def __init__(self, rref, probe):
        super().__init__()
        self.trap_exit = True
        self.rref = rref
        self.probe = probe

    def on_start(self):
        self.link(self.rref)

    def on_receive(self, message):
        self.probe.ref.tell(message)


def test_a_link_made_in_on_start_crosses(pair):
    a, b = pair
    w = _worker(b)
    probe = Probe()
    rref = a.remote_ref(b.node, "w")
    _Linker.start(rref, probe)
    wait_until(partial(links_of, w), "the link to reach b")
    w.stop()
    assert probe.wait_type(Exit) == Exit(rref, "normal")


def test_a_remote_ref_with_no_kernel_to_use_never_breaks_a_process(pair):
    probe = Probe()
    rref = RemoteRef("b@127.0.0.1", "w")  # two kernels run: which one is ambiguous
    mid = probe.monitor(rref)
    assert probe.wait_type(Down) == Down(mid, rref, "noproc")
    probe.ref.stop()  # its teardown walks its monitors: no error
    assert exit_reason(probe.ref) == "normal"
