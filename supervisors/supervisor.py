"""Supervisor: OTP's supervisor behaviour as a trapping Process.

Children start left to right and stop right to left. A child that ends is restarted according
to its restart type and the strategy; more than `intensity` restarts within `period` seconds
make the supervisor stop every child and exit with "shutdown", so that its own supervisor
decides. API errors (AlreadyStarted, NotFound, ...) are replies: the supervisor keeps running.

All state lives in the supervisor's own thread: children's exits arrive as Exit messages and API
calls arrive as asks, in one mailbox, so they are handled one at a time and in order.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import threading
import time
from collections.abc import Hashable, Iterable
from typing import Any

from pykka import ActorRef

from supervisors.errors import (
    AlreadyPresent,
    AlreadyStarted,
    InvalidChildSpec,
    NotFound,
    Restarting,
    Running,
    SimpleOneForOne,
    StartChildError,
    SupervisorError,
)
from supervisors.gc_pause import gc_paused
from supervisors.intensity import RestartIntensity
from supervisors.messages import Exit
from supervisors.process import _REGISTRY, Ignore, Process, _process_of, _SelfExit, exit
from supervisors.reasons import KILL, SHUTDOWN, Reason, is_clean_exit
from supervisors.report import report, wanted
from supervisors.specs import ChildInfo, ChildSpec, SupFlags

RESTARTING = "restarting"
_naming = threading.local()  # the child id a parent is starting, to name a child supervisor


class _Child:
    """A child's spec and state: ref is an ActorRef, None (not running) or RESTARTING.

    `last` is the last ActorRef it ran as: a simple_one_for_one child that is restarting is
    still known to callers by that ref (OTP's {restarting, OldPid})."""

    __slots__ = ("extra", "key", "last", "ref", "restarts", "spec")

    def __init__(self, key: Hashable, spec: ChildSpec, extra: tuple = ()) -> None:
        self.key = key
        self.spec = spec
        self.ref: Any = None
        self.last: Any = None
        self.extra = extra
        self.restarts = 0  # times restarted so far (shown in its crash reports)


class _TryAgain:
    """A restart that failed is retried through the mailbox, so API calls can interleave."""

    __slots__ = ("child",)

    def __init__(self, child: _Child) -> None:
        self.child = child


class Supervisor(Process):
    """A supervisor. Start it with `Supervisor.start(flags, children)` or subclass it and
    override `init()`.

    The proxy (`ref.proxy()`) offers the OTP API: start_child, terminate_child, restart_child,
    delete_child, which_children, count_children and get_childspec.
    """

    trap_exit = True

    def __init__(
        self,
        flags: SupFlags | None = None,
        children: Iterable[ChildSpec] = (),
        *,
        name: str | None = None,
    ) -> None:
        super().__init__()
        self._init_flags = flags
        self._init_children = list(children)
        self.name = name or str(getattr(_naming, "child_id", None) or type(self).__name__)
        self._flags = SupFlags()
        self._intensity = RestartIntensity(1, 5.0)
        self._children: list[_Child] = []  # static children, in start order
        self._dynamic: dict[Hashable, _Child] = {}  # simple_one_for_one children, in start order
        self._template: ChildSpec | None = None
        self._by_urn: dict[str, _Child] = {}
        self._dynamic_keys = itertools.count()

    @classmethod
    def start(
        cls, flags: SupFlags | None = None, children: Iterable[ChildSpec] = (), **kwargs: Any
    ) -> ActorRef[Any]:
        """Start the supervisor and all its children; returns once every child has started.

        If a child fails to start, the children already started are stopped in reverse order
        and StartChildError (naming the child) is raised. Subclasses that override `init()`
        may take their own arguments.
        """
        if cls is Supervisor:
            return cls._sv_spawn((flags, children), kwargs, link_to=None)
        args = tuple(a for a in (flags, children) if a not in (None, ()))
        return cls._sv_spawn(args, kwargs, link_to=None)

    def init(self) -> tuple[SupFlags, list[ChildSpec]] | None:
        """Return (flags, children). Override in subclasses; return None to not start
        (OTP's `ignore`: `start()` then returns None)."""
        return (self._init_flags or SupFlags(), self._init_children)

    # ------------------------------------------------------------------------ start-up

    def on_start(self) -> None:
        result = self.init()
        if result is None:
            raise Ignore()
        if not (isinstance(result, tuple) and len(result) == 2):
            raise TypeError(
                f"supervisor {self.name}: init() must return (SupFlags, [ChildSpec, ...]) or "
                f"None; got {result!r}"
            )
        flags, specs = result
        if not isinstance(flags, SupFlags):
            raise TypeError(f"supervisor {self.name}: flags must be a SupFlags; got {flags!r}")
        specs = list(specs)
        _check_specs(self.name, flags, specs)
        self._flags = flags
        self._intensity = RestartIntensity(flags.intensity, flags.period)
        if flags.strategy == "simple_one_for_one":
            self._template = specs[0]
            return
        self._children = [_Child(spec.id, spec) for spec in specs]
        for child in list(self._children):
            try:
                self._start(child)
            except StartChildError:
                self._children.remove(child)
                self._stop_static_children()
                raise
            if child.ref is None and child.spec.restart == "temporary":
                self._children.remove(child)  # an ignored temporary child leaves no spec

    @property
    def _simple(self) -> bool:
        return self._template is not None

    def _start(self, child: _Child, level: int | None = None, announce: bool = True) -> Any:
        """Start one child, linked to us. Raises StartChildError; None means it ignored.
        `level` overrides the child_started report's level (DEBUG in a batch); `announce`
        False skips it (a batch that found nobody listening at that level, once for all)."""
        spec = child.spec
        _naming.child_id = spec.id
        try:
            if isinstance(spec.start, tuple):
                cls, args, kwargs = spec.start
                ref = cls._sv_spawn(args + child.extra, kwargs, link_to=self)
            else:
                ref = spec.start(*child.extra)
                if ref is not None:
                    self._adopt(spec.id, ref)
        except _SelfExit:
            raise
        except BaseException as exc:
            report("start_error", self.name, spec.id, reason=exc)
            raise StartChildError(spec.id, exc) from exc
        finally:
            _naming.child_id = None
        if spec.restart == "temporary":
            # OTP keeps no start args for temporary children: they are never restarted.
            child.extra = ()
            if isinstance(spec.start, tuple) and (spec.start[1] or spec.start[2]):
                child.spec = dataclasses.replace(spec, start=(spec.start[0], (), {}))
        child.ref = ref
        if ref is not None:
            child.last = ref
            self._by_urn[ref.actor_urn] = child
            if announce:
                report(
                    "child_started",
                    self.name,
                    spec.id,
                    level=level,
                    ref=ref.actor_urn,
                    restart=spec.restart,
                )
        return ref

    def _adopt(self, child_id: Hashable, ref: Any) -> None:
        """Link to a child that a start callable started, and become its parent."""
        if not isinstance(ref, ActorRef):
            raise TypeError(
                f"start callable for {child_id!r} must return an ActorRef or None; got {ref!r}"
            )
        proc = _process_of(ref)
        if proc is not None:
            proc._sv_parent_urn = self.actor_urn
        elif not issubclass(ref.actor_class, Process):
            raise TypeError(
                f"start callable for {child_id!r} returned a {ref.actor_class.__name__}, which is "
                "not a supervisors.Process; plain pykka actors cannot be linked"
            )
        self.link(ref)  # a child already dead arrives as Exit(ref, "noproc"): a crash

    # ------------------------------------------------------------------- child exits

    def on_receive(self, message: Any) -> Any:
        if type(message) is Exit:
            child = self._by_urn.pop(message.sender.actor_urn, None) if message.sender else None
            if child is not None:
                self._child_exited(child, message.reason)
            return None
        if type(message) is _TryAgain:
            child = message.child
            if child.ref == RESTARTING and self._owns(child):
                self._restart(child, None)
            return None
        return super().on_receive(message)

    def _owns(self, child: _Child) -> bool:
        if self._simple:
            return self._dynamic.get(child.key) is child
        return any(c is child for c in self._children)

    def _child_exited(self, child: _Child, reason: Reason) -> None:
        spec = child.spec
        clean = is_clean_exit(reason)
        if clean:
            report("child_exited", self.name, spec.id, reason=reason)
        else:  # one structured line per crash; crash_log shows the traceback once per site
            report("child_crashed", self.name, spec.id, reason=reason, restarts=child.restarts)
        if spec.restart == "permanent" or (spec.restart == "transient" and not clean):
            self._restart(child, reason)
            return
        self._forget(child)
        if spec.significant:
            self._check_auto_shutdown()

    def _forget(self, child: _Child) -> None:
        """A child that ended for good: temporary and dynamic children lose their entry."""
        child.ref = None
        if self._simple:
            self._dynamic.pop(child.key, None)
        elif child.spec.restart == "temporary":
            self._children = [c for c in self._children if c is not child]

    def _check_auto_shutdown(self) -> None:
        mode = self._flags.auto_shutdown
        if mode == "never":
            return
        if mode == "all_significant" and any(
            c.spec.significant and isinstance(c.ref, ActorRef) for c in self._children
        ):
            return
        report("auto_shutdown", self.name, mode=mode)
        self.exit(SHUTDOWN)

    def _restart(self, child: _Child, reason: Reason) -> None:
        if not self._intensity.add_restart(time.monotonic()):
            report(
                "reached_max_restart_intensity",
                self.name,
                child.spec.id,
                reason=reason,
                intensity=self._flags.intensity,
                period=self._flags.period,
            )
            if self._simple:
                self._forget(child)
            else:
                child.ref = None
            self.exit(SHUTDOWN)
        strategy = self._flags.strategy
        if strategy in ("one_for_one", "simple_one_for_one"):
            self._start_group([child], child)
            return
        index = self._children.index(child)
        affected = self._children if strategy == "one_for_all" else self._children[index:]
        for other in reversed(list(affected)):
            if other is not child:
                self._stop_child(other)  # temporary bystanders are dropped, not restarted
        index = self._children.index(child)
        group = list(self._children) if strategy == "one_for_all" else self._children[index:]
        self._start_group(group, child)

    def _start_group(self, group: list[_Child], trigger: _Child) -> None:
        for member in group:
            try:
                ref = self._start(member)
            except StartChildError:
                member.ref = RESTARTING
                self._sv_tell_self(_TryAgain(member))
                return
            if ref is None and self._simple:
                self._dynamic.pop(member.key, None)
            elif ref is not None:
                member.restarts += 1
                report(
                    "child_restarted",
                    self.name,
                    member.spec.id,
                    ref=ref.actor_urn,
                    trigger=trigger.spec.id,
                )

    # ------------------------------------------------------------------- termination

    def _stop_child(self, child: _Child) -> None:
        """Stop one child per its shutdown spec; a temporary one also loses its spec."""
        ref = child.ref
        child.ref = None
        if child.spec.restart == "temporary" and not self._simple:
            self._children = [c for c in self._children if c is not child]
        if not isinstance(ref, ActorRef):
            return
        self._by_urn.pop(ref.actor_urn, None)
        self.unlink(ref)
        proc = _process_of(ref)
        if proc is None:
            return  # it ended on its own just now; its Exit, if queued, is ignored
        reason = _shutdown(proc, ref, child.spec.shutdown)
        self._report_shutdown(child, reason)

    def _report_shutdown(
        self, child: _Child, reason: Reason, level: int | None = None, announce: bool = True
    ) -> bool:
        """Report a child's stop; `level` overrides a clean one's (DEBUG in a mass stop), and
        `announce` False skips a clean one (nobody listens at that level). An unexpected
        reason is always a shutdown_error at ERROR. Returns whether it was clean."""
        expected = "killed" if child.spec.shutdown == "brutal_kill" else SHUTDOWN
        if reason == expected:
            if announce:
                report("shutdown", self.name, child.spec.id, level=level, reason=reason)
            return True
        report("shutdown_error", self.name, child.spec.id, reason=reason)
        return False

    def _stop_static_children(self) -> None:
        for child in reversed(list(self._children)):
            self._stop_child(child)

    def _stop_dynamic_children(self) -> None:
        """simple_one_for_one: stop all children at once, in no defined order (as OTP)."""
        children = [c for c in self._dynamic.values() if isinstance(c.ref, ActorRef)]
        self._dynamic.clear()
        shutdown = self._template.shutdown if self._template else 5.0
        signal = KILL if shutdown == "brutal_kill" else SHUTDOWN
        # The loops below run once per child, 100,000 times for 100,000 children, so what
        # does not change per child is looked up once (gc_pause.py says why the collector
        # waits). unlink(ref) then exit(ref, signal), each child looked up once; our side of
        # every link goes under one hold of our lock (a child dying meanwhile finds its link
        # gone and sends nothing, as after unlink).
        with gc_paused():
            me, my_urn, links, by_urn = self.actor_ref, self.actor_urn, self._sv_links, self._by_urn
            with self._sv_lock:
                for child in children:
                    links.pop(child.ref.actor_urn, None)
            registered = _REGISTRY.get
            pending = []
            for child in children:
                ref = child.ref
                urn = ref.actor_urn
                by_urn.pop(urn, None)
                # a local child: its live Process is in the registry (what _process_of does
                # for a plain ActorRef, without the checks for other kinds of ref)
                proc = registered(urn) if type(ref) is ActorRef else _process_of(ref)
                if proc is not None:
                    proc._sv_remove_link(my_urn)
                    proc._sv_receive_exit(me, signal, via_link=False)
                    pending.append((child, proc))
        # otherwise "infinity" or "brutal_kill" (ChildSpec never leaves shutdown None)
        deadline = time.monotonic() + shutdown if isinstance(shutdown, int | float) else None
        # The wait is paused too when a shutdown timeout bounds it; "infinity" may wait for a
        # stuck child forever, and the whole interpreter's collector with it.
        with gc_paused() if deadline is not None else contextlib.nullcontext():
            if pending:
                # The pool runs the children's exits in the order they were signalled. Wait
                # for the last one first: the others are then (nearly) all done, and the loop
                # below finds them finished instead of waking up once per child.
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                pending[-1][1]._sv_wait_finished(remaining)
            # As start_children: each clean stop at DEBUG, one children_shutdown at INFO for
            # all (a log line per child was most of the cost of stopping 100,000); errors stay
            # ERROR.
            clean = 0
            debug = logging.DEBUG
            each = wanted(debug)
            for child, proc in pending:
                if not proc._sv_finished.is_set():
                    remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                    if not proc._sv_wait_finished(remaining):
                        exit(proc.actor_ref, KILL)
                        proc._sv_wait_finished(None)
                clean += self._report_shutdown(child, proc._sv_reason, debug, each)
        if pending and self._template is not None:
            report(
                "children_shutdown",
                self.name,
                self._template.id,
                count=len(pending),
                errors=len(pending) - clean,
            )

    def on_failure(self, *exc_info: Any) -> None:
        """A crash in the supervisor's own machinery still stops the children in order."""
        self.on_stop()

    def on_stop(self) -> None:
        """Stop the children, last started first, each per its shutdown spec."""
        if self._simple:
            self._stop_dynamic_children()
        else:
            self._stop_static_children()

    # ---------------------------------------------------------------------- the API

    def start_child(self, spec_or_args: ChildSpec | list | tuple = ()) -> Any:
        """Add and start a child. Static: pass a ChildSpec. simple_one_for_one: pass a list of
        extra args, appended to the template's args. Returns the ref (None if it ignored)."""
        if self._simple:
            if not isinstance(spec_or_args, list | tuple):
                raise InvalidChildSpec(
                    None,
                    f"simple_one_for_one start_child takes a list of extra args; got {spec_or_args!r}",
                )
            assert self._template is not None
            child = _Child(next(self._dynamic_keys), self._template, tuple(spec_or_args))
            ref = self._start(child)
            if ref is not None:
                self._dynamic[child.key] = child
            return ref
        spec = spec_or_args
        if not isinstance(spec, ChildSpec):
            raise InvalidChildSpec(None, f"expected a ChildSpec; got {spec!r}")
        if spec.significant and self._flags.auto_shutdown == "never":
            raise InvalidChildSpec(
                spec.id, "bad combination: significant child under auto_shutdown 'never'"
            )
        existing = self._find(spec.id)
        if existing is not None:
            if isinstance(existing.ref, ActorRef):
                raise AlreadyStarted(spec.id, existing.ref)
            raise AlreadyPresent(spec.id)
        child = _Child(spec.id, spec)
        ref = self._start(child)
        if ref is not None or spec.restart != "temporary":
            self._children.append(child)
        return ref

    def start_children(self, n: int, args: list | tuple = ()) -> list[Any]:
        """simple_one_for_one: start `n` children from the template in one call, each with the
        same extra `args` appended to the template's args. Returns their refs in start order
        (None for a child that ignored), as n start_child calls would, one after the other.

        One ask instead of n: the caller's round trip per child is what bounds a large start.
        The supervisor reports the batch once at INFO (children_started, with the count) and
        each child's child_started at DEBUG. If a child fails to start, the children started
        before it in this batch keep running (as they would after as many start_child calls),
        the rest are not attempted, and StartChildError is raised with `started`: the refs of
        the children this batch did start.
        """
        if not self._simple:
            raise SupervisorError(
                "start_children is only for simple_one_for_one supervisors; a static child "
                "needs a ChildSpec of its own: use start_child(spec)"
            )
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InvalidChildSpec(None, f"start_children needs a count >= 0; got {n!r}")
        if not isinstance(args, list | tuple):
            raise InvalidChildSpec(
                None, f"start_children takes a list of extra args for each child; got {args!r}"
            )
        template = self._template
        assert template is not None
        extra = tuple(args)
        refs: list[Any] = []
        dynamic, keys, start = self._dynamic, self._dynamic_keys, self._start
        debug = logging.DEBUG
        each = wanted(debug)  # once per batch: a child_started at DEBUG per child, or none
        try:
            with gc_paused():  # the batch allocates and frees nothing: see gc_pause.py
                for _ in range(n):
                    child = _Child(next(keys), template, extra)
                    ref = start(child, debug, each)
                    if ref is not None:
                        dynamic[child.key] = child
                    refs.append(ref)
        except StartChildError as exc:
            exc.started = refs
            raise
        finally:
            if refs:
                report(
                    "children_started",
                    self.name,
                    template.id,
                    count=sum(1 for r in refs if r is not None),
                    asked=n,
                    restart=template.restart,
                )
        return refs

    def terminate_child(self, child_id: Any) -> None:
        """Stop a child per its shutdown spec. Static: by id (the spec is kept, except for a
        temporary child). simple_one_for_one: by ref; the child is removed."""
        if self._simple:
            if not isinstance(child_id, ActorRef):
                raise SimpleOneForOne("terminate_child by id (pass the child's ref)")
            child = self._by_urn.get(child_id.actor_urn) or self._restarting(child_id)
            if child is None:
                if _is_alive(child_id):
                    raise NotFound(child_id)
                return  # as OTP: a process that no longer exists needs no terminating
            self._stop_child(child)
            self._dynamic.pop(child.key, None)
            return
        child = self._find(child_id)
        if child is None:
            raise NotFound(child_id)
        self._stop_child(child)

    def restart_child(self, child_id: Hashable) -> Any:
        """Start a static child that was terminated. Returns its new ref."""
        return self._start(self._stopped_child(child_id, "restart_child"))

    def delete_child(self, child_id: Hashable) -> None:
        """Remove the spec of a static child that is not running."""
        child = self._stopped_child(child_id, "delete_child")
        self._children = [c for c in self._children if c is not child]

    def _stopped_child(self, child_id: Hashable, call: str) -> _Child:
        """The static child `call` may act on: it must exist and be neither running nor
        between restart attempts (OTP's running / restarting / not_found errors)."""
        if self._simple:
            raise SimpleOneForOne(call)
        child = self._find(child_id)
        if child is None:
            raise NotFound(child_id)
        if child.ref == RESTARTING:
            raise Restarting(child_id)
        if isinstance(child.ref, ActorRef):
            raise Running(child_id)
        return child

    def which_children(self) -> list[ChildInfo]:
        """One ChildInfo(id, ref | None | "restarting", type) per child, in start order."""
        if self._simple:
            kind = self._template.type  # type: ignore[union-attr]
            return [ChildInfo(None, c.ref, kind) for c in self._dynamic.values()]
        return [ChildInfo(c.spec.id, c.ref, c.spec.type) for c in self._children]

    def count_children(self) -> dict[str, int]:
        """{"specs", "active", "supervisors", "workers"}, counted as OTP does."""
        if self._simple:
            kind = self._template.type  # type: ignore[union-attr]
            total = len(self._dynamic)
            active = sum(1 for c in self._dynamic.values() if _is_alive(c.ref))
            return {
                "specs": 1,
                "active": active,
                "supervisors": total if kind == "supervisor" else 0,
                "workers": total if kind == "worker" else 0,
            }
        return {
            "specs": len(self._children),
            "active": sum(1 for c in self._children if _is_alive(c.ref)),
            "supervisors": sum(1 for c in self._children if c.spec.type == "supervisor"),
            "workers": sum(1 for c in self._children if c.spec.type == "worker"),
        }

    def get_childspec(self, child_id: Any) -> ChildSpec:
        """The spec of a child: by id, or by ref under simple_one_for_one."""
        if self._simple:
            if isinstance(child_id, ActorRef) and child_id.actor_urn in self._by_urn:
                return self._template  # type: ignore[return-value]
            raise NotFound(child_id)
        child = self._find(child_id)
        if child is None:
            raise NotFound(child_id)
        return child.spec

    def _restarting(self, ref: ActorRef[Any]) -> _Child | None:
        """The simple_one_for_one child between restart attempts that last ran as `ref`."""
        for child in self._dynamic.values():
            last = child.last
            if child.ref == RESTARTING and last is not None and last.actor_urn == ref.actor_urn:
                return child
        return None

    def _find(self, child_id: Hashable) -> _Child | None:
        for child in self._children:
            if child.spec.id == child_id:
                return child
        return None


def _is_alive(ref: Any) -> bool:
    return isinstance(ref, ActorRef) and ref.is_alive()


def _shutdown(proc: Process, ref: ActorRef[Any], shutdown: Any) -> Reason:
    """Stop one process: kill, or "shutdown" then kill after the timeout, or wait forever."""
    if shutdown == "brutal_kill":
        exit(ref, KILL)
    else:
        exit(ref, SHUTDOWN)
        timeout = None if shutdown == "infinity" else float(shutdown)
        if not proc._sv_wait_finished(timeout):
            exit(ref, KILL)
    proc._sv_wait_finished(None)
    return proc._sv_reason


def _check_specs(name: str, flags: SupFlags, specs: list[ChildSpec]) -> None:
    """OTP's init-time checks: types, unique ids, one spec for simple_one_for_one, and no
    significant children under auto_shutdown never."""
    seen: set[Any] = set()
    for spec in specs:
        if not isinstance(spec, ChildSpec):
            raise TypeError(f"supervisor {name}: children must be ChildSpec objects; got {spec!r}")
        if spec.id in seen:
            raise ValueError(f"supervisor {name}: duplicate child id {spec.id!r}")
        seen.add(spec.id)
        if spec.significant and flags.auto_shutdown == "never":
            raise ValueError(
                f"supervisor {name}: bad combination: child {spec.id!r} is significant but "
                "auto_shutdown is 'never'"
            )
    if flags.strategy == "simple_one_for_one" and len(specs) != 1:
        raise ValueError(
            f"supervisor {name}: simple_one_for_one needs exactly one child spec (the template); "
            f"got {len(specs)}"
        )
