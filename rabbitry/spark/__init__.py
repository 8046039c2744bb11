"""Spark executors that embed a rabbitry node (docs/spark.md).

On the driver:
    configure(builder_or_conf, node_config, join=..., master_file=...)   before getOrCreate()

Inside a task (the executor's node, over its local control socket):
    node_name()          this executor's node
    require_running()    raise NodePaused/NodeUnavailable (retryable) unless the node runs
    redis()              a FailoverRedis on the current Redis master
    is_revoked(id)       the cluster's revoked ids, as gossip has them here
    elect_once(key, fn)  run fn on exactly one executor

Nothing here imports pyspark: the daemon module must stay light, and tasks import this.
"""

from rabbitry.spark.configure import configure
from rabbitry.spark.settings import SparkEmbedError
from rabbitry.spark.task import (
    NodePaused,
    NodeUnavailable,
    RetryableTaskError,
    elect_once,
    is_revoked,
    node_name,
    redis,
    require_running,
    revoked_ids,
)

__all__ = [
    "NodePaused",
    "NodeUnavailable",
    "RetryableTaskError",
    "SparkEmbedError",
    "configure",
    "elect_once",
    "is_revoked",
    "node_name",
    "redis",
    "require_running",
    "revoked_ids",
]
