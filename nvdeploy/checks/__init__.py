"""The check catalog: each check is a small function from a node's facts to findings, registered by id.

Checks are pure (facts + profile in, findings out). ``nvdeploy checks list`` and ``nvdeploy checks show ID``
print this catalog from the registry, with each check's docstring.
"""

from __future__ import annotations

from nvdeploy.checks.registry import CHECKS, Check, NodeContext, register

# Importing the modules registers their checks.
from nvdeploy.checks import driver, gpu, kmsg, memory, system  # noqa: E402,F401  isort: skip
# The catalog of issue 4: NVLink, PCIe, fabric manager, InfiniBand, clocks/thermals/MIG, versions, DCGM, nccl-tests.
from nvdeploy.checks import clocks, dcgm, fabric, ib, nccl, nvlink, pcie, versions  # noqa: E402,F401  isort: skip
# The GPU stack around the driver (issue 12): CUDA toolkit/driver compatibility, MPS.
from nvdeploy.checks import container, cuda, mps, power, rdma  # noqa: E402,F401  isort: skip
# The Kubernetes GPU Operator (cluster stage on the controller, nvdeploy/phases/k8s.py).
from nvdeploy.checks import gpu_operator  # noqa: E402,F401  isort: skip

__all__ = ["CHECKS", "Check", "NodeContext", "register"]
