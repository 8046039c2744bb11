"""Layer 3: Beetle-style coordinated Redis failover, supervised, with no single point of failure.

    RedisMasterFile        the master file FailoverRedis reads (atomic, mtime-cached)
    FailoverRedis          a redis-py client that always talks to the file's master
    ConfigurationServer    the RCS: watches the master, runs the switch (actor shell)
    ConfigurationClient    the RCC: one per worker host, keeps its master file

The protocol cores are server_core.py and client_core.py (pure, run in tests/sim). See
docs/failover.md and docs/failover-client.md.
"""

from failover.errors import FailoverError, NoRedisMaster, ReplicationError
from failover.master_file import RedisMasterFile
from failover.redis_client import FailoverRedis
from failover.shell import ConfigurationClient, ConfigurationServer

__all__ = [
    "ConfigurationClient",
    "ConfigurationServer",
    "FailoverError",
    "FailoverRedis",
    "NoRedisMaster",
    "RedisMasterFile",
    "ReplicationError",
]
