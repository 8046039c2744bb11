"""Fixtures shared by every test package."""

from tests.services import redis_servers  # noqa: F401 - a fixture, re-exported for pytest
