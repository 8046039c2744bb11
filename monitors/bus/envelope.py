"""The wire envelope: one versioned JSON object per message, the same on every backend.

    {"v": 1, "id": "<hex>", "from": "<node>", "rk": "<routing key>", "ts": <wall clock>,
     "to": "<node>" (direct sends only), "body": {...}}

JSON, never pickle (docs/architecture.md, rule 4): a frame from the broker is input from anyone who can
reach the broker. Decoding checks everything and raises BadFrame with a reason the bus logs.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from dataclasses import dataclass
from typing import Any

from monitors.bus.topic import validate_routing_key

VERSION = 1
MAX_FRAME = 1024 * 1024  # 1 MiB, the default frame limit


# The ids' own generator, not the random module's shared one: code that seeds or watches the
# shared one (hypothesis does, while it draws) must not see the bus's threads move it. Seeded
# from the OS now, and again in a forked child (as the module's own is), so that two
# processes never share a sequence.
_IDS = random.Random()
os.register_at_fork(after_in_child=_IDS.seed)


class BadFrame(ValueError):
    """An incoming frame that is not a valid envelope. `kind` is one of a fixed set of short
    codes (too_big, not_utf8, not_json, not_object, bad_version, missing_field, bad_field,
    bad_key, misaddressed, key_mismatch); `reason` says exactly why, for the log."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(f"{kind}: {reason}")
        self.kind, self.reason = kind, reason


@dataclass(frozen=True)
class BusMessage:
    """A delivered message. `sent_at` is the sender's wall clock (time.time()), so compare it
    with care across hosts. `body` is shared by every handler of this message: treat it as
    read-only."""

    routing_key: str
    sender: str
    body: dict[str, Any]
    direct: bool
    sent_at: float
    id: str


def new_id() -> str:
    """A random 128-bit message id in hex: unique enough to deduplicate redeliveries.

    From a `random.Random` (seeded from the OS at start and again in every forked child), not uuid4:
    uuid4 reads os.urandom, a system call that lets go of the GIL, and with many nodes in one
    process every let-go is a wait in line for it again (3 ms a message at 50 nodes). The id
    needs to be unique, not unguessable: whoever can publish on the bus can name any id."""
    return f"{_IDS.getrandbits(128):032x}"


def encode(
    sender: str,
    routing_key: str,
    body: dict[str, Any],
    *,
    to: str | None = None,
    msg_id: str | None = None,
    ts: float | None = None,
    max_frame: int = MAX_FRAME,
) -> tuple[str, bytes]:
    """Build a frame; return (id, bytes). Raises TypeError for a body that is not a JSON object
    and ValueError for a bad routing key, NaN/Infinity, or a frame over `max_frame` bytes, all
    before anything is sent."""
    validate_routing_key(routing_key)
    if not isinstance(body, dict):
        raise TypeError(
            f"a bus message body must be a dict (a JSON object), not {type(body).__name__}"
        )
    msg_id = msg_id or new_id()
    envelope: dict[str, Any] = {
        "v": VERSION,
        "id": msg_id,
        "from": sender,
        "rk": routing_key,
        "ts": time.time() if ts is None else ts,
    }
    if to is not None:
        envelope["to"] = to
    envelope["body"] = body
    try:
        text = _encode_json(envelope)
    except TypeError as exc:
        raise TypeError(
            f"bus message body for {routing_key!r} is not JSON-serializable: {exc}"
        ) from None
    except ValueError as exc:
        raise ValueError(f"bus message body for {routing_key!r} is not valid JSON: {exc}") from None
    data = text.encode()
    if len(data) > max_frame:
        raise ValueError(
            f"bus message for {routing_key!r} is {len(data)} bytes, over the frame limit of "
            f"{max_frame} bytes; send less (or a reference to it), or raise max_frame on every node"
        )
    return msg_id, data


def _reject_constant(name: str) -> Any:
    raise BadFrame("not_json", f"{name} is not JSON")


# One encoder and one decoder for every frame: json.dumps and json.loads with options build
# a new JSONEncoder or JSONDecoder (and its scanner) per call, a few microseconds a frame on
# the path every message takes. Same output and same checks as those calls; both are safe to
# share between threads (json's own default ones are). allow_nan=False: NaN is not JSON, and
# other languages' parsers reject it.
_encode_json = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode
_decode_json = json.JSONDecoder(parse_constant=_reject_constant).decode


def decode(data: bytes, *, max_frame: int = MAX_FRAME) -> dict[str, Any]:
    """Parse and check a frame; return the envelope dict, or raise BadFrame(reason)."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise BadFrame("bad_field", f"frame is {type(data).__name__}, not bytes")
    if len(data) > max_frame:
        raise BadFrame("too_big", f"frame of {len(data)} bytes is over the limit of {max_frame}")
    try:
        text = (data if type(data) is bytes else bytes(data)).decode("utf-8")
        envelope = _decode_json(text)
    except BadFrame:
        raise
    except UnicodeDecodeError:
        raise BadFrame("not_utf8", "not UTF-8") from None
    except RecursionError:
        raise BadFrame("not_json", "JSON nested too deeply") from None
    except ValueError as exc:
        raise BadFrame("not_json", f"not JSON: {exc}") from None
    if not isinstance(envelope, dict):
        raise BadFrame("not_object", f"not a JSON object but a {type(envelope).__name__}")
    version = envelope.get("v")
    if version != VERSION:
        raise BadFrame(
            "bad_version", f"unsupported envelope version {version!r} (this node speaks {VERSION})"
        )
    for field, kind in (("id", str), ("from", str), ("rk", str), ("body", dict)):
        if field not in envelope:
            raise BadFrame("missing_field", f"missing field {field!r}")
        if not isinstance(envelope[field], kind):
            raise BadFrame(
                "bad_field",
                f"field {field!r} is a {type(envelope[field]).__name__}, not {kind.__name__}",
            )
    ts = envelope.get("ts")
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
        raise BadFrame("bad_field", f"field 'ts' is {ts!r}, not a number of seconds")
    to = envelope.get("to")
    if to is not None and not isinstance(to, str):
        raise BadFrame("bad_field", f"field 'to' is a {type(to).__name__}, not str")
    if not envelope["id"] or not envelope["from"]:
        raise BadFrame("bad_field", "empty 'id' or 'from'")
    try:
        validate_routing_key(envelope["rk"])
    except ValueError as exc:
        raise BadFrame("bad_key", str(exc)) from None
    return envelope


def to_message(envelope: dict[str, Any]) -> BusMessage:
    """The BusMessage a handler sees for a decoded envelope."""
    return BusMessage(
        routing_key=envelope["rk"],
        sender=envelope["from"],
        body=envelope["body"],
        direct=envelope.get("to") is not None,
        sent_at=float(envelope["ts"]),
        id=envelope["id"],
    )
