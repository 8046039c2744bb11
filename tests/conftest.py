"""Fixtures shared by every test package: real servers (tests/services.py) and the `cluster`
fixture of rabbitry.testing.plugin (real node processes behind fault proxies)."""

from tests.services import redis_servers  # noqa: F401 - a fixture, re-exported for pytest

pytest_plugins = ["rabbitry.testing.plugin"]
