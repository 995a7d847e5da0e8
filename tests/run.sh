#!/usr/bin/env bash
# Install what the tests need, then run them. Used by the README and by .ci/run.
#
# Python: the active virtualenv when there is one ($VIRTUAL_ENV), else the project's own .venv, created here with
# `python3 -m venv` (PYTHON=/path/to/python3 picks another interpreter). A virtualenv, because a distribution's
# Python (Debian 12, Ubuntu 24.04: PEP 668) refuses `pip install` into itself. The test extras are installed into
# it (editable) when the checkout's setup.cfg/pyproject.toml changed since the last install, then pytest runs there.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_install() {  # apt_install PACKAGE... (root with apt-get only)
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
can_apt() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }

if ! command -v sshd >/dev/null 2>&1 && [ ! -x /usr/sbin/sshd ]; then
  if can_apt; then
    apt_install openssh-server openssh-client
  else
    echo "tests/run.sh: OpenSSH's sshd is needed for the end-to-end tests (apt-get install openssh-server)" >&2
    exit 2
  fi
fi
# sudo: the fault matrix runs the real sudo on the fake nodes (tests/e2e/test_fault_matrix_ssh.py).
if ! command -v sudo >/dev/null 2>&1; then
  if can_apt; then
    apt_install sudo
  else
    echo "tests/run.sh: sudo is missing (apt-get install sudo): the sudo rows of the fault matrix will skip" >&2
  fi
fi
if ! command -v chromium >/dev/null 2>&1; then
  if can_apt; then
    apt_install chromium
  else
    echo "tests/run.sh: chromium is missing (apt-get install chromium): the browser tests of the report will skip" >&2
  fi
fi
if ! command -v promtool >/dev/null 2>&1; then
  if can_apt; then
    apt_install --no-install-recommends prometheus
  else
    echo "tests/run.sh: promtool is missing (apt-get install prometheus): the Prometheus linter tests will skip" >&2
  fi
fi
# The Slurm tests run a real slurmctld + slurmd cluster on this machine (tests/e2e/slurm, tests/slurm/start-slurm.sh).
if ! command -v slurmctld >/dev/null 2>&1 || ! command -v slurmd >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
  if can_apt; then
    apt_install --no-install-recommends slurmctld slurmd slurm-client munge
  else
    echo "tests/run.sh: Slurm is missing (apt-get install slurmctld slurmd slurm-client munge): the Slurm tests will skip" >&2
  fi
fi

# storage.throughput runs the real fio into a temp folder (tests/unit/test_storage_real_run.py).
if ! command -v fio >/dev/null 2>&1; then
  if can_apt; then
    apt_install --no-install-recommends fio
  else
    echo "tests/run.sh: fio is missing (apt-get install fio): the real fio storage test will skip" >&2
  fi
fi
# The FAIL/ERROR hosts line is read back by the real pdsh (tests/unit/test_cli_run_end.py; its exec module, no network).
if ! command -v pdsh >/dev/null 2>&1; then
  if can_apt; then
    apt_install --no-install-recommends pdsh
  else
    echo "tests/run.sh: pdsh is missing (apt-get install pdsh): the hosts line is not read back by pdsh" >&2
  fi
fi
# The node-side batch script (nvdeploy/transport/batch.sh) is checked by shellcheck before any test.
if ! command -v shellcheck >/dev/null 2>&1; then
  if can_apt; then
    apt_install --no-install-recommends shellcheck
  else
    echo "tests/run.sh: shellcheck is missing (apt-get install shellcheck): batch.sh is not linted" >&2
  fi
fi

# One set-up at a time per checkout (two runs at once must not build .venv together): lock this script's file.
exec 9<tests/run.sh
if command -v flock >/dev/null 2>&1; then
  flock 9
fi

if [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/python" ]; then
  venv="$VIRTUAL_ENV"
else
  venv="$PWD/.venv"
  base="${PYTHON:-python3}"
  if ! "$venv/bin/python" -c 'import pip' >/dev/null 2>&1; then  # missing, or left half-made by a killed run
    if ! "$base" -m venv --clear "$venv" >/dev/null 2>&1; then
      # Debian/Ubuntu ship venv's ensurepip separately: python3-venv (python3.X-venv)
      if can_apt; then
        minor="$("$base" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
        apt_install python3-venv || true
        apt_install "python$minor-venv" 2>/dev/null || true
      fi
      "$base" -m venv --clear "$venv" || {
        echo "tests/run.sh: '$base -m venv' failed: install python3-venv (apt-get install python3-venv)" >&2
        exit 2
      }
    fi
  fi
fi
py="$venv/bin/python"
# Reinstall only when the package definition changed (an editable install sees code changes by itself).
stamp="$venv/.nvdeploy-test-install"
want="$(cat setup.cfg pyproject.toml 2>/dev/null | cksum) $PWD"
# -I: without the current folder on sys.path, so this sees what helper processes started elsewhere will import
here='import os, sys, nvdeploy, pytest; sys.exit(os.path.realpath(nvdeploy.__file__) != os.path.realpath(sys.argv[1]))'
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! "$py" -I -c "$here" "$PWD/nvdeploy/__init__.py" >/dev/null 2>&1
then
  "$py" -m pip install -q --disable-pip-version-check -e '.[test]'
  printf '%s\n' "$want" >"$stamp"
fi
exec 9<&-
if command -v shellcheck >/dev/null 2>&1; then
  if ! shellcheck -s sh nvdeploy/transport/batch.sh >&2; then
    echo "tests/run.sh: shellcheck found problems in nvdeploy/transport/batch.sh: see above" >&2
    exit 1
  fi
elif [ -n "${NVDEPLOY_REQUIRE_SHELLCHECK:-}" ]; then
  echo "tests/run.sh: shellcheck is required in CI (.ci/run installs it)" >&2
  exit 1
fi
# Style is part of the gate: ruff (the test extra installs it; ruff.toml holds its rules) over the whole tree.
if [ -x "$venv/bin/ruff" ]; then
  if ! "$venv/bin/ruff" check --quiet . >&2; then
    echo "tests/run.sh: ruff found problems: see above" >&2
    exit 1
  fi
else
  echo "tests/run.sh: ruff is missing from $venv (pip install -e '.[test]')" >&2
  exit 2
fi
# The layering contracts (.importlinter) are checked before any test, and a broken one fails the run. import-linter
# needs Python 3.11+ (the test extra installs it there); an older interpreter skips them and says so.
if [ -x "$venv/bin/lint-imports" ]; then
  if ! contracts="$("$venv/bin/lint-imports" --no-cache --no-logo .importlinter 2>&1)"; then
    printf '%s\n' "$contracts" >&2
    echo "tests/run.sh: an import contract is broken (.importlinter): see above" >&2
    exit 1
  fi
  printf '%s\n' "$contracts" | grep '^Contracts:' || true
elif "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "tests/run.sh: lint-imports is missing from $venv (pip install -e '.[test]')" >&2
  exit 2
else
  echo "tests/run.sh: Python < 3.11: the import contracts (.importlinter) are not checked" >&2
fi
# In parallel by default: the suite waits on subprocesses, sshd sessions, Slurm daemons and deliberate timeouts far
# more than it computes, so more workers than cores pays (NVDEPLOY_TEST_WORKERS=0: one process). loadgroup: tests
# marked xdist_group (the Slurm e2e tests share one Slurm cluster) stay on one worker. Arguments that choose
# workers themselves (-n, --numprocesses, -p no:xdist) are left alone.
parallel=(-n "${NVDEPLOY_TEST_WORKERS:-4}" --dist loadgroup)
for arg in "$@"; do
  case "$arg" in
    -n*|--numprocesses|--numprocesses=*|no:xdist) parallel=() ;;
  esac
done
if [ "${NVDEPLOY_TEST_WORKERS:-4}" = 0 ]; then
  parallel=()
fi
exec "$py" -m pytest ${parallel[@]+"${parallel[@]}"} "$@"
