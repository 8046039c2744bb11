"""The rabbit_node_monitor port: cluster files, partial partitions, partition modes, autoheal.

Public API:
- `NodeMonitorCore`: the pure core (no threads, sockets, sleeps, clocks or files), fed
  nodeup/nodedown, messages, timers and application start/stop with the current time, returning
  effects. Interface: docs/cores.md; behaviour: docs/node_monitor.md.
- `ClusterStatus`, `read_cluster_status`, `write_cluster_status`, `ClusterFileError`: the
  cluster files (`cluster_nodes.config`, `nodes_running_at_shutdown`), written atomically.
- `PartitionHandling`, `PartitionHandlingError`: the `partition_handling:` config value.
- Effects besides monitors.effects: `PauseApp`, `ResumeApp`, `SaveClusterStatus`, `Notify`.

- `NodeMonitor`: the actor shell (a supervisors.Process) that feeds the core from a NetKernel
  and performs its effects on the real dist layer, the application tree (`AppControl`) and the
  data dir; subscribers get `NodeEvent` messages.
"""

from monitors.node_monitor.config import PartitionHandling, PartitionHandlingError
from monitors.node_monitor.core import NodeMonitorCore
from monitors.node_monitor.effects import (
    NodeMonitorEffect,
    Notify,
    PauseApp,
    ResumeApp,
    SaveClusterStatus,
)
from monitors.node_monitor.shell import AppControl, NodeEvent, NodeMonitor
from monitors.node_monitor.status import (
    ClusterFileError,
    ClusterStatus,
    read_cluster_status,
    write_cluster_status,
)

__all__ = [
    "AppControl",
    "ClusterFileError",
    "ClusterStatus",
    "NodeEvent",
    "NodeMonitor",
    "NodeMonitorCore",
    "NodeMonitorEffect",
    "Notify",
    "PartitionHandling",
    "PartitionHandlingError",
    "PauseApp",
    "ResumeApp",
    "SaveClusterStatus",
    "read_cluster_status",
    "write_cluster_status",
]
