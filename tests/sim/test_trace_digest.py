"""tests/sim/trace_digest.py: the before/after check of behaviour-preserving refactors is only
as good as its determinism: the same tree must print the same lines, run after run."""

from __future__ import annotations

import pytest

from tests.sim import trace_digest


@pytest.mark.timeout(120)
def test_the_failover_digests_repeat_and_cover_every_topology() -> None:
    first = list(trace_digest.failover_runs(1))
    assert first == list(trace_digest.failover_runs(1))
    labels = [label for label, _digest in first]
    assert len(labels) == 6 and len(set(labels)) == 6
    assert all(digest.endswith(" ok") for _label, digest in first)
