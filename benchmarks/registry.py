"""What registering in pykka's ActorRegistry (the default for Process since issue 27) costs a
Process's start and stop, against the same class opted out, in the same run.

    python benchmarks/registry.py [--n 2000] [--rounds 5]

Prints the median start+stop time per process for each, and the ratio (registered / not).
"""

from __future__ import annotations

import argparse
import statistics
import time

from supervisors import Process


class Registered(Process):
    register_in_actor_registry = True


class Unregistered(Process):
    register_in_actor_registry = False


def one_round(cls: type[Process], n: int) -> float:
    """Seconds per process to start n and stop them."""
    began = time.perf_counter()
    refs = [cls.start() for _ in range(n)]
    for ref in refs:
        ref.stop()
    return (time.perf_counter() - began) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"registered": [], "not registered": []}
    for _ in range(args.rounds):  # interleaved, so load changes hit both alike
        times["not registered"].append(one_round(Unregistered, args.n))
        times["registered"].append(one_round(Registered, args.n))
    median = {k: statistics.median(v) for k, v in times.items()}
    for name, value in median.items():
        print(
            f"{name:>15}: {value * 1e6:8.1f} us per Process start + stop (median of {args.rounds})"
        )
    print(
        f"ratio registered / not registered: {median['registered'] / median['not registered']:.3f}"
    )


if __name__ == "__main__":
    main()
