"""The Slurm client's choice of format and its errors, and the srun step's command lines and output split."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Sequence

import pytest

from nvdeploy.slurm.client import Completed, SlurmClient, SlurmError
from nvdeploy.slurm.srun import WRAPPER, SrunOptions, batch_input, nccl_srun_argv, split_labelled, srun_argv
from nvdeploy.transport import batch
from nvdeploy.transport.base import CommandSpec

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
TEXT = (FIXTURES / "scontrol-show-node-22.05.txt").read_text()
DOWN = "slurm_load_node error: Unable to contact slurm controller (connect failure)\n"


class Fake:
    def __init__(self, answers: dict[str, tuple[int, str, str]]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], timeout: float) -> Completed:
        self.calls.append(list(argv))
        rc, out, err = self.answers.get(" ".join(argv[:3]), (1, "", "unexpected"))
        return Completed(tuple(argv), rc, out, err)


def test_22_05_json_is_used_when_it_has_nodes() -> None:
    fake = Fake({"sinfo --json": (0, (FIXTURES / "sinfo-22.05.json").read_text(), "")})
    assert len(SlurmClient(runner=fake).nodes()) == 4 and fake.calls == [["sinfo", "--json"]]


def test_controller_down_json_falls_back_to_text_for_slurms_own_message() -> None:
    fake = Fake({"sinfo --json": (0, '{"errors": [{"error": "Unspecified error"}], "nodes": []}', ""),
                 "scontrol -o show": (1, "", DOWN)})
    with pytest.raises(SlurmError) as err:
        SlurmClient(runner=fake).nodes()
    assert err.value.message == DOWN.strip()
    assert [c[:2] for c in fake.calls] == [["sinfo", "--json"], ["scontrol", "-o"]]


def test_slurm_23_uses_scontrol_json_and_old_slurm_uses_text() -> None:
    new = Fake({"sinfo --json": (0, '{"sinfo": []}', ""),
                "scontrol --json show": (0, '{"nodes": [{"name": "gpu1", "state": ["IDLE"]}]}', "")})
    assert [n.name for n in SlurmClient(runner=new).nodes()] == ["gpu1"]
    old = Fake({"sinfo --json": (1, "", "sinfo: unrecognized option '--json'\n"), "scontrol -o show": (0, TEXT, "")})
    assert len(SlurmClient(runner=old).nodes()) == 4


def test_timeout_is_a_slurm_error() -> None:
    def hang(argv: Sequence[str], timeout: float) -> Completed:
        raise SlurmError(argv, f"no answer within {timeout:g} s (is slurmctld up and reachable?)")

    with pytest.raises(SlurmError, match="no answer within 3 s"):
        SlurmClient(timeout_s=3, runner=hang).nodes()


def test_srun_command_lines() -> None:
    opts = SrunOptions(reservation="nvdeploy-r1", partition="h100", account="ops", qos="maint")
    argv = srun_argv(["gpu1", "gpu2"], opts, 95, "nvdeploy-r1-1", 8)
    assert argv == ["srun", "--nodes=2", "--nodelist=gpu1,gpu2", "--ntasks-per-node=1", "--input=all", "--label",
                    "--job-name=nvdeploy-r1-1", "--time=1:35", "--immediate=30", "--kill-on-bad-exit=0",
                    "--chdir=/", "--reservation=nvdeploy-r1", "--partition=h100", "--account=ops", "--qos=maint",
                    "--exclusive", "--gres=gpu:8", "/bin/sh"]
    nccl = nccl_srun_argv(["gpu1", "gpu2"], 8, SrunOptions(), ["all_reduce_perf", "-b", "8G", "-g", "1"], 600, "j")
    assert nccl[:6] == ["srun", "--mpi=pmix", "--nodes=2", "--nodelist=gpu1,gpu2", "--ntasks-per-node=8",
                        "--gpus-per-node=8"] and nccl[-5:] == ["all_reduce_perf", "-b", "8G", "-g", "1"]
    assert "--chdir=/" in nccl  # never the caller's folder, which may be one others can write


def test_wrapper_output_split_per_node_back_into_the_batch_frames() -> None:
    """Two "tasks" of the wrapper, run here with sh and labelled as srun --label does, interleaved by line."""
    specs = [CommandSpec("echo", ("printf", "a\\0b\\n\\377 __NVD_BATCH_END__ fake"), 10)]
    script = batch.build_script(specs)
    outputs = {}
    for task, node in enumerate(["gpu1", "gpu2"]):
        # stdin stays open while the task runs, as srun --input=all keeps it: its EOF would end the batch.
        # The batch comes on stdin (its size line, then the script), as the step's stdin brings it.
        proc = subprocess.Popen(["/bin/sh", "-c", WRAPPER, "nvd-wrap"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, env={"SLURMD_NODENAME": node, "PATH": "/usr/bin:/bin"})
        assert proc.stdout is not None and proc.stdin is not None
        proc.stdin.write(batch_input(script))
        proc.stdin.flush()
        out = proc.stdout.read()
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
        outputs[task] = [f"{task}: ".encode() + line for line in out.splitlines()]
    mixed = b"\n".join(line for pair in zip(*outputs.values()) for line in pair) + b"\n"
    per_node = split_labelled(mixed)
    assert set(per_node) == {"gpu1", "gpu2"}
    for raw in per_node.values():
        (result,) = batch.parse_output(specs, raw, 0.1)
        assert result.rc == 0 and result.stdout == b"a\0b\n\377 __NVD_BATCH_END__ fake"


def _host(name: str, gres: str, partitions: tuple, state: str = "idle", alloc: int = 0):
    from nvdeploy.config.inventory import Host
    from nvdeploy.slurm.nodes import SlurmNode

    return Host(name, {"slurm_node": SlurmNode(name, state, (), "", "", gres, partitions, (), alloc).to_dict()})


def test_step_gres_and_partition_come_from_the_nodes() -> None:
    from nvdeploy.slurm.srun import SrunPool

    pool = SrunPool([_host("a", "gpu:8", ("h100", "all")), _host("b", "gpu:h100:7", ("all", "h100"))], SrunOptions())
    assert pool._gres_for(["a", "b"]) == 7 and pool._options_for(["a", "b"]).partition == "h100"
    mixed = SrunPool([_host("a", "gpu:8", ("x",)), _host("b", "", ("y",))], SrunOptions())
    assert mixed._gres_for(["a", "b"]) is None and mixed._options_for(["a", "b"]).partition is None
    given = SrunPool([_host("a", "gpu:8", ("x",))], SrunOptions(partition="p"))
    assert given._options_for(["a"]).partition == "p"
    for pool_ in (pool, mixed, given):
        pool_.release()


def test_nodes_slurm_cannot_start_are_refused_before_the_step() -> None:
    from nvdeploy.results import ErrorReason
    from nvdeploy.slurm.srun import SrunPool

    pool = SrunPool([_host("up", "gpu:8", ("p",)), _host("down", "gpu:8", ("p",), "down"),
                     _host("busy", "gpu:8", ("p",), "mixed", 4)], SrunOptions())
    assert pool.unusable("up") is None
    assert pool.unusable("down") == (ErrorReason.UNREACHABLE, "Slurm cannot start a task on down: node is down")
    reason, text = pool.unusable("busy")  # type: ignore[misc]
    assert reason is ErrorReason.BUSY and "exclusive srun step" in text
    shared = SrunPool([_host("busy", "gpu:8", ("p",), "mixed", 4)], SrunOptions(exclusive=False))
    assert shared.unusable("busy") is None
    pool.release()
    shared.release()


def _silent(name: str):
    from nvdeploy.config.inventory import Host
    from nvdeploy.slurm.nodes import SlurmNode

    node = SlurmNode(name, "idle", ("NOT_RESPONDING",), "", "", "gpu:8", ("p",), (), 0)
    return Host(name, {"slurm_node": node.to_dict()})


def test_a_node_not_responding_just_after_a_resume_is_waited_for_not_given_up() -> None:
    """Slurm shows a resumed node "idle*" until its next ping: the transport waits (one sinfo a second for all
    such nodes) and runs it once Slurm hears from it; one that stays silent past the bound is ERROR unreachable."""
    from nvdeploy.results import ErrorReason
    from nvdeploy.slurm.nodes import SlurmNode
    from nvdeploy.slurm.srun import SrunPool, SrunTransport
    from nvdeploy.transport.base import TransportError

    asked: list[str] = []

    class Client:
        def nodes(self, names: str) -> list[SlurmNode]:
            asked.append(names)
            late = ("NOT_RESPONDING",) if len(asked) < 2 else ()
            return [SlurmNode("late", "idle", late, "", "", "gpu:8", ("p",), (), 0),
                    SlurmNode("gone", "idle", ("NOT_RESPONDING",), "", "", "gpu:8", ("p",), (), 0)]

    pool = SrunPool([_silent("late"), _silent("gone")], SrunOptions(immediate_s=3), client=Client())  # type: ignore[arg-type]
    try:
        assert pool._expected == {"late", "gone"}  # the first step's gathering waits for both
        SrunTransport(pool, "late").connect()
        assert asked[0] == "gone,late" and pool.unusable("late") is None
        with pytest.raises(TransportError) as raised:
            SrunTransport(pool, "gone").connect()
        assert raised.value.reason is ErrorReason.UNREACHABLE
        assert "slurmd is not responding (idle*) for 3 s" in str(raised.value)
        assert "gone" not in pool._expected and len(asked) <= 6
    finally:
        pool.release()
