"""Where one client's transaction spends its time: the floor under mnesia_like's rate at 1 client.

One client runs transactions one after another on node a of 3 disc replicas in this process
(parallel commit, the default), as `mnesia.py --part etcd` does with 1 client. After a
warm-up, --txs of them are traced: each step is stamped (time.perf_counter) where it happens,
by wrapping, in this process only, the functions that do it:

    the client's calls into the store    Schema._call (read, write, commit: until answered)
    each message a store's core handles  MnesiaCore.receive (prepare, vote, commit, ack, ...)
    each write to a peer                 NetKernel.send_many
    each fsync                           TableLog._sync (the store's thread), SyncTicket.run

and the commit is cut into phases, each the median over the traced transactions:

    to the prepares    the commit's request reaching the store -> its last prepare sent
    prepare round      the last prepare sent -> the last peer's yes vote handled on a (the
                       peers' prepare records fsynced, side by side with a's)
    decision           -> the last commit message sent
    commit round       -> the last peer's ack handled on a
    answer             -> the client has its answer

Beside them, in the same run: the median fdatasync of a 100-byte append on the same disc, a
NetKernel call round trip between two nodes in this process (a hop there and back), and, if
etcd can be had (etcd_anchor.py), one client's etcd put p50: the anchor that mnesia.py's 1-client
ratio is taken against. The tracing adds a little to every step (printed: the same run's
untraced p50 beside the traced one).

Usage: python benchmarks/mnesia_timeline.py [--txs 300] [--blind] [--show 1] [--no-etcd]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.etcd_anchor import etcd_cluster
from benchmarks.mnesia import TABLE, store_cluster
from mnesia_like import disc_log
from mnesia_like.core import MnesiaCore
from mnesia_like.shell import Schema
from monitors.dist import NetKernel
from monitors.dist import netkernel as netkernel_module

Event = tuple[float, str, str]  # (perf_counter, thread, what)


class Tracer:
    """Stamps the steps of a transaction while `on`; see the module docstring."""

    def __init__(self) -> None:
        self.on = False
        self.events: list[Event] = []

    def mark(self, what: str) -> None:
        if self.on:
            self.events.append((time.perf_counter(), threading.current_thread().name, what))

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Wrap the functions named in the module docstring; put them back on exit."""
        mark = self.mark
        saved: list[tuple[Any, str, Any]] = []

        def wrap(owner: Any, name: str, make: Callable[[Any], Any]) -> None:
            original = getattr(owner, name)
            saved.append((owner, name, original))
            setattr(owner, name, make(original))

        def receive(original: Any) -> Any:
            def traced(core: Any, sender: str, msg: Any, now: float) -> Any:
                kind = msg.get("t") if isinstance(msg, dict) else "?"
                mark(f"{_short(core.node)} handles {kind} from {_short(sender)}")
                return original(core, sender, msg, now)

            return traced

        def send_many(original: Any) -> Any:
            def traced(kernel: Any, node: str, name: str, msgs: list[Any]) -> Any:
                kinds = ",".join(str(m.get("t")) for m in msgs if isinstance(m, dict))
                mark(f"{_short(kernel.node)} sends {kinds} to {_short(node)}")
                return original(kernel, node, name, msgs)

            return traced

        def fsync(original: Any) -> Any:
            def traced(*args: Any) -> Any:
                mark("fsync begins")
                try:
                    return original(*args)
                finally:
                    mark("fsync ends")

            return traced

        def call(original: Any) -> Any:
            def traced(schema: Any, op: str, /, **kwargs: Any) -> Any:
                mark(f"client {op} asks")
                try:
                    return original(schema, op, **kwargs)
                finally:
                    mark(f"client {op} answered")

            return traced

        def request(original: Any) -> Any:
            def traced(core: Any, req_id: int, op: str, args: Any, now: float) -> Any:
                mark(f"{_short(core.node)} request {op}")
                return original(core, req_id, op, args, now)

            return traced

        wrap(MnesiaCore, "receive", receive)
        wrap(MnesiaCore, "request", request)
        wrap(netkernel_module.NetKernel, "send_many", send_many)
        wrap(disc_log.TableLog, "_sync", fsync)
        wrap(disc_log.SyncTicket, "run", fsync)
        wrap(Schema, "_call", call)
        try:
            yield
        finally:
            for owner, name, original in reversed(saved):
                setattr(owner, name, original)


def _short(node: str) -> str:
    return node.split("@", 1)[0]


PHASES = ("to the prepares", "prepare round", "decision", "commit round", "answer")


def phases(events: list[Event], coordinator: str) -> dict[str, float] | None:
    """One transaction's commit phases (seconds), from its events; None if a step is
    missing (the transaction did not take the path traced: a restart, say)."""

    def last(pred: Callable[[str], bool]) -> float | None:
        found = [t for t, _, w in events if pred(w)]
        return found[-1] if found else None

    a = coordinator
    begin = last(lambda w: w == f"{a} request tx_commit")
    prepared = last(lambda w: w.startswith(f"{a} sends prepare"))
    voted = last(lambda w: w.startswith(f"{a} handles vote from") and not w.endswith(f" {a}"))
    decided = last(lambda w: w.startswith(f"{a} sends commit"))
    acked = last(lambda w: w.startswith(f"{a} handles ack from") and not w.endswith(f" {a}"))
    answered = last(lambda w: w == "client tx_commit answered")
    steps = (begin, prepared, voted, decided, acked, answered)
    if any(s is None for s in steps) or sorted(steps) != list(steps):  # type: ignore[type-var]
        return None
    return {name: steps[i + 1] - steps[i] for i, name in enumerate(PHASES)}  # type: ignore[operator]


def client_calls(events: list[Event]) -> dict[str, float]:
    """How long each of the client's calls took (the ask, until the answer)."""
    out: dict[str, float] = {}
    asked: dict[str, float] = {}
    for t, _, w in events:
        if w.startswith("client ") and w.endswith(" asks"):
            asked[w.split()[1]] = t
        elif w.startswith("client ") and w.endswith(" answered"):
            op = w.split()[1]
            if op in asked:
                out[op] = t - asked.pop(op)
    return out


def fdatasync_p50(directory: Path, count: int = 300) -> float:
    """A 100-byte append and its fdatasync, `count` times: the disc's price for one."""
    path = directory / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    took = []
    try:
        for _ in range(count):
            os.write(fd, b"x" * 100)
            start = time.perf_counter()
            os.fdatasync(fd)
            took.append(time.perf_counter() - start)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return statistics.median(took)


def call_round_trip_p50(count: int = 2000) -> float:
    """A NetKernel call between two nodes in this process, there and back: one hop each way
    through the same machinery a prepare and its vote take (no store behind it)."""
    from monitors.dist import Message
    from supervisors import Process

    class Echo(Process):
        def on_receive(self, message: Any) -> Any:
            return message.msg if isinstance(message, Message) else None

    cookie = b"timeline"
    a_ref = NetKernel.start("ta@127.0.0.1", "127.0.0.1:0", cookie)
    b_ref = NetKernel.start("tb@127.0.0.1", "127.0.0.1:0", cookie)
    echo = Echo.start()
    try:
        a, b = NetKernel.of(a_ref), NetKernel.of(b_ref)
        a.set_address(b.node, b.address)
        b.register("echo", echo)
        took = []
        for n in range(count):
            start = time.perf_counter()
            a.call(b.node, "echo", {"n": n})
            took.append(time.perf_counter() - start)
        return statistics.median(took[count // 10 :])
    finally:
        echo.stop()
        a_ref.stop()
        b_ref.stop()


def etcd_put_p50(root: Path, count: int = 1000) -> float | None:
    """One client's etcd put p50 on 3 members (None if etcd cannot be had)."""
    try:
        with etcd_cluster(root / "etcd") as etcd:
            client = etcd.client()
            took = []
            for n in range(count + 100):
                start = time.perf_counter()
                client.put(f"k{n % 50}", "v" * 8)
                took.append(time.perf_counter() - start)
            return statistics.median(took[100:])
    except RuntimeError as exc:
        print(f"etcd: {exc}")
        return None


def run(args: argparse.Namespace) -> None:
    ms = 1000.0
    with tempfile.TemporaryDirectory(prefix="mnesia-timeline-") as tmp:
        root = Path(tmp)
        tracer = Tracer()
        traced: list[list[Event]] = []
        plain: list[float] = []
        with store_cluster(root, 3) as dbs, tracer.installed():
            db = dbs[0]
            coordinator = "a"
            for i in range(args.warmup + 2 * args.txs):
                key = f"c{i % 50}"

                def bump(tx: Any, key: str = key, i: int = i) -> None:
                    if args.blind:
                        tx.write(TABLE, {"key": key, "value": i})
                        return
                    row = tx.read(TABLE, key)
                    tx.write(TABLE, {"key": key, "value": (row["value"] if row else 0) + 1})

                trace = i >= args.warmup and i % 2 == 0  # every other one: a traced and a plain
                tracer.events = []
                tracer.on = trace
                start = time.perf_counter()
                db.transaction(bump)
                took = time.perf_counter() - start
                tracer.on = False
                if trace:
                    traced.append(tracer.events)
                elif i >= args.warmup:
                    plain.append(took)
        fsync = fdatasync_p50(root)
    hop = call_round_trip_p50()
    with tempfile.TemporaryDirectory(prefix="mnesia-timeline-etcd-") as tmp:
        etcd = None if args.no_etcd else etcd_put_p50(Path(tmp))

    what = "write 1 record" if args.blind else "read + write 1 record"
    cut = [p for p in (phases(ev, coordinator) for ev in traced) if p is not None]
    calls = [client_calls(ev) for ev in traced]
    totals = [ev[-1][0] - ev[0][0] for ev in traced]
    print(
        f"one client's transactions ({what}), 3 disc replicas in one process, parallel commit:"
        f" {len(traced)} traced, {len(plain)} not"
    )
    print(
        f"  p50 untraced {statistics.median(plain) * ms:.3f} ms, traced"
        f" {statistics.median(totals) * ms:.3f} ms (the tracing's own cost is the difference)"
    )
    for op in ("tx_read", "tx_write", "tx_commit"):
        values = [c[op] for c in calls if op in c]
        if values:
            print(f"  client call {op:10s} p50 {statistics.median(values) * ms:.3f} ms")
    print(f"  the commit, phase by phase ({len(cut)} transactions took the path traced):")
    for name in PHASES:
        print(f"    {name:16s} p50 {statistics.median(p[name] for p in cut) * ms:.3f} ms")
    print(f"  beside it, same run: fdatasync p50 {fsync * ms:.3f} ms;", end=" ")
    print(f"a NetKernel call round trip (2 nodes, this process) p50 {hop * ms:.3f} ms")
    if etcd is not None:
        untraced = statistics.median(plain)
        print(
            f"  etcd put, 1 client, 3 members: p50 {etcd * ms:.3f} ms; ours untraced / etcd ="
            f" {untraced / etcd:.2f} (the rate ratio at 1 client is about its inverse,"
            f" {etcd / untraced:.2f})"
        )
    for n in range(min(args.show, len(traced))):
        events = traced[len(traced) // 2 + n]
        print("  one traced transaction, step by step (ms from its first step):")
        t0 = events[0][0]
        for t, thread, w in events:
            print(f"    {(t - t0) * ms:7.3f}  {thread[:20]:20s} {w}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--txs", type=int, default=300, help="transactions traced")
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--blind", action="store_true", help="write only (a put), no read")
    parser.add_argument("--show", type=int, default=1, help="traced transactions to print whole")
    parser.add_argument("--no-etcd", action="store_true", help="skip the etcd anchor")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} at start")
    run(args)
    print(f"load average {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
