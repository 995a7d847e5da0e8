"""Imports every module that extends the simulator with tools, faults or output filters.

Each module below registers itself on import (``register_tool``, ``register_fault``, ``OUTPUT_FILTERS``). Add one
import line per new module.
"""
from nvdeploy.sim import fake_nvml  # noqa: E402,F401
