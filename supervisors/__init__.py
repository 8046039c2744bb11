"""Layer 1: Erlang/OTP supervision on pykka.

Process (links, monitors, exit signals), PooledProcess (the same on a shared thread pool),
Supervisor, ChildSpec, OsProcess and supervision-tree
config files. This package imports nothing else of rabbitry's.
"""

from supervisors.config_check import ConfigChecker
from supervisors.config_errors import ConfigError
from supervisors.config_read import read_config_file
from supervisors.durations import parse_duration
from supervisors.errors import (
    AlreadyPresent,
    AlreadyStarted,
    CallerError,
    InvalidChildSpec,
    NotFound,
    Restarting,
    Running,
    SimpleOneForOne,
    StartChildError,
    SupervisorError,
)
from supervisors.messages import Down, Exit
from supervisors.osprocess import OsProcess, OsProcessExited, OsProcessStartError
from supervisors.pool import configure_pool, pool_settings, stop_pool
from supervisors.pooled import PooledProcess
from supervisors.process import Ignore, Process, current_process, exit, exit_reason, processes
from supervisors.reasons import format_reason
from supervisors.report import add_listener as add_report_listener
from supervisors.report import remove_listener as remove_report_listener
from supervisors.specs import ChildInfo, ChildSpec, SupFlags
from supervisors.supervisor import Supervisor
from supervisors.tree import TreeConfigError, TreeSpec, format_tree, load_tree, start_tree

__all__ = [
    "AlreadyPresent",
    "AlreadyStarted",
    "CallerError",
    "ChildInfo",
    "ChildSpec",
    "ConfigChecker",
    "ConfigError",
    "Down",
    "Exit",
    "Ignore",
    "InvalidChildSpec",
    "NotFound",
    "OsProcess",
    "OsProcessExited",
    "OsProcessStartError",
    "PooledProcess",
    "Process",
    "Restarting",
    "Running",
    "SimpleOneForOne",
    "StartChildError",
    "SupFlags",
    "Supervisor",
    "SupervisorError",
    "TreeConfigError",
    "TreeSpec",
    "add_report_listener",
    "configure_pool",
    "current_process",
    "exit",
    "exit_reason",
    "format_reason",
    "format_tree",
    "load_tree",
    "parse_duration",
    "pool_settings",
    "processes",
    "read_config_file",
    "remove_report_listener",
    "start_tree",
    "stop_pool",
]
