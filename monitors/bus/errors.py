"""The bus's exceptions.

Every message says what failed and what to check, because these surface in node logs where the
reader has no debugger: "which broker, which node, what now".
"""

from __future__ import annotations


class BusError(Exception):
    """Any failure of the bus itself: closed bus, broker refusal, bad setup."""


class BusUnavailable(BusError):
    """A confirmed publish or send could not be confirmed: the broker is down, did not answer in
    time, or refused the message (a full queue). The message may or may not have arrived."""


class BusUnroutable(BusUnavailable):
    """A confirmed direct send found no queue for the node (AMQP and memory only: the node has
    never connected, or its queue expired). A subclass of BusUnavailable, so callers that only
    care "did it get there" catch one thing."""
