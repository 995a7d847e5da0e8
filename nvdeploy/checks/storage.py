"""``storage.throughput``: read and write throughput of the paths the host var ``storage_paths`` names, against
per-path floors (pure: the storage script's facts and the host vars in, findings out)."""

from __future__ import annotations

from typing import Any, Mapping, Optional

from nvdeploy.checks.gating import raw_gate
from nvdeploy.checks.registry import NodeContext, register
from nvdeploy.collect.storage_commands import (
    COLLECTOR,
    DEFAULT_FILE_MIB,
    DEFAULT_RUNTIME_S,
    MAX_FILE_MIB,
    MAX_RUNTIME_S,
    PATH_SLACK_S,
    bounds,
    shared_concurrency,
    storage_paths,
)
from nvdeploy.parsers.storage import PathResult, StorageRun
from nvdeploy.results import ErrorReason, Finding, Remediation, Verdict

CHECK_ID = "storage.throughput"
DIRECTIONS = ("write", "read")  # the order the script measures them: the read needs the written file
_DD_NOTE = ("fio not installed: measured with dd, one sequential 1 MiB stream with direct I/O, which understates a "
            "parallel file system (install fio)")


def floor_of(spec: Mapping[str, Any], direction: str) -> Optional[float]:
    value = spec.get(f"{direction}_gbps")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _direction_finding(ctx: NodeContext, path: PathResult, direction: str, floor: Optional[float],
                       shared: str = "") -> Finding:
    step = path.step(direction)
    tool = path.tool or "?"
    note = (f" ({_DD_NOTE})" if tool == "dd" else "") + shared
    label = f"{path.path} {direction}"
    if step is None or step.gbps is None:
        why = step.error if step is not None and step.error else "not measured"
        return ctx.finding(CHECK_ID, Verdict.ERROR, f"{label}: no throughput from {tool} ({why}): the throughput "
                           f"could not be measured{note}", reason=ErrorReason.UNPARSEABLE,
                           remediation=Remediation.INVESTIGATE, collector=COLLECTOR)
    gbps = round(step.gbps, 3)
    if floor is None:
        return ctx.finding(CHECK_ID, Verdict.PASS, f"{label} {gbps:g} GB/s with {tool} (no {direction}_gbps floor "
                           f"in storage_paths: recorded, not judged){note}", observed=gbps, unit="GB/s",
                           collector=COLLECTOR)
    if gbps < floor:
        return ctx.finding(CHECK_ID, Verdict.FAIL, f"{label} {gbps:g} GB/s with {tool} is below the floor {floor:g} "
                           f"GB/s: check the mount (options, client version), the storage network (ib.ports, "
                           f"link rate), the device's health, and other load on it{note}", observed=gbps,
                           expected=f">= {floor:g}", unit="GB/s", remediation=Remediation.INVESTIGATE,
                           collector=COLLECTOR)
    return ctx.finding(CHECK_ID, Verdict.PASS, f"{label} {gbps:g} GB/s with {tool} (>= {floor:g} GB/s){note}",
                       observed=gbps, expected=f">= {floor:g}", unit="GB/s", collector=COLLECTOR)


def judge_path(ctx: NodeContext, path: Optional[PathResult], name: str, spec: Mapping[str, Any],
               complete: bool) -> list[Finding]:
    """The findings of one configured path: FAIL missing, ERROR hung / not writable / cut off, else per direction."""
    if path is None:
        why = "the storage script's answer ends before it" if not complete else "the storage script skipped it"
        return [ctx.finding(CHECK_ID, Verdict.ERROR, f"{name}: not measured ({why})", reason=ErrorReason.INCOMPLETE,
                            collector=COLLECTOR)]
    if path.status in ("missing", "notdir"):
        what = "does not exist" if path.status == "missing" else "is not a directory"
        return [ctx.finding(CHECK_ID, Verdict.FAIL, f"{name} {what} on the node: the file system is not mounted "
                            "(check fstab / the mount unit, the storage client, the network to the server)",
                            observed=path.status, expected="a mounted directory", remediation=Remediation.INVESTIGATE,
                            collector=COLLECTOR)]
    if path.status == "timeout":
        return [ctx.finding(CHECK_ID, Verdict.ERROR, f"{name}: no answer within {path.detail or '?'} s (a hung mount? "
                            "the test was killed on the node and its file removed where the mount allowed it)",
                            reason=ErrorReason.TIMEOUT, remediation=Remediation.INVESTIGATE, collector=COLLECTOR)]
    if path.status == "nowrite":
        kind = "read-only" if path.read_only else "not writable by the run's user"
        return [ctx.finding(CHECK_ID, Verdict.ERROR, f"{name} is {kind} ({path.detail}): the throughput could not be "
                            "measured (the test writes a file first, then reads it back); ERROR, not FAIL: a "
                            "read-only dataset mount may be intended, a slow one is not known",
                            reason=ErrorReason.NOT_RUN, remediation=Remediation.INVESTIGATE, collector=COLLECTOR)]
    if path.status != "ok":
        return [ctx.finding(CHECK_ID, Verdict.ERROR, f"{name}: the storage script's answer for it is cut off",
                            reason=ErrorReason.INCOMPLETE, collector=COLLECTOR)]
    # A shared file system is measured a few nodes at a time (runner/engine.py): say so beside the figure.
    shared = (f" (shared path: measured at most {shared_concurrency(ctx.host_vars)} node(s) at a time)"
              if spec.get("shared") is True else "")
    return [_direction_finding(ctx, path, d, floor_of(spec, d), shared) for d in DIRECTIONS]


def storage_throughput(ctx: NodeContext) -> list[Finding]:
    configured = storage_paths(ctx.host_vars)
    if not configured:
        return [ctx.finding(CHECK_ID, Verdict.SKIP, "no storage_paths in the host vars: nothing to measure")]
    gated = raw_gate(ctx, CHECK_ID, COLLECTOR, "the storage test", "install fio (or coreutils' dd)")
    if gated:
        return gated
    run: Optional[StorageRun] = ctx.facts.get("storage")
    if run is None:
        return [ctx.finding(CHECK_ID, Verdict.ERROR, "the storage script printed nothing readable",
                            reason=ErrorReason.UNPARSEABLE, collector=COLLECTOR)]
    out: list[Finding] = []
    for name, spec in configured.items():
        out.extend(judge_path(ctx, run.get(name), name, spec, run.complete))
    return out


_LIMIT = bounds({})[2]
# The text is built from the bounds above (checks show prints it), then the function is registered with it.
storage_throughput.__doc__ = f"""Runs one ``sh -c`` script on the node for the paths of the host var
    ``storage_paths``, e.g. ``{{/data: {{read_gbps: 10}}, /local/nvme: {{write_gbps: 5}}}}``. For each path it
    makes a test file with a unique name inside it (``mktemp <path>/.nvdeploy-storage.XXXXXXXX``), writes it with
    ``fio --rw=write --bs=1M --direct=1 --ioengine=libaio --iodepth=16 --end_fsync=1 --output-format=json``, reads
    it back with ``fio --rw=read`` (same options), and removes it. Where fio is absent:
    ``dd bs=1M oflag=direct conv=fsync`` then ``dd iflag=direct``, one stream, and the finding says so.
    Bounds (standard level): file size
    ``storage_file_mib`` (default {DEFAULT_FILE_MIB} MiB, at most {MAX_FILE_MIB}); fio run time per direction
    ``storage_runtime_s`` (default {DEFAULT_RUNTIME_S} s, at most {MAX_RUNTIME_S}); each path under its own
    ``timeout`` of ``storage_timeout`` s (default 2 x run time + {PATH_SLACK_S} = {_LIMIT} s); the whole command
    the sum of the paths' limits. Paths are arguments of the script, never shell text. The script's EXIT trap
    removes the file on every ending: done, its timeout, the batch's timeout, or the TERM of the batch watcher
    (EOF, Ctrl-C, SIGTERM, ``--deadline``); the next run removes a file a KILL left (its user's, older than
    30 min). Reads are direct I/O (``--direct=1``, ``iflag=direct``), not the page cache of the file just written.
    A path other nodes mount too (``shared: true``, e.g. ``{{/lustre: {{read_gbps: 5, shared: true}}}}``) is
    measured by at most ``storage_concurrency`` nodes at a time (default 4, the run waits for a turn), so a
    node's figure is its own and not its share of what every node pulls at once; its findings say so.

    PASS: each direction at or above the path's floor (``read_gbps`` / ``write_gbps`` in GB/s, 10^9 bytes/s); a
    direction without a floor is recorded, not judged. FAIL: below the floor, or the path does not exist or is not
    a directory (not mounted). ERROR ``timeout``: the path did not answer within its limit (a hung mount; the
    node's other checks go on). ERROR ``not_run``: the path is read-only or not writable, so the throughput could
    not be measured (a FAIL would claim it is slow; it may be a dataset mount meant to be read-only). ERROR: no
    figure from fio or dd, or the answer cut off. SKIP: no ``storage_paths``. The figures go to
    ``fleet.performance`` per path (``storage_read_gbps``, ``storage_write_gbps``), which names a path far below
    its peers even above its floor.

    Remediation (INVESTIGATE): mount the path (fstab, the mount unit, the storage client); check the storage
    network's ports and rate, the device's health (``nvme smart-log``) and what else loads it; re-test."""
storage_throughput = register(CHECK_ID, collectors=(COLLECTOR,))(storage_throughput)
