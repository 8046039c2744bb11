"""Checking config files key by key, with errors that name the file, the key path and what was
expected, such as `node.yaml: cluster.nodes.b@h: expected "host:port"; got 7002 (line 9)`.

Tree files and node config files share this, so every config mistake reads the same way.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any, NoReturn

from supervisors.config_errors import ConfigError
from supervisors.config_read import line_of
from supervisors.durations import parse_duration


class ConfigChecker:
    """Checks one parsed file. Knows its name (for errors) and its directory (relative paths
    are taken from there). Subclasses add the checks of one schema; `error` is the exception
    class they raise."""

    error: type[ConfigError] = ConfigError

    def __init__(self, file: str, base_dir: Path) -> None:
        self.file = file
        self.base_dir = base_dir

    def fail(
        self,
        path: str,
        expected: str,
        got: str | None = None,
        *,
        at: Any = None,
        problem: str | None = None,
    ) -> NoReturn:
        raise self.error(self.file, path, expected, got, line=line_of(at), problem=problem)

    def check_keys(self, mapping: dict, path: str, allowed: tuple[str, ...]) -> None:
        for key in mapping:
            key_path = join(path, key)
            if not isinstance(key, str):
                self.fail(key_path, "string keys", f"the key {show(key)}", at=(mapping, key))
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                expected = f"one of {', '.join(allowed)}"
                self.fail(
                    key_path,
                    expected,
                    at=(mapping, key),
                    problem=f"unknown key {key!r}{hint}; expected {expected}",
                )

    def choice(
        self, mapping: dict, path: str, key: str, allowed: tuple[str, ...], default: str
    ) -> Any:
        if key not in mapping:
            return default
        value = mapping[key]
        if value not in allowed or not isinstance(value, str):
            self.fail(
                join(path, key), f"one of {', '.join(allowed)}", show(value), at=(mapping, key)
            )
        return value

    def duration(self, mapping: dict, path: str, key: str, *, allow_zero: bool = True) -> float:
        value = mapping[key]
        try:
            return parse_duration(value, allow_zero=allow_zero)
        except ValueError:
            what = "seconds > 0" if not allow_zero else "seconds >= 0"
            self.fail(
                join(path, key),
                f"a duration: {what} as a number, or a string such as '500ms', '5s', '2m'",
                show(value),
                at=(mapping, key),
            )

    def path_value(self, item: dict, path: str, key: str) -> str | None:
        if key not in item:
            return None
        value = item[key]
        if not isinstance(value, str) or not value:
            self.fail(join(path, key), "a non-empty path string", typed(value), at=(item, key))
        resolved = Path(value).expanduser()
        if not resolved.is_absolute():
            resolved = self.base_dir / resolved
        return os.path.normpath(resolved)

    def string(self, mapping: dict, path: str, key: str) -> str:
        """A required non-empty string."""
        value = mapping[key]
        if not isinstance(value, str) or not value.strip():
            self.fail(join(path, key), "a non-empty string", typed(value), at=(mapping, key))
        return value

    def require(self, mapping: dict, path: str, key: str, expected: str) -> Any:
        """The value of a required key, or a "missing" error."""
        if key not in mapping:
            self.fail(
                join(path, key), expected, problem=f"missing: expected {expected}", at=mapping
            )
        return mapping[key]


def join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def plain(value: Any) -> Any:
    """Strip the line-tracking YAML containers back to plain dicts and lists."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def show(value: Any) -> str:
    """A value as the file would spell it, shortened."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(plain(value))
    return text if len(text) <= 80 else text[:77] + "..."


def typed(value: Any) -> str:
    """A value with its kind, for type errors: "a string 'abc'", "a mapping {...}"."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        kind = "a boolean"
    elif isinstance(value, int):
        kind = "an integer"
    elif isinstance(value, float):
        kind = "a number"
    elif isinstance(value, str):
        kind = "a string"
    elif isinstance(value, dict):
        kind = "a mapping"
    elif isinstance(value, list):
        kind = "a list"
    else:
        kind = article(type(value).__name__)
    return f"{kind} {show(value)}"


def article(noun: str) -> str:
    return f"an {noun}" if noun[:1].lower() in "aeiou" else f"a {noun}"
