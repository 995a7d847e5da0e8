"""Idempotent install and optimize actions, by name (``ACTIONS``); playbooks name them in their steps.

``nvdeploy actions list`` / ``nvdeploy actions show NAME`` print this catalog with each action's parameters.
"""

from __future__ import annotations

from nvdeploy.actions.base import ACTIONS, Action, ActionContext, Change, Param, StepResult, StepStatus, run_action

# Importing the modules registers their actions.
from nvdeploy.actions import gpu, imex, packages, system  # noqa: E402,F401  isort: skip

__all__ = ["ACTIONS", "Action", "ActionContext", "Change", "Param", "StepResult", "StepStatus", "run_action"]
