#!/usr/bin/env bash
# Install what the tests need, then run them. Used by the README and by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v sshd >/dev/null 2>&1 && [ ! -x /usr/sbin/sshd ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server openssh-client >/dev/null
  else
    echo "tests/run.sh: OpenSSH's sshd is needed for the end-to-end tests (apt-get install openssh-server)" >&2
    exit 2
  fi
fi
# sudo: the fault matrix runs the real sudo on the fake nodes (tests/e2e/test_fault_matrix_ssh.py).
if ! command -v sudo >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq sudo >/dev/null
  else
    echo "tests/run.sh: sudo is missing (apt-get install sudo): the sudo rows of the fault matrix will skip" >&2
  fi
fi
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "tests/run.sh: chromium is missing (apt-get install chromium): the browser tests of the report will skip" >&2
  fi
fi
python3 -m pip install -q -e '.[test]'
exec python3 -m pytest "$@"
