"""How a crashed process's traceback is logged: once per distinct crash site, as an operator
reads OTP's logs.

A supervised child that crashes every few seconds for the same reason used to print a
15-line traceback each time, which buries everything else. OTP prints one crash report per
crash; what varies is the detail. Here the supervisor's `child_crashed` report is the one
structured line per crash (child, reason, restart count), and a supervised process's
traceback is logged in full the first time a crash site is seen (the exception's type and the innermost frame's
file and line), and at DEBUG after that. An exception that says it is deliberate (a class
attribute `deliberate = True`, as the examples' FlakyCrash) is logged at DEBUG only: it is
not an incident.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any

_MAX_SITES = 1000  # bounded: a process that crashes at ever new lines must not grow memory
_seen: OrderedDict[tuple[str, str, int], None] = OrderedDict()
_lock = threading.Lock()


def is_deliberate(reason: Any) -> bool:
    """The exception marks itself as a crash on purpose (examples, fault injection)."""
    return isinstance(reason, BaseException) and getattr(reason, "deliberate", False) is True


def crash_site(exc: BaseException) -> tuple[str, str, int]:
    """(exception type, file, line) of the innermost frame that raised it."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    name = f"{type(exc).__module__}.{type(exc).__qualname__}"
    if tb is None:
        return (name, "", 0)
    return (name, tb.tb_frame.f_code.co_filename, tb.tb_lineno)


def first_at_site(exc: BaseException) -> bool:
    """True the first time a crash at this site is seen in this OS process."""
    site = crash_site(exc)
    with _lock:
        if site in _seen:
            _seen.move_to_end(site)
            return False
        _seen[site] = None
        if len(_seen) > _MAX_SITES:
            _seen.popitem(last=False)
        return True


def log_crash(logger: logging.Logger, process: Any, exc_info: Any, *, supervised: bool) -> None:
    """Log an unhandled exception that ended `process`: see the module docstring. A process
    without a parent (`supervised` False) has nobody to report its crash, so it is logged as
    pykka does, in full at ERROR every time."""
    exc = exc_info[1] if exc_info else None
    if not supervised or not isinstance(exc, BaseException):
        logger.error("Unhandled exception in %s:", process, exc_info=exc_info)
    elif is_deliberate(exc):
        logger.debug("Deliberate crash of %s:", process, exc_info=exc_info)
    elif first_at_site(exc):
        logger.error("Unhandled exception in %s:", process, exc_info=exc_info)
    else:
        logger.debug("Unhandled exception in %s (seen before):", process, exc_info=exc_info)


def forget_sites() -> None:
    """Tests: start afresh."""
    with _lock:
        _seen.clear()
