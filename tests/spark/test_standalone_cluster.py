"""A real standalone Spark cluster: a master and two workers as separate processes (pyspark's
own bin/spark-class), the pipeline submitted with spark-submit (rabbitry/pipeline/submit.py:
the master is spark-submit's, not set in code) with dynamic allocation on, so executors come
when tasks wait and go after 2 s idle. Exactly-once holds, the core (pause_minority) never
pauses, the executors' nodes attach as ephemeral members, and the core forgets every one of
them once its executor is gone (forget_ephemeral_after 3 s)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.services import redis_server_binary, require_spark
from tests.waiting import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(600)]

HOST = "127.0.0.1"
PAUSE_LINE = "pausing the application"


class StandaloneCluster:
    """A Spark master and workers started with bin/spark-class, each its own process group,
    output to a file. `stop()` kills each one's whole tree (executors' JVMs, their Python
    daemons and workers, the nodes those embed), newest first."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        import pyspark

        self.home = Path(pyspark.__file__).resolve().parent
        self.root = root
        self.env = {**env, "SPARK_HOME": str(self.home), "SPARK_LOCAL_IP": HOST}
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.url = ""

    def _spawn(self, name: str, argv: list[str]) -> Path:
        out = self.root / f"{name}.out"
        with out.open("wb") as sink:
            proc = subprocess.Popen(
                argv,
                env=self.env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.procs.append((name, proc))
        return out

    def _wait_line(self, out: Path, text: str, what: str, timeout: float = 120.0) -> None:
        proc = self.procs[-1][1]

        def seen() -> bool:
            if proc.poll() is not None:
                raise AssertionError(
                    f"{what} exited ({proc.returncode}): {out.read_text()[-3000:]}"
                )
            return text in out.read_text(errors="replace")

        wait_until(seen, what, timeout, poll=0.2)

    def start(self, workers: int = 2) -> StandaloneCluster:
        from rabbitry.demo.stack import free_port

        spark_class = str(self.home / "bin" / "spark-class")
        port = free_port()
        self.url = f"spark://{HOST}:{port}"
        out = self._spawn(
            "master",
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", HOST,
             "--port", str(port), "--webui-port", str(free_port())],
        )  # fmt: skip
        self._wait_line(out, "I have been elected leader", "the Spark master")
        for index in range(workers):
            work = self.root / f"worker-{index}"
            work.mkdir(parents=True, exist_ok=True)
            out = self._spawn(
                f"worker-{index}",
                [spark_class, "org.apache.spark.deploy.worker.Worker", self.url,
                 "--host", HOST, "--cores", "1", "--memory", "1g", "--work-dir", str(work),
                 "--webui-port", str(free_port())],
            )  # fmt: skip
            self._wait_line(out, "Successfully registered with master", f"worker {index}")
        return self

    def stop(self) -> None:
        import psutil

        for _name, proc in reversed(self.procs):
            kill_tree(proc, psutil)


def kill_tree(proc: subprocess.Popen[bytes], psutil: Any) -> None:
    """SIGKILL a process started in its own session, its process group, and every descendant
    (an executor JVM, its Python daemon, workers and sidecar nodes may have left the group)."""
    tree = []
    with contextlib.suppress(psutil.Error):
        tree = psutil.Process(proc.pid).children(recursive=True)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    for child in tree:
        with contextlib.suppress(psutil.Error):
            child.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, StandaloneCluster]]:
    """The demo stack's Redis set and core nodes (pause_minority, forget_ephemeral_after 3 s),
    without a Spark session in this process, and a standalone master with two workers."""
    require_spark()
    redis_server_binary()
    from rabbitry.demo.stack import DemoStack

    root = Path(tmp_path_factory.mktemp("standalone"))
    stack = DemoStack(root / "stack", forget_ephemeral_after=3.0)
    env = dict(os.environ)
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    (root / "conf").mkdir()
    env["SPARK_CONF_DIR"] = str(root / "conf")  # no spark-defaults.conf of the host's
    cluster = StandaloneCluster(root, env)
    try:
        stack.start(spark=False)
        cluster.start(workers=2)
        yield stack, cluster
    finally:
        cluster.stop()
        stack.stop()


class CoreWatch:
    """Polls the core nodes while the job runs: any pause or unreachable core, and every
    ephemeral member each one saw up."""

    def __init__(self, stack: Any) -> None:
        self.stack = stack
        self.problems: list[str] = []
        self.ephemeral_seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from rabbitry.control import ControlError

        while not self._stop.wait(0.3):
            for view in self.stack.core_views():
                if view.state != "running":
                    self.problems.append(f"{view.name} {view.state}")
                    continue
                with contextlib.suppress(ControlError):
                    self.ephemeral_seen |= set(self.stack.client(view.name).ephemeral()["up"])

    def __enter__(self) -> CoreWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)


def _submit(stack: Any, cluster: StandaloneCluster, tmp: Path, data: Any, run_id: str) -> Path:
    """spark-submit the pipeline; returns the output directory. Dynamic allocation: executors
    are asked for while tasks wait and removed after 2 s idle, at most 2 (one per worker)."""
    from rabbitry.pipeline import submit

    template = tmp / "spark-node.yaml"
    template.write_text(json.dumps(stack.node_template()))
    first = stack.core_name(0)
    conf = {
        "spark.dynamicAllocation.enabled": "true",
        "spark.dynamicAllocation.shuffleTracking.enabled": "true",
        "spark.dynamicAllocation.executorIdleTimeout": "2s",
        "spark.dynamicAllocation.minExecutors": "0",
        "spark.dynamicAllocation.maxExecutors": "2",
        "spark.executor.cores": "1",
        "spark.executor.memory": "512m",
        "spark.driver.memory": "512m",
        "spark.ui.enabled": "false",
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.executorEnv.PYTHONPATH": os.environ.get("PYTHONPATH", ""),
    }
    argv = [str(cluster.home / "bin" / "spark-submit"), "--master", cluster.url]
    for key, value in conf.items():
        argv += ["--conf", f"{key}={value}"]
    out = tmp / "out.parquet"
    argv += [
        submit.__file__,
        "--input", str(data.path), "--output", str(out),
        "--node-config", str(template), "--join", f"{first}={stack.core_dist[first]}",
        "--master-file", str(stack.master_file), "--system", "demo", "--wait-replicas", "1",
        "--data-root", str(stack.executors_root), "--run-id", run_id,
        "--partitions", "8", "--batch", "100", "--json",
    ]  # fmt: skip
    log = tmp / "spark-submit.out"
    with log.open("wb") as sink:
        driver = subprocess.Popen(
            argv,
            env=cluster.env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    cluster.procs.append(("driver", driver))  # killed with the cluster, whatever happens
    try:
        code = driver.wait(420)
    except subprocess.TimeoutExpired:
        code = None
    text = log.read_text(errors="replace")
    assert code == 0, f"spark-submit ended with {code}:\n{text[-4000:]}"
    return out


def _summary(log: Path) -> dict[str, Any]:
    """The --json summary: the last JSON object spark-submit's stdout holds."""
    text = log.read_text(errors="replace")
    start = text.rfind("\n{\n")
    assert start >= 0, f"no JSON summary in {log}:\n{text[-3000:]}"
    return json.loads(text[start:].strip())


def test_pipeline_on_a_standalone_cluster_with_dynamic_allocation(
    standalone: tuple[Any, StandaloneCluster], tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    from rabbitry.demo.data import generate_messages
    from rabbitry.demo.report import check_exactly_once

    stack, cluster = standalone
    data = generate_messages(tmp_path / "in.jsonl", 4000, duplicate_ratio=0.15, seed=13)
    stack.revoke(list(data.revoked))
    stack.wait_revoked(len(data.revoked))
    run_id = f"standalone-{uuid.uuid4().hex[:8]}"
    with CoreWatch(stack) as watch:
        out = _submit(stack, cluster, tmp_path, data, run_id)
        summary = _summary(tmp_path / "spark-submit.out")
        executors = set(stack.executor_infos())  # the nodes still up; gone ones removed theirs

        def forgotten() -> bool:
            known = [stack.client(v.name).ephemeral() for v in stack.core_views()]
            return all(not k["up"] and not k["down"] for k in known)

        # The application ended, so every executor went away: each core forgets each node
        wait_until(forgotten, "every core to forget every executor's node", 120, poll=0.3)

    ids = pq.read_table(str(out), columns=["id"]).column("id").to_pylist()
    check = check_exactly_once(data.expected_ids(), data.revoked, ids)
    assert check.ok, check
    assert check.duplicates_executed == 0 and check.lost == 0
    assert summary["processed"] == len(ids) == check.expected
    assert summary["duplicates_skipped"] + summary["revoked_skipped"] + summary["processed"] == (
        data.messages
    )
    assert not watch.problems, f"a core node paused or was unreachable: {watch.problems[:10]}"
    for node in stack.launcher.nodes:
        paused = [line for line in node.stdout() + node.stderr() if PAUSE_LINE in line]
        assert not paused, f"{node.name} paused: {paused[:3]}"
    assert watch.ephemeral_seen, "no executor's node attached to the core as an ephemeral member"
    assert all(name.startswith("spark-") for name in watch.ephemeral_seen), watch.ephemeral_seen
    assert not executors - watch.ephemeral_seen, "an executor's node the core never listed"
    launched = sum(
        (cluster.root / f"worker-{i}.out")
        .read_text(errors="replace")
        .count("Asked to launch executor")
        for i in range(2)
    )
    print(
        f"executors launched: {launched}; nodes seen as ephemeral: {sorted(watch.ephemeral_seen)}"
    )
