"""The demo's verdict: did every message get processed exactly once, and how long did the
failover and the pauses take. Written as `demo-report.json` and printed as a short summary.

Exactly once, for the demo's input, means: every distinct id that is not revoked appears in the
output exactly once, and nothing else appears. The counts are kept apart because each points at
a different bug: a duplicate is a claim that did not hold (two executors both ran it), a lost id
is a claim taken but never completed (or a task never retried), an unexpected id is a revoked
id that was not skipped, or garbage.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.text import Text

from monitors.durable_files import atomic_write
from rabbitry.demo.names import short_name

_EXAMPLES = 10  # ids quoted per problem, enough to start debugging without a huge report


@dataclass(frozen=True)
class ExactlyOnce:
    """The outcome of `check_exactly_once`; `ok` is the whole verdict."""

    expected: int  # distinct ids minus revoked: what should be processed
    processed: int  # output rows
    distinct_processed: int
    duplicates_executed: int  # output rows beyond the first per id
    lost: int  # expected ids missing from the output
    unexpected: int  # distinct ids in the output that are revoked or unknown
    lost_examples: list[str] = field(default_factory=list)
    duplicate_examples: list[str] = field(default_factory=list)
    unexpected_examples: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.duplicates_executed == 0 and self.lost == 0 and self.unexpected == 0


def check_exactly_once(
    expected_ids: Collection[str], revoked: Collection[str], output_ids: Iterable[str]
) -> ExactlyOnce:
    """Compare the pipeline's output ids with the input's distinct ids and the revoked ones."""
    expected = set(expected_ids)
    revoked_set = set(revoked)
    counts = Counter(output_ids)
    should = expected - revoked_set
    lost = should - counts.keys()
    unexpected = counts.keys() - should
    duplicates = {i: c - 1 for i, c in counts.items() if c > 1}
    return ExactlyOnce(
        expected=len(should),
        processed=sum(counts.values()),
        distinct_processed=len(counts),
        duplicates_executed=sum(duplicates.values()),
        lost=len(lost),
        unexpected=len(unexpected),
        lost_examples=sorted(lost)[:_EXAMPLES],
        duplicate_examples=sorted(duplicates)[:_EXAMPLES],
        unexpected_examples=sorted(unexpected)[:_EXAMPLES],
    )


def write_report(
    path: str | os.PathLike[str],
    *,
    messages: int,
    distinct_ids: int,
    revoked: int | Collection[str],
    check: ExactlyOnce,
    failover_seconds: float | None,
    pause_seconds: Mapping[str, float] | float | None,
    timeline: Any = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write the report as JSON and return it.

    `revoked` is the revoked ids or their count (the report keeps the count).
    `pause_seconds` is per node (as `Timeline.pause_seconds()` gives it) or one number.
    `timeline` is a Timeline (its `to_json()` is stored) or an already JSON-ready dict.
    `extra` keys are added at the top level (e.g. the pipeline's own summary, run settings).
    """
    revoked_count = revoked if isinstance(revoked, int) else len(revoked)
    if timeline is not None and hasattr(timeline, "to_json"):
        timeline = timeline.to_json()
    report: dict[str, Any] = {
        "ok": check.ok,
        "messages": messages,
        "distinct_ids": distinct_ids,
        "revoked": revoked_count,
        "expected": check.expected,
        "processed": check.processed,
        "distinct_processed": check.distinct_processed,
        "duplicates_executed": check.duplicates_executed,
        "lost": check.lost,
        "unexpected": check.unexpected,
        "failover_seconds": _seconds(failover_seconds),
        "pause_seconds": _pauses(pause_seconds),
        "examples": {
            "lost": check.lost_examples,
            "duplicates": check.duplicate_examples,
            "unexpected": check.unexpected_examples,
        },
    }
    for key, value in (extra or {}).items():
        if key in report:
            raise ValueError(f"extra key {key!r} would overwrite the report's own {key!r}")
        report[key] = value
    report["timeline"] = timeline if timeline is not None else {"events": [], "samples": []}
    # Write then rename: a Ctrl-C mid-write leaves the previous report, not half a file.
    atomic_write(path, (json.dumps(report, indent=2, default=_jsonable) + "\n").encode())
    return report


def summary_lines(report: Mapping[str, Any], *, markup: bool = True) -> list[str]:
    """The final summary, one string per line, with rich markup (or plain, `markup=False`)."""

    def mark(good: bool) -> str:
        return "[green]✓[/]" if good else "[bold red]✗[/]"

    expected = report.get("expected", report["distinct_ids"] - report["revoked"])
    processed = report["processed"]
    lines = [
        f"Messages: {report['messages']:,} ({report['distinct_ids']:,} distinct ids, "
        f"{report['revoked']:,} revoked)",
        f"{mark(processed == expected)} processed {processed:,} "
        f"(expected distinct ids - revoked = {expected:,})",
        f"{mark(report['duplicates_executed'] == 0)} duplicates executed: "
        f"{report['duplicates_executed']:,}",
        f"{mark(report['lost'] == 0)} lost: {report['lost']:,}",
    ]
    if report.get("unexpected"):
        lines.append(
            f"{mark(False)} unexpected ids in the output (revoked or unknown): "
            f"{report['unexpected']:,}"
        )
    failover = report.get("failover_seconds")
    lines.append(
        f"Redis failover: {failover:.2f} s" if failover is not None else "Redis failover: none"
    )
    first = report.get("first_message")
    if isinstance(first, Mapping):
        lines.append(
            f"First message: {first['seconds']:.1f} s into the job ({first['share']:.0%} of it)"
        )
    pauses = report.get("pause_seconds")
    if isinstance(pauses, Mapping):
        paused = {node: s for node, s in pauses.items() if s}
        text = ", ".join(f"{short_name(node)} {s:.2f} s" for node, s in paused.items()) or "none"
        lines.append(f"Paused: {text}")
    elif pauses is not None:
        lines.append(f"Paused: {pauses:.2f} s")
    ok = report.get("ok")
    lines.append(
        "[bold green]Exactly once: yes[/]" if ok else "[bold red]Exactly once: NO[/] (see report)"
    )
    if not markup:
        lines = [Text.from_markup(line).plain for line in lines]
    return lines


def _seconds(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(float(value), 3)


def _pauses(value: Mapping[str, float] | float | None) -> dict[str, float] | float | None:
    if isinstance(value, Mapping):
        return {str(node): round(float(s), 3) for node, s in value.items()}
    return _seconds(value)


def _jsonable(value: Any) -> Any:
    """What json cannot write itself: sets (sorted), paths, dataclasses."""
    if isinstance(value, set | frozenset):
        return sorted(value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if hasattr(value, "__dataclass_fields__"):
        return asdict(value)
    raise TypeError(f"cannot write {type(value).__name__} to the report: {value!r}")
