"""Bus options and name checks, validated once at connect so mistakes fail early and clearly."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from monitors.bus.envelope import MAX_FRAME

# No ':' so that on Redis one namespace's channel pattern ("ns:bc:*") can never match another
# namespace's channels; no glob characters for the same reason. AMQP accepts all of these.
_EXCHANGE = re.compile(r"[A-Za-z0-9_.\-]{1,100}")
# Printable ASCII without spaces: node names end up in queue names, Redis keys and logs.
_NODE = re.compile(r"[!-~]{1,200}")


@dataclass(frozen=True)
class BusOptions:
    """Everything `connect_bus(url, node, **options)` accepts. Times are seconds."""

    exchange: str = "rabbitry"  # namespace: several clusters can share one broker
    heartbeat_interval: float = 2.0  # AMQP event-queue message TTL (Celery's queue_ttl)
    max_frame: int = MAX_FRAME  # bytes; larger publishes raise, larger frames are dropped
    max_outgoing: int = 10_000  # queued publishes waiting for the I/O thread
    max_incoming: int = 10_000  # received messages waiting for handlers
    echo: bool = True  # deliver this node's own broadcasts to it (as Celery does)
    connect_timeout: float | None = 5.0  # connect_bus waits this long; None: don't wait
    reconnect_initial: float = 0.1  # first reconnect delay
    reconnect_max: float = 5.0  # reconnect delay cap
    direct_max: int = 10_000  # length limit of a node's direct queue (AMQP, Redis)
    direct_expires: float = 60.0  # a direct queue unused this long is deleted (AMQP, Redis)
    broker_heartbeat: int = 10  # AMQP connection heartbeat, whole seconds

    def __post_init__(self) -> None:
        validate_exchange(self.exchange)
        for name in ("heartbeat_interval", "reconnect_initial", "reconnect_max", "direct_expires"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ValueError(
                    f"bus option {name} must be a positive number of seconds, not {value!r}"
                )
        for name in ("max_frame", "max_outgoing", "max_incoming", "direct_max", "broker_heartbeat"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"bus option {name} must be a positive int, not {value!r}")
        if self.connect_timeout is not None and not (
            isinstance(self.connect_timeout, int | float) and self.connect_timeout >= 0
        ):
            raise ValueError(
                f"bus option connect_timeout must be seconds >= 0 or None, not {self.connect_timeout!r}"
            )
        if self.reconnect_initial > self.reconnect_max:
            raise ValueError("bus option reconnect_initial must not exceed reconnect_max")
        if not isinstance(self.echo, bool):
            raise ValueError(f"bus option echo must be a bool, not {self.echo!r}")

    @classmethod
    def from_kwargs(cls, options: dict[str, object]) -> BusOptions:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise TypeError(
                f"unknown bus option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        return cls(**options)  # type: ignore[arg-type]


def validate_exchange(name: str) -> str:
    if not isinstance(name, str) or not _EXCHANGE.fullmatch(name):
        raise ValueError(f"bad bus exchange {name!r}: use 1-100 letters, digits, '_', '.' or '-'")
    return name


def validate_node(node: str) -> str:
    if not isinstance(node, str) or not _NODE.fullmatch(node):
        raise ValueError(
            f"bad bus node name {node!r}: use 1-200 printable ASCII characters without spaces"
        )
    return node
