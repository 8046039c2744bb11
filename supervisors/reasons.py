"""Exit reasons, as Erlang has them.

A reason is "normal", "shutdown", ("shutdown", detail), "killed", "noproc", "noconnection",
"kill" (only as a signal), or the exception that ended a process.
"""

from __future__ import annotations

from typing import Any

NORMAL = "normal"
SHUTDOWN = "shutdown"
KILL = "kill"
KILLED = "killed"
NOPROC = "noproc"
NOCONNECTION = "noconnection"

Reason = Any


def is_clean_exit(reason: Reason) -> bool:
    """True for normal, shutdown and ("shutdown", x): the reasons a transient child may end with."""
    if reason in (NORMAL, SHUTDOWN):
        return True
    return isinstance(reason, tuple) and len(reason) == 2 and reason[0] == SHUTDOWN


def format_reason(reason: Reason) -> str:
    """A short, readable form of a reason for logs and error messages."""
    if isinstance(reason, BaseException):
        text = str(reason)
        return f"{type(reason).__name__}({text!r})" if text else type(reason).__name__
    if isinstance(reason, str):
        return reason
    return repr(reason)
