"""Frames (length-prefixed versioned JSON) and names (name@host, host:port)."""

from __future__ import annotations

import struct

import pytest

from monitors.dist.frames import TICK, FrameDecoder, FrameError, decode_body, encode
from monitors.dist.names import (
    BadAddress,
    BadNodeName,
    format_address,
    new_creation,
    parse_address,
    validate_node,
    validate_registered_name,
)


def test_encode_then_decode():
    frame = encode({"v": 1, "t": "send", "to": "x", "m": {"k": [1, "é"]}})
    assert struct.unpack(">I", frame[:4])[0] == len(frame) - 4
    assert FrameDecoder().feed(frame) == [{"v": 1, "t": "send", "to": "x", "m": {"k": [1, "é"]}}]


def test_frames_split_anywhere_and_ticks():
    data = encode({"v": 1, "t": "a"}) + TICK + encode({"v": 1, "t": "b"})
    decoder = FrameDecoder()
    out = []
    for i in range(len(data)):
        out += decoder.feed(data[i : i + 1])
    assert out == [{"v": 1, "t": "a"}, None, {"v": 1, "t": "b"}]
    assert decoder.buffered == 0


def test_the_size_limit_is_checked_on_the_header():
    decoder = FrameDecoder(max_frame=100)
    with pytest.raises(FrameError, match="limit") as info:
        decoder.feed(struct.pack(">I", 101))  # no body needed to refuse
    assert info.value.kind == "too_large"


def test_encode_refuses_what_it_could_not_send():
    with pytest.raises(FrameError, match="limit"):
        encode({"v": 1, "t": "x", "m": "y" * 200}, max_frame=100)
    with pytest.raises(TypeError):
        encode({"v": 1, "t": "x", "m": object()})
    with pytest.raises(ValueError):
        encode({"v": 1, "t": "x", "m": float("nan")})


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (b"\xff", "not_utf8"),
        (b"{", "not_json"),
        (b'{"v": 1, "t": "x", "n": Infinity}', "not_json"),
        (b"[]", "not_object"),
        (b'"s"', "not_object"),
        (b'{"t": "x"}', "bad_version"),
        (b'{"v": 2, "t": "x"}', "bad_version"),
        (b'{"v": 1}', "not_object"),
        (b'{"v": 1, "t": 3}', "not_object"),
    ],
)
def test_bad_bodies(body, kind):
    with pytest.raises(FrameError) as info:
        decode_body(body)
    assert info.value.kind == kind
    with pytest.raises(FrameError):
        FrameDecoder().feed(struct.pack(">I", len(body)) + body)


@pytest.mark.parametrize("node", ["a@127.0.0.1", "rabbit_1@host-2.example.com", "x@[::1]"])
def test_good_node_names(node):
    assert validate_node(node) == node


@pytest.mark.parametrize(
    "node", ["a", "a@", "@h", "a@b@c", "a b@h", "", 5, None, "a@h" + "x" * 300]
)
def test_bad_node_names(node):
    with pytest.raises(BadNodeName, match="node name"):
        validate_node(node)


def test_addresses():
    assert parse_address("127.0.0.1:7001") == ("127.0.0.1", 7001)
    assert parse_address("[::1]:0") == ("::1", 0)
    assert format_address("::1", 5) == "[::1]:5"
    assert format_address("h", 5) == "h:5"
    for bad in ["127.0.0.1", ":7001", "h:x", "h:70000", 7001]:
        with pytest.raises(BadAddress, match="address"):
            parse_address(bad)


def test_registered_names():
    assert validate_registered_name("rabbit_node_monitor") == "rabbit_node_monitor"
    for bad in ["", 3, "urn:uuid:1"]:
        with pytest.raises(ValueError, match="registered name"):
            validate_registered_name(bad)


def test_creation_is_a_fresh_nonzero_u32():
    seen = {new_creation() for _ in range(100)}
    assert len(seen) > 95
    assert all(0 < c < 2**32 for c in seen)


def test_json_depth_is_bounded_before_decoding():
    from monitors.json_depth import MAX_DEPTH, json_depth_exceeds

    assert not json_depth_exceeds("[" * MAX_DEPTH + "]" * MAX_DEPTH)
    assert json_depth_exceeds("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))
    assert not json_depth_exceeds('["' + "[" * 1000 + '"]')  # brackets in a string
    assert not json_depth_exceeds('["\\"' + "{" * 1000 + '"]')  # after an escaped quote
    body = b'{"v":1,"t":"x","m":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(FrameError) as exc:
        decode_body(body)
    assert exc.value.kind == "too_deep"
