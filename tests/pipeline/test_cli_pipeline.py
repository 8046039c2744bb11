"""`rabbitry pipeline run` as a real subprocess, for everything decided before Spark starts.

Each run puts a stand-in `pyspark` package first on PYTHONPATH: importing it writes a marker
file and ends the process with exit code 99. So "exits 2 before Spark starts" is checked
directly (the real pyspark was never even imported), not by timing.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEADLINE = 60.0  # seconds; only reached when something hung
POISON_EXIT = 99

POISON = """\
import os
from pathlib import Path
Path(os.environ["PYSPARK_MARKER"]).write_text("pyspark was imported")
os._exit(99)
"""


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str
    pyspark_imported: bool


Cli = Callable[..., Result]


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    poison = tmp_path / "poison"
    (poison / "pyspark").mkdir(parents=True)
    (poison / "pyspark" / "__init__.py").write_text(POISON)
    marker = tmp_path / "pyspark-imported"

    def rabbitry(*args: str) -> Result:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(poison), str(ROOT)])
        env["PYSPARK_MARKER"] = str(marker)
        result = subprocess.run(
            [sys.executable, "-m", "rabbitry", "pipeline", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=DEADLINE,
            check=False,
        )
        return Result(result.returncode, result.stdout, result.stderr, marker.exists())

    return rabbitry


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "msgs.jsonl"
    path.write_text('{"id": "a", "payload": "p"}\n')
    return path


def test_the_stand_in_pyspark_is_what_gets_imported(cli: Cli, source: Path, tmp_path: Path) -> None:
    """The check of the checks: once the paths are fine, the CLI reaches pyspark, and the
    stand-in stops it there."""
    result = cli(
        "run",
        "--input",
        str(source),
        "--output",
        str(tmp_path / "out"),
        "--plain-redis",
        "127.0.0.1:1",
    )
    assert result.returncode == POISON_EXIT, result.stderr
    assert result.pyspark_imported


def test_help_describes_the_job_and_the_reject_file(cli: Cli) -> None:
    result = cli("run", "--help")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    for words in ("--input", "--output", "--overwrite", "--node-config", "--join", "--run-id"):
        assert words in text
    assert "<output>.rejects.jsonl" in text
    assert "line numbers" in text
    assert "exit codes" in text
    assert not result.pyspark_imported


def test_a_missing_input_exits_2_before_spark(cli: Cli, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-input.jsonl"
    result = cli(
        "run", "--input", str(missing), "--output", str(tmp_path / "out"), "--node-config", "x.yaml"
    )
    assert result.returncode == 2
    assert result.stderr.startswith("rabbitry pipeline run: ")
    assert f"input {missing} does not exist" in result.stderr
    assert "Traceback" not in result.stderr
    assert not result.pyspark_imported


def test_an_existing_output_without_overwrite_exits_2(
    cli: Cli, source: Path, tmp_path: Path
) -> None:
    output = tmp_path / "out.parquet"
    output.mkdir()
    (output / "part-0.parquet").write_bytes(b"PAR1")
    result = cli("run", "--input", str(source), "--output", str(output), "--node-config", "n.yaml")
    assert result.returncode == 2
    assert "already exists" in result.stderr and "--overwrite" in result.stderr
    assert not result.pyspark_imported
    assert (output / "part-0.parquet").read_bytes() == b"PAR1"  # untouched


def test_a_missing_node_config_without_plain_redis_exits_2(
    cli: Cli, source: Path, tmp_path: Path
) -> None:
    result = cli("run", "--input", str(source), "--output", str(tmp_path / "out"))
    assert result.returncode == 2
    assert "--node-config is required" in result.stderr
    assert "--plain-redis" in result.stderr
    assert not result.pyspark_imported


def test_a_bad_join_exits_2(cli: Cli, source: Path, tmp_path: Path) -> None:
    result = cli(
        "run",
        "--input",
        str(source),
        "--output",
        str(tmp_path / "out"),
        "--node-config",
        "n.yaml",
        "--join",
        "a@127.0.0.1",
    )
    assert result.returncode == 2
    assert "--join 'a@127.0.0.1'" in result.stderr
    assert "NODE=HOST:PORT" in result.stderr
    assert not result.pyspark_imported


def test_a_missing_required_option_exits_2(cli: Cli, tmp_path: Path) -> None:
    result = cli("run", "--output", str(tmp_path / "out"))
    assert result.returncode == 2
    assert "--input" in result.stderr
    assert not result.pyspark_imported


def test_a_zero_batch_exits_2_before_spark(cli: Cli, source: Path, tmp_path: Path) -> None:
    result = cli(
        "run",
        "--input",
        str(source),
        "--output",
        str(tmp_path / "out"),
        "--plain-redis",
        "127.0.0.1:6379",
        "--batch",
        "0",
    )
    assert not result.pyspark_imported
    assert result.returncode == 2
    assert "--batch" in result.stderr


# -- the same checks in this process (cheaper), for the variants -------------------------------


@pytest.fixture
def main_in_process(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str]]:
    """rabbitry.cli.main, with the root logger put back afterwards (the CLI replaces its
    handlers, pytest's included)."""
    from rabbitry.cli import main

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level

    def call(*args: str) -> tuple[int, str]:
        try:
            code = main(["pipeline", *args])
        finally:
            for handler in list(root.handlers):
                root.removeHandler(handler)
            for handler in handlers:
                root.addHandler(handler)
            root.setLevel(level)
        return code, capsys.readouterr().err

    return call


@pytest.mark.parametrize(
    "join",
    ["a@127.0.0.1", "a@127.0.0.1=", "a=127.0.0.1:7001", "a@h=127.0.0.1", "=127.0.0.1:7001"],
)
def test_bad_join_variants(
    main_in_process: Callable[..., tuple[int, str]], source: Path, tmp_path: Path, join: str
) -> None:
    code, err = main_in_process(
        "run", "--input", str(source), "--output", str(tmp_path / "out"), "--join", join
    )
    assert code == 2
    assert f"--join {join!r}: expected NODE=HOST:PORT" in err


def test_several_good_joins_pass_to_the_next_check(
    main_in_process: Callable[..., tuple[int, str]], source: Path, tmp_path: Path
) -> None:
    code, err = main_in_process(
        "run",
        "--input",
        str(source),
        "--output",
        str(tmp_path / "out"),
        "--join",
        "a@127.0.0.1=127.0.0.1:7001",
        "--join",
        "b@127.0.0.1=127.0.0.1:7002",
    )
    assert code == 2
    assert "--join" not in err
    assert "--node-config is required" in err


def test_the_paths_are_checked_before_the_join(
    main_in_process: Callable[..., tuple[int, str]], tmp_path: Path
) -> None:
    code, err = main_in_process(
        "run", "--input", str(tmp_path / "nope"), "--output", str(tmp_path / "o"), "--join", "x"
    )
    assert code == 2
    assert "does not exist" in err and "--join" not in err


def test_an_empty_input_directory_exits_2(
    main_in_process: Callable[..., tuple[int, str]], tmp_path: Path
) -> None:
    (tmp_path / "in").mkdir()
    code, err = main_in_process(
        "run", "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out")
    )
    assert code == 2
    assert "is empty" in err


def test_output_the_same_as_input_exits_2(
    main_in_process: Callable[..., tuple[int, str]], source: Path
) -> None:
    code, err = main_in_process(
        "run", "--input", str(source), "--output", str(source), "--overwrite"
    )
    assert code == 2
    assert "same path" in err


def test_a_missing_output_directory_exits_2(
    main_in_process: Callable[..., tuple[int, str]], source: Path, tmp_path: Path
) -> None:
    code, err = main_in_process(
        "run", "--input", str(source), "--output", str(tmp_path / "nope" / "out")
    )
    assert code == 2
    assert f"output directory {tmp_path / 'nope'} does not exist" in err


def test_pipeline_without_a_command_shows_its_usage(
    main_in_process: Callable[..., tuple[int, str]],
) -> None:
    code, err = main_in_process()
    assert code == 2
    assert "usage: rabbitry pipeline" in err and "run" in err
