"""ConfigError: the one exception every config-file mistake raises, tree files and node configs
alike, so that they all read `file: key.path: expected ...; got ... (line N)`."""

from __future__ import annotations

import os
from typing import Any


class ConfigError(Exception):
    """A mistake in a config file.

    Attributes: `file` (the path as given), `key_path` (such as `supervisor.children[2].restart`;
    empty for problems with the file as a whole), `expected` (what would have been right), `got`
    (what was found, as text, or None), `line` (1-based, when the parser knows it).
    """

    def __init__(
        self,
        file: str | os.PathLike[str],
        key_path: str,
        expected: str,
        got: str | None = None,
        *,
        line: int | None = None,
        problem: str | None = None,
    ) -> None:
        self.file = str(file)
        self.key_path = key_path
        self.expected = expected
        self.got = got
        self.line = line
        if problem is None:
            problem = f"expected {expected}" if got is None else f"expected {expected}; got {got}"
        self.problem = problem
        message = ": ".join(part for part in (self.file, key_path, problem) if part)
        if line is not None:
            message += f" (line {line})"
        super().__init__(message)

    def __reduce__(self) -> Any:
        return (
            _rebuild_error,
            (
                type(self),
                (self.file, self.key_path, self.expected, self.got),
                self.line,
                self.problem,
            ),
        )


def _rebuild_error(cls: type, args: tuple, line: int | None, problem: str) -> ConfigError:
    return cls(*args, line=line, problem=problem)
