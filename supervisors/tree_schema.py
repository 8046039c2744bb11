"""Checking a parsed tree key by key and building SupFlags and ChildSpecs from it."""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import re
import shutil
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from supervisors.config_check import ConfigChecker, article, join, plain, show, typed
from supervisors.durations import parse_duration
from supervisors.osprocess import OsProcess
from supervisors.process import Process
from supervisors.specs import (
    AUTO_SHUTDOWNS,
    RESTARTS,
    STRATEGIES,
    ChildSpec,
    Shutdown,
    SupFlags,
)
from supervisors.supervisor import Supervisor
from supervisors.tree_errors import TreeConfigError
from supervisors.tree_format import _seconds

ROOT_ID = "root"
DEFAULT_GRACE = 5.0

_TOP_KEYS = ("supervisor",)
_FLAG_KEYS = ("strategy", "intensity", "period", "auto_shutdown", "children")
_ROOT_KEYS = ("id", *_FLAG_KEYS)
# singleton, singleton_lease and placement: honoured by a rabbitry node (rabbitry.singleton)
_COMMON_CHILD_KEYS = (
    "id",
    "restart",
    "shutdown",
    "type",
    "significant",
    "singleton",
    "singleton_lease",
    "placement",
)
_KIND_KEYS = {
    "start": ("start", "args", "kwargs"),
    "command": ("command", "env", "cwd", "log_file", "pid_file", "grace"),
    "supervisor": ("supervisor",),
}
_CHILD_KEYS = (*_COMMON_CHILD_KEYS, *(k for keys in _KIND_KEYS.values() for k in keys))
_KINDS = tuple(_KIND_KEYS)
_START_FORM = 'a "module:Class" string such as "mypkg.workers:Worker"'


@dataclass(frozen=True)
class TreeSpec:
    """A loaded tree: the root's flags and children, its id, and the file it came from."""

    flags: SupFlags
    children: list[ChildSpec]
    id: Hashable = ROOT_ID
    file: Path | None = field(default=None, compare=False)


class _Ctx(ConfigChecker):
    """Checks a tree file; see ConfigChecker."""

    error = TreeConfigError
    check_files = False  # `tree check`: also what starting would find missing (see below)

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
                typed(value),
                at=at,
            )
        if not root and "id" in value:
            self.fail(
                join(path, "id"),
                "the id on the child entry",
                at=(value, "id"),
                problem="a nested supervisor takes its id from its child entry "
                f"({path.rsplit('.', 1)[0]}.id); remove this key",
            )
        self.check_keys(value, path, _ROOT_KEYS if root else _FLAG_KEYS)
        sup_id: Hashable = ROOT_ID
        if "id" in value:
            sup_id = self.identifier(value, join(path, "id"))
        if root:
            names = (str(sup_id),)
        strategy = self.choice(value, path, "strategy", STRATEGIES, "one_for_one")
        intensity = 1
        if "intensity" in value:
            intensity = value["intensity"]
            key_path = join(path, "intensity")
            if isinstance(intensity, bool) or not isinstance(intensity, int):
                self.fail(key_path, "an integer >= 0", typed(intensity), at=(value, "intensity"))
            if intensity < 0:
                self.fail(key_path, "an integer >= 0", show(intensity), at=(value, "intensity"))
        period = 5.0
        if "period" in value:
            period = self.duration(value, path, "period", allow_zero=False)
        auto_shutdown = self.choice(value, path, "auto_shutdown", AUTO_SHUTDOWNS, "never")
        if strategy == "simple_one_for_one" and auto_shutdown != "never":
            self.fail(
                join(path, "auto_shutdown"),
                "never with strategy simple_one_for_one",
                show(auto_shutdown),
                at=(value, "auto_shutdown"),
            )
        try:
            flags = SupFlags(
                strategy=strategy, intensity=intensity, period=period, auto_shutdown=auto_shutdown
            )
        except (TypeError, ValueError) as exc:
            key = _field_in(str(exc), ("strategy", "intensity", "period", "auto_shutdown"))
            self.fail(join(path, key) if key else path, str(exc), at=(value, key), problem=str(exc))
        children = self.children(value, path, flags, names)
        return sup_id, flags, children

    def children(
        self, sup: dict, path: str, flags: SupFlags, names: tuple[str, ...]
    ) -> list[ChildSpec]:
        key_path = join(path, "children")
        items = sup.get("children", [])
        if not isinstance(items, list):
            self.fail(
                key_path,
                "a list of child entries (in TOML: [[...children]] tables)",
                typed(items),
                at=(sup, "children"),
            )
        specs: list[ChildSpec] = []
        seen: dict[Hashable, int] = {}
        for index, item in enumerate(items):
            child_path = f"{key_path}[{index}]"
            spec = self.child(item, child_path, (items, index), flags, names)
            if spec.id in seen:
                self.fail(
                    join(child_path, "id"),
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
                typed(item),
                at=at,
            )
        self.check_keys(item, path, _CHILD_KEYS)
        if "id" not in item:
            self.fail(
                join(path, "id"),
                "a non-empty string naming the child",
                at=item,
                problem="missing: every child needs an id (a non-empty string)",
            )
        child_id = self.identifier(item, join(path, "id"))
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
                    join(path, key),
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
            key_path = join(path, "significant")
            if not isinstance(significant, bool):
                self.fail(key_path, "true or false", typed(significant), at=(item, "significant"))
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
            start = self.start_child(item, path, template=flags.strategy == "simple_one_for_one")
        elif kind == "command":
            start = self.command_child(item, path, (*names, child_id), shutdown)
        else:
            _, sub_flags, sub_children = self.supervisor(
                item["supervisor"],
                join(path, "supervisor"),
                (item, "supervisor"),
                names=(*names, child_id),
            )
            start = (Supervisor, (sub_flags, sub_children), {})
        singleton = self.singleton_options(item, path)
        try:
            return ChildSpec(
                child_id,
                start,
                restart=restart,
                shutdown=shutdown,
                type=child_type,
                significant=significant,
                **singleton,
            )
        except (TypeError, ValueError) as exc:
            message = str(exc)
            prefix = f"child {child_id!r}: "
            message = message.removeprefix(prefix)
            key = _field_in(
                message,
                (
                    "restart",
                    "shutdown",
                    "type",
                    "significant",
                    "start",
                    "singleton_lease",
                    "placement",
                    "singleton",
                ),
            )
            if key == "start":
                key = kind
            self.fail(join(path, key) if key else path, message, at=(item, key), problem=message)

    def singleton_options(self, item: dict, path: str) -> dict[str, Any]:
        """singleton: true, with its optional singleton_lease (a duration) and placement (an
        ordered list of node names), as ChildSpec takes them."""
        if not any(key in item for key in ("singleton", "singleton_lease", "placement")):
            return {}
        singleton = item.get("singleton", False)
        if not isinstance(singleton, bool):
            self.fail(
                join(path, "singleton"), "true or false", typed(singleton), at=(item, "singleton")
            )
        options: dict[str, Any] = {"singleton": singleton}
        for key in ("singleton_lease", "placement"):
            if key in item and not singleton:
                self.fail(
                    join(path, key),
                    "singleton: true beside it",
                    at=(item, key),
                    problem=f"bad combination: {key} goes with singleton: true",
                )
        if "singleton_lease" in item:
            value = item["singleton_lease"]
            try:
                lease = parse_duration(value)
            except ValueError:
                lease = -1.0
            if not lease > 0:
                self.fail(
                    join(path, "singleton_lease"),
                    "seconds > 0 (a number, or '500ms', '5s', '2m')",
                    show(value),
                    at=(item, "singleton_lease"),
                )
            options["singleton_lease"] = lease
        if "placement" in item:
            nodes = item["placement"]
            if not isinstance(nodes, list) or not all(
                isinstance(n, str) and "@" in n for n in nodes
            ):
                self.fail(
                    join(path, "placement"),
                    "a list of node names such as [a@host1, b@host2], most preferred first",
                    typed(nodes),
                    at=(item, "placement"),
                )
            options["placement"] = tuple(nodes)
        return options

    def start_child(self, item: dict, path: str, *, template: bool = False) -> tuple:
        cls = self.import_target(item, join(path, "start"))
        args: list = []
        if "args" in item:
            args = item["args"]
            if not isinstance(args, list):
                self.fail(
                    join(path, "args"),
                    "a list of positional arguments, such as [1, 2]",
                    typed(args),
                    at=(item, "args"),
                )
        kwargs: dict = {}
        if "kwargs" in item:
            kwargs = item["kwargs"]
            key_path = join(path, "kwargs")
            if not isinstance(kwargs, dict):
                self.fail(
                    key_path,
                    "a mapping of keyword arguments, such as {queue: jobs}",
                    typed(kwargs),
                    at=(item, "kwargs"),
                )
            for key in kwargs:
                if not isinstance(key, str) or not key.isidentifier():
                    self.fail(
                        join(key_path, key),
                        "keyword names that are Python identifiers",
                        show(key),
                        at=(kwargs, key),
                    )
        self.check_signature(cls, args, kwargs, item, path, template=template)
        return (cls, tuple(plain(a) for a in args), {k: plain(v) for k, v in kwargs.items()})

    def check_signature(
        self, cls: type, args: list, kwargs: dict, item: dict, path: str, *, template: bool
    ) -> None:
        """args and kwargs must fit the class's __init__, so that a misspelt keyword is a
        config error at load time (`tree check` and `node start` exit 2), not a TypeError
        inside a StartChildError when the tree starts. A simple_one_for_one template gets
        more args from start_child, so only what it has is checked there."""
        try:
            signature = inspect.signature(cls)
        except (TypeError, ValueError):  # a C class or an odd metaclass: nothing to check
            return
        signature = signature.replace(  # shown in messages: names and defaults are enough
            parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
            return_annotation=inspect.Signature.empty,
        )
        params = signature.parameters.values()
        named = [
            p.name
            for p in params
            if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        ]
        takes_any = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params)
        for key in kwargs:
            if key not in named and not takes_any:
                close = difflib.get_close_matches(key, named, n=1, cutoff=0.6)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                expected = f"one of {', '.join(named)}" if named else "no keyword arguments"
                self.fail(
                    join(join(path, "kwargs"), key),
                    expected,
                    at=(kwargs, key),
                    problem=f"{cls.__name__}() takes no keyword argument {key!r}{hint}; "
                    f"expected {expected} ({cls.__name__}{signature})",
                )
        try:
            (signature.bind_partial if template else signature.bind)(*args, **kwargs)
        except TypeError as exc:
            key = "args" if "args" in item or "kwargs" not in item else "kwargs"
            self.fail(
                join(path, key),
                f"arguments that fit {cls.__name__}{signature}",
                at=(item, key) if key in item else item,
                problem=f"{cls.__name__}{signature} cannot take these arguments: {exc}",
            )

    def import_target(self, item: dict, path: str) -> type:
        text = item["start"]
        at = (item, "start")
        if not isinstance(text, str):
            self.fail(path, _START_FORM, typed(text), at=at)
        module_name, sep, attr = text.strip().partition(":")
        if not sep or not module_name or not attr or ":" in attr:
            self.fail(path, _START_FORM, show(text), at=at)
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
                f"{text!r}, which is {article(type(target).__name__)}",
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
        key_path = join(path, "command")
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
                typed(command),
                at=at,
            )
        for index, part in enumerate(command):
            if not isinstance(part, str):
                self.fail(
                    f"{key_path}[{index}]",
                    'a string (quote numbers and booleans: "6390", "true")',
                    typed(part),
                    at=(command, index),
                )
        env = None
        if "env" in item:
            env = item["env"]
            env_path = join(path, "env")
            if not isinstance(env, dict):
                self.fail(
                    env_path,
                    "a mapping of environment variables, such as {LANG: C}",
                    typed(env),
                    at=(item, "env"),
                )
            for name, val in env.items():
                if not isinstance(name, str) or not name or "=" in name:
                    self.fail(
                        join(env_path, name),
                        "variable names that are non-empty strings without '='",
                        show(name),
                        at=(env, name),
                    )
                if not isinstance(val, str):
                    self.fail(
                        join(env_path, name),
                        'a string (quote numbers and booleans: "1")',
                        typed(val),
                        at=(env, name),
                    )
            env = dict(env)
        cwd = self.path_value(item, path, "cwd")
        if self.check_files:
            self.check_command_files(item, path, command, env, cwd)
        log_file = self.path_value(item, path, "log_file")
        pid_file = self.path_value(item, path, "pid_file")
        if "grace" in item:
            grace = self.duration(item, path, "grace")
            if isinstance(shutdown, float) and grace > shutdown:
                self.fail(
                    join(path, "grace"),
                    at=(item, "grace"),
                    expected=f"at most the child's shutdown time ({_seconds(shutdown)})",
                    got=show(item["grace"]),
                    problem=f"bad combination: grace {show(item['grace'])} is longer than "
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

    def check_command_files(
        self, item: dict, path: str, command: list, env: dict | None, cwd: str | None
    ) -> None:
        """What `tree run` would find missing when it starts the command (`tree check`
        only): the cwd must be a directory, and the program must be on PATH (the child's
        env PATH, else ours) or, given as a path, an executable file (relative to cwd)."""
        if cwd is not None and not os.path.isdir(cwd):
            self.fail(
                join(path, "cwd"),
                "an existing directory",
                at=(item, "cwd"),
                problem=f"{cwd} is not a directory; expected an existing directory "
                "(relative paths are taken from the tree file's directory)",
            )
        program = command[0]
        if os.sep in program:
            full = os.path.join(cwd or os.getcwd(), program)
            if not (os.path.isfile(full) and os.access(full, os.X_OK)):
                self.fail(
                    f"{join(path, 'command')}[0]",
                    "an executable file",
                    at=(command, 0),
                    problem=f"{full} is not an executable file",
                )
            return
        search = (env or {}).get("PATH", os.environ.get("PATH", os.defpath))
        if shutil.which(program, path=search) is None:
            self.fail(
                f"{join(path, 'command')}[0]",
                "a program on PATH",
                at=(command, 0),
                problem=f"{program!r} is not found on PATH; expected a program on PATH "
                "(the child's env PATH, else rabbitry's), or a path to one",
            )

    # -------------------------------------------------------------------------- values

    def identifier(self, mapping: dict, path: str) -> str:
        value = mapping["id"]
        if not isinstance(value, str) or not value.strip():
            self.fail(path, "a non-empty string", typed(value), at=(mapping, "id"))
        return value

    def shutdown(self, item: dict, path: str) -> Shutdown | None:
        if "shutdown" not in item:
            return None
        value = item["shutdown"]
        match value:
            case "brutal_kill" | "infinity":
                return value
        try:
            return parse_duration(value)
        except ValueError:
            self.fail(
                join(path, "shutdown"),
                "seconds >= 0 (a number, or '500ms', '5s', '2m'), brutal_kill or infinity",
                show(value),
                at=(item, "shutdown"),
            )


# ------------------------------------------------------------------------------- helpers


def _process_name(names: tuple[str, ...]) -> str:
    """A file-name-safe OsProcess name from the ids on the path from the root."""
    return ".".join(re.sub(r"[^A-Za-z0-9_.-]", "_", name) for name in names).lstrip(".") or "cmd"


def _field_in(message: str, fields: tuple[str, ...]) -> str | None:
    """The field name mentioned first in a SupFlags/ChildSpec error message."""
    best: tuple[int, str] | None = None
    for name in fields:
        match = re.search(rf"\b{name}\b", message)
        if match and (best is None or match.start() < best[0]):
            best = (match.start(), name)
    return best[1] if best else None


# ------------------------------------------------------------------------------ rendering
