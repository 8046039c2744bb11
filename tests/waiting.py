"""Waiting on a condition in tests: poll until true, or fail saying what was awaited.

Tests wait on conditions, never on fixed sleeps: a slow machine makes a test slower, not red.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

TIMEOUT = 10.0  # seconds; only ever reached when something hung


def wait_until(
    predicate: Callable[[], Any],
    what: str = "condition",
    timeout: float = TIMEOUT,
    poll: float = 0.002,
) -> Any:
    """Poll `predicate` until it returns something truthy, and return that.

    Raises AssertionError naming `what` after `timeout` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(poll)
