"""Errors of the supervisor API, named like OTP's {error, ...} returns.

All of them are CallerErrors: they go back to the caller and the supervisor keeps running.
"""

from __future__ import annotations

from typing import Any

from supervisors.reasons import format_reason


class CallerError(Exception):
    """Raise this (or a subclass) from a handler to answer the caller with an error.

    Any other exception escaping a handler crashes the process, as in Erlang. A CallerError is a
    reply, not a crash: the asker gets it and the process goes on.
    """


class SupervisorError(CallerError):
    """Base of the errors a supervisor returns to callers of its API."""


class AlreadyPresent(SupervisorError):
    """start_child: a child spec with this id exists but is not running (OTP already_present)."""

    def __init__(self, child_id: Any) -> None:
        super().__init__(
            f"child {child_id!r} is already present (not running); "
            "use restart_child() to start it or delete_child() to remove its spec"
        )
        self.child_id = child_id


class AlreadyStarted(SupervisorError):
    """start_child: a child with this id is already running (OTP {already_started, Pid})."""

    def __init__(self, child_id: Any, ref: Any) -> None:
        super().__init__(f"child {child_id!r} is already started as {ref}")
        self.child_id = child_id
        self.ref = ref


class Running(SupervisorError):
    """restart_child / delete_child: the child is running; terminate_child() it first."""

    def __init__(self, child_id: Any) -> None:
        super().__init__(f"child {child_id!r} is running; call terminate_child() first")
        self.child_id = child_id


class Restarting(SupervisorError):
    """restart_child / delete_child: the child is between failed restart attempts."""

    def __init__(self, child_id: Any) -> None:
        super().__init__(
            f"child {child_id!r} is restarting (its last restart failed and is being retried)"
        )
        self.child_id = child_id


class NotFound(SupervisorError):
    """No child with this id (or ref) under this supervisor."""

    def __init__(self, child_id: Any) -> None:
        super().__init__(f"no child {child_id!r} under this supervisor")
        self.child_id = child_id


class SimpleOneForOne(SupervisorError):
    """The call is not available under simple_one_for_one (OTP {error, simple_one_for_one})."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what} is not supported by a simple_one_for_one supervisor")


class StartChildError(SupervisorError):
    """A child failed to start (OTP failed_to_start_child). `reason` is what its start raised.

    From start_children, `started` holds the refs of the children the batch started before
    this one failed (they keep running); otherwise it is empty."""

    def __init__(self, child_id: Any, reason: Any) -> None:
        super().__init__(f"failed to start child {child_id!r}: {format_reason(reason)}")
        self.child_id = child_id
        self.reason = reason
        self.started: list[Any] = []


class InvalidChildSpec(SupervisorError):
    """start_child was given a spec this supervisor cannot accept (OTP's {error, {invalid_..}})."""

    def __init__(self, child_id: Any, why: str) -> None:
        super().__init__(f"invalid child spec {child_id!r}: {why}")
        self.child_id = child_id
