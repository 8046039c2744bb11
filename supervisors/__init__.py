"""Layer 1: Erlang/OTP supervision on pykka.

Process (links, monitors, exit signals), Supervisor, ChildSpec, OsProcess and supervision-tree
config files. This package imports nothing else of rabbitry's.
"""

from supervisors.errors import (
    AlreadyPresent,
    AlreadyStarted,
    CallerError,
    NotFound,
    Restarting,
    Running,
    SimpleOneForOne,
    StartChildError,
    SupervisorError,
)
from supervisors.messages import Down, Exit
from supervisors.process import Ignore, Process, current_process, exit, exit_reason
from supervisors.specs import ChildInfo, ChildSpec, SupFlags

__all__ = [
    "AlreadyPresent",
    "AlreadyStarted",
    "CallerError",
    "ChildInfo",
    "ChildSpec",
    "Down",
    "Exit",
    "Ignore",
    "NotFound",
    "Process",
    "Restarting",
    "Running",
    "SimpleOneForOne",
    "StartChildError",
    "SupFlags",
    "SupervisorError",
    "current_process",
    "exit",
    "exit_reason",
]
