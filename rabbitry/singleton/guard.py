"""SingletonGuard: the place of a `singleton: true` child in every core node's application tree.

The guard runs wherever the application runs. It tells the node's SingletonService that it is
there, and starts the real child (linked, trapping its exit) only when the service says this
node holds the lease; it stops the child when the lease is lost, handed over
or about to run out unrenewed, and before it goes itself (a pause, a stop, a leave), so that the
release that follows lets the next node start at once.

An OS-process child gets RABBITRY_SINGLETON_TOKEN and RABBITRY_SINGLETON_LEASE_FILE; the file
holds the lease's wall-clock expiry (seconds since the epoch, decimal) and is rewritten on each
renewal, so that a child that checks it before acting never acts after its lease has run out,
even when its node is frozen and nothing stops it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from supervisors import ChildSpec, Exit, OsProcess, Process, Supervisor
from supervisors import exit as send_exit

log = logging.getLogger("rabbitry.singleton")

TOKEN_ENV = "RABBITRY_SINGLETON_TOKEN"
LEASE_FILE_ENV = "RABBITRY_SINGLETON_LEASE_FILE"


def lease_file(run_dir: Path, key: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in key)
    return Path(run_dir) / f"singleton-{safe}.lease"


def write_lease_file(path: Path, expires: float) -> None:
    """Replace the file atomically (a reader sees the old expiry or the new one, never half)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{expires:.6f}\n")
    os.replace(tmp, path)


class SingletonGuard(Process):
    """Stands in for `spec` in the application tree (see the module docstring). The child's
    exit is the guard's: a crash ends the guard with the child's reason, so the application
    tree restarts the guard (its restart type is the child's) as it would the child."""

    trap_exit = True

    def __init__(self, spec: ChildSpec, service: Callable[[], Any], run_dir: str) -> None:
        super().__init__()
        self._spec = spec
        self._service_of = service
        self._file = lease_file(Path(run_dir), str(spec.id))
        self._child: Any = None
        self._token: int | None = None
        self._service: Any = None

    @property
    def key(self) -> str:
        return str(self._spec.id)

    def on_start(self) -> None:
        self._service = self._service_of()
        if self._service is None:
            raise RuntimeError(
                f"singleton {self.key!r}: this node runs no singleton service (a singleton "
                "child needs a rabbitry node; `rabbitry tree run` runs it as a plain child)"
            )
        lease = self._spec.singleton_lease
        self._service.proxy().guard_up(self.key, self.actor_ref, lease, self._spec.placement)

    def on_stop(self) -> None:
        self._stop_child()
        with contextlib.suppress(Exception):
            self._service.proxy().guard_down(self.key, "the application stopped")

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Exit):
            if (
                self._child is not None
                and message.sender is not None
                and (message.sender.actor_urn == self._child.actor_urn)
            ):
                self._child, self._token = None, None
                if message.reason == "normal":
                    self.stop()
                else:
                    self.exit(message.reason)
                return None
            self.exit(message.reason)  # our own supervisor (or another link) ends us
            return None
        if isinstance(message, tuple) and message and message[0] == "singleton_start":
            _, token, expires = message
            self._start_child(token, expires)
            return None
        if isinstance(message, tuple) and message and message[0] == "singleton_renew":
            _, token, expires = message
            if token == self._token:
                write_lease_file(self._file, expires)
            return None
        if isinstance(message, tuple) and message and message[0] == "singleton_stop":
            if message[1] == self._token:
                self._stop_child()
            return None
        return super().on_receive(message)

    def _start_child(self, token: int, expires: float) -> None:
        self._stop_child()
        write_lease_file(self._file, expires)
        start = self._child_spec(token).start
        ref = start[0].start(*start[1], **start[2]) if isinstance(start, tuple) else start()
        if ref is None:  # OTP's ignore
            return
        self._child, self._token = ref, token
        self.link(ref)
        log.info("singleton %s: started here with token %d", self.key, token)

    def _stop_child(self) -> None:
        child, self._child = self._child, None
        self._token = None
        if child is not None:
            with contextlib.suppress(Exception):
                self.unlink(child)
            self._shut_down(child)
        with contextlib.suppress(OSError):
            write_lease_file(self._file, 0.0)  # a child still reading it acts no more

    def _shut_down(self, child: Any) -> None:
        """As a supervisor stops a child: per its shutdown (seconds, brutal_kill, infinity)."""
        shutdown = self._spec.shutdown
        if shutdown == "brutal_kill":
            send_exit(child, "kill")
            return
        timeout = None if shutdown == "infinity" else float(shutdown or 5.0)
        try:
            child.stop(block=True, timeout=timeout)
        except Exception:
            send_exit(child, "kill")

    def _child_spec(self, token: int) -> ChildSpec:
        spec = replace(self._spec, singleton=False, singleton_lease=None, placement=())
        start = spec.start
        if (
            isinstance(start, tuple)
            and isinstance(start[0], type)
            and issubclass(start[0], OsProcess)
        ):
            cls, args, kwargs = start
            env = {
                **(kwargs.get("env") or {}),
                TOKEN_ENV: str(token),
                LEASE_FILE_ENV: str(self._file),
            }
            spec = replace(spec, start=(cls, args, {**kwargs, "env": env}))
        return spec


def with_singletons(
    children: list[ChildSpec], service: Callable[[], Any], run_dir: Path
) -> list[ChildSpec]:
    """The same children with every `singleton: true` child (at any depth) replaced by its
    guard."""
    out = []
    for child in children:
        start = child.start
        if child.singleton:
            guard_start: tuple[type, tuple[Any, ...], dict[str, Any]] = (
                SingletonGuard,
                (child, service, str(run_dir)),
                {},
            )
            out.append(
                ChildSpec(
                    child.id,
                    guard_start,
                    restart=child.restart,
                    shutdown="infinity"
                    if child.shutdown == "infinity"
                    else _longer(child.shutdown),
                    type=child.type,
                )
            )
        elif (
            isinstance(start, tuple)
            and isinstance(start[0], type)
            and issubclass(start[0], Supervisor)
        ):
            cls, args, kwargs = start
            if len(args) == 2 and isinstance(args[1], list):
                nested = with_singletons(args[1], service, run_dir)
                out.append(replace(child, start=(cls, (args[0], nested), kwargs)))
            else:
                out.append(child)
        else:
            out.append(child)
    return out


def _longer(shutdown: Any) -> Any:
    """The guard's own shutdown: the child's, plus a second to stop it and release."""
    if isinstance(shutdown, int | float):
        return float(shutdown) + 1.0
    return 5.0 if shutdown == "brutal_kill" else shutdown
