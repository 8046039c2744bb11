"""The connection handshake, as a pure core: fed bytes and events, it returns bytes to write
and, at the end, a verdict. No sockets, no clock, no randomness (the shell passes the nonce).

Authentication comes first and is fixed-size binary, so nothing a peer sends is parsed (no
JSON, no length we trust) until it has proved it knows the cookie:

    acceptor  -> connector   CHALLENGE  MAGIC "RBTD" | version u16 | nonce_a (32)     38 bytes
    connector -> acceptor    ANSWER     MAGIC "RBTD" | version u16 | nonce_c (32)
                                        | HMAC-SHA256(cookie, "rabbitry-dist connector"
                                                      + nonce_a + nonce_c)          70 bytes
    acceptor  -> connector   ACK        HMAC-SHA256(cookie, "rabbitry-dist acceptor"
                                                    + nonce_c + nonce_a)            32 bytes

Each side proves the cookie over a nonce the other chose; the two labels stop a MAC being
reflected back. Then length-prefixed JSON frames (frames.py):

    connector -> acceptor    {"v":1,"t":"hello","node":..,"creation":..,"role":..}
    acceptor  -> connector   {"v":1,"t":"welcome","node":..,"creation":..,"role":..}
                          or {"v":1,"t":"refused","status":"nok"|"not_allowed"}
                          or {"v":1,"t":"refused","status":"name_in_use","at":ADDR}
                          or {"v":1,"t":"refused","status":"role","why":TEXT}

`role` is "core" or "ephemeral" (absent: core); the shell checks it against the cluster's
membership (a core name may not attach as ephemeral, nor the other way round).
    connector -> acceptor    a tick (empty frame): "set up", see messages.CONNECTION_SETUP_FAILED

The acceptor stops at `NeedDecision` after the hello: only the shell knows whether that node
is banned or already connecting to us (simultaneous connects: the connection started by the
greater node name wins, as in Erlang), and answers with `decide(status)`. The shell may
also refuse a hello whose name a live node holds (`name_in_use`, with where that node runs):
it asks the old link first, see netkernel's name check and DESIGN "Names and roles are
verified, not believed".
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from dataclasses import dataclass

from monitors.dist.frames import HEADER, TICK, FrameError, decode_body, encode
from monitors.dist.names import BadNodeName, validate_node

__all__ = [
    "ACK_SIZE",
    "ANSWER_SIZE",
    "CHALLENGE_SIZE",
    "MAGIC",
    "NONCE_SIZE",
    "PROTOCOL_VERSION",
    "Acceptor",
    "Connector",
    "Established",
    "Failed",
    "NeedDecision",
    "Step",
]

MAGIC = b"RBTD"
PROTOCOL_VERSION = 1
NONCE_SIZE = 32
MAC_SIZE = 32
_VERSION = struct.Struct(">H")
CHALLENGE_SIZE = len(MAGIC) + _VERSION.size + NONCE_SIZE
ANSWER_SIZE = CHALLENGE_SIZE + MAC_SIZE
ACK_SIZE = MAC_SIZE
_CONNECTOR_LABEL = b"rabbitry-dist connector"
_ACCEPTOR_LABEL = b"rabbitry-dist acceptor"

# Statuses the acceptor may answer a hello with.
OK = "ok"
NOK = "nok"  # we are connecting to you and our connection wins the tie-break
NOT_ALLOWED = "not_allowed"  # banned after a disconnect, or a connection to ourselves
NAME_IN_USE = "name_in_use"  # a live node holds that name (it answered us just now)
ROLE_CONFLICT = "role"  # the name is a member of the cluster under the other role
MAX_AT = 255  # the longest address a name_in_use refusal may carry
MAX_WHY = 1024  # the longest reason a role refusal may carry
ROLES = ("core", "ephemeral")


@dataclass(frozen=True)
class Established:
    """Handshake done: `node` and `creation` are the peer's; `rest` are bytes already read
    that belong to the frame stream."""

    node: str
    creation: int
    rest: bytes = b""
    role: str = "core"


@dataclass(frozen=True)
class NeedDecision:
    """Acceptor only: `node` (creation `creation`) is authenticated and says hello; the shell
    must call `decide(status)`."""

    node: str
    creation: int
    role: str = "core"


@dataclass(frozen=True)
class Failed:
    """Handshake over, no connection. `reason` is a short code:

    garbage (not our protocol), bad_version, bad_cookie, bad_frame, frame_too_large, timeout,
    closed (the peer hung up), refused (the acceptor said `detail`), wrong_node (the acceptor
    is not the node we meant to reach), name_in_use (the acceptor holds a live link from a
    node of our name: `detail` is the address where that node runs), role (the name is a
    member of the cluster under the other role: `detail` says why).
    """

    reason: str
    detail: str


Verdict = Established | NeedDecision | Failed | None


@dataclass(frozen=True)
class Step:
    """What one event produced: bytes to write (maybe none) and a verdict (maybe none yet)."""

    out: bytes = b""
    verdict: Verdict = None


def _mac(cookie: bytes, label: bytes, first: bytes, second: bytes) -> bytes:
    return hmac.new(cookie, label + first + second, hashlib.sha256).digest()


def _cookie_bytes(cookie: bytes | str) -> bytes:
    data = cookie.encode() if isinstance(cookie, str) else bytes(cookie)
    if not data:
        raise ValueError("cookie: must not be empty")
    return data


def _check_nonce(nonce: bytes) -> bytes:
    if len(nonce) != NONCE_SIZE:
        raise ValueError(f"nonce: expected {NONCE_SIZE} bytes; got {len(nonce)}")
    return bytes(nonce)


class _Core:
    """What both sides share: a buffer, the state, reading fixed blocks and one frame."""

    def __init__(self, max_frame: int) -> None:
        self._buf = b""
        self._state = "start"
        self._max_frame = max_frame
        self.verdict: Verdict = None

    @property
    def done(self) -> bool:
        """True once the handshake has ended (established or failed)."""
        return isinstance(self.verdict, Established | Failed)

    @property
    def state(self) -> str:
        return self._state

    def _take(self, size: int) -> bytes | None:
        if len(self._buf) < size:
            return None
        block, self._buf = self._buf[:size], self._buf[size:]
        return block

    def _take_greeting(self, size: int) -> bytes | Step:
        """The first binary block (magic, version, ...), or the Step to return: wait for more,
        or the end on garbage or a wrong version. A wrong magic is refused as soon as its
        bytes are in, rather than after waiting for a whole block of garbage."""
        block = self._take(size)
        if block is None:
            if len(self._buf) >= len(MAGIC) and not self._buf.startswith(MAGIC):
                return self._end(_garbage(self._buf))
            return Step()
        if not block.startswith(MAGIC):
            return self._end(_garbage(block))
        (version,) = _VERSION.unpack_from(block, len(MAGIC))
        if version != PROTOCOL_VERSION:
            return self._end(
                Failed(
                    "bad_version",
                    f"peer speaks handshake version {version}; we speak {PROTOCOL_VERSION}",
                )
            )
        return block

    def _take_frame(self) -> dict | Failed | None:
        if len(self._buf) < 4:
            return None
        (length,) = HEADER.unpack_from(self._buf)
        if length > self._max_frame:
            return Failed(
                "frame_too_large",
                f"handshake frame of {length} bytes exceeds the limit of {self._max_frame}",
            )
        if length == 0:
            return Failed("bad_frame", "a tick where the handshake expected a frame")
        if len(self._buf) < 4 + length:
            return None
        body, self._buf = self._buf[4 : 4 + length], self._buf[4 + length :]
        try:
            return decode_body(body)
        except FrameError as exc:
            return Failed("bad_frame", str(exc))

    def _peer_identity(self, frame: dict, expected_type: str) -> tuple[str, int, str] | Failed:
        if frame.get("t") != expected_type:
            return Failed("bad_frame", f"expected a {expected_type!r} frame; got {frame['t']!r}")
        node, creation = frame.get("node"), frame.get("creation")
        try:
            validate_node(node, "peer node name")
        except BadNodeName as exc:
            return Failed("bad_frame", str(exc))
        if type(creation) is not int or not 0 < creation < 2**32:
            return Failed("bad_frame", f"creation must be an int in 1..2**32-1; got {creation!r}")
        role = frame.get("role", "core")
        if role not in ROLES:
            return Failed("bad_frame", f"role must be one of {', '.join(ROLES)}; got {role!r}")
        return node, creation, role  # type: ignore[return-value]

    def _end(self, verdict: Verdict, out: bytes = b"") -> Step:
        self.verdict = verdict
        self._state = "done"
        return Step(out, verdict)

    def feed(self, data: bytes) -> Step:
        """Bytes arrived from the peer."""
        if self.done:
            return Step()
        self._buf += data
        return self._advance()

    def _advance(self) -> Step:  # pragma: no cover - overridden
        raise NotImplementedError

    def timeout(self) -> Step:
        """The shell's handshake deadline passed."""
        if self.done:
            return Step()
        return self._end(Failed("timeout", f"no {self._waiting_for()} within the timeout"))

    def closed(self) -> Step:
        """The peer closed the connection (or it failed) before the handshake ended."""
        if self.done:
            return Step()
        return self._end(Failed("closed", f"closed while waiting for {self._waiting_for()}"))

    def _waiting_for(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError


class Acceptor(_Core):
    """The side that accepted the TCP connection. Call `start()` first and write its bytes."""

    def __init__(
        self,
        cookie: bytes | str,
        node: str,
        creation: int,
        *,
        nonce: bytes,
        max_frame: int = 1 << 20,
        role: str = "core",
    ) -> None:
        super().__init__(max_frame)
        self._cookie = _cookie_bytes(cookie)
        self._node = validate_node(node)
        self._creation = creation
        self._nonce = _check_nonce(nonce)
        self._role = _check_role(role)
        self._peer: tuple[str, int, str] | None = None

    def start(self) -> Step:
        """Send the challenge."""
        self._state = "await_answer"
        return Step(MAGIC + _VERSION.pack(PROTOCOL_VERSION) + self._nonce)

    def _waiting_for(self) -> str:
        return {
            "start": "the start",
            "await_answer": "answer to our challenge",
            "await_hello": "hello frame",
            "await_decision": "decision",
        }.get(self._state, self._state)

    def _advance(self) -> Step:
        if self._state == "await_answer":
            block = self._take_greeting(ANSWER_SIZE)
            if isinstance(block, Step):
                return block
            offset = len(MAGIC) + _VERSION.size
            peer_nonce = block[offset : offset + NONCE_SIZE]
            peer_mac = block[offset + NONCE_SIZE :]
            want = _mac(self._cookie, _CONNECTOR_LABEL, self._nonce, peer_nonce)
            if not hmac.compare_digest(peer_mac, want):
                return self._end(Failed("bad_cookie", "the peer does not know our cookie"))
            self._state = "await_hello"
            ack = _mac(self._cookie, _ACCEPTOR_LABEL, peer_nonce, self._nonce)
            return Step(ack + self._advance().out, self.verdict)
        if self._state == "await_hello":
            frame = self._take_frame()
            if frame is None:
                return Step()
            if isinstance(frame, Failed):
                return self._end(frame)
            identity = self._peer_identity(frame, "hello")
            if isinstance(identity, Failed):
                return self._end(identity)
            self._peer = identity
            self._state = "await_decision"
            self.verdict = NeedDecision(*identity)
            return Step(b"", self.verdict)
        return Step()  # await_decision: bytes wait in the buffer until decide()

    def decide(self, status: str, at: str = "") -> Step:
        """Answer the hello: "ok" establishes; "nok"/"not_allowed" refuses; "name_in_use"
        refuses and tells the newcomer `at`, where the live node of its name runs; "role"
        refuses and tells it `at`, why its role conflicts with the cluster's files."""
        if self._state != "await_decision" or self._peer is None:
            raise RuntimeError(f"decide() called in state {self._state!r}")
        if status == OK:
            welcome = encode(
                {
                    "v": 1,
                    "t": "welcome",
                    "node": self._node,
                    "creation": self._creation,
                    "role": self._role,
                },
                self._max_frame,
            )
            rest, self._buf = self._buf, b""
            peer, creation, role = self._peer
            return self._end(Established(peer, creation, rest, role), welcome)
        if status not in (NOK, NOT_ALLOWED, NAME_IN_USE, ROLE_CONFLICT):
            raise ValueError(
                "status: expected 'ok', 'nok', 'not_allowed', 'name_in_use' or 'role'; "
                f"got {status!r}"
            )
        frame: dict = {"v": 1, "t": "refused", "status": status}
        if status == NAME_IN_USE:
            frame["at"] = at[:MAX_AT]
        elif status == ROLE_CONFLICT:
            frame["why"] = at[:MAX_WHY]
        refused = encode(frame, self._max_frame)
        return self._end(Failed("refused", f"we refused {self._peer[0]}: {status}"), refused)


class Connector(_Core):
    """The side that opened the TCP connection to reach `expect`. It writes nothing until it
    has checked the acceptor's challenge."""

    def __init__(
        self,
        cookie: bytes | str,
        node: str,
        creation: int,
        expect: str,
        *,
        nonce: bytes,
        max_frame: int = 1 << 20,
        role: str = "core",
    ) -> None:
        super().__init__(max_frame)
        self._cookie = _cookie_bytes(cookie)
        self._node = validate_node(node)
        self._creation = creation
        self._role = _check_role(role)
        self._expect = validate_node(expect, "node to connect to")
        self._nonce = _check_nonce(nonce)
        self._peer_nonce = b""
        self._state = "await_challenge"  # start() is optional: the connector speaks second

    def start(self) -> Step:
        """Nothing to send: wait for the acceptor's challenge."""
        self._state = "await_challenge"
        return Step()

    def _waiting_for(self) -> str:
        return {
            "start": "the start",
            # A node with `tls:` waits silently for a TLS hello, so a plain node sees this.
            "await_challenge": "challenge (does the peer run with `tls:` and this node not?)",
            # The acceptor hangs up here when our MAC is wrong: say so, it is the usual cause.
            "await_ack": "the acceptor's proof of the cookie (does it have our cookie?)",
            "await_welcome": "welcome frame",
        }.get(self._state, self._state)

    def _advance(self) -> Step:
        if self._state == "await_challenge":
            block = self._take_greeting(CHALLENGE_SIZE)
            if isinstance(block, Step):
                return block
            self._peer_nonce = block[len(MAGIC) + _VERSION.size :]
            mac = _mac(self._cookie, _CONNECTOR_LABEL, self._peer_nonce, self._nonce)
            self._state = "await_ack"
            answer = MAGIC + _VERSION.pack(PROTOCOL_VERSION) + self._nonce + mac
            step = self._advance()
            return Step(answer + step.out, step.verdict)
        if self._state == "await_ack":
            ack = self._take(ACK_SIZE)
            if ack is None:
                return Step()
            want = _mac(self._cookie, _ACCEPTOR_LABEL, self._nonce, self._peer_nonce)
            if not hmac.compare_digest(ack, want):
                return self._end(Failed("bad_cookie", "the acceptor does not know our cookie"))
            self._state = "await_welcome"
            hello = encode(
                {
                    "v": 1,
                    "t": "hello",
                    "node": self._node,
                    "creation": self._creation,
                    "role": self._role,
                },
                self._max_frame,
            )
            step = self._advance()
            return Step(hello + step.out, step.verdict)
        if self._state == "await_welcome":
            frame = self._take_frame()
            if frame is None:
                return Step()
            if isinstance(frame, Failed):
                return self._end(frame)
            if frame.get("t") == "refused":
                status = frame.get("status")
                at = frame.get("at")
                if status == NAME_IN_USE and isinstance(at, str) and 0 < len(at) <= MAX_AT:
                    return self._end(Failed("name_in_use", at))
                why = frame.get("why")
                if status == ROLE_CONFLICT and isinstance(why, str) and 0 < len(why) <= MAX_WHY:
                    return self._end(Failed("role", why))
                return self._end(Failed("refused", f"the acceptor refused us: {status}"))
            identity = self._peer_identity(frame, "welcome")
            if isinstance(identity, Failed):
                return self._end(identity)
            if identity[0] != self._expect:
                return self._end(
                    Failed(
                        "wrong_node",
                        f"the address answered as {identity[0]}, not {self._expect}",
                    )
                )
            rest, self._buf = self._buf, b""
            # The tick confirms the setup to the acceptor (see CONNECTION_SETUP_FAILED).
            return self._end(Established(identity[0], identity[1], rest, identity[2]), TICK)
        return Step()


def _check_role(role: str) -> str:
    if role not in ROLES:
        raise ValueError(f"role: expected one of {', '.join(ROLES)}; got {role!r}")
    return role


def _garbage(data: bytes) -> Failed:
    if data[:2] == b"\x16\x03":  # a TLS handshake record: a node with `tls:` dialled us
        return Failed(
            "garbage", "a TLS client hello: the peer runs with `tls:` and this node without"
        )
    return Failed("garbage", f"not a rabbitry dist peer (first bytes {data[:8]!r})")
