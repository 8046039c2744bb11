"""The core's routing table: every message type the schemas accept has a handler, and a type
without one is logged and dropped (it once fell into the autoheal state machine)."""

from __future__ import annotations

from monitors.effects import Log
from monitors.node_monitor import autoheal as ah
from monitors.node_monitor.messages import SCHEMAS
from tests.node_monitor.helpers import CREATION, B, connect, core, of, sends


def test_every_schema_type_has_a_handler() -> None:
    c = core()
    assert set(c._routes) == set(SCHEMAS)
    for t in ah.MESSAGE_TYPES:
        assert c._routes[t] == c._on_autoheal


def test_a_type_without_a_handler_is_logged_and_dropped_not_given_to_autoheal() -> None:
    c = core(mode="autoheal")
    connect(c, B)
    del c._routes["autoheal_status_request"]  # a type the schemas know, no handler here
    before = c.autoheal.state
    out = c.receive(B, {"t": "autoheal_status_request", "c": CREATION[B]}, 1.0)
    assert not sends(out, "autoheal_status")  # autoheal would have answered with its status
    assert c.autoheal.state == before
    dropped = [e for e in of(out, Log) if "no use" in e.text]
    assert len(dropped) == 1 and dropped[0].fields["t"] == "autoheal_status_request"


def test_a_routed_autoheal_type_still_reaches_autoheal() -> None:
    c = core(mode="autoheal")
    connect(c, B)
    out = c.receive(B, {"t": "autoheal_status_request", "c": CREATION[B]}, 1.0)
    assert sends(out, "autoheal_status", to=B)


def test_messages_carry_v1_and_messages_without_v_are_still_read() -> None:
    c = core()
    out = connect(c, B)  # helpers.peer and helpers.view send no "v", as today's peers do
    assert B in c.status()["running"]
    assert all(e.msg["v"] == 1 for e in sends(out))
    alarm = {"v": 1, "t": "alarm", "c": CREATION[B], "resources": ["disk"]}
    c.receive(B, alarm, 1.0)
    assert c.status()["alarms"] == {B: ["disk"]}
    out = c.receive(B, {**alarm, "v": 2, "resources": []}, 2.0)
    assert c.status()["alarms"] == {B: ["disk"]}  # a version we cannot read is dropped
    assert any("version" in str(e.fields.get("problem")) for e in of(out, Log))
