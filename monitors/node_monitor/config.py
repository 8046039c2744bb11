"""`partition_handling:` from a node config, as RabbitMQ's `cluster_partition_handling`.

The accepted forms (docs/node.md has them in a whole config file)::

    partition_handling: ignore            # the default, as in RabbitMQ
    partition_handling: pause_minority
    partition_handling: autoheal
    partition_handling:
      pause_if_all_down:
        nodes: [a@host1, b@host2]         # at least one node
        recover: autoheal                 # ignore | autoheal (default ignore)

Every mistake raises PartitionHandlingError naming the key path (for instance
`partition_handling.pause_if_all_down.nodes[1]`) and what was expected.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MODES = ("ignore", "pause_minority", "autoheal", "pause_if_all_down")
RECOVERS = ("ignore", "autoheal")
_FORMS = (
    "ignore, pause_minority, autoheal or "
    "{pause_if_all_down: {nodes: [name@host, ...], recover: ignore|autoheal}}"
)


class PartitionHandlingError(ValueError):
    """A `partition_handling` value that is not one of the accepted forms."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem


def _suggest(word: str, choices: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _check_node_name(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise PartitionHandlingError(where, f"expected a node name name@host, got {value!r}")
    name, at, host = value.partition("@")
    if not (name and at and host) or any(c.isspace() for c in value):
        raise PartitionHandlingError(where, f"expected a node name name@host, got {value!r}")
    return value


@dataclass(frozen=True)
class PartitionHandling:
    """The partition handling mode, with pause_if_all_down's preferred nodes and recovery.

    `PartitionHandling("pause_minority")` or
    `PartitionHandling("pause_if_all_down", nodes=("a@h",), recover="autoheal")`.
    """

    mode: str = "ignore"
    nodes: tuple[str, ...] = ()
    recover: str = "ignore"

    def __post_init__(self) -> None:
        where = "partition_handling"
        if self.mode not in MODES:
            raise PartitionHandlingError(
                where, f"expected {_FORMS}, got {self.mode!r}{_suggest(str(self.mode), MODES)}"
            )
        if self.mode != "pause_if_all_down":
            if self.nodes or self.recover != "ignore":
                raise PartitionHandlingError(
                    where, f"nodes and recover belong to pause_if_all_down, not to {self.mode}"
                )
            return
        where += ".pause_if_all_down"
        if isinstance(self.nodes, str) or not isinstance(self.nodes, tuple | list):
            raise PartitionHandlingError(
                f"{where}.nodes", f"expected a list of node names, got {self.nodes!r}"
            )
        if not self.nodes:
            raise PartitionHandlingError(
                f"{where}.nodes",
                "expected at least one node (with none, pause_if_all_down never pauses: "
                "use ignore)",
            )
        nodes = tuple(_check_node_name(n, f"{where}.nodes[{i}]") for i, n in enumerate(self.nodes))
        object.__setattr__(self, "nodes", nodes)
        if self.recover not in RECOVERS:
            raise PartitionHandlingError(
                f"{where}.recover",
                f"expected ignore or autoheal, got {self.recover!r}"
                f"{_suggest(str(self.recover), RECOVERS)}",
            )

    @property
    def autoheal(self) -> bool:
        """Whether rabbit_autoheal runs: `autoheal`, or pause_if_all_down with recover=autoheal."""
        return self.mode == "autoheal" or (
            self.mode == "pause_if_all_down" and self.recover == "autoheal"
        )

    @property
    def pauses(self) -> bool:
        """Whether this mode ever pauses the application (the pause_* modes)."""
        return self.mode in ("pause_minority", "pause_if_all_down")

    @classmethod
    def parse(cls, value: Any, where: str = "partition_handling") -> PartitionHandling:
        """Read the config-file form (a string, or the pause_if_all_down mapping)."""
        if value is None:
            return cls()
        if isinstance(value, str):
            if value == "pause_if_all_down":
                raise PartitionHandlingError(
                    where,
                    "pause_if_all_down needs its nodes: "
                    "{pause_if_all_down: {nodes: [name@host, ...], recover: ignore|autoheal}}",
                )
            if value not in MODES:
                raise PartitionHandlingError(
                    where, f"expected {_FORMS}, got {value!r}{_suggest(value, MODES)}"
                )
            return cls(value)
        if not isinstance(value, Mapping):
            raise PartitionHandlingError(where, f"expected {_FORMS}, got {value!r}")
        if list(value) != ["pause_if_all_down"]:
            keys = ", ".join(repr(k) for k in value)
            hint = "".join(_suggest(str(k), MODES) for k in value if k != "pause_if_all_down")
            raise PartitionHandlingError(
                where,
                f"a mapping here must have the single key pause_if_all_down, got {keys}{hint}",
            )
        inner_where = f"{where}.pause_if_all_down"
        inner = value["pause_if_all_down"]
        if not isinstance(inner, Mapping):
            raise PartitionHandlingError(
                inner_where,
                f"expected {{nodes: [name@host, ...], recover: ignore|autoheal}}, got {inner!r}",
            )
        for key in inner:
            if key not in ("nodes", "recover"):
                raise PartitionHandlingError(
                    f"{inner_where}.{key}",
                    f"unknown key; expected nodes or recover{_suggest(str(key), ('nodes', 'recover'))}",
                )
        if "nodes" not in inner:
            raise PartitionHandlingError(f"{inner_where}.nodes", "missing: the preferred nodes")
        nodes = inner["nodes"]
        if isinstance(nodes, str) or not isinstance(nodes, list | tuple):
            raise PartitionHandlingError(
                f"{inner_where}.nodes", f"expected a list of node names, got {nodes!r}"
            )
        try:
            return cls(
                "pause_if_all_down",
                nodes=tuple(nodes),
                recover=inner.get("recover", "ignore"),
            )
        except PartitionHandlingError as err:
            # re-anchor errors raised by __post_init__ at the caller's key path
            raise PartitionHandlingError(
                err.where.replace("partition_handling", where, 1), err.problem
            ) from None

    def to_config(self) -> str | dict[str, Any]:
        """The config-file form; `parse(to_config())` gives this value back."""
        if self.mode != "pause_if_all_down":
            return self.mode
        return {"pause_if_all_down": {"nodes": list(self.nodes), "recover": self.recover}}
