"""How a run is stopped from outside: SIGTERM and SIGHUP end it as Ctrl-C does, with its report written.

SIGHUP is what a run gets when the operator's SSH session to the controller drops: left at its default it would
kill the run on the spot, with no report, no resume hint and, under ``--slurm``, the scheduler left half changed.
A SIGHUP that was ignored when nvdeploy started (``nohup``) stays ignored.
"""

from __future__ import annotations

import signal
from typing import Any


def _stop(signum: int, frame: Any) -> None:
    from nvdeploy.runner.engine import Interrupted

    raise Interrupted(143)


def _hangup(signum: int, frame: Any) -> None:
    # Whatever handles SIGTERM at this moment: the engine defers it while a result is handed on.
    term = signal.getsignal(signal.SIGTERM)
    if callable(term):
        term(signal.SIGTERM, frame)
    else:
        _stop(signum, frame)


def hangup_as_sigterm() -> Any:
    """SIGHUP handled as SIGTERM; returns the handler it replaced, or None when SIGHUP was not at its default
    (ignored under nohup, or handled already) and is left alone."""
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_DFL:
        return None
    return signal.signal(signal.SIGHUP, _hangup)


def install_stop_handlers() -> None:
    """SIGTERM raises Interrupted(143); SIGHUP does what SIGTERM does."""
    signal.signal(signal.SIGTERM, _stop)
    hangup_as_sigterm()
