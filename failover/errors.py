"""The failover client's exceptions.

They subclass `redis.RedisError`, so code that already treats "Redis failed" as one case (nack
the message, retry the job later) keeps working when it is handed a FailoverRedis. Each message
names the master file and what to check, because these surface in worker logs.
"""

from __future__ import annotations

from redis.exceptions import RedisError


class FailoverError(RedisError):
    """Any failure of the failover client itself (not a plain Redis error)."""


class NoRedisMaster(FailoverError):
    """No usable master within `failover_timeout` (Beetle's NoRedisMaster).

    Either the master file named no master for the whole time (a switch is in progress, or the
    RCC has not written the file yet), or the server it named kept failing. The command was
    not done, or (after an ambiguous failure) may have been done once on a master that is gone.
    """

    def __init__(
        self,
        master_file: str,
        waited: float,
        address: str | None,
        last_error: BaseException | None,
    ) -> None:
        if address is None:
            why = "the file names no master (empty, missing, or not valid; see the log)"
        else:
            why = f"it names {address}, which failed: {last_error!r}"
        super().__init__(
            f"no Redis master after waiting {waited:.1f} s: master file {master_file}: {why}; "
            "check that the configuration client (RCC) on this host is running and that the "
            "configuration server (RCS) has a reachable master"
        )
        self.master_file = master_file
        self.waited = waited
        self.address = address
        self.last_error = last_error


class ReplicationError(FailoverError):
    """A write was done on the master but fewer replicas than `wait_replicas` acknowledged it
    within `wait_timeout` (Redis WAIT).

    The write is NOT durable against a failover: the caller must not count it as done (for a
    claim, do not process the message as claimed). It may still survive, so it is not an undo.
    """

    def __init__(
        self, address: str, command: str, required: int, acknowledged: int | None, detail: str = ""
    ) -> None:
        got = "an error" if acknowledged is None else f"{acknowledged}"
        super().__init__(
            f"{command} on master {address}: {got} of {required} required replica "
            f"acknowledgements (WAIT){': ' + detail if detail else ''}; the write is not "
            "durable against a failover; check the replicas' link to the master "
            "(INFO replication: connected_slaves, master_link_status)"
        )
        self.address = address
        self.command = command
        self.required = required
        self.acknowledged = acknowledged
