"""Pytest fixtures for the real-SSH harness. Opt in with ``pytest_plugins = ["nvdeploy.testing.pytest_plugin"]``
in a conftest, or import the fixture into a test module."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Callable

import pytest

from nvdeploy.testing.sshd import SSHD, SshCluster, sshd_available

ClusterFactory = Callable[..., SshCluster]


@pytest.fixture
def ssh_cluster_factory() -> Iterator[ClusterFactory]:
    """A callable ``make(node_scenarios, workdir=None, **kwargs) -> SshCluster`` returning a started cluster.

    Every cluster it made is stopped at teardown (sshd listeners, sessions and stray processes killed by PID).
    Skips the test when ``/usr/sbin/sshd`` is not installed.
    """
    clusters: list[SshCluster] = []

    def make(
        node_scenarios: Sequence[tuple[str, str]] | int, workdir: Path | None = None, **kwargs: bool
    ) -> SshCluster:
        if not sshd_available():
            pytest.skip(f"{SSHD} is not installed (apt-get install openssh-server)")
        cluster = SshCluster(node_scenarios, workdir, **kwargs)
        clusters.append(cluster)
        cluster.start()
        return cluster

    try:
        yield make
    finally:
        errors: list[BaseException] = []
        for cluster in reversed(clusters):
            try:
                cluster.stop()
            except Exception as exc:  # noqa: BLE001 - stop the others, then report
                errors.append(exc)
        if errors:
            raise errors[0]
