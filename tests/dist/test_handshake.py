"""The handshake core, fed bytes by hand: every verdict, every bad input."""

from __future__ import annotations

import hashlib
import hmac
import struct

import pytest

from monitors.dist.frames import TICK, encode
from monitors.dist.handshake import (
    ACK_SIZE,
    ANSWER_SIZE,
    CHALLENGE_SIZE,
    MAGIC,
    Acceptor,
    Connector,
    Established,
    Failed,
    NeedDecision,
    Step,
)

A, B = "a@127.0.0.1", "b@127.0.0.1"
NA, NC = b"\x01" * 32, b"\x02" * 32


def acceptor(cookie: bytes = b"secret", **kw) -> Acceptor:
    return Acceptor(cookie, B, 222, nonce=NA, **kw)


def connector(cookie: bytes = b"secret", expect: str = B, **kw) -> Connector:
    return Connector(cookie, A, 111, expect, nonce=NC, **kw)


def run(acc: Acceptor, con: Connector, chunk: int | None = None) -> tuple[Step, Step]:
    """Shuttle bytes between the two cores until neither has anything to say; return the
    last step of each. The acceptor's NeedDecision is answered "ok"."""
    to_con = acc.start().out
    assert con.start() == Step()
    to_acc = b""
    last_acc = last_con = Step()
    while to_con or to_acc:
        if to_con:
            data, to_con = to_con, b""
            for piece in _pieces(data, chunk):
                last_con = con.feed(piece)
                to_acc += last_con.out
        if to_acc:
            data, to_acc = to_acc, b""
            for piece in _pieces(data, chunk):
                step = acc.feed(piece)
                if isinstance(step.verdict, NeedDecision):
                    step = acc.decide("ok")
                to_con += step.out
                if step != Step():  # bytes after the end (the confirming tick) say nothing
                    last_acc = step
    return last_acc, last_con


def _pieces(data: bytes, chunk: int | None) -> list[bytes]:
    if chunk is None:
        return [data]
    return [data[i : i + chunk] for i in range(0, len(data), chunk)]


def answer(cookie: bytes, challenge: bytes, version: int = 1, nonce: bytes = NC) -> bytes:
    peer_nonce = challenge[6:]
    mac = hmac.new(cookie, b"rabbitry-dist connector" + peer_nonce + nonce, hashlib.sha256)
    return MAGIC + struct.pack(">H", version) + nonce + mac.digest()


def authenticated_acceptor() -> Acceptor:
    acc = acceptor()
    challenge = acc.start().out
    step = acc.feed(answer(b"secret", challenge))
    assert len(step.out) == ACK_SIZE and step.verdict is None
    return acc


def authenticated_connector() -> Connector:
    """A connector that has checked the ACK and sent its hello; next it wants the welcome."""
    con = connector()
    acc = acceptor()
    step = con.feed(acc.start().out)
    ack = acc.feed(step.out).out
    step = con.feed(ack)
    assert step.out.startswith(b"\x00\x00\x00") and b'"hello"' in step.out
    return con


# ---------------------------------------------------------------------------- success


def test_both_sides_establish_with_each_others_names_and_creations():
    acc, con = acceptor(), connector()
    last_acc, last_con = run(acc, con)
    assert last_acc.verdict == Established(A, 111, b"")
    assert last_con.verdict == Established(B, 222, b"")
    assert acc.done and con.done


def test_the_connector_confirms_with_a_tick():
    acc, con = acceptor(), connector()
    _, last_con = run(acc, con)
    assert last_con.out == TICK


@pytest.mark.parametrize("chunk", [1, 3, 37])
def test_byte_by_byte_feeding_gives_the_same_result(chunk):
    last_acc, last_con = run(acceptor(), connector(), chunk)
    assert last_acc.verdict == Established(A, 111, b"")
    assert last_con.verdict == Established(B, 222, b"")


def test_the_acceptor_stops_for_a_decision_after_the_hello():
    acc = authenticated_acceptor()
    hello = encode({"v": 1, "t": "hello", "node": A, "creation": 111})
    step = acc.feed(hello)
    assert step == Step(b"", NeedDecision(A, 111))
    assert not acc.done


def test_sizes_of_the_binary_exchange():
    acc = acceptor()
    challenge = acc.start().out
    assert len(challenge) == CHALLENGE_SIZE == 38
    assert challenge.startswith(MAGIC)
    con = connector()
    con.start()
    assert len(con.feed(challenge).out) == ANSWER_SIZE == 70


def test_bytes_after_the_welcome_are_handed_over_as_rest():
    con = authenticated_connector()
    welcome = encode({"v": 1, "t": "welcome", "node": B, "creation": 222})
    extra = encode({"v": 1, "t": "send", "to": "x", "m": {}}) + TICK
    step = con.feed(welcome + extra)
    assert step.verdict == Established(B, 222, extra)


def test_bytes_after_the_hello_are_handed_over_as_rest():
    acc = authenticated_acceptor()
    hello = encode({"v": 1, "t": "hello", "node": A, "creation": 111})
    acc.feed(hello + TICK)
    step = acc.decide("ok")
    assert step.verdict == Established(A, 111, TICK)
    assert b'"welcome"' in step.out


def test_feeding_after_the_end_does_nothing():
    acc, con = acceptor(), connector()
    run(acc, con)
    assert acc.feed(b"more") == Step()
    assert con.feed(b"more") == Step()
    assert acc.timeout() == Step() and con.closed() == Step()


# ---------------------------------------------------------------------------- cookie


def test_wrong_cookie_on_the_connector_is_refused_before_anything_else_is_read():
    acc = acceptor(b"right")
    challenge = acc.start().out
    # A wrong MAC followed by a frame header announcing 4 GB: the MAC fails first.
    step = acc.feed(answer(b"wrong", challenge) + b"\xff\xff\xff\xff")
    assert step.out == b""  # no ACK: the acceptor proves nothing to a stranger
    assert isinstance(step.verdict, Failed) and step.verdict.reason == "bad_cookie"


def test_wrong_cookie_on_the_acceptor_is_refused_by_the_connector():
    acc, con = acceptor(b"theirs"), connector(b"ours")
    con.start()
    step = con.feed(acc.start().out)
    # Pretend the acceptor accepted our answer anyway and sent its (wrong) proof.
    fake_ack = hmac.new(b"theirs", b"rabbitry-dist acceptor" + NC + NA, hashlib.sha256).digest()
    step = con.feed(fake_ack)
    assert step.out == b""  # no hello to an acceptor that does not know the cookie
    assert isinstance(step.verdict, Failed) and step.verdict.reason == "bad_cookie"


def test_a_reflected_connector_mac_is_not_a_valid_ack():
    con = connector()
    con.start()
    acc = acceptor()
    answer_bytes = con.feed(acc.start().out).out
    reflected = answer_bytes[-32:]
    step = con.feed(reflected)
    assert isinstance(step.verdict, Failed) and step.verdict.reason == "bad_cookie"


def test_a_full_run_with_different_cookies_fails_on_the_acceptor():
    last_acc, last_con = run(acceptor(b"one"), connector(b"two"))
    assert last_acc.verdict.reason == "bad_cookie"
    assert last_con.verdict is None  # it is left waiting; the shell closes, then times out


# ---------------------------------------------------------------------------- garbage


@pytest.mark.parametrize("data", [b"GET / HTTP/1.1\r\n\r\n", b"\x00" * 80, b"RBTX" + b"\x00" * 66])
def test_garbage_to_the_acceptor(data):
    acc = acceptor()
    acc.start()
    step = acc.feed(data)
    assert step.out == b""
    assert step.verdict.reason == "garbage"
    assert repr(data[:8]) in step.verdict.detail


def test_garbage_is_refused_as_soon_as_the_magic_is_wrong():
    acc = acceptor()
    acc.start()
    assert acc.feed(b"GE") == Step()
    assert acc.feed(b"T ").verdict.reason == "garbage"


def test_garbage_to_the_connector():
    con = connector()
    con.start()
    step = con.feed(b"SSH-2.0-OpenSSH_9.0\r\n" + b"x" * 40)
    assert step.out == b"" and step.verdict.reason == "garbage"


def test_wrong_version_from_the_connector():
    acc = acceptor()
    challenge = acc.start().out
    step = acc.feed(answer(b"secret", challenge, version=2))
    assert step.verdict.reason == "bad_version"
    assert "version 2" in step.verdict.detail


def test_wrong_version_from_the_acceptor():
    con = connector()
    con.start()
    step = con.feed(MAGIC + struct.pack(">H", 9) + NA)
    assert step.out == b"" and step.verdict.reason == "bad_version"


# ---------------------------------------------------------------------------- frames


def test_an_oversized_hello_is_refused_on_its_header():
    acc = authenticated_acceptor()
    step = acc.feed(struct.pack(">I", 2_000_000))
    assert step.verdict.reason == "frame_too_large"
    assert "2000000" in step.verdict.detail


def test_an_oversized_welcome_is_refused_on_its_header():
    con = authenticated_connector()
    step = con.feed(struct.pack(">I", (1 << 20) + 1))
    assert step.verdict.reason == "frame_too_large"


def _framed(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"{not json", "not JSON"),
        (b"\xff\xfe", "not UTF-8"),
        (b"[1, 2]", "not an object"),
        (b'{"v": 2, "t": "hello", "node": "a@h", "creation": 1}', "version"),
        (b'{"v": 1, "t": "welcome", "node": "a@127.0.0.1", "creation": 1}', "expected a 'hello'"),
        (b'{"v": 1, "t": "hello", "node": "no-at-sign", "creation": 1}', "name@host"),
        (b'{"v": 1, "t": "hello", "node": "a@127.0.0.1"}', "creation"),
        (b'{"v": 1, "t": "hello", "node": "a@127.0.0.1", "creation": 0}', "creation"),
        (b'{"v": 1, "t": "hello", "node": "a@127.0.0.1", "creation": "1"}', "creation"),
        (b'{"v": 1, "t": "hello", "node": 5, "creation": 1}', "string"),
        (b'{"v": 1, "t": "hello", "node": "a@h", "creation": NaN}', "not JSON"),
    ],
)
def test_a_bad_hello_is_refused(body, why):
    acc = authenticated_acceptor()
    step = acc.feed(_framed(body))
    assert step.verdict.reason == "bad_frame"
    assert why in step.verdict.detail


def test_a_tick_instead_of_the_hello_is_refused():
    acc = authenticated_acceptor()
    assert acc.feed(TICK).verdict.reason == "bad_frame"


def test_a_bad_welcome_is_refused():
    con = authenticated_connector()
    step = con.feed(_framed(b'{"v": 1, "t": "welcome", "node": "b@127.0.0.1"}'))
    assert step.verdict.reason == "bad_frame"


# ---------------------------------------------------------------------------- decisions


@pytest.mark.parametrize("status", ["nok", "not_allowed"])
def test_a_refusal_is_sent_and_the_connector_learns_why(status):
    acc = authenticated_acceptor()
    acc.feed(encode({"v": 1, "t": "hello", "node": A, "creation": 111}))
    step = acc.decide(status)
    assert step.verdict.reason == "refused"
    con = authenticated_connector()
    con_step = con.feed(step.out)
    assert con_step.verdict.reason == "refused"
    assert status in con_step.verdict.detail


def test_decide_checks_its_input_and_its_state():
    acc = acceptor()
    acc.start()
    with pytest.raises(RuntimeError, match="decide"):
        acc.decide("ok")
    acc = authenticated_acceptor()
    acc.feed(encode({"v": 1, "t": "hello", "node": A, "creation": 111}))
    with pytest.raises(ValueError, match="status"):
        acc.decide("maybe")


def test_the_connector_refuses_an_acceptor_with_another_name():
    acc, con = acceptor(), connector(expect="c@127.0.0.1")
    _, last_con = run(acc, con)
    assert last_con.verdict.reason == "wrong_node"
    assert B in last_con.verdict.detail and "c@127.0.0.1" in last_con.verdict.detail
    assert last_con.out == b""  # no confirming tick


# ---------------------------------------------------------------------------- events


@pytest.mark.parametrize("stage", ["challenge", "hello", "decision"])
def test_timeout_in_each_acceptor_state(stage):
    acc = acceptor()
    challenge = acc.start().out
    if stage != "challenge":
        acc.feed(answer(b"secret", challenge))
    if stage == "decision":
        acc.feed(encode({"v": 1, "t": "hello", "node": A, "creation": 111}))
    step = acc.timeout()
    assert step.verdict.reason == "timeout"
    assert acc.done


@pytest.mark.parametrize("stage", ["challenge", "ack", "welcome"])
def test_timeout_and_close_in_each_connector_state(stage):
    for event in ("timeout", "closed"):
        con = connector()
        con.start()
        if stage != "challenge":
            acc = acceptor()
            ack = acc.feed(con.feed(acc.start().out).out).out
            if stage == "welcome":
                con.feed(ack)
        step = getattr(con, event)()
        assert step.verdict.reason == event


def test_a_close_after_our_answer_suggests_the_cookie():
    con = connector()
    con.start()
    con.feed(acceptor().start().out)
    assert "cookie" in con.closed().verdict.detail


def test_constructor_checks():
    with pytest.raises(ValueError, match="nonce"):
        Acceptor(b"c", B, 1, nonce=b"short")
    with pytest.raises(ValueError, match="cookie"):
        Connector(b"", A, 1, B, nonce=NC)
    with pytest.raises(ValueError, match="name@host"):
        Connector(b"c", A, 1, "nohost", nonce=NC)
