"""The error every tree-file mistake raises: file, key path, what was expected."""

from __future__ import annotations

from supervisors.config_check import ConfigError


class TreeConfigError(ConfigError):
    """A mistake in a supervision-tree file (see ConfigError for the attributes)."""
