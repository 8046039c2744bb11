"""Reading what a singleton child wrote while it held its lease (examples/singleton/
leased_writer.py appends "<token> <time>" lines to one file): the write interval of each token,
and the check that no two overlap. The singleton tests and benchmarks/singleton.py share it."""

from __future__ import annotations

import itertools
from pathlib import Path

Spans = dict[int, tuple[float, float]]


def write_spans(path: Path) -> Spans:
    """{token: (first write, last write)}; a missing file is no writes, a torn line is skipped."""
    spans: Spans = {}
    if not path.exists():
        return spans
    for line in path.read_text().splitlines():
        token_text, _, at_text = line.partition(" ")
        try:
            token, at = int(token_text), float(at_text)
        except ValueError:
            continue
        lo, hi = spans.get(token, (at, at))
        spans[token] = (min(lo, at), max(hi, at))
    return spans


def overlaps(spans: Spans) -> list[str]:
    """Each pair of consecutive tokens whose write intervals overlap (two instances acted at
    once), described; empty when the singleton was never two."""
    found = []
    for (t1, (_, end1)), (t2, (start2, _)) in itertools.pairwise(sorted(spans.items())):
        if end1 >= start2:
            found.append(
                f"token {t1} wrote until {end1:.6f}, after token {t2} began at {start2:.6f}"
            )
    return found
