"""`rabbitry swarm`: many real ephemeral members in a few OS processes (load for scale tests).

A swarm member is a real ephemeral node without the parts only an operator needs: the real
NetKernel, the real NodeMonitor running EphemeralMonitorCore, gossip when the template has a
`bus:`, and the application tree when it has a `tree:` (held until the core lets it run, as on
any ephemeral node). It has no control API, no metrics listener, no node_stats sampler (the
alarms of one ephemeral member do not block the core) and no singleton service (an ephemeral
member never holds a singleton). Everything else is `rabbitry.node.Node`'s own code.

Several members share one OS process. They share its dist I/O loop (one thread and one epoll
for every member's connections, given by the caller of `start_members`), and its one
send_after timer thread. Nothing else here touches what is process-global:
`rabbitry.node._current` stays unset (a swarm member's application cannot call
`current_node()`: there is no single node in the process), signal handlers belong to the
command, and the PooledProcess pool is shared by all of them and stopped once, at the end.

Member i of a template `node: exec@10.0.0.5` is `exec-<i>@10.0.0.5`, listens on port 0 of the
template's listen host, and keeps its files in `<template data_dir>/exec-<i>`.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from monitors.dist.ioloop import IoLoop
from rabbitry.node import Node
from rabbitry.node_config import NodeConfig, NodeConfigError, node_config_from_mapping
from supervisors import ChildSpec, Supervisor, SupFlags, read_config_file

log = logging.getLogger("rabbitry.swarm")

# keys of the template a swarm member does not take: it has no control API or metrics of its
# own (N members would need N ports and N tokens for nothing a load generator needs)
DROPPED_KEYS = ("control", "metrics")
# Members joining at once in one process. A start counts as done only once the member runs
# (attached to the core), at most JOIN_WAIT: a closed loop, so that a thousand members join
# as fast as the machine absorbs them. Started open-loop, 300-500 members per process piled
# up handshakes, subscriptions and syncs faster than two cores could serve them; their own
# timers then fired late (ticks, Redis liveness), and reconnecting made it worse: at 1,000 the
# swarm never got ready. Eight at a time (32 joins at once with 4 processes) still collapsed
# at 600-900 members on 2 CPUs (most called down, then attaching again, READY after 96 s);
# three got all 1,000 READY in 26-30 s in three runs, one with a brief dip (docs/membership.md).
START_WORKERS = 3
JOIN_WAIT = 30.0
# A member whose start fails (under load, its gossip child's first ask of its node monitor can
# outlast its 10 s bound) is started again, at most START_ATTEMPTS times in all, before the
# failure ends the swarm: one slow start must not take the process's other members with it.
START_ATTEMPTS = 3


def load_template(path: str | os.PathLike[str]) -> tuple[dict[str, Any], Path]:
    """The template's parsed mapping and the directory its relative paths are taken from.

    Raises NodeConfigError (a ConfigError) for a file that is not a usable ephemeral node
    config: checked once here, with member 0's name, so a mistake names the template's keys.
    """
    path = Path(path)
    data = read_config_file(path, str(path), NodeConfigError)
    if not isinstance(data, dict):
        raise NodeConfigError(
            str(path), "", "a mapping (an ephemeral node config)", type(data).__name__
        )
    role = data.get("role", "ephemeral")
    if role != "ephemeral":
        raise NodeConfigError(
            str(path),
            "role",
            "ephemeral (swarm members are ephemeral: drop the key or write role: ephemeral)",
            repr(role),
        )
    base = path.resolve().parent
    member_config(data, base, 0, file=str(path))  # every mistake the node checker finds
    return data, base


def member_name(template_node: str, index: int) -> str:
    """`exec@host` -> `exec-<index>@host`."""
    name, _, host = template_node.partition("@")
    return f"{name}-{index}@{host}"


def member_config(
    template: dict[str, Any], base_dir: Path, index: int, *, file: str = "<swarm template>"
) -> NodeConfig:
    """The checked config of member `index` of the swarm made from `template`."""
    data = {k: v for k, v in template.items() if k not in DROPPED_KEYS}
    node = data.get("node")
    if not isinstance(node, str) or "@" not in node:
        raise NodeConfigError(file, "node", "name@host", repr(node))
    name = member_name(node, index)
    listen = data.get("listen")
    if not isinstance(listen, str) or ":" not in listen:
        raise NodeConfigError(
            file, "listen", '"host:port" (swarm members use port 0)', repr(listen)
        )
    host = listen.rpartition(":")[0]
    data_dir = Path(data.get("data_dir") or base_dir / "data" / node)
    if not data_dir.is_absolute():
        data_dir = base_dir / data_dir
    data.update(
        node=name,
        listen=f"{host}:0",
        role="ephemeral",
        data_dir=str(data_dir / name.partition("@")[0]),
    )
    return node_config_from_mapping(data, file=file, base_dir=base_dir)


class SwarmMember(Node):
    """One ephemeral member of a swarm: a Node with only the parts such a member needs."""

    io_loop: IoLoop | None = None

    @classmethod
    def start(cls, config: NodeConfig, io_loop: IoLoop | None = None) -> SwarmMember:
        """Start the member's root tree; unlike Node.start, it does not claim the process.
        `io_loop`: the dist I/O loop shared by the members of this process (else its own)."""
        member = cls(config)
        member.io_loop = io_loop
        config.data_dir.mkdir(parents=True, exist_ok=True)
        member.root = Supervisor.start(
            SupFlags("rest_for_one", intensity=3, period=10.0),
            member._children(),
            name=config.node,
        )
        member._root_ready.set()
        return member

    def stop(self) -> None:
        """Stop its tree in reverse order: the node monitor's stop sends the leave."""
        if self.root is not None and self.root.is_alive():
            self.root.stop()

    _monitor_proxy: Any = None  # (the monitor's ref, its proxy): a proxy costs ~3 ms to make

    def running(self) -> bool:
        """True once the ephemeral monitor lets its application run (attached to the core)."""
        monitor = self.parts.monitor
        if monitor is None:
            return False
        if self._monitor_proxy is None or self._monitor_proxy[0] is not monitor:
            self._monitor_proxy = (monitor, monitor.proxy())  # anew after a restart
        return not self._monitor_proxy[1].is_paused().get(timeout=10)

    def _kernel_options(self) -> dict[str, Any]:
        return {"io_loop": self.io_loop} if self.io_loop is not None else {}

    def _children(self) -> list[ChildSpec]:
        children = [
            ChildSpec("net_kernel", self._start_kernel, shutdown=5.0),
            ChildSpec("node_monitor", self._start_monitor, shutdown=10.0),
        ]
        if self.config.bus is not None:
            children.append(ChildSpec("gossip", self._start_gossip, shutdown=5.0))
        if self.config.tree is not None and not self._app_held:
            children.append(self._app_spec())  # never: an ephemeral member holds it
        return children


def start_members(
    configs: Iterable[NodeConfig], stop: Any = None, io_loop: IoLoop | None = None
) -> list[SwarmMember]:
    """Start every member, START_WORKERS joining at a time. If one fails, the started ones are
    stopped and the error is raised. Once `stop` (an Event) is set, no more are started:
    the ones started are returned (a SIGTERM during a long start must not wait for it).
    `io_loop`: one dist I/O loop for all of them (started and stopped by the caller)."""
    configs = list(configs)

    def start(config: NodeConfig) -> SwarmMember | None:
        for attempt in range(1, START_ATTEMPTS + 1):
            if stop is not None and stop.is_set():
                return None
            try:
                member = SwarmMember.start(config, io_loop)
                break
            except Exception as exc:
                if attempt == START_ATTEMPTS:
                    raise
                log.warning(
                    "swarm: %s did not start (attempt %d of %d): %s; starting it again",
                    config.node,
                    attempt,
                    START_ATTEMPTS,
                    exc,
                )
                time.sleep(attempt)
        deadline = time.monotonic() + JOIN_WAIT
        while not _running(member) and time.monotonic() < deadline:
            if stop is not None and stop.is_set():
                break
            time.sleep(0.02)
        return member

    with concurrent.futures.ThreadPoolExecutor(START_WORKERS, "swarm-start") as pool:
        futures = [pool.submit(start, c) for c in configs]
        concurrent.futures.wait(futures)
    members: list[SwarmMember] = []
    errors: list[BaseException] = []
    for future in futures:
        error = future.exception()
        if error is not None:
            errors.append(error)
        elif (member := future.result()) is not None:
            members.append(member)
    if errors:
        stop_members(members)
        raise errors[0]
    return members


def wait_running(members: list[SwarmMember], stop: Any, poll: float = 0.2) -> bool:
    """Wait until every member runs; False if `stop` (an Event) was set first."""
    waiting = list(members)
    while waiting:
        waiting = [m for m in waiting if not _running(m)]
        if waiting and stop.wait(poll):
            return False
    return True


def _running(member: SwarmMember) -> bool:
    try:
        return member.running()
    except Exception:  # still starting, or restarting under its supervisor
        return False


def stop_members(members: list[SwarmMember]) -> None:
    """Stop every member at once (each sends its leave), then wait for all of them."""
    if not members:
        return
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(min(32, len(members)), "swarm-stop") as pool:
        for future in [pool.submit(m.stop) for m in members]:
            try:
                future.result()
            except Exception as exc:  # one bad stop must not keep the others running
                log.warning("swarm: a member did not stop cleanly: %s", exc)
    log.info("swarm: %d members stopped in %.1f s", len(members), time.monotonic() - t0)
