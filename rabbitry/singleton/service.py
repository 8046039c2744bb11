"""SingletonService: the actor shell around SingletonCore, one per node (the root's
`singletons` child, before `app`).

It feeds the core the messages sent to SingletonCore.NAME, its timers, and the node monitor's
members (on every node event and every REFRESH seconds), and performs the effects: StartInstance,
RenewInstance and StopInstance on the guards of the application tree (rabbitry/singleton/
guard.py), PersistTokens as an fsynced file in data_dir, and the answers to whereis and global
registrations. A stop asks the guard and waits for it, so that the release the core sends after
a StopInstance (a handover) never lets the next node start before this instance has stopped.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from monitors.core_shell import DistCoreShell
from monitors.dist import NetKernel
from monitors.durable_files import atomic_write
from monitors.shell_effects import ShellEffects
from rabbitry.singleton import leases
from rabbitry.singleton.core import SingletonCore
from rabbitry.singleton.effects import (
    Answer,
    Conflict,
    PersistTokens,
    RenewInstance,
    StartInstance,
    StopInstance,
)

log = logging.getLogger("rabbitry.singleton")

TOKENS_FILE = "singleton_tokens.json"
REFRESH = 1.0  # seconds between two reads of the node monitor's members
GLOBAL_PREFIX = "global:"


def read_tokens(data_dir: Path) -> tuple[int, float] | None:
    """(max_token, longest lease) persisted by this node's acceptor, or None if it never
    granted one (a fresh node need not stay quiet after its start)."""
    path = Path(data_dir) / TOKENS_FILE
    try:
        data = json.loads(path.read_text())
        return int(data["max_token"]), float(data["lease"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        # unreadable: never grant a smaller token than we may have; stay quiet a long lease
        log.error("singleton: %s is unreadable (%s); granting nothing for a while", path, exc)
        return 1 << 40, 60.0


class SingletonService(DistCoreShell[SingletonCore]):
    """One node's singleton shell (see the module docstring)."""

    def __init__(
        self, kernel: Any, monitor: Any, data_dir: str | Path, lease: float, role: str = "core"
    ) -> None:
        super().__init__()
        self._kernel_ref = kernel
        self._monitor = monitor
        self.data_dir = Path(data_dir)
        self._lease = lease
        self._role = role
        self._guards: dict[str, Any] = {}
        self._globals: dict[str, Any] = {}  # key -> the registered process (global names)
        self._queries: dict[int, Future[Any]] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ lifecycle

    def on_start(self) -> None:
        self.kernel = NetKernel.of(self._kernel_ref)
        saved = read_tokens(self.data_dir)
        status = self._status()
        self.core = SingletonCore(
            self.kernel.node,
            lease=self._lease,
            max_token=saved[0] if saved else 0,
            restarted=saved is not None,
            role=self._role,
            members=status.get("all", []),
        )
        self._effects = ShellEffects(self, self._timers, log, "singleton", kernel=self.kernel)
        self.attach(SingletonCore.NAME)
        with contextlib.suppress(Exception):
            self._monitor.proxy().subscribe(self.actor_ref)
        now = time.monotonic()
        self._perform(self.core.set_members(status.get("all", []), status.get("running", []), now))
        self._perform(self.core.start(now))
        self.send_after(REFRESH, "refresh")

    def on_stop(self) -> None:
        self._shutdown()

    def on_failure(self, *_exc_info: Any) -> None:
        self._shutdown()

    def _shutdown(self) -> None:
        self._timers.clear()
        leases.clear()
        for future in self._queries.values():
            with contextlib.suppress(Exception):
                future.set_result(None)
        self.detach(SingletonCore.NAME)
        with contextlib.suppress(Exception):
            self._monitor.proxy().unsubscribe(self.actor_ref)

    # ------------------------------------------------------------------ the API

    def guard_up(
        self, key: str, guard: Any, lease: float | None, placement: Iterable[str] = ()
    ) -> None:
        """A singleton's guard runs in this node's application tree: hold it when we may."""
        assert self.core is not None
        self._guards[key] = guard
        self._perform(
            self.core.want(key, time.monotonic(), lease=lease, placement=tuple(placement))
        )

    def guard_down(self, key: str, reason: str = "stopped") -> None:
        """The guard has stopped its instance and goes: release the lease (a handover)."""
        assert self.core is not None
        self._guards.pop(key, None)
        self._perform(self.core.unwant(key, time.monotonic(), reason))

    def register_global(self, name: str, process: Any, regname: str) -> None:
        """Ask the core for the global name; `registered(name)` tells how it went."""
        assert self.core is not None
        key = GLOBAL_PREFIX + name
        self._globals[key] = process
        info = {"name": regname}
        self._perform(self.core.want(key, time.monotonic(), info=info))

    def registered(self, name: str) -> str:
        """ "held", "taken" (another node holds it), "asking" or "none"."""
        assert self.core is not None
        claim = self.core.claims.get(GLOBAL_PREFIX + name)
        if claim is None:
            return "none"
        if claim.phase == "held":
            return "held"
        if claim.taken_by is not None and claim.phase == "idle":
            # a holder that said it won; a live grant alone may be a duellist that lost too
            # (three nodes registering at once each lost a round to another's grant, and all
            # three refused): the claim asks again after its jittered retry meanwhile
            return "taken"
        return "asking"

    def unregister_global(self, name: str) -> bool:
        assert self.core is not None
        key = GLOBAL_PREFIX + name
        process = self._globals.pop(key, None)
        self._perform(self.core.unwant(key, time.monotonic(), "unregistered"))
        return process is not None

    def whereis(self, key: str) -> Future[Any]:
        """A future of the live grant for `key` ({"holder", "token", "info"}) or None."""
        assert self.core is not None
        future: Future[Any] = Future()
        qid, effects = self.core.whereis(key, time.monotonic())
        self._queries[qid] = future
        self._perform(effects)
        return future

    def status(self) -> dict[str, Any]:
        """GET /singletons: what runs where, as far as this node knows, with wall-clock
        expiries."""
        assert self.core is not None
        now, wall = time.monotonic(), time.time()
        st = self.core.status(now)
        singletons = {}
        for key, grant in st["grants"].items():
            if key.startswith(GLOBAL_PREFIX):
                continue
            singletons[key] = {
                "node": grant["holder"],
                "token": grant["token"],
                "expires": round(wall + grant["left"], 3),
            }
        for key, held in st["held"].items():
            if key.startswith(GLOBAL_PREFIX):
                continue
            singletons[key] = {
                "node": self.core.node,
                "token": held["token"],
                "expires": round(wall + held["expires_in"], 3),
            }
        for key in st["wanted"]:
            if not key.startswith(GLOBAL_PREFIX):
                singletons.setdefault(key, {"node": None, "token": None, "expires": None})
        names = {
            key.removeprefix(GLOBAL_PREFIX): grant["holder"]
            for key, grant in st["grants"].items()
            if key.startswith(GLOBAL_PREFIX)
        }
        return {
            "node": self.core.node,
            "singletons": dict(sorted(singletons.items())),
            "global_names": dict(sorted(names.items())),
            "held_here": sorted(k for k in st["held"] if not k.startswith(GLOBAL_PREFIX)),
            "max_token": st["max_token"],
            "moves": st["moves"],
        }

    # ------------------------------------------------------------------ events

    # The incoming half is DistCoreShell's (monitors/core_shell.py): messages to
    # SingletonCore.NAME and timers; the members come from the node monitor (not NodeUp).

    def on_other(self, message: Any, now: float) -> Any:
        if message == "refresh":
            self._refresh()
            self.send_after(REFRESH, "refresh")
        elif type(message).__name__ == "NodeEvent":
            self._refresh()
        else:
            return super().on_other(message, now)
        return None

    def _status(self) -> dict[str, Any]:
        try:
            return self._monitor.proxy().get_status().get(timeout=5)
        except Exception as exc:
            log.debug("singleton: the node monitor's status is not available (%s)", exc)
            return {}

    def _refresh(self) -> None:
        assert self.core is not None
        status = self._status()
        if status:
            self._perform(self.core.set_members(status["all"], status["running"], time.monotonic()))

    # ------------------------------------------------------------------ effects

    def _perform(self, effects: Iterable[Any]) -> None:
        effects_ = self._effects
        assert effects_ is not None
        for effect in effects:
            if effects_.perform(effect):
                continue
            kind = type(effect)
            if kind is PersistTokens:
                data = json.dumps({"max_token": effect.max_token, "lease": effect.lease})
                atomic_write(self.data_dir / TOKENS_FILE, data.encode())
            elif kind is StartInstance:
                self._lease_to_guard(effect, "singleton_start")
            elif kind is RenewInstance:
                self._lease_to_guard(effect, "singleton_renew")
            elif kind is StopInstance:
                self._stop_instance(effect)
            elif kind is Answer:
                future = self._queries.pop(effect.query, None)
                if future is not None and not future.done():
                    future.set_result(effect.grant)
            elif kind is Conflict:
                self._conflict(effect)
            else:
                log.error("singleton: unknown effect %r", effect)

    def _lease_to_guard(self, effect: StartInstance | RenewInstance, what: str) -> None:
        """A lease won or renewed: its wall-clock end to current() and to the key's guard."""
        if effect.key.startswith(GLOBAL_PREFIX):
            return  # a global name has no instance to start; registered() reports it held
        expires = time.time() + effect.expires_in
        leases.set_lease(effect.key, effect.token, expires)
        guard = self._guards.get(effect.key)
        if guard is not None:
            guard.tell((what, effect.token, expires))

    def _stop_instance(self, effect: StopInstance) -> None:
        leases.drop(effect.key)
        if effect.key.startswith(GLOBAL_PREFIX):
            return
        guard = self._guards.get(effect.key)
        if guard is None:
            return  # its guard stopped the instance itself before it went (guard_down)
        log.info(
            "singleton %s: stopping token %d here: %s", effect.key, effect.token, effect.reason
        )
        try:  # wait: a release may follow, and the next instance must not start before
            guard.ask(("singleton_stop", effect.token), timeout=60)
        except Exception as exc:
            log.warning("singleton %s: stopping the instance failed: %s", effect.key, exc)

    def _conflict(self, effect: Conflict) -> None:
        process = self._globals.pop(effect.key, None)
        if process is None:
            return
        name = effect.key.removeprefix(GLOBAL_PREFIX)
        log.warning("global name %r: held by %s now; telling the loser here", name, effect.winner)
        with contextlib.suppress(Exception):
            self.kernel.unregister(global_regname(name))
        with contextlib.suppress(Exception):
            process.tell(("global_name_conflict", name))
        assert self.core is not None
        self._perform(self.core.unwant(effect.key, time.monotonic(), "conflict"))


def global_regname(name: str) -> str:
    """The dist name a globally registered process is reachable under on its node."""
    return f"rabbitry.global.{name}"
