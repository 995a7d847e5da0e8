"""How the probe travels: its source and pynvml's, compressed into one command-line argument.

No file is copied to the node and nothing is left behind: ``PYTHON -I -S -c BOOTSTRAP PAYLOAD`` rebuilds the two
modules in memory and runs the probe. The payload (~70 KB) stays well under Linux's 128 KiB limit for one
argument (a test holds it there).

The probe often runs as root, so its interpreter is started the way the batch runner's is: from a fixed path
(the node's system Python, or the host's ``probe_python``), never ``$PATH``'s ``python3``, and isolated (``-I``:
no script or working folder on ``sys.path``, no ``PYTHON*`` variables, no user site; ``-S``: no site packages,
which the probe does not need since it carries pynvml). Without ``-I``, ``python3 -c`` puts the working folder
first on ``sys.path``, so a ``base64.py`` planted there would run as root and could print healthy GPU facts.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import zlib
from functools import lru_cache
from pathlib import Path
from typing import Optional, Sequence

from nvdeploy.transport.node_paths import SYSTEM_PYTHONS

MAX_ARGUMENT_BYTES = 120 * 1024

BOOTSTRAP = (
    "import base64,json,sys,types,zlib\n"
    "m=json.loads(zlib.decompress(base64.b64decode(sys.argv[1])).decode())\n"
    "for n,s in m['modules']:\n"
    " mod=types.ModuleType(n);sys.modules[n]=mod;exec(compile(s,n+'.py','exec'),mod.__dict__)\n"
    "g={'__name__':'nvd_probe'};exec(compile(m['main'],'nvml_probe.py','exec'),g)\n"
    "sys.exit(g['main']())\n"
)


def _source_of(module: str) -> str:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise RuntimeError(f"{module} is not installed (pip install nvidia-ml-py)")
    return Path(spec.origin).read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def payload() -> str:
    probe = (Path(__file__).parent / "nvml_probe.py").read_text(encoding="utf-8")
    document = {"modules": [["pynvml", _source_of("pynvml")]], "main": probe}
    return base64.b64encode(zlib.compress(json.dumps(document).encode(), 9)).decode("ascii")


# The probe's argv is ``/bin/sh -c LAUNCH nvd-probe BOOTSTRAP PAYLOAD PYTHON...``: the first PYTHON that is an
# executable file runs it; none (a node without Python) exits 127, as a missing ``python3`` did, and nvidia-smi's
# facts are used instead.
LAUNCH = (
    'b=$1 p=$2; shift 2\n'
    'for x in "$@"; do [ -f "$x" ] && [ -x "$x" ] && exec "$x" -I -S -c "$b" "$p"; done\n'
    'echo "nvdeploy probe: no Python at $*" >&2; exit 127\n'
)
PROBE_NAME = "nvd-probe"


def probe_argv(*pythons: str) -> tuple[str, ...]:
    """The probe's argv, run by the first of ``pythons`` found (default: the node's system Python)."""
    return ("/bin/sh", "-c", LAUNCH, PROBE_NAME, BOOTSTRAP, payload(), *(pythons or SYSTEM_PYTHONS))


def launched_python(argv: Sequence[str]) -> Optional[tuple[str, ...]]:
    """The interpreters a probe argv tries (in order), or None when ``argv`` is not the probe's."""
    if len(argv) >= 6 and tuple(argv[:4]) == ("/bin/sh", "-c", LAUNCH, PROBE_NAME) and argv[4] == BOOTSTRAP:
        return tuple(argv[6:])
    return None
