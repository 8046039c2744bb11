"""The demo's live terminal view: nodes, the Redis master and job progress, redrawn in place.

In a terminal this is a rich Live display. Anywhere else (a test, a CI log, output piped to a
file) redrawing would print screenfuls of repeated frames, so the view prints one compact line
at most once per second instead, plus a line whenever the phase changes, so that no phase goes
unlogged, and each event (a fault, a failover warning) once, as its own line.

`update()` only stores the state: the Live display renders it on its own refresh thread (a few
times per second), so the demo's sampling loop can call `update()` as often as it likes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from rabbitry.demo.names import short_name

_STATE_STYLES = {"running": "green", "paused": "yellow", "down": "bold red"}
_REDIS_STYLES = {"master": "bold cyan", "replica": "cyan", "down": "bold red"}


@dataclass(frozen=True)
class NodeStatus:
    """One node as the view shows it."""

    role: str  # "core" | "executor"
    state: str  # "running" | "paused" | "down"


@dataclass
class DemoState:
    """Everything the view shows; the demo builds a fresh one (or mutates one) per update."""

    nodes: dict[str, NodeStatus | tuple[str, str]] = field(default_factory=dict)
    redis_master: str | None = None
    done_tasks: int = 0
    total_tasks: int | None = None
    processed: int = 0
    throughput: float = 0.0  # messages per second
    phase: str = ""
    events: list[str] = field(default_factory=list)  # the last few, newest last
    redis_servers: dict[str, str] = field(default_factory=dict)  # address -> master|replica|down


def _node(status: NodeStatus | tuple[str, str]) -> NodeStatus:
    return status if isinstance(status, NodeStatus) else NodeStatus(*status)


def render(state: DemoState, *, max_events: int = 5) -> RenderableType:
    """The full view of `state` as a rich renderable (a panel of tables)."""
    nodes = Table(title="Nodes", title_justify="left", expand=True, box=None, pad_edge=False)
    nodes.add_column("node")
    nodes.add_column("role", style="dim")
    nodes.add_column("state")
    for name, status in state.nodes.items():
        node = _node(status)
        nodes.add_row(
            short_name(name), node.role, Text(node.state, style=_STATE_STYLES.get(node.state, ""))
        )

    redis_table = Table(title="Redis", title_justify="left", expand=True, box=None, pad_edge=False)
    redis_table.add_column("server")
    redis_table.add_column("role")
    if state.redis_servers:
        for address, role in state.redis_servers.items():
            in_use = " (in use)" if address == state.redis_master else ""
            redis_table.add_row(address, Text(role + in_use, style=_REDIS_STYLES.get(role, "")))
    else:
        redis_table.add_row(
            "master",
            Text(
                state.redis_master or "unknown", style="bold cyan" if state.redis_master else "red"
            ),
        )

    top = Table.grid(expand=True, padding=(0, 3))
    top.add_column(ratio=3)
    top.add_column(ratio=2)
    top.add_row(nodes, redis_table)

    total = state.total_tasks
    bar = ProgressBar(total=float(total or 1), completed=float(state.done_tasks if total else 0))
    progress = Table.grid(padding=(0, 2))
    progress.add_column(width=40)
    progress.add_column()
    progress.add_row(bar, Text(_progress_text(state)))

    parts: list[RenderableType] = [top, Text(""), progress]
    if state.events:
        parts.append(Text(""))
        for line in state.events[-max_events:]:
            parts.append(Text(f"• {line}", style="dim"))
    title = "rabbitry demo" + (f" — {state.phase}" if state.phase else "")
    return Panel(Group(*parts), title=title, title_align="left", border_style="blue")


def one_line(state: DemoState, elapsed: float | None = None) -> str:
    """The compact, plain-text form of `state` for logs."""
    parts = []
    if elapsed is not None:
        parts.append(f"[{elapsed:6.1f}s]")
    parts.append(state.phase or "-")
    if state.nodes:
        nodes = " ".join(
            f"{short_name(name).replace(' ', '-')}={_node(s).state}"
            for name, s in state.nodes.items()
        )
        parts.append(f"| nodes {nodes}")
    parts.append(f"| redis {state.redis_master or 'unknown'}")
    parts.append(f"| {_progress_text(state)}")
    return " ".join(parts)


def _progress_text(state: DemoState) -> str:
    tasks = (
        f"{state.done_tasks}/{state.total_tasks}" if state.total_tasks else f"{state.done_tasks}"
    )
    return f"tasks {tasks} · {state.processed:,} messages · {state.throughput:,.0f}/s"


class DemoView:
    """A context manager showing the latest `DemoState`; see the module docstring."""

    def __init__(
        self,
        console: Console | None = None,
        *,
        refresh_per_second: float = 4.0,
        plain_interval: float = 1.0,
        max_events: int = 5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.console = console or Console()
        self._refresh = refresh_per_second
        self._interval = plain_interval
        self._max_events = max_events
        self._clock = clock
        self._started = clock()
        self._state = DemoState()
        self._lock = threading.Lock()  # update() may come from several threads
        self._live: Live | None = None
        self._last_print: float | None = None
        self._printed_phase: str | None = None
        self._pending = False  # an update not yet printed (plain mode)
        self._printed_events: list[str] = []  # plain mode: events already printed

    @property
    def live(self) -> bool:
        """Whether the view redraws in place (the console is a terminal)."""
        return self.console.is_terminal

    def __enter__(self) -> DemoView:
        if self.live:
            self._live = Live(
                console=self.console,
                get_renderable=self._renderable,
                refresh_per_second=self._refresh,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start()
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Stop redrawing, leaving the last frame (or the last line) on screen."""
        if self._live is not None:
            live, self._live = self._live, None
            live.stop()
        elif self._pending:
            self._print(self._clock())

    def update(self, state: DemoState) -> None:
        """Show `state` from now on."""
        with self._lock:
            self._state = state
            if self.live:
                return  # the Live refresh thread renders it
            self._pending = True
            now = self._clock()
            due = self._last_print is None or now - self._last_print >= self._interval
            if due or state.phase != self._printed_phase:
                self._print(now)

    def _print(self, now: float) -> None:
        state = self._state
        for event in state.events:  # each event once, as its own line, before the state
            if event not in self._printed_events:
                self.console.print(f"  • {event}", markup=False, highlight=False, soft_wrap=True)
                self._printed_events.append(event)
        self._printed_events = self._printed_events[-50:]
        self.console.print(
            one_line(state, now - self._started), markup=False, highlight=False, soft_wrap=True
        )
        self._last_print = now
        self._printed_phase = state.phase
        self._pending = False

    def _renderable(self) -> RenderableType:
        return render(self._state, max_events=self._max_events)
