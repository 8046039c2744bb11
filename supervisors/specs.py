"""Supervisor flags and child specs, validated when they are built.

A bad spec raises ValueError or TypeError at construction, naming the field and what was
expected, so that mistakes surface where they are written rather than at the first crash.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Literal

STRATEGIES = ("one_for_one", "one_for_all", "rest_for_one", "simple_one_for_one")
RESTARTS = ("permanent", "transient", "temporary")
CHILD_TYPES = ("worker", "supervisor")
AUTO_SHUTDOWNS = ("never", "any_significant", "all_significant")
SHUTDOWN_WORDS = ("brutal_kill", "infinity")
DEFAULT_WORKER_SHUTDOWN = 5.0

Strategy = Literal["one_for_one", "one_for_all", "rest_for_one", "simple_one_for_one"]
RestartType = Literal["permanent", "transient", "temporary"]
ChildType = Literal["worker", "supervisor"]
AutoShutdown = Literal["never", "any_significant", "all_significant"]
Shutdown = float | Literal["brutal_kill", "infinity"]


@dataclass(frozen=True)
class SupFlags:
    """How a supervisor restarts its children (OTP's sup_flags; same defaults).

    More than `intensity` restarts within `period` seconds make the supervisor give up: it stops
    every child in reverse start order and exits with "shutdown". Unlike OTP, `period` is a
    float and restart times are not rounded to whole seconds.
    """

    strategy: Strategy = "one_for_one"
    intensity: int = 1
    period: float = 5.0
    auto_shutdown: AutoShutdown = "never"

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(
                f"strategy must be one of {', '.join(STRATEGIES)}; got {self.strategy!r}"
            )
        if isinstance(self.intensity, bool) or not isinstance(self.intensity, int):
            raise TypeError(f"intensity must be an int >= 0; got {self.intensity!r}")
        if self.intensity < 0:
            raise ValueError(f"intensity must be >= 0; got {self.intensity}")
        if (
            isinstance(self.period, bool)
            or not isinstance(self.period, int | float)
            or not math.isfinite(self.period)
            or self.period <= 0
        ):
            raise ValueError(f"period must be a number of seconds > 0; got {self.period!r}")
        object.__setattr__(self, "period", float(self.period))
        if self.auto_shutdown not in AUTO_SHUTDOWNS:
            raise ValueError(
                f"auto_shutdown must be one of {', '.join(AUTO_SHUTDOWNS)}; got {self.auto_shutdown!r}"
            )
        if self.strategy == "simple_one_for_one" and self.auto_shutdown != "never":
            raise ValueError(
                "bad combination: auto_shutdown must be 'never' with simple_one_for_one "
                f"(got {self.auto_shutdown!r})"
            )


def _check_shutdown(value: object) -> Shutdown:
    if value in SHUTDOWN_WORDS:
        return value  # type: ignore[return-value]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(
            f"shutdown must be seconds >= 0, 'brutal_kill' or 'infinity'; got {value!r}"
        )
    if value < 0:
        raise ValueError(f"shutdown must be seconds >= 0; got {value!r}")
    return float(value)


@dataclass(frozen=True)
class ChildSpec:
    """One child of a supervisor (OTP's child_spec map).

    `start` is a Process subclass, a `(cls, args, kwargs)` triple, or a callable that starts a
    Process and returns its ActorRef (or None, meaning "ignore": the child is not started).
    `shutdown` defaults to 5 s for a worker and "infinity" for a supervisor, as in OTP.

    `singleton`, `singleton_lease` and `placement` are for a rabbitry node: there such a child
    of the application tree runs on one core member of the cluster at a time (see
    rabbitry.singleton). A plain supervisor runs it as any other child.
    """

    id: Hashable
    start: Any
    restart: RestartType = "permanent"
    shutdown: Shutdown | None = None
    type: ChildType = "worker"
    significant: bool = False
    args: tuple = field(default=(), repr=False)
    singleton: bool = False
    singleton_lease: float | None = None
    placement: tuple[str, ...] = ()
    kwargs: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        try:
            hash(self.id)
        except TypeError:
            raise TypeError(f"child id must be hashable; got {self.id!r}") from None
        if self.restart not in RESTARTS:
            raise ValueError(
                f"child {self.id!r}: restart must be one of {', '.join(RESTARTS)}; got {self.restart!r}"
            )
        if self.type not in CHILD_TYPES:
            raise ValueError(
                f"child {self.id!r}: type must be 'worker' or 'supervisor'; got {self.type!r}"
            )
        if not isinstance(self.significant, bool):
            raise TypeError(
                f"child {self.id!r}: significant must be a bool; got {self.significant!r}"
            )
        if self.significant and self.restart == "permanent":
            raise ValueError(
                f"child {self.id!r}: bad combination: a significant child cannot be permanent "
                "(use transient or temporary)"
            )
        self._check_singleton()
        shutdown = self.shutdown
        if shutdown is None:
            shutdown = "infinity" if self.type == "supervisor" else DEFAULT_WORKER_SHUTDOWN
        try:
            object.__setattr__(self, "shutdown", _check_shutdown(shutdown))
        except ValueError as exc:
            raise ValueError(f"child {self.id!r}: {exc}") from None
        object.__setattr__(
            self, "start", _normalise_start(self.id, self.start, self.args, self.kwargs)
        )
        object.__setattr__(self, "args", ())
        object.__setattr__(self, "kwargs", {})

    def _check_singleton(self) -> None:
        if not isinstance(self.singleton, bool):
            raise TypeError(f"child {self.id!r}: singleton must be a bool; got {self.singleton!r}")
        lease = self.singleton_lease
        if lease is not None:
            if isinstance(lease, bool) or not isinstance(lease, int | float) or not lease > 0:
                raise ValueError(
                    f"child {self.id!r}: singleton_lease must be seconds > 0; got {lease!r}"
                )
            if not self.singleton:
                raise ValueError(
                    f"child {self.id!r}: bad combination: singleton_lease without singleton: true"
                )
        placement = tuple(self.placement)
        if not all(isinstance(n, str) and "@" in n for n in placement):
            raise ValueError(
                f"child {self.id!r}: placement must be a list of node names (name@host); "
                f"got {list(placement)!r}"
            )
        if placement and not self.singleton:
            raise ValueError(
                f"child {self.id!r}: bad combination: placement without singleton: true"
            )
        object.__setattr__(self, "placement", placement)

    def describe_start(self) -> str:
        """The start target as "module:Name", for reports and `rabbitry tree check`."""
        target = self.start[0] if isinstance(self.start, tuple) else self.start
        module = getattr(target, "__module__", "?")
        name = getattr(target, "__qualname__", repr(target))
        return f"{module}:{name}"


def _normalise_start(child_id: Hashable, start: Any, args: tuple, kwargs: dict) -> Any:
    """Turn every accepted `start` form into either (cls, args, kwargs) or a plain callable."""
    from supervisors.process import Process  # local: process imports specs for typing only

    if isinstance(start, type):
        if not issubclass(start, Process):
            raise TypeError(
                f"child {child_id!r}: start class {start.__qualname__} is not a supervisors.Process "
                "subclass (pykka actors need links and exit signals to be supervised)"
            )
        return (start, tuple(args), dict(kwargs))
    if isinstance(start, tuple):
        if len(start) != 3:
            raise TypeError(f"child {child_id!r}: start must be (cls, args, kwargs); got {start!r}")
        cls, a, kw = start
        if not (isinstance(cls, type) and issubclass(cls, Process)):
            raise TypeError(
                f"child {child_id!r}: the first item of start must be a Process subclass; got {cls!r}"
            )
        if not isinstance(a, list | tuple) or not isinstance(kw, dict):
            raise TypeError(
                f"child {child_id!r}: start must be (cls, args: list|tuple, kwargs: dict); got {start!r}"
            )
        return (cls, tuple(a) + tuple(args), {**kw, **kwargs})
    if callable(start):
        if args or kwargs:
            raise TypeError(
                f"child {child_id!r}: args/kwargs go with a class start, not a callable"
            )
        return start
    raise TypeError(
        f"child {child_id!r}: start must be a Process subclass, a (cls, args, kwargs) triple or a "
        f"callable returning an ActorRef; got {start!r}"
    )


@dataclass(frozen=True)
class ChildInfo:
    """One row of `which_children()`: ref is an ActorRef, None (not running) or "restarting"."""

    id: Hashable | None
    ref: Any
    type: ChildType


StartFn = Callable[..., Any]
