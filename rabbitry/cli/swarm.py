"""`rabbitry swarm --config ephemeral.yaml --count N [--processes P]`: N ephemeral members.

The command itself starts P worker processes (itself again, with a hidden `--slice`) and
hands each a contiguous slice of the member indices. A worker starts its members
(rabbitry.swarm), prints `RUNNING <k>` once all k of them run, and stops them with a leave on
SIGTERM. The command prints `READY N` when every worker has, and forwards SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from rabbitry.cli import HelpFormatter, add_log_level, configure_logging
from supervisors import ConfigError

SWARM_EPILOG = """\
examples:
  rabbitry swarm --config examples/cluster/x-ephemeral.yaml --count 200
  rabbitry swarm --config executor.yaml --count 1000 --processes 4 --log-level info

Member i of a template with `node: exec@127.0.0.1` is exec-<i>@127.0.0.1 (i = 0..N-1). Each
listens on port 0 of the template's listen host, has no control API or metrics listener of its
own (`control:` and `metrics:` in the template are ignored) and keeps its files in
<data_dir>/exec-<i>. Each is a real ephemeral node: real dist links to the core, the real
ephemeral node monitor, gossip when the template has a `bus:`, the `tree:` when it has one
(held until the core lets it run). The template's role must be ephemeral (or absent).

Once all N are attached and running (their monitor lets their application run), the command
prints one line on stdout:
  READY <N>
SIGTERM or Ctrl-C makes every member leave (the core forgets them at once) and exits 0.
Exit codes: 0 stopped by a signal, 1 a member or worker failed, 2 a bad template or usage."""

WORKER_READY = "RUNNING"
STOP_GRACE = 60.0  # a worker stopping hundreds of members (each leave is one message per link)


def register(commands: Any) -> None:
    """Add `swarm` to the `rabbitry` command's subparsers."""
    swarm = commands.add_parser(
        "swarm",
        help="run N ephemeral members from one template config (load for scale tests)",
        description="Start N real ephemeral members from one ephemeral node config, packed into "
        "a few OS processes, and keep them attached until SIGTERM/Ctrl-C.",
        epilog=SWARM_EPILOG,
        formatter_class=HelpFormatter,
    )
    swarm.add_argument(
        "--config", required=True, metavar="FILE", help="the template: an ephemeral node config"
    )
    swarm.add_argument(
        "--count", required=True, type=int, metavar="N", help="how many members to start"
    )
    swarm.add_argument(
        "--processes",
        type=int,
        default=None,
        metavar="P",
        help="OS processes to pack them into (default: one per core of this machine, "
        f"{os.cpu_count() or 1} here, never more than N)",
    )
    swarm.add_argument("--slice", default=None, help=argparse.SUPPRESS)  # a worker's members
    add_log_level(swarm, default="error")  # N members: warnings come N at a time
    swarm.set_defaults(handler=swarm_command, help_parser=swarm)


def swarm_command(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    if args.count < 1:
        print("rabbitry swarm: --count must be at least 1", file=sys.stderr)
        return 2
    if args.processes is not None and args.processes < 1:
        print("rabbitry swarm: --processes must be at least 1", file=sys.stderr)
        return 2
    from rabbitry.swarm import load_template

    try:
        load_template(args.config)
    except ConfigError as exc:
        print(f"rabbitry swarm: {exc}", file=sys.stderr)
        return 2
    if args.slice is not None:
        return _worker(args)
    return _parent(args)


# ----------------------------------------------------------------------------- the command


def _parent(args: argparse.Namespace) -> int:
    n = args.count
    p = max(1, min(args.processes or os.cpu_count() or 1, n))
    bounds = [(k * n // p, (k + 1) * n // p) for k in range(p)]
    stop = threading.Event()
    received: list[int] = []

    def on_signal(signum: int, _frame: Any) -> None:
        received.append(signum)
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    base = [sys.executable, "-m", "rabbitry", "swarm", "--config", args.config]
    log_level = ["--log-level", args.log_level]
    workers = [
        subprocess.Popen(
            # the slice names the command's pid: a worker that finds another parent stops
            [*base, "--count", str(n), "--slice", f"{a}:{b}:{os.getpid()}", *log_level],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,  # Ctrl-C reaches the command, which stops them in order
        )
        for a, b in bounds
    ]
    ready = threading.Semaphore(0)
    for w in workers:
        threading.Thread(target=_watch, args=(w, ready), daemon=True).start()
    t0, seen, failed = time.monotonic(), 0, False
    while seen < len(workers) and not stop.is_set():
        if ready.acquire(timeout=0.2):
            seen += 1
        elif any(w.poll() is not None for w in workers):
            failed = True
            break
    if seen == len(workers):
        print(f"READY {n}", flush=True)
        print(
            f"rabbitry swarm: {n} members running in {len(workers)} processes after "
            f"{time.monotonic() - t0:.1f} s",
            file=sys.stderr,
            flush=True,
        )
        while not stop.wait(0.5):
            if any(w.poll() is not None for w in workers):
                failed = True
                break
    if failed:
        codes = [w.poll() for w in workers]
        print(f"rabbitry swarm: a worker process ended (exit codes {codes})", file=sys.stderr)
    return _stop_workers(workers) if not failed else max(1, _stop_workers(workers))


def _watch(worker: subprocess.Popen[str], ready: threading.Semaphore) -> None:
    assert worker.stdout is not None
    for line in worker.stdout:
        if line.startswith(WORKER_READY):
            ready.release()


def _stop_workers(workers: list[subprocess.Popen[str]]) -> int:
    for w in workers:
        if w.poll() is None:
            w.send_signal(signal.SIGTERM)
    code = 0
    deadline = time.monotonic() + STOP_GRACE
    for w in workers:
        try:
            rc = w.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print(f"rabbitry swarm: worker {w.pid} did not stop; killed", file=sys.stderr)
            w.kill()
            rc = w.wait()
        code = code or (rc if rc in (1, 2) else (0 if rc == 0 else 1))
    return code


# ----------------------------------------------------------------------------- a worker

ORPHAN_POLL = 1.0  # how often a worker checks that the command that started it still runs


def _orphan_watch(parent: int, stop: threading.Event) -> None:
    """A worker runs in its own session (Ctrl-C goes to the command, which stops the workers
    in order), so a SIGKILLed command would leave it running: when the parent goes, stop.
    (`parent` comes from the command itself: it may be gone before the worker looks.)"""
    while True:
        if os.getppid() != parent:
            print("rabbitry swarm: the swarm command went; stopping", file=sys.stderr)
            stop.set()
            return
        if stop.wait(ORPHAN_POLL):
            return


def _worker(args: argparse.Namespace) -> int:
    from monitors.dist.ioloop import IoLoop
    from rabbitry.swarm import (
        load_template,
        member_config,
        start_members,
        stop_members,
        wait_running,
    )
    from supervisors import stop_pool

    first, last, parent = [*args.slice.split(":"), ""][:3]
    template, base = load_template(args.config)
    configs = [
        member_config(template, base, i, file=args.config) for i in range(int(first), int(last))
    ]
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    parent_pid = int(parent) if parent else os.getppid()
    threading.Thread(target=_orphan_watch, args=(parent_pid, stop), daemon=True).start()
    # One dist I/O loop for all of this process's members: a thread and an epoll in all,
    # instead of one per member.
    io_loop = IoLoop(f"swarm {args.slice}")
    io_loop.start()
    try:
        members = start_members(configs, stop, io_loop)
    except Exception as exc:
        print(f"rabbitry swarm: members {args.slice} failed to start: {exc}", file=sys.stderr)
        io_loop.stop()
        return 1
    try:
        if wait_running(members, stop):
            print(f"{WORKER_READY} {len(members)}", flush=True)
            stop.wait()
    finally:
        stop_members(members)
        io_loop.stop()
        stop_pool(if_unused=True)
    return 0
