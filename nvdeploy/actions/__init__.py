"""Idempotent install and optimize actions, by name (``ACTIONS``); playbooks name them in their steps.

``nvdeploy actions list`` / ``nvdeploy actions show NAME`` print this catalog with each action's parameters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nvdeploy.actions.base import (
        ACTIONS,
        Action,
        ActionContext,
        Change,
        Param,
        StepResult,
        StepStatus,
        run_action,
    )

__all__ = ["ACTIONS", "Action", "ActionContext", "Change", "Param", "StepResult", "StepStatus", "run_action"]


def __getattr__(name: str) -> Any:
    # The catalog loads on first use, not on import: the pure OS facts (osinfo) are imported by the simulator's
    # fake tools, one Python process per simulated command, and must not pay for the action modules and what
    # they import. Importing the modules registers their actions.
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from nvdeploy.actions import base, gpu, imex, mig, packages, system  # noqa: F401

    return getattr(base, name)
