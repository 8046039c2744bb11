"""What both node monitors (core.py and ephemeral.py) do once they have decided: pause or
resume the application, and keep their timers in step with what their state needs.

The decision itself differs (a core member counts, an ephemeral node follows the core); what
a decision leads to must not: the application's state moves the same way, and the node, its
log and its subscribers hear of it in the same words.
"""

from __future__ import annotations

from typing import Any

from monitors.effects import CancelTimer, Log, SetTimer
from monitors.node_monitor.effects import NodeMonitorEffect, Notify, PauseApp, ResumeApp


def pause(app: str, node: str, why: str) -> tuple[str, list[NodeMonitorEffect]]:
    """The application's state after a decision to pause (a running or starting application
    is stopping), and the effects: the log line, PauseApp and the "paused" notification."""
    if app in ("running", "starting"):
        app = "stopping"
    return app, [
        Log.warning("pausing the application", reason=why),
        PauseApp(why),
        Notify("paused", node),
    ]


def resume(
    app: str, node: str, reason: str, *, first: bool = False, **log_fields: Any
) -> tuple[str, list[NodeMonitorEffect]]:
    """The application's state after a decision to resume (a stopped or stopping application
    is starting), and the effects: the log line, ResumeApp and the "resumed" notification.
    `first`: the application was held at boot and never ran, so it starts, not resumes."""
    if app in ("stopped", "stopping"):
        app = "starting"
    return app, [
        Log.info("starting the application" if first else "resuming the application", **log_fields),
        ResumeApp(reason),
        Notify("resumed", node),
    ]


def sync_timers(timers: set[str], wanted: dict[str, tuple[bool, float]]) -> list[NodeMonitorEffect]:
    """Arm each timer in `wanted` (key -> (needed, after seconds)) that is needed and not armed,
    cancel each that is armed and no longer needed; `timers` (the armed keys) is updated."""
    out: list[NodeMonitorEffect] = []
    for key, (needed, after) in wanted.items():
        if needed and key not in timers:
            timers.add(key)
            out.append(SetTimer(key, after))
        elif not needed and key in timers:
            timers.discard(key)
            out.append(CancelTimer(key))
    return out
