"""The worst-case duration a maintenance reservation must cover, and the run's deadline inside it."""

from __future__ import annotations

import time

from nvdeploy.cli.commands.slurm import _reservation_deadline
from nvdeploy.config.inventory import Host
from nvdeploy.config.levels import load_levels
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.slurm.budget import CLOSE_S, worst_case
from nvdeploy.slurm.reservation import Reservation


def hosts(n: int, **vars_: object) -> list[Host]:
    return [Host(f"gpu{i}", {"profile": "h100-sxm-8x", **vars_}) for i in range(n)]


def test_full_level_needs_the_dcgm_r3_limit_and_the_cluster_rounds() -> None:
    levels, catalog = load_levels(), ProfileCatalog()
    full = worst_case(hosts(4), catalog, levels["full"], 64, 10.0, None)
    assert full.seconds > 3600 + 900 and "dcgm_diag_r3 3600 s" in full.detail and "cluster stages" in full.detail
    quick = worst_case(hosts(4), catalog, levels["quick"], 64, 10.0, None)
    assert quick.seconds < 30 * 60 < full.seconds
    # A host's own limit counts; nodes beyond --forks run in waves.
    longer = worst_case(hosts(4, dcgm_timeout=7200), catalog, levels["full"], 64, 10.0, None)
    assert longer.seconds - full.seconds == 3600
    waves = worst_case(hosts(4), catalog, levels["standard"], 2, 10.0, None)
    single = worst_case(hosts(2), catalog, levels["standard"], 2, 10.0, None)
    assert "x 2 waves" in waves.detail and waves.seconds > single.seconds
    assert worst_case(hosts(4), catalog, levels["full"], 64, 10.0, 1600).seconds < 30 * 60


def test_the_run_deadline_ends_before_the_reservation_does() -> None:
    res = Reservation("r", ("a",), 1800.0, created=True, created_at=time.monotonic() - 600)
    inside = _reservation_deadline(res, None)
    assert 1800 - 600 - CLOSE_S - 5 < inside <= 1800 - 600 - CLOSE_S
    assert _reservation_deadline(res, 100.0) == 100.0
    late = Reservation("r", ("a",), 60.0, created=True, created_at=time.monotonic() - 600)
    assert _reservation_deadline(late, None) == 1.0  # past its end: no node, no heavy test starts
