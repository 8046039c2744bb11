"""One Spark stack for every test here: Spark sessions take 15-20 s to start, so they are
shared (one SparkContext per process, too). The stack is rabbitry.demo.stack's: 3 redis-servers
with the RCS/RCC tree, 3 core nodes (pause_minority) and local-cluster[2,1,1024], whose two
executors embed a node each. Tests that fault a node restore it before they end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.services import redis_server_binary, require_spark

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="session")
def spark_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    require_spark()
    redis_server_binary()
    from rabbitry.demo.stack import DemoStack

    root = Path(tmp_path_factory.mktemp("spark-stack"))
    stack = DemoStack(root, master="local-cluster[2,1,1024]")
    try:
        stack.start()
        stack.executors = stack.warm_up(executors=2)
        yield stack
    finally:
        stack.stop()
