"""Fixtures shared by every test package: real servers (tests/services.py) and the `cluster`
fixture of rabbitry.testing.plugin (real node processes behind fault proxies).

The suite runs on two pytest-xdist workers (`-n 2 --dist loadgroup` in pyproject.toml): most
tests wait on timers and other processes, so two at once nearly halve the wall time on two
cores. Each test file is one unit of work, kept on one worker, so its module fixtures are made
once and its tests never race each other on the names they use on the shared brokers. Every
test that runs Spark is one unit too: the Spark session is shared, and two JVMs at once would
only fight for the cores. That unit is handed out first because it is the longest.
"""

from __future__ import annotations

import os
import tempfile

import pytest

from monitors.dist.name_lock import LOCK_DIR_ENV
from tests.services import redis_servers  # noqa: F401 - a fixture, re-exported for pytest

pytest_plugins = ["rabbitry.testing.plugin"]

SPARK_GROUP = "spark"
_SPARK_FILES = ("tests/spark/", "tests/rabbitry/test_demo_quick.py")


# Files that must not run at the same time as another: the README guide's RCS uses the same
# failover set name on the same bus as the failover CLI tests.
_SHARED = {"tests/rabbitry/test_readme_guide.py": "tests/failover/test_cli_failover.py"}


def _group(item: pytest.Item) -> str:
    path = item.nodeid.split("::", 1)[0]
    if item.get_closest_marker("spark") is not None or path.startswith(_SPARK_FILES):
        return SPARK_GROUP
    return _SHARED.get(path, path)


def pytest_configure(config: pytest.Config) -> None:
    """Each pytest process (an xdist worker) gets its own node-name locks (name_lock.py):
    the workers run test clusters with the same names at once, as two hosts would."""
    os.environ[LOCK_DIR_ENV] = tempfile.mkdtemp(prefix="rabbitry-names-")


@pytest.fixture(autouse=True)
def _own_name_locks(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """And each test its own, for the nodes it starts itself: a node process that an earlier
    test leaked (a demo that timed out, say) must not hold a name a later test uses. Module
    fixtures are made before this runs and keep the worker's; the `cluster` fixture's nodes
    take their cluster's (rabbitry.testing.cluster.Cluster.lock_env)."""
    monkeypatch.setenv(LOCK_DIR_ENV, str(tmp_path_factory.mktemp("names")))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give each test its xdist group (see the module docstring), Spark's first in line."""
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_group(item)))
    items.sort(key=lambda item: _group(item) != SPARK_GROUP)  # stable: files keep their order
