"""Supervision-tree config files: read YAML or TOML into specs, check every key, start the root.

The schema (see docs/tree-files.md)::

    supervisor:                 # the root; `id` is optional here
      id: root
      strategy: one_for_one     # one_for_one | one_for_all | rest_for_one | simple_one_for_one
      intensity: 3
      period: 5s
      auto_shutdown: never
      children:
        - id: worker            # a Process subclass
          start: "mypkg.workers:Worker"
          args: [1, 2]
          kwargs: {queue: jobs}
        - id: redis             # an OS process
          command: [redis-server, --port, "6390"]
          env: {LANG: C}
          cwd: /srv/redis
        - id: inner             # a nested supervisor
          supervisor: {strategy: rest_for_one, children: [...]}

Every mistake raises TreeConfigError naming the file, the key path (written as
`supervisor.children[2].restart`) and what was expected. `start:` targets are imported while the
file is loaded, so a missing module or class is reported before anything starts.
"""

from __future__ import annotations

import difflib
import importlib
import math
import os
import re
import shlex
import tomllib
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import yaml

from supervisors.durations import parse_duration
from supervisors.osprocess import OsProcess
from supervisors.process import Process
from supervisors.specs import (
    AUTO_SHUTDOWNS,
    RESTARTS,
    SHUTDOWN_WORDS,
    STRATEGIES,
    ChildSpec,
    SupFlags,
)
from supervisors.supervisor import Supervisor

__all__ = [
    "TreeConfigError",
    "TreeSpec",
    "format_tree",
    "load_tree",
    "start_tree",
    "tree_from_mapping",
]

ROOT_ID = "root"
DEFAULT_GRACE = 5.0
YAML_SUFFIXES = (".yaml", ".yml")
TOML_SUFFIXES = (".toml",)

_TOP_KEYS = ("supervisor",)
_FLAG_KEYS = ("strategy", "intensity", "period", "auto_shutdown", "children")
_ROOT_KEYS = ("id", *_FLAG_KEYS)
_COMMON_CHILD_KEYS = ("id", "restart", "shutdown", "type", "significant")
_KIND_KEYS = {
    "start": ("start", "args", "kwargs"),
    "command": ("command", "env", "cwd", "log_file", "pid_file", "grace"),
    "supervisor": ("supervisor",),
}
_CHILD_KEYS = (*_COMMON_CHILD_KEYS, *(k for keys in _KIND_KEYS.values() for k in keys))
_KINDS = tuple(_KIND_KEYS)
_START_FORM = 'a "module:Class" string such as "mypkg.workers:Worker"'


class TreeConfigError(Exception):
    """A mistake in a tree file.

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
            ((self.file, self.key_path, self.expected, self.got), self.line, self.problem),
        )


def _rebuild_error(args: tuple, line: int | None, problem: str) -> TreeConfigError:
    return TreeConfigError(*args, line=line, problem=problem)


@dataclass(frozen=True)
class TreeSpec:
    """A loaded tree: the root's flags and children, its id, and the file it came from."""

    flags: SupFlags
    children: list[ChildSpec]
    id: Hashable = ROOT_ID
    file: Path | None = field(default=None, compare=False)


# ---------------------------------------------------------------------------------- public


def load_tree(path: str | os.PathLike[str]) -> TreeSpec:
    """Read a YAML (.yaml/.yml) or TOML (.toml) tree file into a TreeSpec.

    Raises TreeConfigError for any mistake, including a `start:` target that cannot be imported.
    Relative `cwd`, `log_file` and `pid_file` values are taken relative to the file's directory.
    """
    path = Path(path)
    file = str(path)
    data = _read(path, file)
    return tree_from_mapping(data, file=file, base_dir=path.resolve().parent)


def tree_from_mapping(
    data: Any, *, file: str = "<tree>", base_dir: str | os.PathLike[str] | None = None
) -> TreeSpec:
    """Check an already parsed tree (the mapping with the `supervisor` key) into a TreeSpec.

    `file` only names the source in errors; `base_dir` (default: the current directory) is what
    relative paths are resolved against.
    """
    ctx = _Ctx(file, Path(base_dir) if base_dir is not None else Path.cwd())
    if data is None:
        ctx.fail("", "a mapping with the root key 'supervisor'", "an empty file")
    if isinstance(data, dict) and not data:
        ctx.fail("", "a mapping with the root key 'supervisor'", "an empty mapping")
    if not isinstance(data, dict):
        ctx.fail("", "a mapping with the root key 'supervisor'", _typed(data))
    ctx.check_keys(data, "", _TOP_KEYS)
    if "supervisor" not in data:
        ctx.fail(
            "supervisor",
            "the root supervisor (a mapping with strategy, children, ...)",
            problem="missing: expected the root supervisor (a mapping with strategy, "
            "children, ...)",
            at=data,
        )
    root_id, flags, children = ctx.supervisor(
        data["supervisor"], "supervisor", (data, "supervisor"), names=()
    )
    return TreeSpec(flags=flags, children=children, id=root_id, file=Path(file))


def start_tree(path_or_spec: str | os.PathLike[str] | TreeSpec) -> Any:
    """Start the root supervisor of a tree file (or a loaded TreeSpec) and return its ActorRef.

    Returns once every child has started, as `Supervisor.start` does, and raises as it does if
    one fails. Raises TreeConfigError if the file is wrong.
    """
    if isinstance(path_or_spec, TreeSpec):
        spec = path_or_spec
    elif isinstance(path_or_spec, str | os.PathLike):
        spec = load_tree(path_or_spec)
    else:
        raise TypeError(f"start_tree takes a path or a TreeSpec; got {path_or_spec!r}")
    return Supervisor.start(spec.flags, spec.children, name=str(spec.id))


def format_tree(spec: TreeSpec) -> str:
    """A readable, indented rendering of a tree, one line per supervisor or child."""
    lines = [f"{spec.id}: supervisor, {_describe_flags(spec.flags)}"]
    _format_children(spec.children, "", lines)
    return "\n".join(lines)


# --------------------------------------------------------------------------------- reading


def _read(path: Path, file: str) -> Any:
    suffix = path.suffix.lower()
    if suffix not in YAML_SUFFIXES + TOML_SUFFIXES:
        raise TreeConfigError(
            file, "", "a .yaml, .yml or .toml file", f"a {suffix or 'suffix-less'} file"
        )
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TreeConfigError(
            file, "", "a readable tree file", problem=f"cannot read the file: {exc.strerror or exc}"
        ) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TreeConfigError(
            file, "", "UTF-8 text", problem=f"not UTF-8 text (byte {exc.start}: {exc.reason})"
        ) from None
    if suffix in TOML_SUFFIXES:
        return _parse_toml(text, file)
    return _parse_yaml(text, file)


def _parse_toml(text: str, file: str) -> Any:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        match = re.search(r"\(at line (\d+), column (\d+)\)", message)
        line = int(match.group(1)) if match else None
        if match:
            message = message[: match.start()].rstrip() + f" at column {match.group(2)}"
        raise TreeConfigError(
            file, "", "valid TOML", line=line, problem=f"invalid TOML: {message}"
        ) from None
    return data or None  # a TOML file with nothing in it is an empty file, as in YAML


def _parse_yaml(text: str, file: str) -> Any:
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
        raise TreeConfigError(
            file, "", "valid YAML", line=line, problem=f"invalid YAML: {problem}"
        ) from None
    except yaml.YAMLError as exc:
        raise TreeConfigError(file, "", "valid YAML", problem=f"invalid YAML: {exc}") from None


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


def _line_of(at: Any) -> int | None:
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


class _Ctx:
    """Checks one file; knows its name (for errors) and its directory (for relative paths)."""

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
        raise TreeConfigError(self.file, path, expected, got, line=_line_of(at), problem=problem)

    def check_keys(self, mapping: dict, path: str, allowed: tuple[str, ...]) -> None:
        for key in mapping:
            key_path = _join(path, key)
            if not isinstance(key, str):
                self.fail(key_path, "string keys", f"the key {_show(key)}", at=(mapping, key))
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

    # ------------------------------------------------------------------- supervisors

    def supervisor(
        self, value: Any, path: str, at: Any, *, names: tuple[str, ...]
    ) -> tuple[Hashable, SupFlags, list[ChildSpec]]:
        """Check a supervisor mapping. `names` are the ids from the root down to this
        supervisor; empty for the root, whose id is read here."""
        root = not names
        if not isinstance(value, dict):
            self.fail(
                path,
                "a supervisor mapping (strategy, intensity, period, children, ...)",
                _typed(value),
                at=at,
            )
        if not root and "id" in value:
            self.fail(
                _join(path, "id"),
                "the id on the child entry",
                at=(value, "id"),
                problem="a nested supervisor takes its id from its child entry "
                f"({path.rsplit('.', 1)[0]}.id); remove this key",
            )
        self.check_keys(value, path, _ROOT_KEYS if root else _FLAG_KEYS)
        sup_id: Hashable = ROOT_ID
        if "id" in value:
            sup_id = self.identifier(value, _join(path, "id"))
        if root:
            names = (str(sup_id),)
        strategy = self.choice(value, path, "strategy", STRATEGIES, "one_for_one")
        intensity = 1
        if "intensity" in value:
            intensity = value["intensity"]
            key_path = _join(path, "intensity")
            if isinstance(intensity, bool) or not isinstance(intensity, int):
                self.fail(key_path, "an integer >= 0", _typed(intensity), at=(value, "intensity"))
            if intensity < 0:
                self.fail(key_path, "an integer >= 0", _show(intensity), at=(value, "intensity"))
        period = 5.0
        if "period" in value:
            period = self.duration(value, path, "period", allow_zero=False)
        auto_shutdown = self.choice(value, path, "auto_shutdown", AUTO_SHUTDOWNS, "never")
        if strategy == "simple_one_for_one" and auto_shutdown != "never":
            self.fail(
                _join(path, "auto_shutdown"),
                "never with strategy simple_one_for_one",
                _show(auto_shutdown),
                at=(value, "auto_shutdown"),
            )
        try:
            flags = SupFlags(
                strategy=strategy, intensity=intensity, period=period, auto_shutdown=auto_shutdown
            )
        except (TypeError, ValueError) as exc:
            key = _field_in(str(exc), ("strategy", "intensity", "period", "auto_shutdown"))
            self.fail(
                _join(path, key) if key else path, str(exc), at=(value, key), problem=str(exc)
            )
        children = self.children(value, path, flags, names)
        return sup_id, flags, children

    def children(
        self, sup: dict, path: str, flags: SupFlags, names: tuple[str, ...]
    ) -> list[ChildSpec]:
        key_path = _join(path, "children")
        items = sup.get("children", [])
        if not isinstance(items, list):
            self.fail(
                key_path,
                "a list of child entries (in TOML: [[...children]] tables)",
                _typed(items),
                at=(sup, "children"),
            )
        specs: list[ChildSpec] = []
        seen: dict[Hashable, int] = {}
        for index, item in enumerate(items):
            child_path = f"{key_path}[{index}]"
            spec = self.child(item, child_path, (items, index), flags, names)
            if spec.id in seen:
                self.fail(
                    _join(child_path, "id"),
                    "an id unique among its siblings",
                    f"{spec.id!r}, already the id of {key_path}[{seen[spec.id]}]",
                    at=(item, "id"),
                )
            seen[spec.id] = index
            specs.append(spec)
        if flags.strategy == "simple_one_for_one" and len(specs) != 1:
            self.fail(
                key_path,
                "exactly one child (the template start_child uses) with strategy simple_one_for_one",
                f"{len(specs)} children",
                at=(sup, "children"),
            )
        return specs

    # ------------------------------------------------------------------------ children

    def child(
        self, item: Any, path: str, at: Any, flags: SupFlags, names: tuple[str, ...]
    ) -> ChildSpec:
        if not isinstance(item, dict):
            self.fail(
                path,
                "a child mapping with id and one of start, command or supervisor",
                _typed(item),
                at=at,
            )
        self.check_keys(item, path, _CHILD_KEYS)
        if "id" not in item:
            self.fail(
                _join(path, "id"),
                "a non-empty string naming the child",
                at=item,
                problem="missing: every child needs an id (a non-empty string)",
            )
        child_id = self.identifier(item, _join(path, "id"))
        kinds = [kind for kind in _KINDS if kind in item]
        if len(kinds) != 1:
            got = "none of them" if not kinds else " and ".join(kinds)
            self.fail(
                path,
                "exactly one of start (a Process class), command (an OS process) or "
                "supervisor (a nested supervisor)",
                got,
                at=item,
            )
        kind = kinds[0]
        for key in item:
            if key not in _COMMON_CHILD_KEYS and key not in _KIND_KEYS[kind]:
                owner = next(k for k, keys in _KIND_KEYS.items() if key in keys)
                self.fail(
                    _join(path, key),
                    f"only keys that go with {kind}:",
                    at=(item, key),
                    problem=f"{key!r} goes with {owner}:, but this child has {kind}: "
                    f"(its keys are {', '.join(_COMMON_CHILD_KEYS + _KIND_KEYS[kind])})",
                )
        restart = self.choice(item, path, "restart", RESTARTS, "permanent")
        default_type = "supervisor" if kind == "supervisor" else "worker"
        allowed_types = {
            "start": ("worker", "supervisor"),
            "command": ("worker",),
            "supervisor": ("supervisor",),
        }[kind]
        child_type = self.choice(item, path, "type", allowed_types, default_type)
        shutdown = self.shutdown(item, path)
        significant = False
        if "significant" in item:
            significant = item["significant"]
            key_path = _join(path, "significant")
            if not isinstance(significant, bool):
                self.fail(key_path, "true or false", _typed(significant), at=(item, "significant"))
            if significant and restart == "permanent":
                self.fail(
                    key_path,
                    "false for a permanent child",
                    "true",
                    at=(item, "significant"),
                    problem="bad combination: a significant child cannot be permanent; "
                    "expected restart: transient or temporary, or significant: false",
                )
            if significant and flags.auto_shutdown == "never":
                self.fail(
                    key_path,
                    "false under auto_shutdown: never",
                    "true",
                    at=(item, "significant"),
                    problem="bad combination: significant: true under a supervisor with "
                    "auto_shutdown: never; expected the supervisor's auto_shutdown to be "
                    "any_significant or all_significant, or significant: false",
                )
        if kind == "start":
            start = self.start_child(item, path)
        elif kind == "command":
            start = self.command_child(item, path, (*names, child_id), shutdown)
        else:
            _, sub_flags, sub_children = self.supervisor(
                item["supervisor"],
                _join(path, "supervisor"),
                (item, "supervisor"),
                names=(*names, child_id),
            )
            start = (Supervisor, (sub_flags, sub_children), {})
        try:
            return ChildSpec(
                child_id,
                start,
                restart=restart,
                shutdown=shutdown,
                type=child_type,
                significant=significant,
            )
        except (TypeError, ValueError) as exc:
            message = str(exc)
            prefix = f"child {child_id!r}: "
            message = message.removeprefix(prefix)
            key = _field_in(message, ("restart", "shutdown", "type", "significant", "start"))
            if key == "start":
                key = kind
            self.fail(_join(path, key) if key else path, message, at=(item, key), problem=message)

    def start_child(self, item: dict, path: str) -> tuple:
        cls = self.import_target(item, _join(path, "start"))
        args: list = []
        if "args" in item:
            args = item["args"]
            if not isinstance(args, list):
                self.fail(
                    _join(path, "args"),
                    "a list of positional arguments, such as [1, 2]",
                    _typed(args),
                    at=(item, "args"),
                )
        kwargs: dict = {}
        if "kwargs" in item:
            kwargs = item["kwargs"]
            key_path = _join(path, "kwargs")
            if not isinstance(kwargs, dict):
                self.fail(
                    key_path,
                    "a mapping of keyword arguments, such as {queue: jobs}",
                    _typed(kwargs),
                    at=(item, "kwargs"),
                )
            for key in kwargs:
                if not isinstance(key, str) or not key.isidentifier():
                    self.fail(
                        _join(key_path, key),
                        "keyword names that are Python identifiers",
                        _show(key),
                        at=(kwargs, key),
                    )
        return (cls, tuple(_plain(a) for a in args), {k: _plain(v) for k, v in kwargs.items()})

    def import_target(self, item: dict, path: str) -> type:
        text = item["start"]
        at = (item, "start")
        if not isinstance(text, str):
            self.fail(path, _START_FORM, _typed(text), at=at)
        module_name, sep, attr = text.strip().partition(":")
        if not sep or not module_name or not attr or ":" in attr:
            self.fail(path, _START_FORM, _show(text), at=at)
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            self.fail(
                path, "an importable module", f"{text!r} ({type(exc).__name__}: {exc})", at=at
            )
        except Exception as exc:
            self.fail(
                path,
                "an importable module",
                at=at,
                problem=f"importing {module_name!r} for {text!r} raised "
                f"{type(exc).__name__}: {exc}",
            )
        target: Any = module
        walked = module_name
        for part in attr.split("."):
            if not hasattr(target, part):
                names = [n for n in dir(target) if not n.startswith("_")]
                close = difflib.get_close_matches(part, names, n=1, cutoff=0.6)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                self.fail(
                    path,
                    f"{walked!r} to define {part!r}",
                    at=at,
                    problem=f"{walked!r} has no attribute {part!r}{hint}; expected {_START_FORM} "
                    "naming a supervisors.Process subclass",
                )
            target = getattr(target, part)
            walked = f"{walked}:{part}" if walked == module_name else f"{walked}.{part}"
        if not isinstance(target, type):
            self.fail(
                path,
                "a supervisors.Process subclass",
                f"{text!r}, which is {_article(type(target).__name__)}",
                at=at,
            )
        if not issubclass(target, Process):
            self.fail(
                path,
                "a supervisors.Process subclass",
                f"{text!r}, a class that does not derive from supervisors.Process",
                at=at,
            )
        return target

    def command_child(self, item: dict, path: str, names: tuple[str, ...], shutdown: Any) -> tuple:
        """An OsProcess start triple. Its name (which names its default log and pid files) is
        the ids from the root down, such as "hello.pipeline.web", so that children with the
        same id in different parts of the tree do not share files."""
        key_path = _join(path, "command")
        command = item["command"]
        at = (item, "command")
        if isinstance(command, str):
            self.fail(
                key_path,
                'a list of strings, such as [redis-server, --port, "6390"]',
                f"a string {command!r} (split it into a list)",
                at=at,
            )
        if not isinstance(command, list) or not command:
            self.fail(
                key_path,
                'a non-empty list of strings, such as [redis-server, --port, "6390"]',
                _typed(command),
                at=at,
            )
        for index, part in enumerate(command):
            if not isinstance(part, str):
                self.fail(
                    f"{key_path}[{index}]",
                    'a string (quote numbers and booleans: "6390", "true")',
                    _typed(part),
                    at=(command, index),
                )
        env = None
        if "env" in item:
            env = item["env"]
            env_path = _join(path, "env")
            if not isinstance(env, dict):
                self.fail(
                    env_path,
                    "a mapping of environment variables, such as {LANG: C}",
                    _typed(env),
                    at=(item, "env"),
                )
            for name, val in env.items():
                if not isinstance(name, str) or not name or "=" in name:
                    self.fail(
                        _join(env_path, name),
                        "variable names that are non-empty strings without '='",
                        _show(name),
                        at=(env, name),
                    )
                if not isinstance(val, str):
                    self.fail(
                        _join(env_path, name),
                        'a string (quote numbers and booleans: "1")',
                        _typed(val),
                        at=(env, name),
                    )
            env = dict(env)
        cwd = self.path_value(item, path, "cwd")
        log_file = self.path_value(item, path, "log_file")
        pid_file = self.path_value(item, path, "pid_file")
        if "grace" in item:
            grace = self.duration(item, path, "grace")
            if isinstance(shutdown, float) and grace > shutdown:
                self.fail(
                    _join(path, "grace"),
                    at=(item, "grace"),
                    expected=f"at most the child's shutdown time ({_seconds(shutdown)})",
                    got=_show(item["grace"]),
                    problem=f"bad combination: grace {_show(item['grace'])} is longer than "
                    f"shutdown {_seconds(shutdown)}, so the supervisor would kill the process "
                    "before its grace time is up; expected a grace of at most the shutdown "
                    "(or a longer shutdown)",
                )
        elif isinstance(shutdown, float):
            grace = shutdown
        else:
            grace = DEFAULT_GRACE
        kwargs = {
            "env": env,
            "cwd": cwd,
            "name": _process_name(names),
            "log_file": log_file,
            "pid_file": pid_file,
            "grace": grace,
        }
        return (OsProcess, (list(command),), kwargs)

    # -------------------------------------------------------------------------- values

    def identifier(self, mapping: dict, path: str) -> str:
        value = mapping["id"]
        if not isinstance(value, str) or not value.strip():
            self.fail(path, "a non-empty string", _typed(value), at=(mapping, "id"))
        return value

    def choice(
        self, mapping: dict, path: str, key: str, allowed: tuple[str, ...], default: str
    ) -> Any:
        if key not in mapping:
            return default
        value = mapping[key]
        if value not in allowed or not isinstance(value, str):
            self.fail(
                _join(path, key), f"one of {', '.join(allowed)}", _show(value), at=(mapping, key)
            )
        return value

    def duration(self, mapping: dict, path: str, key: str, *, allow_zero: bool = True) -> float:
        value = mapping[key]
        try:
            return parse_duration(value, allow_zero=allow_zero)
        except ValueError:
            what = "seconds > 0" if not allow_zero else "seconds >= 0"
            self.fail(
                _join(path, key),
                f"a duration: {what} as a number, or a string such as '500ms', '5s', '2m'",
                _show(value),
                at=(mapping, key),
            )

    def shutdown(self, item: dict, path: str) -> float | str | None:
        if "shutdown" not in item:
            return None
        value = item["shutdown"]
        if value in SHUTDOWN_WORDS and isinstance(value, str):
            return value
        try:
            return parse_duration(value)
        except ValueError:
            self.fail(
                _join(path, "shutdown"),
                "seconds >= 0 (a number, or '500ms', '5s', '2m'), brutal_kill or infinity",
                _show(value),
                at=(item, "shutdown"),
            )

    def path_value(self, item: dict, path: str, key: str) -> str | None:
        if key not in item:
            return None
        value = item[key]
        if not isinstance(value, str) or not value:
            self.fail(_join(path, key), "a non-empty path string", _typed(value), at=(item, key))
        resolved = Path(value).expanduser()
        if not resolved.is_absolute():
            resolved = self.base_dir / resolved
        return os.path.normpath(resolved)


# ------------------------------------------------------------------------------- helpers


def _process_name(names: tuple[str, ...]) -> str:
    """A file-name-safe OsProcess name from the ids on the path from the root."""
    return ".".join(re.sub(r"[^A-Za-z0-9_.-]", "_", name) for name in names).lstrip(".") or "cmd"


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _field_in(message: str, fields: tuple[str, ...]) -> str | None:
    """The field name mentioned first in a SupFlags/ChildSpec error message."""
    best: tuple[int, str] | None = None
    for name in fields:
        match = re.search(rf"\b{name}\b", message)
        if match and (best is None or match.start() < best[0]):
            best = (match.start(), name)
    return best[1] if best else None


def _plain(value: Any) -> Any:
    """Strip the line-tracking YAML containers back to plain dicts and lists."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _show(value: Any) -> str:
    """A value as the file would spell it, shortened."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(_plain(value))
    return text if len(text) <= 80 else text[:77] + "..."


def _typed(value: Any) -> str:
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
        kind = _article(type(value).__name__)
    return f"{kind} {_show(value)}"


def _article(noun: str) -> str:
    return f"an {noun}" if noun[:1].lower() in "aeiou" else f"a {noun}"


# ------------------------------------------------------------------------------ rendering


def _seconds(value: float) -> str:
    if value > 0 and value < 1:
        return f"{value * 1000:g}ms"
    if value >= 60 and value % 60 == 0:
        return f"{value / 60:g}m"
    return f"{value:g}s"


def _describe_flags(flags: SupFlags) -> str:
    parts = [flags.strategy]
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
        shutdown = spec.shutdown if isinstance(spec.shutdown, str) else _seconds(spec.shutdown)
        props = [spec.type, spec.restart, f"shutdown {shutdown}"]
        if spec.significant:
            props.append("significant")
        branch = "└── " if last else "├── "
        lines.append(f"{indent}{branch}{spec.id} ({', '.join(props)}): {what}")
        if grandchildren is not None:
            _format_children(grandchildren, indent + ("    " if last else "│   "), lines)
