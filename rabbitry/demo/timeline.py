"""What happened during a demo run, and when: events, periodic samples, the durations worth
reporting, and a plot of it all.

Two kinds of record, both stamped with seconds since the Timeline was made (monotonic clock):

- events: things that happen once (`event("redis_master_killed", "127.0.0.1:6379")`);
- samples: the state of the world, taken periodically (each node's state, the Redis master
  the cluster uses, messages processed so far).

Durations come from whichever record is exact for them. A failover is bracketed by two
events the demo knows the moment they happen: from "redis_master_killed" to the next
"redis_master_changed". Pauses come from the samples instead: a node is paused when its status
says so, which the demo only learns by polling, so "node_paused" events would be no more
precise than the samples and could disagree with the plot. A state is taken to hold from its
sample until the next one, so pause times have the sampling interval as resolution.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rabbitry.demo.names import short_name

RUNNING = "running"
PAUSED = "paused"
DOWN = "down"
NODE_STATES = (RUNNING, PAUSED, DOWN)

# Event kinds the helpers and the plot know by name; any other kind is recorded just the same.
REDIS_MASTER_KILLED = "redis_master_killed"
REDIS_MASTER_CHANGED = "redis_master_changed"
PARTITION_START = "partition_start"
PARTITION_END = "partition_end"

EVENT_LABELS = {
    REDIS_MASTER_KILLED: "Redis master killed",
    REDIS_MASTER_CHANGED: "new Redis master",
    PARTITION_START: "partition start",
    PARTITION_END: "partition end",
    "node_paused": "node paused",
    "node_resumed": "node resumed",
    "job_started": "job started",
    "job_finished": "job finished",
}
_EVENT_COLORS = {
    REDIS_MASTER_KILLED: "#c62828",
    REDIS_MASTER_CHANGED: "#6a1b9a",
    PARTITION_START: "#263238",
    PARTITION_END: "#78909c",
}
_STATE_COLORS = {RUNNING: "#43a047", PAUSED: "#fb8c00", DOWN: "#e53935"}
_UNKNOWN_COLOR = "#cfd8dc"
_LABEL_ROW_POINTS = 11  # height of one row of event labels above the lanes
_MASTER_PALETTE = ("#1e88e5", "#8e24aa", "#00897b", "#f4511e", "#6d4c41", "#3949ab")

Span = tuple[float, float, Any]  # (start, end, value)


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed, so no PNG can be drawn."""


@dataclass(frozen=True)
class Event:
    t: float  # seconds since the timeline started
    kind: str
    detail: str = ""


@dataclass(frozen=True)
class Sample:
    t: float
    nodes: dict[str, str] = field(default_factory=dict)  # name -> running | paused | down
    redis_master: str | None = None
    processed: int = 0


class Timeline:
    """A thread-safe record of events and samples; `clock` is injectable for tests."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._start = clock()
        self._lock = threading.Lock()
        self._events: list[Event] = []
        self._samples: list[Sample] = []

    def now(self) -> float:
        """Seconds since the timeline started."""
        return self._clock() - self._start

    # ------------------------------------------------------------------------ recording

    def event(self, kind: str, detail: str = "") -> Event:
        """Record that `kind` happened now (`detail`: which node, which address, ...)."""
        if not isinstance(kind, str) or not kind:
            raise ValueError(f"an event kind must be a non-empty string; got {kind!r}")
        with self._lock:
            event = Event(self.now(), kind, str(detail))
            self._events.append(event)
        return event

    def sample(self, nodes: Mapping[str, str], redis_master: str | None, processed: int) -> Sample:
        """Record the current state: each node's state, the Redis master in use (None while
        nobody knows), and the messages processed so far."""
        for name, state in nodes.items():
            if state not in NODE_STATES:
                raise ValueError(
                    f"node {name!r} has state {state!r}; expected one of {', '.join(NODE_STATES)}"
                )
        with self._lock:
            sample = Sample(self.now(), dict(nodes), redis_master, int(processed))
            self._samples.append(sample)
        return sample

    @property
    def events(self) -> list[Event]:
        with self._lock:
            return list(self._events)

    @property
    def samples(self) -> list[Sample]:
        with self._lock:
            return list(self._samples)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: {"events": [{t, kind, detail}], "samples": [{t, nodes,
        redis_master, processed}]}, times rounded to milliseconds."""
        return {
            "events": [
                {"t": round(e.t, 3), "kind": e.kind, "detail": e.detail} for e in self.events
            ],
            "samples": [
                {
                    "t": round(s.t, 3),
                    "nodes": dict(s.nodes),
                    "redis_master": s.redis_master,
                    "processed": s.processed,
                }
                for s in self.samples
            ],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Timeline:
        """A timeline rebuilt from `to_json()` output (e.g. a report), to re-plot it."""
        timeline = cls(clock=lambda: 0.0)
        timeline._events = [
            Event(float(e["t"]), str(e["kind"]), str(e.get("detail", "")))
            for e in data.get("events", [])
        ]
        timeline._samples = [
            Sample(
                float(s["t"]),
                dict(s.get("nodes", {})),
                s.get("redis_master"),
                int(s.get("processed", 0)),
            )
            for s in data.get("samples", [])
        ]
        return timeline

    # ------------------------------------------------------------------------ durations

    def intervals(self, start_kind: str, end_kind: str) -> list[tuple[float, float | None]]:
        """(start, end) pairs: each `start_kind` event up to the next `end_kind` event; end is
        None if none followed. A start while one is open is part of the same interval."""
        result: list[tuple[float, float | None]] = []
        opened: float | None = None
        for event in self.events:
            if event.kind == start_kind and opened is None:
                opened = event.t
            elif event.kind == end_kind and opened is not None:
                result.append((opened, event.t))
                opened = None
        if opened is not None:
            result.append((opened, None))
        return result

    def failover_durations(self) -> list[float]:
        """Seconds from each master kill to the next master change (completed ones only)."""
        return [
            end - start
            for start, end in self.intervals(REDIS_MASTER_KILLED, REDIS_MASTER_CHANGED)
            if end is not None
        ]

    def failover_seconds(self) -> float | None:
        """The longest completed failover, or None if no failover completed."""
        durations = self.failover_durations()
        return max(durations) if durations else None

    def pause_seconds(self) -> dict[str, float]:
        """Per node (every node ever sampled), the seconds spent paused according to the
        samples: a state holds from its sample to the next one."""
        totals: dict[str, float] = {}
        samples = self.samples
        for sample in samples:
            for name in sample.nodes:
                totals.setdefault(name, 0.0)
        for current, following in itertools.pairwise(samples):
            for name, state in current.nodes.items():
                if state == PAUSED:
                    totals[name] += following.t - current.t
        return totals

    def first_message(self) -> dict[str, float] | None:
        """How long the job ran before its first message was processed, in seconds and as a
        share of the job (issue 27: the warm-up must be at most a fifth of it). Read off the
        samples, so up to one sampling period late; None if the job did not run or nothing
        was processed."""
        started = next((e.t for e in self.events if e.kind == "job_started"), None)
        finished = next((e.t for e in self.events if e.kind == "job_finished"), None)
        if started is None or finished is None or finished <= started:
            return None
        first = next((s.t for s in self.samples if s.t >= started and s.processed > 0), None)
        if first is None:
            return None
        seconds = max(0.0, first - started)
        return {"seconds": round(seconds, 3), "share": round(seconds / (finished - started), 3)}

    # ------------------------------------------------------------------ series for plots

    def end(self) -> float:
        """The time of the last record (0.0 if there is none)."""
        times = [s.t for s in self.samples] + [e.t for e in self.events]
        return max(times, default=0.0)

    def state_spans(self) -> dict[str, list[Span]]:
        """Per node, (start, end, state) runs of equal state; the last runs to `end()`. A
        node missing from a sample has state None there (not known)."""
        samples = self.samples
        names: list[str] = []
        for sample in samples:
            names.extend(name for name in sample.nodes if name not in names)
        return {
            name: _runs([(s.t, s.nodes.get(name)) for s in samples], self.end()) for name in names
        }

    def master_spans(self) -> list[Span]:
        """(start, end, address or None) runs of the Redis master in use."""
        return _runs([(s.t, s.redis_master) for s in self.samples], self.end())

    def throughput(self, window: float = 1.0) -> list[tuple[float, float]]:
        """(t, messages per second over the last `window` seconds) at each sample after the
        first; a window smooths the steps that task-sized batches of progress make."""
        samples = self.samples
        points = []
        first = 0
        for i in range(1, len(samples)):
            while first < i - 1 and samples[i].t - samples[first + 1].t >= window:
                first += 1
            elapsed = samples[i].t - samples[first].t
            if elapsed > 0:
                rate = (samples[i].processed - samples[first].processed) / elapsed
                points.append((samples[i].t, max(rate, 0.0)))
        return points

    # ---------------------------------------------------------------------------- plot

    def plot(
        self, path: str | Path, *, title: str = "rabbitry demo: nodes, Redis master, throughput"
    ) -> Path:
        """Draw the timeline as a PNG: a lane per node coloured by state, a lane for the
        Redis master, the throughput below, and a labelled vertical line per event."""
        try:
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            from matplotlib.figure import Figure
        except ImportError as exc:
            raise PlotUnavailable(
                "the timeline plot needs matplotlib: pip install matplotlib "
                "(or install rabbitry with its `demo` extra)"
            ) from exc

        # Figure + Agg canvas, never pyplot: no global backend switch, no GUI, thread-safe.
        fig = Figure(figsize=(12, 6.5), dpi=100)
        FigureCanvasAgg(fig)
        grid = fig.add_gridspec(2, 1, height_ratios=[3, 2], hspace=0.08)
        lanes = fig.add_subplot(grid[0])
        rate = fig.add_subplot(grid[1], sharex=lanes)
        end = max(self.end(), 1e-3)
        _draw_lanes(self, lanes, end)
        _draw_throughput(self, rate)
        fig.subplots_adjust(left=0.14, right=0.8, top=0.8, bottom=0.09)
        label_rows = _draw_events(self, lanes, rate, end)
        # room above the lanes for the rows of event labels, below the title
        height = fig.get_figheight() * 72.0
        fig.subplots_adjust(top=0.9 - (label_rows * _LABEL_ROW_POINTS + 6) / height)
        fig.suptitle(title, fontsize=13, x=0.02, ha="left")
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(target, format="png")
        return target


# ------------------------------------------------------------------------ plot helpers


def _draw_lanes(timeline: Timeline, lanes: Any, end: float) -> None:
    """One lane per node coloured by state, then the Redis master lane, and the legend."""
    from matplotlib.patches import Patch

    def bar(row: int, start: float, stop: float, color: str) -> None:
        # A minimum width keeps a one-sample state visible.
        width = max(stop - start, end * 0.002)
        lanes.broken_barh([(start, width)], (row - 0.38, 0.76), facecolors=color, edgecolor="none")

    spans = timeline.state_spans()
    names = list(spans)
    for row, name in enumerate(names):
        for start, stop, state in spans[name]:
            bar(row, start, stop, _STATE_COLORS.get(state, _UNKNOWN_COLOR))
    master_row = len(names)
    master_colors: dict[str, str] = {}
    for start, stop, address in timeline.master_spans():
        if address is None:
            color = _UNKNOWN_COLOR
        else:
            color = master_colors.setdefault(
                address, _MASTER_PALETTE[len(master_colors) % len(_MASTER_PALETTE)]
            )
        bar(master_row, start, stop, color)
        if stop - start > end * 0.12:  # room for the address inside the bar
            lanes.text(
                (start + stop) / 2,
                master_row,
                address or "no master",
                ha="center",
                va="center",
                fontsize=8,
                color="white" if address else "#37474f",
            )
    labels = [*(short_name(n) for n in names), "Redis master"]
    lanes.set_yticks(range(len(labels)), labels)
    lanes.set_ylim(len(labels) - 0.5, -0.5)
    lanes.set_xlim(0, end)
    lanes.tick_params(labelbottom=False)
    lanes.grid(axis="x", alpha=0.3)

    handles = [Patch(color=_STATE_COLORS[s], label=f"node {s}") for s in NODE_STATES]
    handles += [Patch(color=c, label=f"master {a}") for a, c in master_colors.items()]
    handles.append(Patch(color=_UNKNOWN_COLOR, label="unknown / no master"))
    lanes.legend(
        handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False
    )


def _draw_throughput(timeline: Timeline, rate: Any) -> None:
    points = timeline.throughput()
    if points:
        xs, ys = zip(*points, strict=True)
        rate.plot(xs, ys, color="#1e88e5", linewidth=1.5)
        rate.fill_between(xs, ys, color="#1e88e5", alpha=0.15)
    else:
        rate.text(0.5, 0.5, "no samples", transform=rate.transAxes, ha="center")
    rate.set_ylim(bottom=0)
    rate.set_ylabel("messages / s")
    rate.set_xlabel("seconds since start")
    rate.grid(alpha=0.3)


def _draw_events(timeline: Timeline, lanes: Any, rate: Any, end: float) -> int:
    """Shade the failover and partition windows, so their length reads at a glance, and mark
    every event with a dashed line across both panels, labelled above the lanes (laid out in
    rows, so that events close together stay readable). Returns the rows of labels."""
    for kind, closing, color in (
        (REDIS_MASTER_KILLED, REDIS_MASTER_CHANGED, "#c62828"),
        (PARTITION_START, PARTITION_END, "#263238"),
    ):
        for start, stop in timeline.intervals(kind, closing):
            for axis in (lanes, rate):
                axis.axvspan(
                    start, end if stop is None else stop, color=color, alpha=0.08, zorder=0
                )
    for event in timeline.events:
        color = _EVENT_COLORS.get(event.kind, "#546e7a")
        for axis in (lanes, rate):
            axis.axvline(event.t, color=color, linestyle="--", linewidth=1.1)
    return _label_events(timeline.events, lanes)


def _label_events(events: list[Event], lanes: Any) -> int:
    """Label every event above the lanes, laid out so that no two labels overlap: each label
    takes the lowest row where it clears every label already there (measured as drawn), and
    flips to the left of its line where the right edge would cut it."""
    fig = lanes.figure
    renderer = fig.canvas.get_renderer()
    axes_box = lanes.get_window_extent(renderer)
    rows: list[list[Any]] = []  # per row, the drawn labels' boxes (display coordinates)
    for event in sorted(events, key=lambda e: e.t):
        text = EVENT_LABELS.get(event.kind, event.kind.replace("_", " "))
        color = _EVENT_COLORS.get(event.kind, "#546e7a")
        for row in itertools.count():
            if row == len(rows):
                rows.append([])
            label = lanes.annotate(
                text,
                xy=(event.t, 1.0),
                xycoords=lanes.get_xaxis_transform(),
                xytext=(2, 3 + row * _LABEL_ROW_POINTS),
                textcoords="offset points",
                ha="left",
                va="bottom",
                fontsize=8,
                color=color,
                annotation_clip=False,
            )
            box = label.get_window_extent(renderer)
            if box.x1 > axes_box.x1 + 40:  # past the right edge: put it left of its line
                label.set_horizontalalignment("right")
                label.set_position((-2, 3 + row * _LABEL_ROW_POINTS))
                box = label.get_window_extent(renderer)
            padded = box.expanded(1.0, 1.0).padded(3)
            if not any(padded.overlaps(other) for other in rows[row]):
                rows[row].append(box)
                break
            label.remove()
    return len(rows)


def _runs(points: list[tuple[float, Any]], end: float) -> list[Span]:
    """Merge (t, value) points into (start, end, value) runs; the last runs to `end`."""
    runs: list[Span] = []
    for t, value in points:
        if runs and runs[-1][2] == value:
            continue
        if runs:
            runs[-1] = (runs[-1][0], t, runs[-1][2])
        runs.append((t, t, value))
    if runs:
        runs[-1] = (runs[-1][0], max(end, runs[-1][0]), runs[-1][2])
    return runs
