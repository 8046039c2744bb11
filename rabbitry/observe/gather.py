"""Ask several parts of a node at once, and keep only what answers within a time budget.

A scrape or a page refresh must never wait on the network: a part whose actor is stuck (a
dist send to a hung peer, a store waiting for a lock) would otherwise hold up everything. So
each part runs on a pool thread, the caller waits for the budget once for all of them, and a
part still running then is reported missing; its thread finishes on its own. A part still busy
from an earlier call is not asked again (it is missing again), so a hung part ties up one
thread, never a growing pile of them.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from supervisors import format_reason


@dataclass
class Gathered:
    """What the parts answered (`results`), and why the others did not (`missing`)."""

    results: dict[str, Any] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    took: float = 0.0

    def get(self, part: str, default: Any = None) -> Any:
        return self.results.get(part, default)


class Gatherer:
    """Runs named parts in parallel with a deadline; one per reader (metrics, the page)."""

    def __init__(self, name: str, max_workers: int = 16) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers, thread_name_prefix=name)
        self._busy: dict[str, concurrent.futures.Future[Any]] = {}
        self._lock = threading.Lock()

    def gather(self, parts: Mapping[str, Callable[[], Any]], budget: float) -> Gathered:
        """Run every part; return within about `budget` seconds whatever answered."""
        started = time.monotonic()
        out = Gathered()
        futures: dict[str, concurrent.futures.Future[Any]] = {}
        with self._lock:
            for name, fn in parts.items():
                previous = self._busy.get(name)
                if previous is not None and not previous.done():
                    out.missing[name] = "still busy with an earlier request"
                    continue
                try:
                    futures[name] = self._busy[name] = self._pool.submit(fn)
                except RuntimeError:  # the pool was shut down: the reader is stopping
                    out.missing[name] = "stopping"
        concurrent.futures.wait(list(futures.values()), timeout=budget)
        for name, future in futures.items():
            if not future.done():
                out.missing[name] = f"no answer within {budget * 1000:.0f} ms"
                continue
            error = future.exception()
            if error is not None:
                out.missing[name] = format_reason(error)
            else:
                out.results[name] = future.result()
        out.took = time.monotonic() - started
        return out

    def close(self) -> None:
        """Stop taking parts; threads still running finish on their own."""
        self._pool.shutdown(wait=False, cancel_futures=True)
