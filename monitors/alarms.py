"""Resource alarms, as RabbitMQ raises them: memory above a high watermark, free disk below a
limit. `evaluate` is pure (readings in, the set of active alarms out) so it can be tested and
simulated; `sample` reads the machine with psutil. The node monitor broadcasts changes so that
every node's status shows the whole cluster's alarms.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import psutil

MEMORY = "memory"
DISK = "disk"


@dataclass(frozen=True)
class Readings:
    """One sample of the machine: bytes of memory used and in total, bytes of disk free."""

    memory_used: int
    memory_total: int
    disk_free: int


def evaluate(readings: Readings, memory_high_watermark: float, disk_free_limit: int) -> set[str]:
    """The alarms that are on: "memory" when used/total exceeds the watermark, "disk" when free
    space is under the limit. Like RabbitMQ, no hysteresis: an alarm clears as soon as the
    reading is back on the safe side."""
    active = set()
    if (
        readings.memory_total > 0
        and readings.memory_used / readings.memory_total > memory_high_watermark
    ):
        active.add(MEMORY)
    if readings.disk_free < disk_free_limit:
        active.add(DISK)
    return active


def sample(data_dir: str | Path) -> Readings:
    """Read memory in use (total minus available, as the kernel counts reclaimable cache as
    free) and the free space of the file system holding `data_dir`."""
    memory = psutil.virtual_memory()
    path = Path(data_dir)
    while not path.exists() and path != path.parent:
        path = path.parent  # the data dir may not exist yet; its file system does
    disk = psutil.disk_usage(str(path))
    return Readings(memory.total - memory.available, memory.total, disk.free)
