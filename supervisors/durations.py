"""Durations as config files write them: a number of seconds, or "500ms", "5s", "2m", "1h".

Python APIs take float seconds; only files carry strings. Every layer reads its config through
this one parser so that "5s" means the same thing everywhere.
"""

from __future__ import annotations

import math
import re

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*$")


def parse_duration(value: object, *, allow_zero: bool = True) -> float:
    """Return `value` as float seconds, or raise ValueError saying what was expected.

    Accepts int/float seconds and strings such as "250ms", "1.5s", "2m", "1h" or "3" (seconds).
    Booleans are rejected, because `true` in a YAML file is never a duration.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected a duration such as 5, '500ms', '5s' or '2m', got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        match = _PATTERN.match(value)
        if not match:
            raise ValueError(f"expected a duration such as 5, '500ms', '5s' or '2m', got {value!r}")
        seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    else:
        raise ValueError(f"expected a duration such as 5, '500ms', '5s' or '2m', got {value!r}")
    if math.isnan(seconds) or math.isinf(seconds) or seconds < 0:
        raise ValueError(f"expected a finite duration >= 0, got {value!r}")
    if not allow_zero and seconds == 0:
        raise ValueError(f"expected a duration > 0, got {value!r}")
    return seconds
