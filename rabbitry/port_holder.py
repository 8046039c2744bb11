"""Saying which config key names a port that is taken, and which process holds it.

`listen:` and `control:` are bound by the dist layer and the control API, deep below the CLI;
what reaches `rabbitry node start` is an OSError. A newcomer needs the key to change, the line
it is on, and, where the OS tells us (psutil; another user's process may be hidden), who has
the port: usually a node they forgot in another terminal.
"""

from __future__ import annotations

import contextlib
import errno
from pathlib import Path
from typing import Any

from rabbitry.node_config import NodeConfigError
from supervisors import read_config_file
from supervisors.config_read import line_of

# the node's children that bind the address of a config key
CHILD_KEYS = {"net_kernel": "listen", "control": "control", "metrics": "metrics"}


def is_address_in_use(reason: Any) -> bool:
    """An OSError (or the metrics child's NodeConfigError) saying the address is taken."""
    if isinstance(reason, OSError) and reason.errno == errno.EADDRINUSE:
        return True
    return isinstance(reason, OSError | NodeConfigError) and "Address already in use" in str(reason)


def holder_of(host: str, port: int) -> str | None:
    """ "pid 1234 (python -m rabbitry node start --config a.yaml)" for the process listening on
    host:port, or None where that cannot be known (no psutil, no permission, no match)."""
    try:
        import psutil

        connections = psutil.net_connections(kind="inet")
    except Exception:  # psutil missing, or the OS refuses (macOS without root)
        return None
    for conn in connections:
        if conn.status != "LISTEN" or not conn.laddr or conn.laddr.port != port:
            continue
        if conn.laddr.ip not in (host, "0.0.0.0", "::") and host not in ("0.0.0.0", "::"):
            continue
        if conn.pid is None:
            return None
        try:
            process = psutil.Process(conn.pid)
            command = " ".join(process.cmdline()) or process.name()
        except Exception:
            return f"pid {conn.pid}"
        return f"pid {conn.pid} ({' '.join(command.split())[:120]})"
    return None


def address_in_use_error(config: Any, key: str, address: Any) -> NodeConfigError:
    """The error `rabbitry node start` prints for a taken address: file, key, line, holder."""
    file = str(config.file or "<node config>")
    line = None
    if config.file is not None:
        with contextlib.suppress(NodeConfigError):  # the line is a help, not a must
            line = line_of((read_config_file(Path(config.file), file, NodeConfigError), key))
    holder = holder_of(address.host, address.port)
    who = f"it is held by {holder}" if holder else "another process is listening on it"
    return NodeConfigError(
        file,
        key,
        "a free address of this host",
        line=line,
        problem=f"cannot listen on {address}: the address is in use ({who}); expected a free "
        "address of this host: stop that process, or give this node another port",
    )
