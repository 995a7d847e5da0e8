"""Where nvdeploy keeps its state: the run folders (``<state>/<cluster>/<run-id>/``) and the run history
(``<state>/history.sqlite``).

One rule for every command that writes or reads them, so a cron job, a second shell and a command run from
another folder find the same history:

1. ``--state-dir DIR`` (``--out DIR`` is the same option);
2. the environment variable ``NVDEPLOY_STATE_DIR``;
3. ``./reports`` when that folder exists in the current folder (a checkout of nvdeploy has one: the default the
   README has always documented, and where earlier runs already are);
4. ``$XDG_STATE_HOME/nvdeploy``, by default ``~/.local/state/nvdeploy`` (the XDG Base Directory specification's
   place for state that should persist between runs but is not worth backing up like configuration).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

ENV_VAR = "NVDEPLOY_STATE_DIR"
CHECKOUT_FOLDER = "reports"


class StateDirError(Exception):
    """No state folder can be named (no option, no variable, no ./reports and no home folder)."""


@dataclass(frozen=True)
class StateDir:
    """The state folder and the rule that chose it, for messages (``$NVDEPLOY_STATE_DIR``)."""

    path: Path
    source: str


def resolve_state_dir(option: Optional[Path] = None, environ: Optional[Mapping[str, str]] = None,
                      cwd: Optional[Path] = None) -> StateDir:
    """The state folder by the rule of this module; ``environ`` and ``cwd`` default to the process's own."""
    env = os.environ if environ is None else environ
    if option is not None:
        return StateDir(Path(option), "--state-dir")
    chosen = env.get(ENV_VAR, "").strip()
    if chosen:
        return StateDir(Path(os.path.expanduser(chosen)), f"${ENV_VAR}")
    here = Path.cwd() if cwd is None else cwd
    if (here / CHECKOUT_FOLDER).is_dir():
        # Relative, as before: reports and messages keep saying reports/<cluster>/... in a checkout.
        return StateDir(Path(CHECKOUT_FOLDER) if cwd is None else here / CHECKOUT_FOLDER,
                        f"./{CHECKOUT_FOLDER} in the current folder")
    xdg = env.get("XDG_STATE_HOME", "").strip()
    # The specification: a relative XDG_STATE_HOME is invalid and is ignored.
    if xdg and os.path.isabs(xdg):
        return StateDir(Path(xdg) / "nvdeploy", "$XDG_STATE_HOME")
    home = env.get("HOME", "").strip()
    if not home:
        try:
            home = str(Path.home())
        except (KeyError, RuntimeError):
            home = ""
    if not home or not os.path.isabs(home):
        raise StateDirError(f"no state folder: set --state-dir DIR or ${ENV_VAR} (no ./{CHECKOUT_FOLDER} here, "
                            "no XDG_STATE_HOME and no home folder)")
    return StateDir(Path(home) / ".local" / "state" / "nvdeploy",
                    f"the default: no ./{CHECKOUT_FOLDER} here, no $XDG_STATE_HOME")


STATE_DIR_HELP = (f"Where runs and the history live: runs in DIR/<cluster>/<run-id>/, the history in "
                  f"DIR/history.sqlite. Default: ${ENV_VAR}, else ./{CHECKOUT_FOLDER} when it exists here (a "
                  "checkout), else $XDG_STATE_HOME/nvdeploy (~/.local/state/nvdeploy).")
