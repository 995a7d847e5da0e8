"""Test harnesses for nvdeploy: real OpenSSH servers on loopback addresses acting as fake GPU nodes."""

from __future__ import annotations

from nvdeploy.testing.errors import HarnessError
from nvdeploy.testing.login_user import TEST_USER, ensure_test_user
from nvdeploy.testing.procs import pid_alive, reap_workdir
from nvdeploy.testing.sshd import (
    BASE_PATH,
    MAX_LISTEN_PER_SSHD,
    SSHD,
    FakeNode,
    SshCluster,
    free_port,
    iter_cluster_processes,
    node_address,
    sshd_available,
)

__all__ = [
    "BASE_PATH",
    "MAX_LISTEN_PER_SSHD",
    "SSHD",
    "TEST_USER",
    "FakeNode",
    "HarnessError",
    "SshCluster",
    "ensure_test_user",
    "free_port",
    "iter_cluster_processes",
    "node_address",
    "pid_alive",
    "reap_workdir",
    "sshd_available",
]
