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
python3 -m pip install -q -e '.[test]'
exec python3 -m pytest "$@"
