"""The scheduler's state is safe whatever the run finds or however it ends, against the real Slurm 22.05 of
slurm_harness.py: resume only what this run re-checked, every ending (normal, error, Ctrl-C, SIGTERM, SIGHUP,
SIGKILL + ``nvdeploy slurm recover``) leaves no failed node schedulable, the reservation covers the run, an
unreadable job list is busy, and the ``--via slurm`` batch travels on stdin."""

from __future__ import annotations

import pytest
from slurm_harness import SlurmTestCluster

from nvdeploy.inventory import Host
from nvdeploy.slurm.client import SlurmClient
from nvdeploy.slurm.srun import SrunOptions, SrunPool
from nvdeploy.transport import batch
from nvdeploy.transport.base import CommandSpec

pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("slurm")]
MAX_ARG_STRLEN = 128 * 1024


def test_via_slurm_batch_larger_than_one_argv_word_travels_on_stdin(slurm: SlurmTestCluster,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch over MAX_ARG_STRLEN (one execve word) runs: srun gets it on stdin, not as an argument."""
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    words = ("a" * 90_000, "b" * 90_000)  # each word fits one argument on the node; the script does not
    spec = CommandSpec("big", ("printf", "%s%s", *words), 60)
    assert len(batch.build_script([spec]).encode()) > MAX_ARG_STRLEN
    pool = SrunPool([Host("node1", {})], SrunOptions(partition="debug", job_name="nvd-big"),
                    SlurmClient(timeout_s=10), gather_s=0.1)
    try:
        (result,) = pool.run("node1", [spec], 120.0)
    finally:
        pool.release()
    assert result.error is None and result.rc == 0, (result.error, result.error_detail, pool.steps)
    assert result.stdout == (words[0] + words[1]).encode()
    (step,) = pool.steps
    assert len(step["command"]) < 4096 and step["command"].endswith("<batch on stdin>")
