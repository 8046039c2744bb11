"""Structured supervisor reports, one log line each, as SASL writes them.

Logger "supervisors.report". Each record carries the report as a dict in `record.report`
(event, supervisor, child and the event's own fields), and its message is the same content as
`event key=value ...` so that a plain log file is greppable.
"""

from __future__ import annotations

import logging
from typing import Any

from supervisors.reasons import format_reason

logger = logging.getLogger("supervisors.report")

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
}


def report(event: str, supervisor: str, child: Any = None, **fields: Any) -> None:
    """Emit one report. Fields named `reason` are rendered with format_reason."""
    level = EVENTS[event]
    if not logger.isEnabledFor(level):
        return
    data: dict[str, Any] = {"event": event, "supervisor": supervisor}
    if child is not None:
        data["child"] = child
    data.update(fields)
    parts = []
    for key, value in data.items():
        if key == "event":
            continue
        text = format_reason(value) if key == "reason" else str(value)
        parts.append(f"{key}={text}")
    logger.log(level, "%s %s", event, " ".join(parts), extra={"report": data})
