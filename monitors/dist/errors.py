"""Errors that `NetKernel.call` and friends raise; each names the node, the name and the why."""

from __future__ import annotations


class DistError(Exception):
    """Base class of the distribution layer's errors."""


class NodeUnreachable(DistError):
    """No connection to `node` could be had (or it went before the reply came)."""

    def __init__(self, node: str, why: str) -> None:
        super().__init__(f"node {node} is unreachable: {why}")
        self.node = node
        self.why = why


class DistTimeout(DistError):
    """A `call` got no reply within its timeout. A late reply is dropped."""

    def __init__(self, node: str, name: str, timeout: float) -> None:
        super().__init__(f"call to {name!r} on {node} got no reply within {timeout:g} s")
        self.node = node
        self.name = name
        self.timeout = timeout


class RemoteCallError(DistError):
    """The remote side answered a `call` with an error instead of a reply.

    `kind` is "noproc" (no live process is registered under that name), "exception" (the
    handler raised; `detail` is the exception's string form, e.g. "ValueError('bad')"),
    "exit" (the process ended before replying) or "bad_reply" (the reply was not JSON).
    """

    def __init__(self, node: str, name: str, kind: str, detail: str) -> None:
        super().__init__(f"call to {name!r} on {node} failed ({kind}): {detail}")
        self.node = node
        self.name = name
        self.kind = kind
        self.detail = detail


class FrameTooLarge(DistError, ValueError):
    """A message encodes to a frame over the size limit (max_frame)."""
