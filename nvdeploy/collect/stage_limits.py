"""Default time limits of the cluster stages' commands, each overridden by its host var (``nccl_timeout``,
``nvloom_timeout``, ``mndiag_timeout``, ``gpudirect_timeout``).

The stages run them (phases/multinode.py, nvloom.py, mndiag.py, gpudirect.py) and the Slurm budget (slurm/budget.py)
adds them up before a run starts, so the limits sit below both.
"""

from __future__ import annotations

# Multi-node nccl-tests under mpirun (nccl.multinode, nccl.domain).
NCCL_TIMEOUT_S = 900.0
# Time kept between mpirun's own --timeout and the command's, for mpirun to stop its ranks and report.
MPIRUN_GRACE_S = 30.0
# nvloom_cli on an NVLink domain's trays (nvloom.domain).
NVLOOM_TIMEOUT_S = 300.0
# dcgmi mndiag on an NVLink domain's trays (dcgm.mndiag).
MNDIAG_TIMEOUT_S = 900.0
# ib_write_bw between a GPUDirect pair (rdma.gpudirect), and the extra time its server side waits for the client.
GPUDIRECT_TIMEOUT_S = 60.0
GPUDIRECT_SERVER_EXTRA_S = 15.0
