"""How many fsyncs sit on a transaction's path: classic 2PC against parallel commit.

A loaded machine makes rates meaningless (the etcd figures of docs/mnesia_like-disc.md were
taken at a load average of 200 to 600 on 2 cores), so this measures the protocol, not the
machine: every fdatasync is made to take DELAY seconds more (a slow disc), and one client
runs transactions one after another on node a of 3 disc replicas in this process. The
median latency divided by DELAY is the number of fsyncs one after the other on a commit's
path (plus the little the rest costs). Rounds alternate the two modes, each on fresh stores.

Usage: python benchmarks/mnesia_fsync_path.py [--delay 0.05] [--txs 20] [--rounds 2]
           [--blind]   (a transaction that only writes, as a put; default: read + write)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import mnesia as bench
from benchmarks.mnesia import TABLE, store_cluster


def one_mode(root: Path, parallel: bool, txs: int, blind: bool) -> list[float]:
    bench.STORE_OPTIONS["parallel_commit"] = parallel
    with store_cluster(root, 3) as dbs:
        db = dbs[0]
        db.transaction(lambda tx: tx.write(TABLE, {"key": "k", "value": 0}))
        times = []
        for i in range(txs):

            def bump(tx: Any, i: int = i) -> None:
                if not blind:
                    row = tx.wread(TABLE, "k")
                    i = (row["value"] if row else 0) + 1
                tx.write(TABLE, {"key": "k", "value": i})

            t0 = time.perf_counter()
            db.transaction(bump)
            times.append(time.perf_counter() - t0)
        return times


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--delay", type=float, default=0.05, help="s added to every fdatasync")
    p.add_argument("--txs", type=int, default=20)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--blind", action="store_true")
    a = p.parse_args()
    real = os.fdatasync

    def slow(fd: int) -> None:
        time.sleep(a.delay)
        real(fd)

    os.fdatasync = slow  # the disc this measures (the store's own fsyncs all go through it)
    print(f"load average {os.getloadavg()} at start; fdatasync + {a.delay * 1000:.0f} ms")
    result: dict[str, list[float]] = {"classic": [], "parallel": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.rounds):
            for mode in ("classic", "parallel"):
                result[mode] += one_mode(Path(tmp), mode == "parallel", a.txs, a.blind)
    out = {}
    for mode, times in result.items():
        med = statistics.median(times)
        out[mode] = {"median_ms": round(med * 1000, 1), "fsyncs_on_path": round(med / a.delay, 2)}
        print(
            f"{mode:9} median {med * 1000:7.1f} ms per transaction = "
            f"{med / a.delay:.2f} x the fsync delay ({len(times)} transactions)"
        )
    print(f"load average {os.getloadavg()} at end")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
