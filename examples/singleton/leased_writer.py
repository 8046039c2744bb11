"""A singleton OS child that acts only while its lease is valid.

It appends "<token> <time>" to the file named on its command line every 20 ms, but only after
checking RABBITRY_SINGLETON_LEASE_FILE: a child that checks its lease before acting never acts
after the lease has run out, even when its node is frozen (SIGSTOP) and nothing stops it.
"""

from __future__ import annotations

import os
import sys
import time


def lease_expiry(path: str) -> float:
    try:
        with open(path) as f:
            return float(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0.0


def main() -> None:
    out = sys.argv[1]
    token = os.environ["RABBITRY_SINGLETON_TOKEN"]
    lease_file = os.environ["RABBITRY_SINGLETON_LEASE_FILE"]
    while True:
        now = time.time()
        if now < lease_expiry(lease_file):
            with open(out, "a") as f:  # O_APPEND: lines of several writers never interleave
                f.write(f"{token} {now:.6f}\n")
        time.sleep(0.02)


if __name__ == "__main__":
    main()
