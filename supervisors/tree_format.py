"""Rendering a loaded tree as indented text, for `rabbitry tree check`."""

from __future__ import annotations

import math
import shlex
from typing import TYPE_CHECKING, Any

from supervisors.osprocess import OsProcess
from supervisors.specs import (
    ChildSpec,
    SupFlags,
)

if TYPE_CHECKING:  # tree_schema imports this module for _seconds
    from supervisors.tree_schema import TreeSpec


def _seconds(value: float) -> str:
    if value > 0 and value < 1:
        return f"{value * 1000:g}ms"
    if value >= 60 and value % 60 == 0:
        return f"{value / 60:g}m"
    return f"{value:g}s"


def _describe_flags(flags: SupFlags) -> str:
    parts: list[str] = [flags.strategy]
    parts.append(f"intensity {flags.intensity} per {_seconds(flags.period)}")
    if flags.auto_shutdown != "never":
        parts.append(f"auto_shutdown {flags.auto_shutdown}")
    return ", ".join(parts)


def _describe_child(spec: ChildSpec) -> tuple[str, list[ChildSpec] | None]:
    """What a child runs, and its children if it is a nested supervisor from a tree file."""
    start = spec.start
    if not isinstance(start, tuple):
        return spec.describe_start(), None
    cls, args, kwargs = start
    if (
        len(args) == 2
        and isinstance(args[0], SupFlags)
        and isinstance(args[1], list)
        and not kwargs
    ):
        return _describe_flags(args[0]), args[1]
    if _is_osprocess(cls) and len(args) == 1 and isinstance(args[0], list):
        text = "$ " + shlex.join(args[0])
        extras = []
        if kwargs.get("cwd"):
            extras.append(f"cwd {kwargs['cwd']}")
        if kwargs.get("env"):
            extras.append(
                "env " + " ".join(f"{k}={shlex.quote(v)}" for k, v in kwargs["env"].items())
            )
        if kwargs.get("log_file"):
            extras.append(f"log {kwargs['log_file']}")
        if kwargs.get("pid_file"):
            extras.append(f"pid {kwargs['pid_file']}")
        grace = kwargs.get("grace")
        if isinstance(grace, int | float) and math.isfinite(grace):
            extras.append(f"grace {_seconds(float(grace))}")
        if extras:
            text += "  [" + "; ".join(extras) + "]"
        return text, None
    call = ", ".join([*(repr(a) for a in args), *(f"{k}={v!r}" for k, v in kwargs.items())])
    return f"{spec.describe_start()}({call})", None


def _is_osprocess(cls: Any) -> bool:
    return isinstance(cls, type) and issubclass(cls, OsProcess)


def _format_children(children: list[ChildSpec], indent: str, lines: list[str]) -> None:
    for index, spec in enumerate(children):
        last = index == len(children) - 1
        what, grandchildren = _describe_child(spec)
        shutdown = (
            _seconds(spec.shutdown) if isinstance(spec.shutdown, int | float) else spec.shutdown
        )
        props = [spec.type, spec.restart, f"shutdown {shutdown}"]
        if spec.significant:
            props.append("significant")
        branch = "└── " if last else "├── "
        lines.append(f"{indent}{branch}{spec.id} ({', '.join(props)}): {what}")
        if grandchildren is not None:
            _format_children(grandchildren, indent + ("    " if last else "│   "), lines)


def format_tree(spec: TreeSpec) -> str:
    """A readable, indented rendering of a tree, one line per supervisor or child."""
    lines = [f"{spec.id}: supervisor, {_describe_flags(spec.flags)}"]
    _format_children(spec.children, "", lines)
    return "\n".join(lines)
