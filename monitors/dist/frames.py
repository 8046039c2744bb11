"""Frames: a 4-byte big-endian length, then that many bytes of UTF-8 JSON (an object).

Every object carries `"v": 1` (the wire version) and `"t"` (its type). A zero length is a
tick: a keepalive with no body, as Erlang's dist ticks are. The size limit is checked on the
header, before the body is read or buffered, so a peer cannot make us hold a huge frame.
Never pickle: a frame can only ever decode to JSON data.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from monitors.json_depth import MAX_DEPTH, json_depth_exceeds

__all__ = [
    "TICK",
    "VERSION",
    "FrameDecoder",
    "FrameError",
    "decode_body",
    "encode",
]

VERSION = 1
HEADER = struct.Struct(">I")
TICK = b"\x00\x00\x00\x00"
DEFAULT_MAX_FRAME = 1 << 20


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# Built once: json.dumps/loads with options build a new encoder/decoder on every call.
_encode_json = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
_decode_json = json.JSONDecoder(parse_constant=_reject_constant).decode


class FrameError(Exception):
    """A frame we cannot accept; `kind` is "too_large", "not_utf8", "not_json", "too_deep",
    "not_object" or "bad_version". The connection it came on is closed."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind


def encode(obj: dict[str, Any], max_frame: int = DEFAULT_MAX_FRAME) -> bytes:
    """One frame for `obj` (which should hold "v" and "t").

    Raises TypeError/ValueError if it is not JSON, FrameError("too_large") over `max_frame`.
    """
    body = _encode_json(obj).encode()
    if len(body) > max_frame:
        raise FrameError(
            "too_large", f"frame of {len(body)} bytes exceeds the limit of {max_frame} bytes"
        )
    return HEADER.pack(len(body)) + body


def decode_body(body: bytes | bytearray | memoryview) -> dict[str, Any]:
    """Decode and check one frame body: UTF-8, JSON, an object, our version, a string "t"."""
    try:
        text = bytes(body).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FrameError("not_utf8", f"frame is not UTF-8: {exc}") from None
    if json_depth_exceeds(text):
        raise FrameError("too_deep", f"frame nests JSON deeper than {MAX_DEPTH} levels")
    try:
        obj = _decode_json(text)
    except ValueError as exc:  # JSONDecodeError, and NaN/Infinity
        raise FrameError("not_json", f"frame is not JSON: {exc}") from None
    if type(obj) is not dict:
        raise FrameError("not_object", f"frame is a JSON {type(obj).__name__}, not an object")
    if obj.get("v") != VERSION:
        raise FrameError(
            "bad_version", f"frame has version {obj.get('v')!r}; this node speaks {VERSION}"
        )
    if type(obj.get("t")) is not str:
        raise FrameError("not_object", "frame has no string type key 't'")
    return obj


class FrameDecoder:
    """Incremental decoder: feed it bytes as they arrive, get whole frames back.

    `feed` returns a list with one dict per frame and None per tick, and raises FrameError
    on the first bad frame (the decoder is then unusable, as the connection is).
    """

    __slots__ = ("_buf", "_max")

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self._buf = b""
        self._max = max_frame

    def feed(self, data: bytes) -> list[dict[str, Any] | None]:
        buf = self._buf + data if self._buf else data
        out: list[dict[str, Any] | None] = []
        pos, size = 0, len(buf)
        unpack = HEADER.unpack_from
        while size - pos >= 4:
            (length,) = unpack(buf, pos)
            if length > self._max:
                raise FrameError(
                    "too_large",
                    f"frame header announces {length} bytes; the limit is {self._max} bytes",
                )
            end = pos + 4 + length
            if end > size:
                break
            out.append(decode_body(buf[pos + 4 : end]) if length else None)
            pos = end
        self._buf = buf[pos:] if pos < size else b""
        return out

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame held so far (never more than max_frame + 3)."""
        return len(self._buf)
