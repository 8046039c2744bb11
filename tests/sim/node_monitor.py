"""Hosting NodeMonitorCore in the simulator: building it from the node's disk, and the
node-monitor effects (PauseApp, ResumeApp, SaveClusterStatus, Notify).

The core API (NodeMonitorCore, ClusterStatus, PartitionHandling) comes from an `api` module:
monitors.node_monitor.core when it exists, or tests.sim.stub_core. Effects are matched by
class name, so the same handlers serve both.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from tests.sim.engine import EffectHandler, Sim, SimNode

REAL_CORE = "monitors.node_monitor.core"
APP_DELAY = (0.005, 0.05)  # how long stopping/starting the application tree takes


def real_core_api() -> ModuleType | None:
    """The real core module, or None while it does not exist yet."""
    try:
        return importlib.import_module(REAL_CORE)
    except ModuleNotFoundError as e:
        if e.name and REAL_CORE.startswith(e.name):
            return None
        raise


def core_api(which: str | Any = "auto") -> Any:
    """Which core: "real", "stub", "auto" (the real core if it exists), or an api object itself (anything
    with NodeMonitorCore, ClusterStatus and PartitionHandling attributes)."""
    if not isinstance(which, str):
        return which
    if which in ("real", "auto"):
        api = real_core_api()
        if api is not None:
            return api
        if which == "real":
            raise RuntimeError(f"{REAL_CORE} does not exist yet")
    return importlib.import_module("tests.sim.stub_core")


@dataclass(frozen=True)
class Mode:
    """A partition-handling mode: "ignore", "pause_minority", "autoheal", or
    "pause_if_all_down" with preferred `nodes` and `recover` ("ignore" | "autoheal")."""

    name: str
    nodes: tuple[str, ...] = ()
    recover: str = "ignore"

    @staticmethod
    def parse(text: str, preferred: tuple[str, ...] = ()) -> Mode:
        """Parse "pause_if_all_down:autoheal" -> Mode("pause_if_all_down", preferred, "autoheal")."""
        name, _, recover = text.partition(":")
        if name == "pause_if_all_down":
            return Mode(name, preferred, recover or "ignore")
        return Mode(name)

    @property
    def label(self) -> str:
        return f"{self.name}:{self.recover}" if self.name == "pause_if_all_down" else self.name

    @property
    def heals(self) -> bool:
        """Autoheal runs after a partition (autoheal, or pause_if_all_down's recover)."""
        return self.name == "autoheal" or self.recover == "autoheal"


class NodeMonitorKind:
    """A CoreKind: one NodeMonitorCore per node, registered as NodeMonitorCore.NAME."""

    def __init__(
        self,
        api: Any,
        members: list[str],
        mode: Mode,
        *,
        down_ping_interval: float = 1.0,
        keepalive_interval: float = 10.0,
        disconnect_ban: float = 1.0,
        autoheal_timeout: float = 60.0,
        hold_app: bool = True,
    ) -> None:
        self.api = api
        # As a real node does (rabbitry/node.py): under the pause modes the application is
        # held at boot until the node may run. The stub core has no such option.
        self.hold_app = hold_app and "hold_app" in inspect.signature(api.NodeMonitorCore).parameters
        self.name: str = api.NodeMonitorCore.NAME
        self.members = list(members)
        self.mode = mode
        self.down_ping_interval = down_ping_interval
        self.keepalive_interval = keepalive_interval
        self.disconnect_ban = disconnect_ban
        self.autoheal_timeout = autoheal_timeout
        if mode.name == "pause_if_all_down":
            self.config = api.PartitionHandling(mode.name, nodes=mode.nodes, recover=mode.recover)
        else:
            self.config = api.PartitionHandling(mode.name)

    def build(self, sim: Sim, node: SimNode) -> Any:
        """A fresh core from the node's simulated disk (the last SaveClusterStatus), or the
        configured members at first start. The app tree starts running with the node."""
        saved = node.disk.get(self.name)
        if saved is None:
            saved = (self.members, self.members, self.members)
        all_, disc, running = saved
        status = self.api.ClusterStatus(all=list(all_), disc=list(disc), running=list(running))
        core = self.api.NodeMonitorCore(
            node=node.name,
            creation=node.creation,
            status=status,
            config=self.config,
            down_ping_interval=self.down_ping_interval,
            keepalive_interval=self.keepalive_interval,
            disconnect_ban=self.disconnect_ban,
            autoheal_timeout=self.autoheal_timeout,
            **({"hold_app": True} if self.hold_app else {}),
        )
        if hasattr(core, "set_weight"):
            core.set_weight(sim.stream(node.name).randrange(0, 4))
        node.state["app"] = "stopped" if getattr(core, "hold_app", False) else "running"
        node.state["app_busy_until"] = sim.now
        node.state["notified"] = []
        return core

    def handlers(self) -> dict[str, EffectHandler]:
        return {
            "PauseApp": self._pause,
            "ResumeApp": self._resume,
            "SaveClusterStatus": self._save,
            "Notify": self._notify,
        }

    # The shell runs app requests one after another, each taking a little while.
    def _app_request(self, sim: Sim, node: SimNode, cname: str, stop: bool) -> None:
        start = max(sim.now, node.state["app_busy_until"])
        done = start + sim.stream(node.name).uniform(*APP_DELAY)
        node.state["app_busy_until"] = done
        node.state["app"] = "stopping" if stop else "starting"
        sim.post(node, done - sim.now, self._app_done, sim, node, cname, stop)

    def _app_done(self, sim: Sim, node: SimNode, cname: str, stop: bool) -> None:
        core = node.cores[cname]
        if stop:
            node.state["app"] = "stopped"
            sim.call(node, cname, "app_stopped", None, core.app_stopped(sim.now))
        else:
            node.state["app"] = "running"
            sim.call(node, cname, "app_started", None, core.app_started(sim.now))

    def _pause(self, sim: Sim, node: SimNode, cname: str, eff: Any) -> None:
        sim.record(node, "pause_app", getattr(eff, "reason", ""))
        self._app_request(sim, node, cname, stop=True)

    def _resume(self, sim: Sim, node: SimNode, cname: str, eff: Any) -> None:
        sim.record(node, "resume_app", "")
        self._app_request(sim, node, cname, stop=False)

    def _save(self, sim: Sim, node: SimNode, cname: str, eff: Any) -> None:
        node.disk[cname] = (list(eff.all), list(eff.disc), list(eff.running))

    def _notify(self, sim: Sim, node: SimNode, cname: str, eff: Any) -> None:
        node.state["notified"].append((sim.now, eff.event, eff.node))
        sim.record(node, "notify", f"{eff.event} {eff.node}")
