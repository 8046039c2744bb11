"""Every test file on disk is collected by the README's test command.

pytest's default `norecursedirs` holds "dist", and for months it silently skipped tests/dist/
(165 tests of the handshake, the gate and TLS). This test compares the files that pytest
collects with the `test_*.py` files under tests/, so that a folder name, an ignore rule or a
conftest can never again hide a test file without failing the run.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def _files_on_disk() -> set[str]:
    return {
        str(p.relative_to(ROOT))
        for p in TESTS.rglob("test_*.py")
        if not any(part.startswith(".") or part == "__pycache__" for part in p.parts)
    }


def _collected_in_subprocess() -> set[str]:
    """Collect the whole tree the way README's command does, in a child pytest."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-n",
            "0",
            "-p",
            "no:cacheprovider",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    files = {line.split("::", 1)[0] for line in out.stdout.splitlines() if "::" in line}
    assert files, (
        f"the child collection printed no test ids:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
    )
    return files


@pytest.mark.timeout(900)  # run alone it collects the whole tree in a child: slow when loaded
def test_every_test_file_on_disk_is_collected(request: pytest.FixtureRequest) -> None:
    session = request.session
    collected = {
        str(Path(item.path).resolve().relative_to(ROOT))
        for item in session.items
        if Path(item.path).resolve().is_relative_to(ROOT)
    }
    base = request.config.invocation_params.dir
    asked = {(base / a.split("::", 1)[0]).resolve() for a in request.config.args}
    whole_tree = asked <= {TESTS, ROOT}
    if not whole_tree:
        # Only part of the suite was asked for: collect the whole tree in a child to compare.
        collected = _collected_in_subprocess()
    missing = sorted(_files_on_disk() - collected)
    assert not missing, (
        f"{len(missing)} test files under tests/ are never collected by `python -m pytest` "
        f"(check norecursedirs and conftest ignores in pyproject.toml): {missing}"
    )
