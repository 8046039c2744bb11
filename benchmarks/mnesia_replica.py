"""One mnesia_like replica in its own OS process, for benchmarks/mnesia.py (`--procs`).

A real cluster runs one store per OS process; running the three of a benchmark in one
process puts them under one GIL, which a 3-member etcd (three Go processes) does not share.
This starts a NetKernel on the given port and a Mnesia store with disc copies under `data`,
prints "ready" and runs until its stdin closes (the benchmark ends, or dies: no orphan).

    python benchmarks/mnesia_replica.py NODE PORT DATA_DIR COOKIE PEER=HOST:PORT ...
"""

from __future__ import annotations

import os
import sys
import time

from mnesia_like import Mnesia
from monitors.dist import NetKernel


def main(argv: list[str]) -> int:
    node, port, data, cookie, *peers = argv
    ref = NetKernel.start(node, f"127.0.0.1:{port}", cookie.encode(), net_ticktime=8.0)
    kernel = NetKernel.of(ref)
    names = []
    for peer in peers:
        name, address = peer.split("=", 1)
        kernel.set_address(name, address)
        names.append(name)
    # the options of benchmarks/mnesia.py's STORE_OPTIONS (kept equal by hand)
    store = Mnesia.start(
        ref,
        data,
        extra_db_nodes=names,
        fsync="commit",
        startup_timeout=0.3,
        reconnect_interval=0.2,
        load_timeout=5.0,
        # --commit of benchmarks/mnesia.py (parallel unless it says classic)
        parallel_commit=os.environ.get("RABBITRY_BENCH_PARALLEL_COMMIT", "1") == "1",
    )
    print("ready", flush=True)
    try:
        sys.stdin.read()  # EOF: the benchmark is done with us
    finally:
        store.stop()
        ref.stop()
        time.sleep(0.05)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
