"""Tree files: YAML and TOML into specs, every mistake as a TreeConfigError, and real trees."""

from __future__ import annotations

import os
import pickle
import textwrap
from pathlib import Path
from typing import Any

import pytest

from supervisors import ChildSpec, Process, SupFlags
from supervisors import tree_schema as tree_module
from supervisors.osprocess import OsProcess
from supervisors.supervisor import Supervisor
from supervisors.tree import (
    TreeConfigError,
    TreeSpec,
    format_tree,
    load_tree,
    start_tree,
    tree_from_mapping,
)
from tests.supervisors.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
HERE = __name__  # the module path that `start:` targets in these tests name


# ---------------------------------------------------------------------- targets for start:


class Sleeper(Process):
    """Does nothing; answers "args" with what it was started with."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self.args = args
        self.kwargs = kwargs

    def on_receive(self, message: Any) -> Any:
        if message == "args":
            return (self.args, self.kwargs)
        return None


class FailsToStart(Process):
    def on_start(self) -> None:
        raise RuntimeError("no thanks")


class NotAProcess:
    pass


def not_a_class() -> None:
    pass


# -------------------------------------------------------------------------------- helpers


def write(directory: Path, text: str, name: str = "app-tree.yaml") -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def load_error(directory: Path, text: str, name: str = "app-tree.yaml") -> TreeConfigError:
    path = write(directory, text, name)
    with pytest.raises(TreeConfigError) as info:
        load_tree(path)
    error = info.value
    assert error.file == str(path)
    assert str(error).startswith(f"{path}: ")
    return error


def one_child(child: str, *, flags: str = "") -> str:
    """A tree whose root has `flags` and the single child given as YAML lines."""
    body = textwrap.indent(textwrap.dedent(child).strip("\n"), " " * 6)
    return f"supervisor:\n{textwrap.indent(textwrap.dedent(flags).strip(), '  ')}\n  children:\n    -\n{body}\n"


def child_error(tmp_path: Path, child: str, *, flags: str = "") -> TreeConfigError:
    return load_error(tmp_path, one_child(child, flags=flags))


# ------------------------------------------------------------------------------- parsing


def test_the_message_names_file_key_path_expected_and_got(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    write(
        tmp_path,
        f"""
        supervisor:
          children:
            - {{id: a, start: "{HERE}:Sleeper"}}
            - {{id: b, start: "{HERE}:Sleeper"}}
            - id: c
              start: "{HERE}:Sleeper"
              restart: sometimes
        """,
    )
    with pytest.raises(TreeConfigError) as info:
        load_tree("app-tree.yaml")
    error = info.value
    assert str(error) == (
        "app-tree.yaml: supervisor.children[2].restart: expected one of permanent, transient, "
        "temporary; got 'sometimes' (line 7)"
    )
    assert error.file == "app-tree.yaml"
    assert error.key_path == "supervisor.children[2].restart"
    assert error.expected == "one of permanent, transient, temporary"
    assert error.got == "'sometimes'"
    assert error.line == 7


def test_minimal_tree_gets_otp_defaults(tmp_path: Path) -> None:
    spec = load_tree(write(tmp_path, "supervisor: {children: []}\n"))
    assert spec == TreeSpec(flags=SupFlags(), children=[], id="root")
    assert spec.file == tmp_path / "app-tree.yaml"
    assert load_tree(write(tmp_path, "supervisor: {}\n")).children == []


def test_start_child_becomes_a_child_spec(tmp_path: Path) -> None:
    spec = load_tree(
        write(
            tmp_path,
            f"""
            supervisor:
              id: top
              strategy: rest_for_one
              intensity: 4
              period: 2m
              auto_shutdown: any_significant
              children:
                - id: worker
                  start: "{HERE}:Sleeper"
                  args: [1, [2, 3], {{x: 4}}]
                  kwargs: {{queue: jobs, limits: {{max: 5}}}}
                  restart: transient
                  shutdown: 500ms
                  type: worker
                  significant: true
                - id: plain
                  start: "{HERE}:Sleeper"
            """,
        )
    )
    assert spec.id == "top"
    assert spec.flags == SupFlags("rest_for_one", 4, 120.0, "any_significant")
    assert spec.children == [
        ChildSpec(
            "worker",
            (Sleeper, (1, [2, 3], {"x": 4}), {"queue": "jobs", "limits": {"max": 5}}),
            restart="transient",
            shutdown=0.5,
            type="worker",
            significant=True,
        ),
        ChildSpec("plain", Sleeper),
    ]
    # Plain containers, not the line-tracking ones the YAML loader uses internally.
    args = spec.children[0].start[1]
    assert type(args[1]) is list and type(args[2]) is dict


@pytest.mark.parametrize(
    ("written", "seconds"),
    [("3", 3.0), ("2.5", 2.5), ('"500ms"', 0.5), ('"5s"', 5.0), ('"2m"', 120.0), ('"1h"', 3600.0)],
)
def test_durations(tmp_path: Path, written: str, seconds: float) -> None:
    spec = load_tree(
        write(
            tmp_path,
            f"""
            supervisor:
              period: {written}
              children:
                - {{id: w, start: "{HERE}:Sleeper", shutdown: {written}}}
            """,
        )
    )
    assert spec.flags.period == seconds
    assert spec.children[0].shutdown == seconds


@pytest.mark.parametrize("word", ["brutal_kill", "infinity"])
def test_shutdown_words(tmp_path: Path, word: str) -> None:
    path = write(tmp_path, one_child(f'{{id: w, start: "{HERE}:Sleeper", shutdown: {word}}}'))
    assert load_tree(path).children[0].shutdown == word


def test_shutdown_defaults_follow_otp(tmp_path: Path) -> None:
    spec = load_tree(
        write(
            tmp_path,
            f"""
            supervisor:
              children:
                - {{id: w, start: "{HERE}:Sleeper"}}
                - {{id: s, supervisor: {{children: []}}}}
            """,
        )
    )
    assert [c.shutdown for c in spec.children] == [5.0, "infinity"]


def test_nested_supervisor(tmp_path: Path) -> None:
    spec = load_tree(
        write(
            tmp_path,
            f"""
            supervisor:
              children:
                - id: inner
                  restart: transient
                  supervisor:
                    strategy: one_for_all
                    intensity: 0
                    children:
                      - {{id: leaf, start: "{HERE}:Sleeper", args: [7]}}
            """,
        )
    )
    inner_flags = SupFlags("one_for_all", 0, 5.0)
    assert spec.children == [
        ChildSpec(
            "inner",
            (Supervisor, (inner_flags, [ChildSpec("leaf", (Sleeper, (7,), {}))]), {}),
            restart="transient",
            type="supervisor",
        )
    ]
    assert spec.children[0].shutdown == "infinity"


def test_command_child_becomes_an_os_process(tmp_path: Path) -> None:
    spec = load_tree(
        write(
            tmp_path / "conf",
            """
            supervisor:
              id: app
              children:
                - id: redis
                  command: [redis-server, --port, "6390"]
                  env: {LANG: C}
                  cwd: data
                  log_file: ../logs/redis.log
                  pid_file: /var/run/redis.pid
                  shutdown: 3s
                - id: inner
                  supervisor:
                    children:
                      - {id: sleep, command: [sleep, "60"], shutdown: brutal_kill}
                      - {id: graceful, command: [sleep, "60"], shutdown: 10s, grace: 2s}
            """,
        )
    )
    conf = tmp_path / "conf"
    redis = spec.children[0]
    assert redis == ChildSpec(
        "redis",
        (
            OsProcess,
            (["redis-server", "--port", "6390"],),
            {
                "env": {"LANG": "C"},
                "cwd": str(conf / "data"),
                "name": "app.redis",
                "log_file": str(tmp_path / "logs" / "redis.log"),
                "pid_file": "/var/run/redis.pid",
                "grace": 3.0,
            },
        ),
        shutdown=3.0,
    )
    sleep, graceful = spec.children[1].start[1][1]
    assert sleep.start[2] == {
        "env": None,
        "cwd": None,
        "name": "app.inner.sleep",
        "log_file": None,
        "pid_file": None,
        "grace": 5.0,
    }
    assert graceful.start[2]["grace"] == 2.0
    assert graceful.start[2]["name"] == "app.inner.graceful"


def test_relative_paths_resolve_against_the_tree_file_not_the_cwd(
    tmp_path: Path, monkeypatch: Any
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    write(
        tmp_path / "deploy",
        "supervisor:\n  children:\n    - {id: c, command: [ls], cwd: ./run/../srv}\n",
    )
    spec = load_tree(Path("..") / "deploy" / "app-tree.yaml")
    assert spec.children[0].start[2]["cwd"] == str(tmp_path / "deploy" / "srv")
    home = write(tmp_path, "supervisor:\n  children:\n    - {id: c, command: [ls], cwd: ~/x}\n")
    assert load_tree(home).children[0].start[2]["cwd"] == os.path.expanduser("~/x")


def test_yaml_and_toml_examples_load_to_equal_specs() -> None:
    yaml_spec = load_tree(EXAMPLES / "hello-tree.yaml")
    toml_spec = load_tree(EXAMPLES / "hello-tree.toml")
    assert yaml_spec == toml_spec
    assert yaml_spec.file != toml_spec.file
    assert [c.id for c in yaml_spec.children] == ["greeter", "pipeline"]


def test_toml_and_yaml_of_the_same_tree_are_equal(tmp_path: Path) -> None:
    from_yaml = load_tree(
        write(
            tmp_path,
            f"""
            supervisor:
              strategy: one_for_all
              period: 1.5
              children:
                - {{id: a, start: "{HERE}:Sleeper", args: [1], kwargs: {{k: v}}, shutdown: 250ms}}
                - {{id: b, command: [sleep, "5"], env: {{A: "1"}}, cwd: .}}
                - id: c
                  supervisor:
                    strategy: simple_one_for_one
                    children: [{{id: t, start: "{HERE}:Sleeper", restart: temporary}}]
            """,
        )
    )
    from_toml = load_tree(
        write(
            tmp_path,
            f"""
            [supervisor]
            strategy = "one_for_all"
            period = 1.5

            [[supervisor.children]]
            id = "a"
            start = "{HERE}:Sleeper"
            args = [1]
            kwargs = {{ k = "v" }}
            shutdown = "250ms"

            [[supervisor.children]]
            id = "b"
            command = ["sleep", "5"]
            env = {{ A = "1" }}
            cwd = "."

            [[supervisor.children]]
            id = "c"
            [supervisor.children.supervisor]
            strategy = "simple_one_for_one"
            [[supervisor.children.supervisor.children]]
            id = "t"
            start = "{HERE}:Sleeper"
            restart = "temporary"
            """,
            name="app-tree.toml",
        )
    )
    assert from_yaml == from_toml


def test_tree_from_mapping(tmp_path: Path) -> None:
    data = {"supervisor": {"children": [{"id": "x", "command": ["true"], "cwd": "sub"}]}}
    spec = tree_from_mapping(data, file="node.yaml:tree", base_dir=tmp_path)
    assert spec.children[0].start[2]["cwd"] == str(tmp_path / "sub")
    with pytest.raises(TreeConfigError, match=r"^node.yaml:tree: supervisor.children\[0\].id: "):
        tree_from_mapping({"supervisor": {"children": [{"id": 3}]}}, file="node.yaml:tree")


# -------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("child", "key_path", "fragment"),
    [
        # unknown keys, with the closest known key suggested
        (
            f'{{id: w, start: "{HERE}:Sleeper", restrat: permanent}}',
            "supervisor.children[0].restrat",
            "unknown key 'restrat' (did you mean 'restart'?); expected one of id, restart,",
        ),
        (
            f'{{id: w, start: "{HERE}:Sleeper", colour: red}}',
            "supervisor.children[0].colour",
            "unknown key 'colour'; expected one of",
        ),
        # missing id, bad id
        (
            f'{{start: "{HERE}:Sleeper"}}',
            "supervisor.children[0].id",
            "missing: every child needs an id",
        ),
        (
            f'{{id: 5, start: "{HERE}:Sleeper"}}',
            "supervisor.children[0].id",
            "expected a non-empty string; got an integer 5",
        ),
        (
            f'{{id: "", start: "{HERE}:Sleeper"}}',
            "supervisor.children[0].id",
            "expected a non-empty string; got a string ''",
        ),
        # what the child is
        (
            "{id: w, restart: permanent}",
            "supervisor.children[0]",
            "expected exactly one of start (a Process class), command (an OS process) or "
            "supervisor (a nested supervisor); got none of them",
        ),
        (
            f'{{id: w, start: "{HERE}:Sleeper", command: [ls]}}',
            "supervisor.children[0]",
            "got start and command",
        ),
        (
            f'{{id: w, start: "{HERE}:Sleeper", command: [ls], supervisor: {{}}}}',
            "supervisor.children[0]",
            "got start and command and supervisor",
        ),
        (
            "{id: w, command: [ls], args: [1]}",
            "supervisor.children[0].args",
            "'args' goes with start:, but this child has command:",
        ),
        (
            f'{{id: w, start: "{HERE}:Sleeper", env: {{A: b}}}}',
            "supervisor.children[0].env",
            "'env' goes with command:, but this child has start:",
        ),
        # start targets
        (
            '{id: w, start: "no_such_module_for_rabbitry:Thing"}',
            "supervisor.children[0].start",
            "expected an importable module; got 'no_such_module_for_rabbitry:Thing' "
            "(ModuleNotFoundError: No module named 'no_such_module_for_rabbitry')",
        ),
        (
            f'{{id: w, start: "{HERE}:Sleepr"}}',
            "supervisor.children[0].start",
            f"'{HERE}' has no attribute 'Sleepr' (did you mean 'Sleeper'?)",
        ),
        (
            f'{{id: w, start: "{HERE}:NotAProcess"}}',
            "supervisor.children[0].start",
            f"expected a supervisors.Process subclass; got '{HERE}:NotAProcess', a class that "
            "does not derive from supervisors.Process",
        ),
        (
            f'{{id: w, start: "{HERE}:not_a_class"}}',
            "supervisor.children[0].start",
            f"expected a supervisors.Process subclass; got '{HERE}:not_a_class', which is a function",
        ),
        (
            f'{{id: w, start: "{HERE}.Sleeper"}}',
            "supervisor.children[0].start",
            'expected a "module:Class" string such as "mypkg.workers:Worker"',
        ),
        (
            "{id: w, start: [a, b]}",
            "supervisor.children[0].start",
            "got a list ['a', 'b']",
        ),
        # wrong types
        (
            f'{{id: w, start: "{HERE}:Sleeper", args: "1, 2"}}',
            "supervisor.children[0].args",
            "expected a list of positional arguments, such as [1, 2]; got a string '1, 2'",
        ),
        (
            f'{{id: w, start: "{HERE}:Sleeper", kwargs: [1]}}',
            "supervisor.children[0].kwargs",
            "expected a mapping of keyword arguments",
        ),
        (
            f'{{id: w, start: "{HERE}:Sleeper", kwargs: {{"not ok": 1}}}}',
            "supervisor.children[0].kwargs.not ok",
            "expected keyword names that are Python identifiers",
        ),
        (
            "{id: w, command: redis-server --port 6390}",
            "supervisor.children[0].command",
            'expected a list of strings, such as [redis-server, --port, "6390"]; got a string '
            "'redis-server --port 6390' (split it into a list)",
        ),
        (
            "{id: w, command: []}",
            "supervisor.children[0].command",
            "expected a non-empty list of strings",
        ),
        (
            "{id: w, command: [redis-server, --port, 6390]}",
            "supervisor.children[0].command[2]",
            'expected a string (quote numbers and booleans: "6390", "true"); got an integer 6390',
        ),
        (
            "{id: w, command: [ls], env: {PORT: 80}}",
            "supervisor.children[0].env.PORT",
            'expected a string (quote numbers and booleans: "1"); got an integer 80',
        ),
        (
            "{id: w, command: [ls], env: [A]}",
            "supervisor.children[0].env",
            "expected a mapping of environment variables",
        ),
        (
            "{id: w, command: [ls], cwd: 5}",
            "supervisor.children[0].cwd",
            "expected a non-empty path string; got an integer 5",
        ),
        (
            f'{{id: w, start: "{HERE}:Sleeper", significant: "yes"}}',
            "supervisor.children[0].significant",
            "expected true or false; got a string 'yes'",
        ),
        # choices
        (
            f'{{id: w, start: "{HERE}:Sleeper", type: daemon}}',
            "supervisor.children[0].type",
            "expected one of worker, supervisor; got 'daemon'",
        ),
        (
            "{id: w, command: [ls], type: supervisor}",
            "supervisor.children[0].type",
            "expected one of worker; got 'supervisor'",
        ),
        (
            "{id: w, type: worker, supervisor: {}}",
            "supervisor.children[0].type",
            "expected one of supervisor; got 'worker'",
        ),
        # durations
        (
            f'{{id: w, start: "{HERE}:Sleeper", shutdown: soon}}',
            "supervisor.children[0].shutdown",
            "expected seconds >= 0 (a number, or '500ms', '5s', '2m'), brutal_kill or infinity; got 'soon'",
        ),
        (
            f'{{id: w, start: "{HERE}:Sleeper", shutdown: -1}}',
            "supervisor.children[0].shutdown",
            "got -1",
        ),
        (
            f'{{id: w, start: "{HERE}:Sleeper", shutdown: true}}',
            "supervisor.children[0].shutdown",
            "got true",
        ),
        (
            "{id: w, command: [ls], grace: 5 parsecs}",
            "supervisor.children[0].grace",
            "expected a duration",
        ),
        (
            "{id: w, command: [ls], shutdown: 1s, grace: 3s}",
            "supervisor.children[0].grace",
            "bad combination: grace '3s' is longer than shutdown 1s",
        ),
        # OTP's bad combinations
        (
            f'{{id: w, start: "{HERE}:Sleeper", significant: true}}',
            "supervisor.children[0].significant",
            "bad combination: a significant child cannot be permanent",
        ),
        (
            f'{{id: w, start: "{HERE}:Sleeper", significant: true, restart: transient}}',
            "supervisor.children[0].significant",
            "bad combination: significant: true under a supervisor with auto_shutdown: never",
        ),
        # nested supervisors
        (
            "{id: w, supervisor: {id: x}}",
            "supervisor.children[0].supervisor.id",
            "a nested supervisor takes its id from its child entry (supervisor.children[0].id)",
        ),
        (
            "{id: w, supervisor: [a]}",
            "supervisor.children[0].supervisor",
            "expected a supervisor mapping",
        ),
        (
            "{id: w, supervisor: {children: [{id: x, start: 'a:b', restart: never}]}}",
            "supervisor.children[0].supervisor.children[0].restart",
            "expected one of permanent, transient, temporary; got 'never'",
        ),
    ],
)
def test_child_errors(tmp_path: Path, child: str, key_path: str, fragment: str) -> None:
    error = child_error(tmp_path, child)
    assert error.key_path == key_path
    assert fragment in str(error)
    assert f": {key_path}: " in str(error)
    assert error.expected


@pytest.mark.parametrize(
    ("flags", "key_path", "fragment"),
    [
        (
            "strategy: one_for_none",
            "supervisor.strategy",
            "expected one of one_for_one, one_for_all, rest_for_one, simple_one_for_one; got 'one_for_none'",
        ),
        (
            "strategie: one_for_one",
            "supervisor.strategie",
            "unknown key 'strategie' (did you mean 'strategy'?)",
        ),
        ("intensity: -1", "supervisor.intensity", "expected an integer >= 0; got -1"),
        ("intensity: '3'", "supervisor.intensity", "expected an integer >= 0; got a string '3'"),
        ("intensity: 1.5", "supervisor.intensity", "got a number 1.5"),
        ("period: 0", "supervisor.period", "expected a duration: seconds > 0"),
        ("period: 5 parsecs", "supervisor.period", "got '5 parsecs'"),
        (
            "auto_shutdown: sometimes",
            "supervisor.auto_shutdown",
            "expected one of never, any_significant, all_significant",
        ),
        ("id: [x]", "supervisor.id", "expected a non-empty string; got a list ['x']"),
    ],
)
def test_supervisor_errors(tmp_path: Path, flags: str, key_path: str, fragment: str) -> None:
    error = child_error(tmp_path, f'{{id: w, start: "{HERE}:Sleeper"}}', flags=flags)
    assert error.key_path == key_path
    assert fragment in str(error)


def test_duplicate_ids_among_siblings(tmp_path: Path) -> None:
    error = load_error(
        tmp_path,
        f"""
        supervisor:
          children:
            - {{id: a, start: "{HERE}:Sleeper"}}
            - {{id: b, start: "{HERE}:Sleeper"}}
            - {{id: a, start: "{HERE}:Sleeper"}}
        """,
    )
    assert error.key_path == "supervisor.children[2].id"
    assert (
        "expected an id unique among its siblings; got 'a', already the id of supervisor.children[0]"
        in str(error)
    )
    assert error.line == 5


def test_same_id_in_different_subtrees_is_fine(tmp_path: Path) -> None:
    spec = load_tree(
        write(
            tmp_path,
            """
            supervisor:
              children:
                - {id: a, supervisor: {children: [{id: x, command: [ls]}]}}
                - {id: b, supervisor: {children: [{id: x, command: [ls]}]}}
            """,
        )
    )
    names = [child.start[1][1][0].start[2]["name"] for child in spec.children]
    assert names == ["root.a.x", "root.b.x"]


@pytest.mark.parametrize("count", [0, 2])
def test_simple_one_for_one_needs_exactly_one_child(tmp_path: Path, count: int) -> None:
    children = "".join(f'    - {{id: c{i}, start: "{HERE}:Sleeper"}}\n' for i in range(count))
    error = load_error(
        tmp_path,
        f"supervisor:\n  strategy: simple_one_for_one\n  children:{' []' if not count else ''}\n{children}",
    )
    assert error.key_path == "supervisor.children"
    assert (
        f"expected exactly one child (the template start_child uses) with strategy simple_one_for_one; got {count} children"
        in str(error)
    )


def test_simple_one_for_one_with_auto_shutdown(tmp_path: Path) -> None:
    error = child_error(
        tmp_path,
        f'{{id: w, start: "{HERE}:Sleeper"}}',
        flags="strategy: simple_one_for_one\nauto_shutdown: any_significant",
    )
    assert error.key_path == "supervisor.auto_shutdown"
    assert "expected never with strategy simple_one_for_one; got 'any_significant'" in str(error)


def test_significant_child_is_fine_under_auto_shutdown(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        one_child(
            f'{{id: w, start: "{HERE}:Sleeper", significant: true, restart: temporary}}',
            flags="auto_shutdown: all_significant",
        ),
    )
    assert load_tree(path).children[0].significant is True


@pytest.mark.parametrize(
    ("text", "key_path", "fragment"),
    [
        ("- just\n- a list\n", "", "expected a mapping with the root key 'supervisor'; got a list"),
        ("tree: {}\n", "tree", "unknown key 'tree'; expected one of supervisor"),
        ("supervisr: {}\n", "supervisr", "unknown key 'supervisr' (did you mean 'supervisor'?)"),
        (
            "supervisor: one_for_one\n",
            "supervisor",
            "expected a supervisor mapping (strategy, intensity, period, children, ...); got a string 'one_for_one'",
        ),
        ("supervisor:\n", "supervisor", "got nothing (null)"),
        (
            "supervisor: {children: {id: a}}\n",
            "supervisor.children",
            "expected a list of child entries (in TOML: [[...children]] tables); got a mapping",
        ),
        (
            "supervisor: {children: [worker]}\n",
            "supervisor.children[0]",
            "expected a child mapping with id and one of start, command or supervisor; got a string 'worker'",
        ),
        ("supervisor: {1: x}\n", "supervisor.1", "expected string keys; got the key 1"),
    ],
)
def test_document_shape_errors(tmp_path: Path, text: str, key_path: str, fragment: str) -> None:
    error = load_error(tmp_path, text)
    assert error.key_path == key_path
    assert fragment in str(error)


def test_an_empty_mapping(tmp_path: Path) -> None:
    error = load_error(tmp_path, "{}\n", name="empty-map.yaml")
    assert str(error).endswith(
        "expected a mapping with the root key 'supervisor'; got an empty mapping"
    )


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("empty.yaml", ""),
        ("comments.yaml", "# nothing here\n"),
        ("empty.toml", ""),
        ("blank.yml", "\n\n"),
    ],
)
def test_empty_files(tmp_path: Path, name: str, text: str) -> None:
    error = load_error(tmp_path, text, name=name)
    assert error.key_path == ""
    assert (
        str(error)
        == f"{tmp_path / name}: expected a mapping with the root key 'supervisor'; got an empty file"
    )


def test_yaml_syntax_error_has_the_line(tmp_path: Path) -> None:
    error = load_error(
        tmp_path, "supervisor:\n  strategy: one_for_one\n  children: [\n    - x: y: z\n"
    )
    assert error.key_path == ""
    assert error.expected == "valid YAML"
    assert "invalid YAML:" in str(error)
    assert error.line is not None
    assert str(error).endswith(f"(line {error.line})")


def test_yaml_duplicate_key_is_an_error(tmp_path: Path) -> None:
    error = load_error(tmp_path, "supervisor:\n  strategy: one_for_one\n  strategy: one_for_all\n")
    assert "invalid YAML: found duplicate key 'strategy'" in str(error)
    assert error.line == 3


def test_toml_syntax_error_has_the_line(tmp_path: Path) -> None:
    error = load_error(
        tmp_path, '[supervisor]\nstrategy = "one_for_one"\nintensity = = 3\n', name="bad.toml"
    )
    assert error.expected == "valid TOML"
    assert "invalid TOML:" in str(error)
    assert error.line == 3


def test_toml_errors_use_the_same_key_paths(tmp_path: Path) -> None:
    error = load_error(
        tmp_path,
        f"""
        [supervisor]
        [[supervisor.children]]
        id = "a"
        start = "{HERE}:Sleeper"
        restart = "sometimes"
        """,
        name="app-tree.toml",
    )
    assert error.key_path == "supervisor.children[0].restart"
    assert error.line is None
    assert str(error) == (
        f"{tmp_path / 'app-tree.toml'}: supervisor.children[0].restart: expected one of "
        "permanent, transient, temporary; got 'sometimes'"
    )


def test_toml_children_as_a_table_instead_of_an_array(tmp_path: Path) -> None:
    error = load_error(tmp_path, '[supervisor.children]\nid = "a"\n', name="app-tree.toml")
    assert error.key_path == "supervisor.children"
    assert "[[...children]]" in str(error)


def test_unreadable_files(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    with pytest.raises(TreeConfigError) as info:
        load_tree(missing)
    assert str(info.value) == f"{missing}: cannot read the file: No such file or directory"
    assert info.value.file == str(missing)

    directory = tmp_path / "dir.yaml"
    directory.mkdir()
    with pytest.raises(TreeConfigError, match="cannot read the file"):
        load_tree(directory)

    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"supervisor: \xff\xfe\n")
    with pytest.raises(TreeConfigError, match="not UTF-8 text"):
        load_tree(binary)


def test_unknown_suffix(tmp_path: Path) -> None:
    path = tmp_path / "tree.json"
    path.write_text("{}")
    with pytest.raises(TreeConfigError) as info:
        load_tree(path)
    assert str(info.value) == f"{path}: expected a .yaml, .yml or .toml file; got a .json file"


def test_errors_from_sup_flags_and_child_spec_get_a_key_path(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Checks the specs make that the loader does not repeat still name the key."""

    def strict_flags(**kwargs: Any) -> SupFlags:
        raise ValueError(f"period must be a number of seconds > 0; got {kwargs['period']!r}")

    monkeypatch.setattr(tree_module, "SupFlags", strict_flags)
    error = child_error(tmp_path, f'{{id: w, start: "{HERE}:Sleeper"}}')
    assert error.key_path == "supervisor.period"
    assert "period must be a number of seconds > 0; got 5.0" in str(error)
    monkeypatch.undo()

    def strict_spec(child_id: Any, *args: Any, **kwargs: Any) -> ChildSpec:
        raise TypeError(f"child {child_id!r}: significant must be a bool; got 1")

    monkeypatch.setattr(tree_module, "ChildSpec", strict_spec)
    error = child_error(tmp_path, f'{{id: w, start: "{HERE}:Sleeper"}}')
    assert error.key_path == "supervisor.children[0].significant"
    assert str(error).endswith(
        "supervisor.children[0].significant: significant must be a bool; got 1 (line 5)"
    )


def test_an_import_that_raises_is_reported(tmp_path: Path, monkeypatch: Any) -> None:
    (tmp_path / "explodes_on_import.py").write_text("raise ValueError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    error = child_error(tmp_path, '{id: w, start: "explodes_on_import:Thing"}')
    assert error.key_path == "supervisor.children[0].start"
    assert (
        "importing 'explodes_on_import' for 'explodes_on_import:Thing' raised ValueError: boom"
        in str(error)
    )


def test_tree_config_error_pickles() -> None:
    error = TreeConfigError("t.yaml", "supervisor.period", "a duration", "'x'", line=3)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.file, copy.key_path, copy.expected, copy.got, copy.line) == (
        "t.yaml",
        "supervisor.period",
        "a duration",
        "'x'",
        3,
    )
    assert (
        str(copy)
        == str(error)
        == "t.yaml: supervisor.period: expected a duration; got 'x' (line 3)"
    )


# ------------------------------------------------------------------------------ format_tree


def test_format_tree_shows_the_whole_tree(tmp_path: Path) -> None:
    spec = load_tree(
        write(
            tmp_path,
            f"""
            supervisor:
              id: top
              strategy: one_for_all
              intensity: 2
              period: 10s
              auto_shutdown: any_significant
              children:
                - {{id: w, start: "{HERE}:Sleeper", args: [1], kwargs: {{k: v}}, restart: transient, significant: true}}
                - {{id: os, command: [sleep, "60"], cwd: /tmp, env: {{A: b c}}, shutdown: 2s}}
                - id: inner
                  supervisor:
                    strategy: rest_for_one
                    children:
                      - {{id: leaf, start: "{HERE}:Sleeper", shutdown: brutal_kill}}
            """,
        )
    )
    assert format_tree(spec).splitlines() == [
        "top: supervisor, one_for_all, intensity 2 per 10s, auto_shutdown any_significant",
        f"├── w (worker, transient, shutdown 5s, significant): {HERE}:Sleeper(1, k='v')",
        "├── os (worker, permanent, shutdown 2s): $ sleep 60  [cwd /tmp; env A='b c'; grace 2s]",
        "└── inner (supervisor, permanent, shutdown infinity): rest_for_one, intensity 1 per 5s",
        f"    └── leaf (worker, permanent, shutdown brutal_kill): {HERE}:Sleeper()",
    ]


# ----------------------------------------------------------------------------- start_tree


def _ids(ref: Any) -> list[tuple[Any, str]]:
    return [(info.id, info.type) for info in ref.proxy().which_children().get()]


def test_start_tree_from_a_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""
        supervisor:
          id: app
          strategy: one_for_one
          children:
            - {{id: first, start: "{HERE}:Sleeper", args: [1, 2], kwargs: {{name: x}}}}
            - id: inner
              supervisor:
                strategy: rest_for_one
                children:
                  - {{id: leaf, start: "{HERE}:Sleeper"}}
            - {{id: last, start: "{HERE}:Sleeper"}}
        """,
    )
    ref = start_tree(path)
    try:
        assert _ids(ref) == [("first", "worker"), ("inner", "supervisor"), ("last", "worker")]
        rows = {info.id: info.ref for info in ref.proxy().which_children().get()}
        assert rows["first"].ask("args") == ((1, 2), {"name": "x"})
        assert _ids(rows["inner"]) == [("leaf", "worker")]
        assert ref.proxy().count_children().get() == {
            "specs": 3,
            "active": 3,
            "supervisors": 1,
            "workers": 2,
        }
    finally:
        ref.stop()
    assert not ref.is_alive()
    assert not rows["first"].is_alive()
    assert not rows["inner"].is_alive()


def test_start_tree_from_a_spec_and_from_str(tmp_path: Path) -> None:
    path = write(tmp_path, one_child(f'{{id: only, start: "{HERE}:Sleeper"}}'))
    for source in (load_tree(path), str(path)):
        ref = start_tree(source)
        try:
            assert _ids(ref) == [("only", "worker")]
        finally:
            ref.stop()


def test_start_tree_with_an_os_process(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("RABBITRY_RUN_DIR", str(tmp_path / "run"))
    path = write(
        tmp_path,
        """
        supervisor:
          children:
            - {id: sleeper, command: [sleep, "60"], shutdown: 2s, log_file: sleeper.log}
        """,
    )
    ref = start_tree(path)
    try:
        (info,) = ref.proxy().which_children().get()
        assert info.id == "sleeper"
        assert info.ref.is_alive()
    finally:
        ref.stop()
    assert (tmp_path / "sleeper.log").exists()


def test_start_tree_raises_when_a_child_fails_to_start(tmp_path: Path) -> None:
    path = write(tmp_path, one_child(f'{{id: bad, start: "{HERE}:FailsToStart"}}'))
    with pytest.raises(Exception, match="bad") as info:
        start_tree(path)
    assert "no thanks" in str(info.value)


def test_start_tree_reports_file_errors_before_starting(tmp_path: Path) -> None:
    path = write(tmp_path, one_child("{id: w, start: 'nowhere_at_all:X'}"))
    with pytest.raises(TreeConfigError, match=r"supervisor.children\[0\].start"):
        start_tree(path)


def test_start_tree_rejects_other_things() -> None:
    with pytest.raises(TypeError, match="takes a path or a TreeSpec"):
        start_tree(42)  # type: ignore[arg-type]


def test_example_tree_runs(tmp_path: Path) -> None:
    ref = start_tree(EXAMPLES / "hello-tree.yaml")
    try:
        assert _ids(ref) == [("greeter", "worker"), ("pipeline", "supervisor")]
        rows = {info.id: info.ref for info in ref.proxy().which_children().get()}
        wait_until(lambda: _ids(rows["pipeline"]) == [("flaky", "worker"), ("printer", "worker")])
    finally:
        ref.stop()
