"""ShellEffects: how an actor shell performs the effects every core returns (monitors/effects.py).

Every shell around a pure core performs the same few effects the same way: SetTimer and
CancelTimer on its keyed timers (core_timers.py), Log with its logger, and, for a core that
talks over dist, Send and Disconnect through the NetKernel and Connect on a helper thread (a
connect blocks; one attempt at a time per node, since the core asks again on its own timer).
This class is that one way. A shell asks it first and handles its own effects (pause the
application, write a disc copy, publish on a bus) when it answers False; a shell that holds
effects back (mnesia_like's group commit) decides what to hold before it asks.

The attempt ends with `ConnectDone(node)` told to the shell, which hands it (and every
NodeDown) to `connect_over(node)` so that the next Connect of that node tries again
(monitors/core_shell.py does both for every dist shell).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from monitors.core_timers import CoreTimers
from monitors.effects import CancelTimer, Connect, Disconnect, Log, Send, SetTimer

__all__ = ["ConnectDone", "ShellEffects"]


@dataclass(frozen=True)
class ConnectDone:
    """What the shell is told when a background connect attempt to `node` ended."""

    node: str


class ShellEffects:
    """The common effects of one shell (see the module docstring).

    `owner` is the shell's Process (its actor_ref hears ConnectDone), `who` names the shell
    in log lines, and `kernel` (a NetKernel) is given for a core that uses dist: without it,
    Send, Connect and Disconnect are left to the shell. Log lines carry the core's fields as
    the record's `fields` attribute, or, with `log_prefix`, inline after that prefix."""

    def __init__(
        self,
        owner: Any,
        timers: CoreTimers,
        logger: logging.Logger,
        who: str,
        *,
        kernel: Any = None,
        log_prefix: str | None = None,
        thread_prefix: str = "connect",
        before_connect: Callable[[str], None] | None = None,
    ) -> None:
        self._owner = owner
        self._timers = timers
        self._log = logger
        self._who = who
        self._kernel = kernel
        self._log_prefix = log_prefix
        self._thread_prefix = thread_prefix
        self._before_connect = before_connect  # runs first on the connect thread (may block)
        self._connecting: set[str] = set()
        self._by_type: dict[type, Callable[[Any], None]] = {
            SetTimer: self._set_timer,
            CancelTimer: self._cancel_timer,
            Log: self._write_log,
        }
        if kernel is not None:
            self._by_type.update(
                {Send: self._send, Connect: self._connect, Disconnect: self._disconnect}
            )

    def perform(self, effect: Any) -> bool:
        """Perform `effect` if it is one of the common ones; False if the shell must."""
        handler = self._by_type.get(type(effect))
        if handler is None:
            return False
        handler(effect)
        return True

    def connect_over(self, node: str) -> None:
        """The attempt to connect `node` ended (ConnectDone), or its connection went
        (NodeDown): the next Connect tries again."""
        self._connecting.discard(node)

    # ---- the effects

    def _send(self, effect: Send) -> None:
        self._kernel.send(effect.node, effect.name, effect.msg)

    def _set_timer(self, effect: SetTimer) -> None:
        self._timers.set(effect.key, effect.after, effect.data)

    def _cancel_timer(self, effect: CancelTimer) -> None:
        self._timers.cancel(effect.key)

    def _disconnect(self, effect: Disconnect) -> None:
        self._kernel.disconnect(effect.node)

    def _write_log(self, effect: Log) -> None:
        if self._log_prefix is None:  # the fields on the line too: "node up node=b@h"
            shown = "".join(f" {key}={value}" for key, value in effect.fields.items())
            self._log.log(effect.level, "%s%s", effect.text, shown, extra={"fields": effect.fields})
        else:
            self._log.log(effect.level, f"{self._log_prefix}: %s %s", effect.text, effect.fields)

    def _connect(self, effect: Connect) -> None:
        node = effect.node
        if node in self._connecting:
            return  # one attempt at a time per node; the core asks again on its timer
        self._connecting.add(node)
        kernel, owner, logger, who = self._kernel, self._owner, self._log, self._who
        before = self._before_connect

        def attempt() -> None:
            try:
                if before is not None:
                    before(node)
                kernel.connect(node)
            except Exception as exc:
                logger.debug("%s: connect to %s failed: %s", who, node, exc)
            with contextlib.suppress(Exception):
                owner.actor_ref.tell(ConnectDone(node))

        threading.Thread(target=attempt, name=f"{self._thread_prefix}-{node}", daemon=True).start()
