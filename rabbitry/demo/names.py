"""Short, readable node names for the demo's view and plot.

An executor's node is named spark-<application id>-<executor id>@<host> (rabbitry.spark's
default), which is unique in the cluster but too long for a lane label: the application id is
the same for every executor of the run. The report keeps the full names.
"""

from __future__ import annotations

import re

_EXECUTOR = re.compile(r"^spark-.+-(?P<executor>[^-@]+)@")


def short_name(node: str) -> str:
    """ "executor 0" for spark-app-2026...-0000-0@127.0.0.1; "a" for a@127.0.0.1."""
    found = _EXECUTOR.match(node)
    if found:
        return f"executor {found.group('executor')}"
    return node.split("@", 1)[0]
