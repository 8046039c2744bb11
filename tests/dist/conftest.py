"""Fixtures for the dist tests: kernels and processes are stopped after each test, and no
dist thread may outlive it."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

import pykka
import pytest

from monitors.dist import NetKernel
from supervisors import exit, processes
from tests.dist.helpers import COOKIE


@pytest.fixture
def make_kernel() -> Iterator[Callable[..., NetKernel]]:
    """make_kernel("a", **options) starts a NetKernel "a@127.0.0.1" on a free port."""
    started: list[NetKernel] = []

    def make(name: str = "a", cookie: bytes | str = COOKIE, **options) -> NetKernel:
        ref = NetKernel.start(f"{name}@127.0.0.1", "127.0.0.1:0", cookie, **options)
        kernel = NetKernel.of(ref)
        started.append(kernel)
        return kernel

    yield make
    for kernel in reversed(started):
        with contextlib.suppress(pykka.ActorDeadError):
            kernel.actor_ref.stop(timeout=10)


def _dist_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("dist-")]


@pytest.fixture(autouse=True)
def no_leftovers() -> Iterator[None]:
    """After each test: stop every Process still alive, then check no dist thread is left."""
    yield
    for ref in processes():
        try:
            ref.stop(block=True, timeout=5)
        except pykka.Timeout:
            with contextlib.suppress(TypeError):
                exit(ref, "kill")
        except pykka.ActorDeadError:
            pass
    deadline = time.monotonic() + 10
    while _dist_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _dist_threads(), f"dist threads left running: {_dist_threads()}"
