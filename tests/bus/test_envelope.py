"""The wire envelope: round trip, limits, and every kind of bad frame."""

from __future__ import annotations

import json

import pytest

from monitors.bus.envelope import VERSION, BadFrame, decode, encode, to_message


def frame(**fields: object) -> bytes:
    envelope = {"v": 1, "id": "i1", "from": "a@h", "rk": "worker.heartbeat", "ts": 1.5, "body": {}}
    envelope.update(fields)
    return json.dumps({k: v for k, v in envelope.items() if v is not ...}).encode()


def test_round_trip() -> None:
    msg_id, data = encode("a@h", "worker.heartbeat", {"clock": 3, "s": "é"}, ts=12.5)
    message = to_message(decode(data))
    assert message.id == msg_id and message.sender == "a@h"
    assert message.body == {"clock": 3, "s": "é"} and message.sent_at == 12.5
    assert message.routing_key == "worker.heartbeat" and message.direct is False
    assert json.loads(data)["v"] == VERSION


def test_direct_round_trip() -> None:
    _, data = encode("a@h", "rcs.ping", {}, to="b@h")
    message = to_message(decode(data))
    assert message.direct is True


def test_size_limit_on_encode() -> None:
    encode("a", "k", {"x": "y" * 800}, max_frame=1000)
    with pytest.raises(ValueError, match="frame limit of 1000"):
        encode("a", "k", {"x": "y" * 1000}, max_frame=1000)


@pytest.mark.parametrize(
    ("body", "error"),
    [([1], TypeError), ({"x": object()}, TypeError), ({"x": float("nan")}, ValueError)],
)
def test_bad_bodies_raise_before_sending(body: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        encode("a", "k", body)  # type: ignore[arg-type]


def test_bad_routing_key_raises() -> None:
    with pytest.raises(ValueError):
        encode("a", "a.*", {})


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (b"\xff\xfe", "not_utf8"),
        (b"not json", "not_json"),
        (b'{"v":1,"x":NaN}', "not_json"),
        (b"[" * 100_000 + b"]" * 100_000, "not_json"),
        (b"[1,2]", "not_object"),
        (frame(v=2), "bad_version"),
        (frame(v=...), "bad_version"),
        (frame(id=...), "missing_field"),
        (frame(body=...), "missing_field"),
        (frame(body=[1]), "bad_field"),
        (frame(ts="now"), "bad_field"),
        (frame(ts=True), "bad_field"),
        (frame(to=5), "bad_field"),
        (frame(id=""), "bad_field"),
        (frame(rk="a.*"), "bad_key"),
        (frame(body={"x": "y" * 2000}), "too_big"),
    ],
)
def test_bad_frames(data: bytes, kind: str) -> None:
    with pytest.raises(BadFrame) as info:
        decode(data, max_frame=1000 if kind == "too_big" else 1_000_000)
    assert info.value.kind == kind
    assert info.value.reason


def test_unknown_fields_are_tolerated() -> None:
    # Forward compatibility within version 1: a newer sender may add fields.
    assert decode(frame(extra="x"))["id"] == "i1"
