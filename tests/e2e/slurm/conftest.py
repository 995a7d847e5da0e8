"""Fixtures of the Slurm e2e tests: the cluster (slurm_harness.py) started once per session, reset per test."""

from __future__ import annotations

import os
import shutil
from typing import Iterator

import pytest
from slurm_harness import DIR, NODES, SlurmTestCluster, prepare


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmTestCluster]:
    required = bool(os.environ.get("NVDEPLOY_REQUIRE_SLURM"))
    have = all(shutil.which(t) for t in ("slurmctld", "slurmd", "srun", "munged"))
    if not have and (os.geteuid() != 0 or not shutil.which("apt-get")):
        if required:
            pytest.fail("Slurm is required (NVDEPLOY_REQUIRE_SLURM=1) but not installed and cannot be")
        pytest.skip("Slurm (slurmctld slurmd slurm-client munge) not installed, and not root with apt-get")
    env = dict(os.environ, SLURM_CONF=str(DIR / "etc" / "slurm.conf"))
    cluster = SlurmTestCluster(DIR, [f"node{i}" for i in range(1, NODES + 1)], env)
    # start-slurm.sh wipes its folder when it (re)starts; the node folders are written after it.
    cluster.stop()
    shutil.rmtree(DIR, ignore_errors=True)
    done = cluster.start()
    if done.returncode != 0 and have:  # a daemon that lost a race for its port on a loaded machine: once more
        cluster.stop()
        shutil.rmtree(DIR, ignore_errors=True)
        done = cluster.start()
    if done.returncode != 0:
        cluster.stop()  # whatever did start (a slurmd that lost its port leaves the others running)
        shutil.rmtree(DIR, ignore_errors=True)
        message = f"start-slurm.sh failed ({done.returncode}): {done.stderr[-2000:]}"
        if required or have:
            pytest.fail(message)
        pytest.skip(message)
    prepare(cluster)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(DIR, ignore_errors=True)


@pytest.fixture
def slurm(slurm_cluster: SlurmTestCluster) -> Iterator[SlurmTestCluster]:
    slurm_cluster.reset()
    yield slurm_cluster
