"""A loaded node's shell starts late: the controller still waits for the node's own timeout, over real OpenSSH on
loopback (127.0.0.0/8).

Under load, ``test_chaos_faults_give_the_same_findings_over_ssh_and_sim`` saw SSH say "no complete answer within
23 s" where the simulator said "timed out after 15 s": the controller counted the commands' limit plus its slack
from when the batch was sent, and gave up before a late-starting node's ``timeout`` fired. Here the node's ``sh``
(first on its PATH, as sshd sets it) sleeps longer than that old limit before it runs the batch, so the old count
fails every time, whatever the machine's load; the stage count (transport/batch_budget.py) passes.
"""

from __future__ import annotations

import pytest

from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.results import ErrorReason
from nvdeploy.sim.scenario import NodeScenario
from nvdeploy.transport.base import CommandSpec
from nvdeploy.transport.ssh import SSHTransport

PROFILE = ProfileCatalog().get("h100-sxm-8x")
TIMEOUT_S = 2
LATE_S = 12  # over the old limit counted from the request: the commands' timeout + 8 s

pytestmark = [pytest.mark.usefixtures("requires_sshd")]


@pytest.mark.timeout(180)
def test_late_shell_over_ssh_gives_the_nodes_own_timeout(ssh_cluster_factory):
    cluster = ssh_cluster_factory([("late", NodeScenario("late", PROFILE, ("smi_hang",)).to_json())])
    node = cluster.node("late")
    late_sh = node.bin_dir / "sh"
    late_sh.write_text(f"#!/bin/sh\n# nvdeploy test: a loaded node whose shell starts {LATE_S} s late\n"
                       f'sleep {LATE_S}\nexec /bin/sh "$@"\n')
    late_sh.chmod(0o755)
    transport = SSHTransport(node.address, user=cluster.user, port=node.port, key_file=str(cluster.client_key),
                             known_hosts=str(cluster.known_hosts), connect_timeout_s=30)
    transport.connect()
    try:
        smi, echo = transport.run_batch([CommandSpec("smi", ("nvidia-smi", "-q"), TIMEOUT_S),
                                         CommandSpec("echo", ("echo", "hi"), TIMEOUT_S)])
    finally:
        transport.close()
    # Before: both ERROR timeout "no complete answer within 10 s", before the node's shell had even started.
    assert (smi.error, smi.error_detail, smi.timed_out) == (ErrorReason.TIMEOUT, f"timed out after {TIMEOUT_S} s",
                                                            True)
    assert (echo.rc, echo.stdout, echo.error) == (0, b"hi\n", None)
    assert smi.duration_s >= LATE_S
