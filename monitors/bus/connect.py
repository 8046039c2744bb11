"""connect_bus: URL in, a started Bus out."""

from __future__ import annotations

from monitors.bus.base import Bus
from monitors.bus.errors import BusUnavailable
from monitors.bus.options import BusOptions
from monitors.bus.urls import parse_bus_url


def connect_bus(url: str, node: str, **options: object) -> Bus:
    """Connect `node` to the bus at `url` (memory://[name], redis://host:port/db,
    amqp://user:pass@host:port/vhost) and return the started Bus.

    Waits up to `connect_timeout` (default 5 s) for the first connection and raises
    BusUnavailable (naming the broker and its last error) if it does not come; with
    connect_timeout=None it returns at once and keeps connecting in the background. Options:
    see BusOptions. A bad URL raises ValueError, an unknown option TypeError.
    """
    parsed = parse_bus_url(url)
    opts = BusOptions.from_kwargs(options)
    cls: type[Bus]
    if parsed.scheme == "memory":
        from monitors.bus.memory import MemoryBus as cls
    elif parsed.scheme == "redis":
        from monitors.bus.redis_bus import RedisBus as cls
    else:
        from monitors.bus.amqp_bus import AmqpBus as cls
    bus = cls(parsed, node, opts)
    bus._start()
    if opts.connect_timeout is not None and not bus.wait_connected(opts.connect_timeout):
        error = bus.last_error or "no answer"
        bus.close()
        raise BusUnavailable(
            f"bus of {node}: could not connect to {parsed.redacted()} within "
            f"{opts.connect_timeout:g} s ({error}); is the broker running and reachable, and "
            "are the credentials and vhost right? (connect_timeout=None connects in the background)"
        )
    return bus
