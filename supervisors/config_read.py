"""Reading config files: YAML (keeping the line of every key, for error messages) and TOML."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import yaml

from supervisors.config_errors import ConfigError

YAML_SUFFIXES = (".yaml", ".yml")
TOML_SUFFIXES = (".toml",)

# --------------------------------------------------------------------------------- reading


def read_config_file(path: Path, file: str, error: type[ConfigError] = ConfigError) -> Any:
    """Parse a .yaml/.yml or .toml file; every problem raises `error` naming the file."""
    suffix = path.suffix.lower()
    if suffix not in YAML_SUFFIXES + TOML_SUFFIXES:
        raise error(file, "", "a .yaml, .yml or .toml file", f"a {suffix or 'suffix-less'} file")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise error(
            file, "", "a readable tree file", problem=f"cannot read the file: {exc.strerror or exc}"
        ) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(
            file, "", "UTF-8 text", problem=f"not UTF-8 text (byte {exc.start}: {exc.reason})"
        ) from None
    if suffix in TOML_SUFFIXES:
        return _parse_toml(text, file, error)
    return _parse_yaml(text, file, error)


def _parse_toml(text: str, file: str, error: type[ConfigError]) -> Any:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        match = re.search(r"\(at line (\d+), column (\d+)\)", message)
        line = int(match.group(1)) if match else None
        if match:
            message = message[: match.start()].rstrip() + f" at column {match.group(2)}"
        raise error(file, "", "valid TOML", line=line, problem=f"invalid TOML: {message}") from None
    return data or None  # a TOML file with nothing in it is an empty file, as in YAML


def _parse_yaml(text: str, file: str, error: type[ConfigError]) -> Any:
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = exc.problem or "cannot parse"
        if exc.context and exc.problem:
            problem = f"{exc.problem} ({exc.context})"
        if mark is not None:
            problem += f" at column {mark.column + 1}"
        raise error(file, "", "valid YAML", line=line, problem=f"invalid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise error(file, "", "valid YAML", problem=f"invalid YAML: {exc}") from None


class _Map(dict):
    """A YAML mapping that remembers the line of each key."""

    line: int | None = None
    lines: dict[Any, int]


class _Seq(list):
    """A YAML sequence that remembers the line of each item."""

    line: int | None = None
    lines: list[int]


class _Loader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys and records line numbers for error messages."""


def _construct_map(loader: _Loader, node: yaml.MappingNode) -> _Map:
    loader.flatten_mapping(node)
    result = _Map()
    result.line = node.start_mark.line + 1
    result.lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in result
        except TypeError:
            raise yaml.constructor.ConstructorError(
                "while reading a mapping",
                node.start_mark,
                f"found a key that cannot be a key ({type(key).__name__})",
                key_node.start_mark,
            ) from None
        if duplicate:
            raise yaml.constructor.ConstructorError(
                "while reading a mapping",
                node.start_mark,
                f"found duplicate key {key!r}",
                key_node.start_mark,
            )
        result[key] = loader.construct_object(value_node, deep=True)
        result.lines[key] = key_node.start_mark.line + 1
    return result


def _construct_seq(loader: _Loader, node: yaml.SequenceNode) -> _Seq:
    result = _Seq(loader.construct_object(child, deep=True) for child in node.value)
    result.line = node.start_mark.line + 1
    result.lines = [child.start_mark.line + 1 for child in node.value]
    return result


_Loader.add_constructor("tag:yaml.org,2002:map", _construct_map)
_Loader.add_constructor("tag:yaml.org,2002:seq", _construct_seq)


# ------------------------------------------------------------------------------- checking


def line_of(at: Any) -> int | None:
    """The line of `container[key]` for at=(container, key), or of the container itself."""
    if isinstance(at, tuple):
        container, key = at
        lines = getattr(container, "lines", None)
        if isinstance(lines, dict) and key in lines:
            return lines[key]
        if isinstance(lines, list) and isinstance(key, int) and 0 <= key < len(lines):
            return lines[key]
        return getattr(container, "line", None)
    return getattr(at, "line", None)
