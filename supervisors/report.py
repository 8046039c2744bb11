"""Structured supervisor reports, one log line each, as SASL writes them.

Logger "supervisors.report". Each record carries the report as a dict in `record.report`
(event, supervisor, child and the event's own fields), and its message is the same content as
`event key=value ...` so that a plain log file is greppable.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from supervisors.crash_log import is_deliberate
from supervisors.reasons import format_reason

logger = logging.getLogger("supervisors.report")
# Functions given every report dict whatever the log level (SASL's report handlers): a node's
# metrics count restarts from them even when INFO lines are not logged.
_listeners: list[Callable[[dict[str, Any]], None]] = []

# What each event is and how loud: progress is INFO, anything that lost work is ERROR.
EVENTS = {
    "child_started": logging.INFO,
    "child_exited": logging.INFO,
    "child_crashed": logging.ERROR,
    "child_restarted": logging.INFO,
    "start_error": logging.ERROR,
    "shutdown": logging.INFO,
    "shutdown_error": logging.ERROR,
    "reached_max_restart_intensity": logging.ERROR,
    "auto_shutdown": logging.INFO,
    "children_started": logging.INFO,  # a start_children batch, once per batch
    "children_shutdown": logging.INFO,  # a simple_one_for_one stopping all its children
}


def report(
    event: str, supervisor: str, child: Any = None, *, level: int | None = None, **fields: Any
) -> None:
    """Emit one report. Fields named `reason` are rendered with format_reason. `level`
    overrides the event's level (a batch logs its children's child_started at DEBUG)."""
    if level is None:
        level = EVENTS[event]
    if event == "child_crashed" and is_deliberate(fields.get("reason")):
        level = logging.INFO  # a crash on purpose (an example's) is not an incident
        fields["deliberate"] = True
    logged = logger.isEnabledFor(level)
    if not logged and not _listeners:
        return
    data: dict[str, Any] = {"event": event, "supervisor": supervisor}
    if child is not None:
        data["child"] = child
    data.update(fields)
    for listener in list(_listeners):
        try:
            listener(data)
        except Exception:  # a listener's bug must not break supervision
            logger.exception("report listener %r failed", listener)
    if not logged:
        return
    parts = []
    for key, value in data.items():
        if key == "event":
            continue
        text = format_reason(value) if key == "reason" else str(value)
        parts.append(f"{key}={text}")
    # What logger.log() does, without its findCaller(): that walks the stack, normalising a
    # path per frame, to find the line below, which never moves (a third of the cost of a
    # report when a supervisor starts or stops 100,000 children). The record is the same.
    code = report.__code__
    record = logger.makeRecord(
        logger.name,
        level,
        code.co_filename,
        sys._getframe().f_lineno,
        "%s %s",
        (event, " ".join(parts)),
        None,
        code.co_name,
        {"report": data},
    )
    logger.handle(record)


def wanted(level: int) -> bool:
    """Whether a report at `level` would go anywhere (a log handler or a listener): a batch
    asks once instead of building a report per child that nobody reads."""
    return bool(_listeners) or logger.isEnabledFor(level)


def add_listener(fn: Callable[[dict[str, Any]], None]) -> None:
    """Call `fn(report)` for every report from now on, on the reporting supervisor's thread
    (so it must be quick and must not block), whatever the log level."""
    _listeners.append(fn)


def remove_listener(fn: Callable[[dict[str, Any]], None]) -> None:
    """Stop calling `fn`; no error if it was not added."""
    if fn in _listeners:
        _listeners.remove(fn)
