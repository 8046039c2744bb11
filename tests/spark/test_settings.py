"""rabbitry.spark.settings and rabbitry.spark.configure on the driver: no Spark session, no JVM.

`pyspark.SparkConf()` keeps its values in a Python dict while no SparkContext exists (checked
below), so configure() is tested on a real SparkConf without starting Java.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rabbitry.spark import SparkEmbedError, configure
from rabbitry.spark.configure import CLUSTER_DEFAULTS, DAEMON_MODULE
from rabbitry.spark.settings import ENV_SETTINGS, EmbedSettings, Identity
from rabbitry.spark.startup import explain, resolve_master

COOKIE = "spark-test-cookie-0123456789"
LOG_URL = "http://worker-1:8081/logPage/?appId={app}&executorId={executor}&logType=stderr"


def identity(executor: str = "3", app: str = "app-20260101-0007") -> Identity:
    return Identity(executor=executor, app=app, host="h1", pid=4242)


# -- Identity ------------------------------------------------------------------------------------


def test_identity_from_an_executor_log_url() -> None:
    url = LOG_URL.format(app="app-20260101120000-0003", executor="7")
    found = Identity.from_environment({"SPARK_LOG_URL_STDERR": url})
    assert found.executor == "7"
    assert found.app == "app-20260101120000-0003"
    assert found.pid == os.getpid()
    assert found.host  # this host's name, made safe
    assert all(c.isalnum() or c in "_.-" for c in found.host)


def test_identity_falls_back_to_the_stdout_log_url() -> None:
    url = LOG_URL.format(app="app-1", executor="2").replace("stderr", "stdout")
    found = Identity.from_environment({"SPARK_LOG_URL_STDOUT": url})
    assert (found.executor, found.app) == ("2", "app-1")


def test_identity_with_the_executor_id_first_in_the_query() -> None:
    url = "http://w:8081/logPage/?executorId=12&appId=app-9&logType=stderr"
    found = Identity.from_environment({"SPARK_LOG_URL_STDERR": url})
    assert (found.executor, found.app) == ("12", "app-9")


def test_identity_replaces_unsafe_characters() -> None:
    url = LOG_URL.format(app="app/../x y", executor="1%2F2@h")
    found = Identity.from_environment({"SPARK_LOG_URL_STDERR": url})
    assert found.executor == "1_2F2_h"
    assert found.app == "app_.._x_y"


def test_identity_without_a_log_url_is_the_local_driver() -> None:
    found = Identity.from_environment({})
    assert found.executor == "driver"
    assert found.app == f"local-{os.getppid()}"
    assert found.pid == os.getpid()


def test_identity_with_a_log_url_that_names_neither() -> None:
    found = Identity.from_environment({"SPARK_LOG_URL_STDERR": "http://w:8081/logPage/"})
    assert found.executor == "driver"
    assert found.app == f"local-{os.getppid()}"


# -- EmbedSettings.render ------------------------------------------------------------------------


def test_render_fills_placeholders_everywhere() -> None:
    settings = EmbedSettings(
        node={
            "cookie": COOKIE,
            "gossip": {"tag": "{app}/{executor}", "list": ["{host}", "{pid}", 5]},
            "{executor}-key": "x",
        }
    )
    config = settings.render(identity(), 7100, 7101)
    assert config["gossip"] == {"tag": "app-20260101-0007/3", "list": ["h1", "4242", 5]}
    assert config["3-key"] == "x"
    assert config["cookie"] == COOKIE


def test_render_defaults_node_listen_control_and_data_dir(tmp_path: Path) -> None:
    settings = EmbedSettings(node={"cookie": COOKIE}, data_root=str(tmp_path))
    config = settings.render(identity(), 7100, 7101)
    assert config["node"] == "spark-app-20260101-0007-3@127.0.0.1"
    assert config["listen"] == "127.0.0.1:7100"
    assert config["control"] == "127.0.0.1:7101"
    assert config["data_dir"] == str(tmp_path / "spark-app-20260101-0007-3_127.0.0.1")


def test_executors_are_ephemeral_members_of_the_seeds_by_default() -> None:
    seeds = {"a@127.0.0.1": "127.0.0.1:7001"}
    config = EmbedSettings(node={"cookie": COOKIE}, join=seeds).render(identity(), 1, 2)
    assert config["role"] == "ephemeral" and config["cluster"] == {"nodes": seeds}
    # opted out, by the setting or by the template; and no seeds: a node of its own
    off = EmbedSettings(node={"cookie": COOKIE}, join=seeds, ephemeral=False)
    assert "role" not in off.render(identity(), 1, 2)
    core = EmbedSettings(node={"cookie": COOKIE, "role": "core"}, join=seeds)
    assert core.render(identity(), 1, 2)["role"] == "core"
    assert "role" not in EmbedSettings(node={"cookie": COOKIE}).render(identity(), 1, 2)


def test_render_keeps_the_template_values() -> None:
    settings = EmbedSettings(
        node={
            "cookie": COOKIE,
            "node": "exec-{executor}@10.0.0.1",
            "listen": "10.0.0.1:7000",
            "control": "127.0.0.1:9999",
            "data_dir": "/srv/rabbitry/{app}",
        }
    )
    config = settings.render(identity(), 7100, 7101)
    assert config["node"] == "exec-3@10.0.0.1"
    assert config["listen"] == "10.0.0.1:7000"
    assert config["control"] == "127.0.0.1:9999"
    assert config["data_dir"] == "/srv/rabbitry/app-20260101-0007"


def test_render_does_not_change_the_template() -> None:
    template = {"cookie": COOKIE, "gossip": {"tag": "{executor}"}}
    EmbedSettings(node=template).render(identity(), 1, 2)
    assert template == {"cookie": COOKIE, "gossip": {"tag": "{executor}"}}


@pytest.mark.parametrize("text", ["{nope}", "a-{executor}-{0}", "{", "x}"])
def test_render_an_unknown_or_malformed_placeholder_names_the_placeholders(text: str) -> None:
    settings = EmbedSettings(node={"cookie": COOKIE, "gossip": {"tag": text}})
    with pytest.raises(SparkEmbedError) as info:
        settings.render(identity(), 1, 2)
    message = str(info.value)
    assert repr(text) in message
    for name in ("{executor}", "{app}", "{host}", "{pid}"):
        assert name in message


def test_render_doubled_braces_are_literal() -> None:
    settings = EmbedSettings(node={"cookie": COOKIE, "gossip": {"tag": "{{executor}}"}})
    assert settings.render(identity(), 1, 2)["gossip"]["tag"] == "{executor}"


# -- EmbedSettings JSON --------------------------------------------------------------------------


def test_settings_json_round_trip() -> None:
    settings = EmbedSettings(
        node={"cookie": COOKIE, "node": "x-{executor}@127.0.0.1", "peers": ["a", "b"]},
        join={"a@127.0.0.1": "127.0.0.1:7001"},
        master_file="/var/run/redis-master",
        system="alpha",
        wait_replicas=2,
        data_root="/data",
        ready_timeout=12.5,
        leave_on_exit=False,
    )
    text = settings.to_json()
    assert json.loads(text)["join"] == {"a@127.0.0.1": "127.0.0.1:7001"}
    assert EmbedSettings.from_json(text) == settings


def test_settings_json_round_trip_with_defaults() -> None:
    settings = EmbedSettings(node={"cookie": COOKIE})
    assert EmbedSettings.from_json(settings.to_json()) == settings


@pytest.mark.parametrize(
    "text", ["", "{not json", "[1, 2]", "{}", '{"node": {}, "colour": "red"}', "null"]
)
def test_settings_from_corrupt_json(text: str) -> None:
    with pytest.raises(SparkEmbedError, match=ENV_SETTINGS):
        EmbedSettings.from_json(text)


# -- configure() on a SparkConf ------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _own_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """configure() sets PYSPARK_PYTHON on local masters: keep it, and what it reads, per test."""
    for name in ("PYSPARK_PYTHON", "PYSPARK_SUBMIT_ARGS", "SPARK_CONF_DIR"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def conf(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A SparkConf that keeps its values in Python. Alone, SparkConf() does that anyway (no
    SparkContext, no JVM); in a full run another module's session may be live in this process,
    so the conf is made as if none were."""
    from pyspark import SparkConf, SparkContext

    with monkeypatch.context() as patch:
        patch.setattr(SparkContext, "_jvm", None)
        made = SparkConf()
    assert made._jconf is None
    return made


def embedded(conf: Any) -> EmbedSettings:
    return EmbedSettings.from_json(conf.get(f"spark.executorEnv.{ENV_SETTINGS}"))


def test_configure_starts_no_jvm() -> None:
    # In a fresh interpreter: a Spark session of another test may be live in this one.
    script = (
        "from pyspark import SparkConf, SparkContext\n"
        "from rabbitry.spark import configure\n"
        "made = SparkConf()\n"
        f"configure(made.setMaster('local[2,4]'), {{'cookie': {COOKIE!r}}})\n"
        "assert made._jconf is None, 'the values left Python'\n"
        "assert SparkContext._gateway is None and SparkContext._jvm is None, 'a JVM started'\n"
        "print('ok')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]


def test_configure_sets_the_daemon_module_and_the_executor_env(conf: Any, tmp_path: Path) -> None:
    conf.setMaster("local[2,4]")
    returned = configure(
        conf,
        {"cookie": COOKIE},
        join={"a@127.0.0.1": "127.0.0.1:7001"},
        master_file=tmp_path / "redis-master",
        system="alpha",
        wait_replicas=1,
        data_root=tmp_path / "data",
        ready_timeout=9.0,
        leave_on_exit=False,
    )
    assert returned is conf
    assert conf.get("spark.python.daemon.module") == DAEMON_MODULE == "rabbitry.spark.daemon"
    assert conf.get("spark.python.use.daemon") == "true"
    settings = embedded(conf)
    assert settings.node == {"cookie": COOKIE}
    assert settings.join == {"a@127.0.0.1": "127.0.0.1:7001"}
    assert settings.master_file == str((tmp_path / "redis-master").resolve())
    assert settings.system == "alpha"
    assert settings.wait_replicas == 1
    assert settings.data_root == str((tmp_path / "data").resolve())
    assert settings.ready_timeout == 9.0
    assert settings.leave_on_exit is False


def test_configure_resolves_a_relative_master_file(
    conf: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    configure(conf.setMaster("local[1]"), {"cookie": COOKIE}, master_file="redis-master")
    assert embedded(conf).master_file == str(tmp_path.resolve() / "redis-master")


def test_configure_reads_a_template_file(conf: Any, tmp_path: Path) -> None:
    path = tmp_path / "spark-node.yaml"
    path.write_text(f"cookie: {COOKIE}\nnode: exec-{{executor}}@127.0.0.1\n")
    configure(conf.setMaster("local[1]"), str(path))
    assert embedded(conf).node == {"cookie": COOKIE, "node": "exec-{executor}@127.0.0.1"}


@pytest.mark.parametrize("master", ["local", "local[2]", "local[2,4]", "local[*,3]"])
def test_configure_on_local_masters_uses_this_python_and_no_cluster_defaults(
    conf: Any, master: str
) -> None:
    configure(conf.setMaster(master), {"cookie": COOKIE})
    assert conf.get("spark.pyspark.python") == sys.executable
    # what a session started from Python actually reads (spark.pyspark.python it does not)
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    for key in CLUSTER_DEFAULTS:
        assert conf.get(key) is None, key


@pytest.mark.parametrize("master", ["local-cluster[2,1,1024]", "spark://h:7077", "yarn"])
def test_configure_on_cluster_masters_sets_the_cluster_defaults(conf: Any, master: str) -> None:
    configure(conf.setMaster(master), {"cookie": COOKIE})
    for key, value in CLUSTER_DEFAULTS.items():
        assert conf.get(key) == value, key
    assert conf.get("spark.excludeOnFailure.enabled") == "true"
    # Spark requires maxFailures > maxTaskAttemptsPerNode when exclusion is on.
    assert int(conf.get("spark.task.maxFailures")) > int(
        conf.get("spark.excludeOnFailure.task.maxTaskAttemptsPerNode")
    )


def test_configure_local_cluster_uses_this_python(conf: Any) -> None:
    configure(conf.setMaster("local-cluster[2,1,1024]"), {"cookie": COOKIE})
    assert conf.get("spark.pyspark.python") == sys.executable
    assert os.environ["PYSPARK_PYTHON"] == sys.executable


def test_configure_a_standalone_master_leaves_the_python_to_the_cluster(conf: Any) -> None:
    configure(conf.setMaster("spark://h:7077"), {"cookie": COOKIE})
    assert conf.get("spark.pyspark.python") is None
    assert "PYSPARK_PYTHON" not in os.environ


def test_configure_keeps_values_already_set(conf: Any) -> None:
    conf.setMaster("spark://h:7077")
    conf.set("spark.task.maxFailures", "20")
    conf.set("spark.excludeOnFailure.enabled", "false")
    configure(conf, {"cookie": COOKIE})
    assert conf.get("spark.task.maxFailures") == "20"
    assert conf.get("spark.excludeOnFailure.enabled") == "false"
    assert conf.get("spark.excludeOnFailure.task.maxTaskAttemptsPerExecutor") == "2"


def test_configure_on_a_local_master_replaces_another_python(
    conf: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local executor must import rabbitry, which the driver's interpreter has; a python3
    found on PATH (an unactivated venv) or set by hand may not."""
    monkeypatch.setenv("PYSPARK_PYTHON", "python3")
    conf.setMaster("local[2]").set("spark.pyspark.python", "/opt/python3")
    configure(conf, {"cookie": COOKIE})
    assert conf.get("spark.pyspark.python") == sys.executable
    assert os.environ["PYSPARK_PYTHON"] == sys.executable


@pytest.mark.parametrize(
    ("submit_args", "master"),
    [
        ("--master local[3] pyspark-shell", "local[3]"),
        ("--master=local-cluster[2,1,512] pyspark-shell", "local-cluster[2,1,512]"),
        ("--conf spark.master=local pyspark-shell", "local"),
        ("--master spark://h:7077 pyspark-shell", "spark://h:7077"),
        ("pyspark-shell", None),
    ],
)
def test_the_master_from_pyspark_submit_args(
    monkeypatch: pytest.MonkeyPatch, submit_args: str, master: str | None
) -> None:
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", submit_args)
    monkeypatch.setenv("SPARK_HOME", "/nonexistent")
    assert resolve_master(None) == master
    assert resolve_master("yarn") == "yarn"  # the builder's own wins


def test_configure_with_the_master_in_spark_defaults_uses_this_python(
    conf: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "spark-defaults.conf").write_text("# defaults\nspark.master   local[2]\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    configure(conf, {"cookie": COOKIE})
    assert os.environ["PYSPARK_PYTHON"] == sys.executable


WORKER_FAILURE = (
    "An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.\n"
    ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 0.0 "
    "failed 2 times, most recent failure: Lost task 0.1 in stage 0.0 (TID 2) (192.0.2.2 "
    "executor 0): org.apache.spark.SparkException: \nError from python worker:\n"
    "  /tmp/shim/python3: Error while finding module specification for "
    "'rabbitry.spark.daemon' (ModuleNotFoundError: No module named 'rabbitry')\n"
    "PYTHONPATH was:\n  /x/pyspark.zip\norg.apache.spark.SparkException: EOFException\n"
    "\tat org.apache.spark.errors.SparkCoreErrors$.eofExceptionWhileReadPortNumberError\n"
)


def test_a_missing_rabbitry_on_the_executors_is_one_line_quoting_their_error() -> None:
    line = explain(RuntimeError(WORKER_FAILURE), "/tmp/shim/python3")
    assert "\n" not in line
    assert "cannot import rabbitry" in line and "/tmp/shim/python3" in line
    assert "No module named 'rabbitry'" in line  # the executor's own words
    assert "PYSPARK_PYTHON" in line  # what to do


def test_other_start_failures_are_one_line_too() -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise ValueError("no")

    assert "\n" not in explain(Unprintable())
    gateway = explain(RuntimeError("[JAVA_GATEWAY_EXITED] Java gateway process exited."))
    assert "Java 17" in gateway
    task = explain(RuntimeError("Traceback...\nrabbitry.spark.task.NodeUnavailable: no info\nat x"))
    assert task == 'a task failed on an executor: "rabbitry.spark.task.NodeUnavailable: no info"'


@pytest.mark.parametrize(
    ("template", "words"),
    [
        ({}, "cookie"),
        ({"node": "x@127.0.0.1"}, "cookie"),
        ({"cookie": COOKIE, "node": "not a node name"}, "node"),
        ({"cookie": COOKIE, "listen": "nowhere"}, "listen"),
        ({"cookie": COOKIE, "colour": "red"}, "colour"),
        ({"cookie": COOKIE, "node": "{nope}@127.0.0.1"}, "placeholder"),
        ({"cookie": COOKIE, "control": None}, "control"),
    ],
)
def test_configure_a_bad_template_raises_spark_embed_error(
    conf: Any, template: dict[str, Any], words: str
) -> None:
    conf.setMaster("local[2]")
    with pytest.raises(SparkEmbedError, match=words):
        configure(conf, template)
    assert conf.get("spark.python.daemon.module") is None  # nothing half set


def test_configure_without_check_accepts_paths_that_exist_only_on_executors(conf: Any) -> None:
    template = {"cookie_file": "/only/on/the/executors/cookie"}
    configure(conf.setMaster("spark://h:7077"), template, check=False)
    assert embedded(conf).node == template


@pytest.mark.parametrize(
    ("options", "words"),
    [({"wait_replicas": -1}, "wait_replicas"), ({"ready_timeout": 0}, "ready_timeout")],
)
def test_configure_bad_options(conf: Any, options: dict[str, Any], words: str) -> None:
    with pytest.raises(SparkEmbedError, match=words):
        configure(conf.setMaster("local[2]"), {"cookie": COOKIE}, **options)


def test_configure_refuses_other_targets() -> None:
    with pytest.raises(TypeError, match="SparkConf"):
        configure(object(), {"cookie": COOKIE})


def test_host_name_is_safe() -> None:
    # The default node name is built from the identity: the host part must not break it.
    found = Identity.from_environment({})
    assert (
        found.host
        == "".join(c if c.isalnum() or c in "_.-" else "_" for c in socket.gethostname())[:60]
    )
