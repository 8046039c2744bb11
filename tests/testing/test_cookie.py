"""The testing cookie is unique to each process.

Two processes running clusters at once (pytest-xdist workers, a benchmark beside a test run,
two helpers' suites) reuse node names (a@127.0.0.1, ...) and ports that one frees and the
other takes. With one shared cookie, a node of one process that reaches a port now held by the
other's node completes the handshake and joins the wrong cluster: seen as an isolated node that
never pauses (a foreign a@ keeps it in a majority) and a heal that never finishes
(docs/testing.md, "Heal rounds that never recover")."""

from __future__ import annotations

import subprocess
import sys

from rabbitry.testing.cluster import COOKIE

_OLD_SHARED = b"rabbitry-testing-cluster-cookie"  # every process's cookie before it was unique


def test_each_process_has_its_own_testing_cookie() -> None:
    other = subprocess.run(
        [sys.executable, "-c", "from rabbitry.testing.cluster import COOKIE; print(COOKIE.hex())"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    assert bytes.fromhex(other) != COOKIE
    assert _OLD_SHARED not in (COOKIE, bytes.fromhex(other))
