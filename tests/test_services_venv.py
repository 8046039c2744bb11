"""tests/services.unactivated_venv run from a venv of one's own (issue 27): the inner venv
must see the packages of the interpreter running the tests, not only the base
interpreter's, or the demo and Spark tests fail with "No module named rabbitry"."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_inner_venv_sees_the_outer_venvs_packages(tmp_path: Path) -> None:
    outer = tmp_path / "outer"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(outer)], check=True)
    python = outer / "bin" / "python"
    purelib = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # The outer venv has what the tests need through its own site dir (as pip would install
    # it there), and one module that only it has.
    ours = sysconfig.get_paths()["purelib"]
    (purelib / "_deps.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    (purelib / "only_in_outer_27.py").write_text("MARK = 27\n")
    script = (
        "import subprocess, sys\n"
        "from pathlib import Path\n"
        "from tests.services import unactivated_venv\n"
        f"python, env = unactivated_venv(Path({str(tmp_path / 'inner')!r}))\n"
        "done = subprocess.run([python, '-c', 'import only_in_outer_27, rabbitry, psutil'],"
        " env=env, capture_output=True, text=True)\n"
        "sys.exit(done.stderr or 0)\n"
    )
    (tmp_path / "inner").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [str(python), "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
