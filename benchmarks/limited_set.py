"""LimitedSet benchmarks: ours next to celery.utils.collections.LimitedSet, in the same run.

Each figure is the median over interleaved rounds (so drift in machine load hits both alike),
with the ratio ours/celery (goal >= 1.0: at least as fast):

1. add: N new ids into a set capped like the revoked set (maxlen 50,000, expires 3 h), so most
   adds also evict the oldest entry;
2. update from a dict of 50,000 {id: stamp} (a mingle reply) into an empty set, and into a set
   that is already full of other ids (every incoming entry evicts one);
3. purge: 50,000 entries that have all expired, removed by one purge(); and the same 50,000
   expiring 100 at a time, one purge() each (a purge timer's steady state).

Each implementation gets stamps from its own clock (celery: time.monotonic, ours: time.time)
so that neither expires anything it should keep.

Usage: python benchmarks/limited_set.py [--quick]
Celery is optional: `python -m pip install 'celery>=5.5,<5.8'`; without it only ours is measured.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

from monitors.gossip.limited_set import LimitedSet

MAXLEN = 50_000
EXPIRES = 3 * 3600.0


def _celery() -> tuple[type | None, str]:
    try:
        from celery.utils.collections import LimitedSet as CeleryLimitedSet
    except ImportError as exc:
        return None, f"celery not importable ({exc}); measuring ours only"
    from importlib.metadata import version

    return CeleryLimitedSet, f"celery {version('celery')}"


def _ids(n: int, prefix: str) -> list[str]:
    # Shaped like task ids (36 characters), made up front so the loop times only the set.
    return [f"{prefix}{i:08d}-0000-4000-8000-{i:012d}"[:36] for i in range(n)]


def add_rate(cls: type, ids: list[str]) -> float:
    limited = cls(maxlen=MAXLEN, expires=EXPIRES)
    add = limited.add
    start = time.perf_counter()
    for item in ids:
        add(item)
    elapsed = time.perf_counter() - start
    assert len(limited) == min(MAXLEN, len(ids))
    return len(ids) / elapsed


def _payload(ids: list[str], clock: Callable[[], float]) -> dict[str, float]:
    base = clock() - 3600.0  # an hour old: kept, not expired
    return {item: base + i * 0.01 for i, item in enumerate(ids)}


def update_rate(cls: type, clock: Callable[[], float], ids: list[str], full: bool) -> float:
    limited = cls(maxlen=MAXLEN, expires=EXPIRES)
    if full:
        for item in _ids(MAXLEN, "f"):
            limited.add(item, now=clock() - 7200.0)  # older than the payload, so evicted
    payload = _payload(ids, clock)
    start = time.perf_counter()
    limited.update(payload)
    elapsed = time.perf_counter() - start
    assert len(limited) == MAXLEN
    assert ids[-1] in limited
    return len(payload) / elapsed


def purge_rate(cls: type, clock: Callable[[], float], ids: list[str]) -> float:
    # No maxlen while filling: Celery's add() purges (with its own clock) once the set is full,
    # which would expire everything before the measured purge() runs.
    limited = cls(maxlen=0, expires=EXPIRES)
    old = clock() - 2 * EXPIRES
    for i, item in enumerate(ids):
        limited.add(item, now=old + i * 0.01)
    assert len(limited) == len(ids)
    now = clock()
    start = time.perf_counter()
    limited.purge(now=now)
    elapsed = time.perf_counter() - start
    assert len(limited) == 0
    return len(ids) / elapsed


def purge_often_rate(cls: type, clock: Callable[[], float], ids: list[str], step: int) -> float:
    """A purge timer's steady state: each purge() finds `step` newly expired entries."""
    limited = cls(maxlen=0, expires=EXPIRES)
    old = clock() - 2 * EXPIRES
    for i, item in enumerate(ids):
        limited.add(item, now=old + i)
    cutoffs = [old + EXPIRES + i for i in range(step - 1, len(ids), step)]
    start = time.perf_counter()
    for cutoff in cutoffs:
        limited.purge(now=cutoff)
    elapsed = time.perf_counter() - start
    assert len(limited) == len(ids) - len(cutoffs) * step
    return len(cutoffs) * step / elapsed


def compare(name: str, rounds: int, ours: Callable[[], float], theirs: Callable[[], float] | None):
    our_rates, their_rates = [], []
    for _ in range(rounds):
        our_rates.append(ours())
        if theirs is not None:
            their_rates.append(theirs())
    o = statistics.median(our_rates)
    if theirs is None:
        print(f"{name}: ours {o:,.0f}/s")
        return
    t = statistics.median(their_rates)
    print(f"{name}: ours {o:,.0f}/s, celery {t:,.0f}/s")
    print(f"  ratio ours/celery = {o / t:.2f}  (goal >= 1.00)  [{rounds} rounds]")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    args = parser.parse_args()
    rounds = 3 if args.quick else 7
    n_add = 100_000 if args.quick else 200_000
    celery_cls, about = _celery()
    print(f"python {sys.version.split()[0]}, {about}")
    print(f"sets capped at maxlen={MAXLEN:,}, expires={EXPIRES:,.0f} s")

    add_ids = _ids(n_add, "a")
    wire_ids = _ids(MAXLEN, "w")
    wall, mono = time.time, time.monotonic

    def celery_or_none(fn: Callable[[], float]) -> Callable[[], float] | None:
        return fn if celery_cls is not None else None

    compare(
        f"add {n_add:,} new ids",
        rounds,
        lambda: add_rate(LimitedSet, add_ids),
        celery_or_none(lambda: add_rate(celery_cls, add_ids)),
    )
    compare(
        f"update from a dict of {MAXLEN:,} into an empty set",
        rounds,
        lambda: update_rate(LimitedSet, wall, wire_ids, full=False),
        celery_or_none(lambda: update_rate(celery_cls, mono, wire_ids, full=False)),
    )
    compare(
        f"update from a dict of {MAXLEN:,} into a full set",
        rounds,
        lambda: update_rate(LimitedSet, wall, wire_ids, full=True),
        celery_or_none(lambda: update_rate(celery_cls, mono, wire_ids, full=True)),
    )
    compare(
        f"purge {MAXLEN:,} expired entries",
        rounds,
        lambda: purge_rate(LimitedSet, wall, wire_ids),
        celery_or_none(lambda: purge_rate(celery_cls, mono, wire_ids)),
    )
    compare(
        f"purge {MAXLEN:,} expired entries, 100 per purge() call",
        rounds,
        lambda: purge_often_rate(LimitedSet, wall, wire_ids, 100),
        celery_or_none(lambda: purge_often_rate(celery_cls, mono, wire_ids, 100)),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
