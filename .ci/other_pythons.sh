#!/usr/bin/env bash
# The Pythons a newcomer may have, besides the 3.11 that .ci/run tests: for each of 3.12 and
# 3.13 found on this machine (python3.X on PATH, else pyenv's), a venv of its own with
# `pip install -e '.[test,demo]'`, then the suites that need neither Spark nor a cluster of
# node processes (below). A missing interpreter is
# skipped, saying so. With RABBITRY_CI_DEMO=1, `rabbitry demo --quick` also runs once on 3.13
# (it installs '.[all]' there: pip resolves `pyspark>=3.5,<5` to the newest, 4.3.0 today, on
# 3.11, 3.12 and 3.13 alike; Java 17+ needed).
#
#     .ci/other_pythons.sh                 # after .ci/run (which starts Redis and RabbitMQ)
#     RABBITRY_CI_VENVS=/var/tmp/venvs .ci/other_pythons.sh   # where the venvs go (kept)
set -euo pipefail
cd "$(dirname "$0")/.."

export PIP_DISABLE_PIP_VERSION_CHECK=1
export RABBITRY_REQUIRE_SERVICES=1
venvs="${RABBITRY_CI_VENVS:-${TMPDIR:-/tmp}/rabbitry-ci-venvs}"
# The suites without Spark and without clusters of node processes: the five packages' own
# suites, the simulator and the fault proxy, where a new Python's stdlib (selectors, ssl,
# threading, typing) shows first. The cluster suites (tests/rabbitry's node tests, chaos,
# testing, mnesia_nodes) run on 3.11 only, to keep CI's time and its exposure to a loaded
# machine's timing bounded; `rabbitry demo --quick` on 3.13 runs a real cluster there.
suites=(-m "not spark" tests/supervisors tests/bus tests/gossip tests/node_monitor tests/dist
        tests/mnesia_like tests/failover tests/sim tests/faultproxy tests/rabbitry/demo
        tests/rabbitry/observe)

find_python() { # 3.12 -> the path of a working python3.12, or nothing
  local candidate
  for candidate in "$(command -v "python$1" 2>/dev/null || true)" \
      $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$1".*/bin/python 2>/dev/null | sort -rV); do
    # a pyenv shim exists for every installed version but may refuse to run: try it
    if [ -n "$candidate" ] && "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != tuple(map(int, sys.argv[1].split("."))))' "$1" 2>/dev/null; then
      echo "$candidate"
      return 0
    fi
  done
}

status=0
for version in 3.12 3.13; do
  python="$(find_python "$version")"
  if [ -z "$python" ]; then
    echo "ci: no Python $version on this machine; skipped"
    continue
  fi
  venv="$venvs/py$version"
  echo "ci: Python $version ($python) in $venv"
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  extras=test,demo  # the timeline plot tests need matplotlib
  if [ "$version" = 3.13 ] && [ "${RABBITRY_CI_DEMO:-0}" = 1 ]; then extras=all; fi
  "$venv/bin/python" -m pip install -q -e ".[$extras]"
  # The venv's python by its path, never activated, as a newcomer's cron or pipx would.
  if ! env -u PYTHONPATH -u VIRTUAL_ENV "$venv/bin/python" -m pytest "${suites[@]}"; then
    echo "ci: the suites failed on Python $version" >&2
    status=1
  fi
  if [ "$extras" = all ]; then
    (cd "$(mktemp -d)" && env -u PYTHONPATH "$venv/bin/rabbitry" demo --quick) || {
      echo "ci: rabbitry demo --quick failed on Python $version" >&2
      status=1
    }
  fi
done
exit "$status"
