"""Broker pub/sub for gossip, mingle and failover: memory://, redis://, amqp://.

    bus = connect_bus("redis://127.0.0.1:6379/0", "a@host", exchange="mycluster")
    sub = bus.subscribe("worker.#", handler)        # handler(BusMessage) on the bus thread
    bus.publish("worker.heartbeat", {"clock": 3})   # to every node (this one too)
    bus.send("b@host", "rcs.ping", {"token": 1}, confirm=True)   # to one node's queue

See docs/bus.md for delivery guarantees per backend.
"""

from monitors.bus.base import STAT_KEYS, Bus, Subscription
from monitors.bus.connect import connect_bus
from monitors.bus.envelope import MAX_FRAME, VERSION, BusMessage
from monitors.bus.errors import BusError, BusUnavailable, BusUnroutable
from monitors.bus.options import BusOptions
from monitors.bus.topic import topic_matches, validate_pattern, validate_routing_key

__all__ = [
    "MAX_FRAME",
    "STAT_KEYS",
    "VERSION",
    "Bus",
    "BusError",
    "BusMessage",
    "BusOptions",
    "BusUnavailable",
    "BusUnroutable",
    "Subscription",
    "connect_bus",
    "topic_matches",
    "validate_pattern",
    "validate_routing_key",
]
