"""Messages the runtime puts in a Process's mailbox: trapped exit signals and monitor notices."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Exit:
    """An exit signal received by a process that traps exits (Erlang's {'EXIT', From, Reason}).

    `sender` is the ActorRef of the process the signal came from, or None when it was sent from
    outside any process (for example the main thread).
    """

    sender: Any
    reason: Any


@dataclass(frozen=True)
class Down:
    """A monitor fired (Erlang's {'DOWN', Ref, process, Pid, Reason}).

    `reason` is "noproc" when the target was already dead at the time `monitor()` was called.
    """

    monitor_id: int
    ref: Any
    reason: Any
