"""Watching a node from outside: Prometheus metrics and what the management page reads.

Observations     counters and a timeline the node keeps (observations.py)
NodeObserver     the node's `observer` child, which feeds them (observer.py)
Gatherer         reads several parts at once within a time budget (gather.py)
MetricsServer    the node's `metrics` child: GET /metrics (metrics.py)
"""

from rabbitry.observe.gather import Gathered, Gatherer
from rabbitry.observe.metrics import MetricsServer, NodeCollector, bind_metrics_server
from rabbitry.observe.observations import Observations
from rabbitry.observe.observer import NodeObserver

__all__ = [
    "Gathered",
    "Gatherer",
    "MetricsServer",
    "NodeCollector",
    "NodeObserver",
    "Observations",
    "bind_metrics_server",
]
