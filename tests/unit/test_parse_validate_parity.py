"""``parse --verdicts`` and ``validate`` give the same verdicts for the same text.

Every real capture under tests/fixtures/real that a ``parse`` format reads is judged twice: by ``nvdeploy parse
FORMAT FILE --verdicts --profile P`` (the CLI, JSON out), and as validate judges a node, with the capture as that
node's collector output through validate's own evaluation (:func:`nvdeploy.runner.evaluate.evaluate`, what the
engine calls for each node; perftest through the GPUDirect pair judgement, checks/rdma.py). A whole capture gets
the very same findings. A piece (``"fragment": true``) and pasted ``-q`` text, tables and CSV, which no collector
prints (their facts are given to the same evaluation), may differ only where the paste does not show something:
that check is SKIP "not in the pasted text", and a piece has one ``parse.fragment`` ERROR more.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nvdeploy.cli.app import cli
from nvdeploy.cli.commands.parse import COLLECTOR_OF, dcgm_level, pasted_checks
from nvdeploy.cli.commands.parse_domain import FORMATS as DOMAIN_FORMATS
from nvdeploy.cli.commands.parse_domain import judge_pasted
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.parsers.detect import FORMATS, detect_format
from nvdeploy.parsers.smi_status import SmiStatus
from nvdeploy.results import CommandResult
from nvdeploy.runner.evaluate import EvaluationJob, evaluate

REAL = Path(__file__).parent.parent / "fixtures" / "real"
PROFILES = ("h100-sxm-8x", "gb200-nvl72")  # an HGX node and an NVL72 tray (nvlink.fabric judged)
NOT_SHOWN = "not in the pasted text"
NO_COLLECTOR = ("nvidia-smi-text", "nvidia-smi-csv")  # pasted only: validate reads -q -x XML
CATALOG = ProfileCatalog()


def _captures() -> list[tuple[Path, str]]:
    out = []
    for path in sorted(REAL.glob("*/*")):
        if path.is_file() and path.suffix != ".tsv":
            fmt = detect_format(path.read_text(encoding="utf-8", errors="replace"))
            if fmt is not None:
                out.append((path, fmt))
    return out


CAPTURES = _captures()


def test_every_parse_format_has_a_real_capture_here():
    assert {fmt for _path, fmt in CAPTURES} == set(FORMATS)


def parsed_verdicts(path: Path, fmt: str, profile: str) -> dict[str, Any]:
    result = CliRunner().invoke(cli, ["parse", fmt, str(path), "--verdicts", "--profile", profile, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def validate_findings(path: Path, fmt: str, profile_name: str) -> list[dict[str, Any]]:
    """What validate says of a node whose collector printed this capture."""
    profile = CATALOG.get(profile_name)
    text = path.read_text(encoding="utf-8", errors="replace")
    label = re.sub(r"[^\w.@:-]", "_", path.name)
    parsed = FORMATS[fmt](text)
    if fmt == "perftest":  # as phases/gpudirect.py judges its client's output
        from nvdeploy.checks.rdma import expectation, judge_pair

        client = CommandResult(name="gpudirect_client", command=f"(captured) {label}", rc=0)
        pair = judge_pair(f"pasted {parsed.test or 'perftest'} output", client, parsed, client,
                          *expectation(profile, {}))
        return [{"check": "rdma.gpudirect", "verdict": pair.verdict.value, "summary": pair.summary}]
    collector = f"dcgm_diag_r{dcgm_level(parsed)}" if fmt == "dcgmi-diag" else COLLECTOR_OF[fmt]
    given = {}
    if fmt in NO_COLLECTOR:
        given = {"smi": parsed, "smi_status": SmiStatus(None)} if parsed.gpus else {}
    results = (CommandResult(name=collector, command=f"(captured) {label}", rc=0, stdout=path.read_bytes()),)
    job = EvaluationJob(label, {}, profile, results, {collector: label}, pasted_checks(collector))
    return [f.to_dict() for f in evaluate(job, given=given).findings]


def _by_check(findings: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for finding in findings:
        out.setdefault(finding["check"], []).append(finding)
    return out


def _multinode_nccl(fmt: str, parsed: Any, profile: str) -> bool:
    """A nccl-tests log of more ranks than the node has GPUs is a multi-node run, never the node's collector output:
    parse does not hold it to one node's rank count (validate's cluster stage judges such runs, nccl.multinode)."""
    return fmt == "nccl-tests" and parsed.nranks is not None and parsed.nranks > CATALOG.get(profile).gpu.count


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("path, fmt", CAPTURES, ids=[f"{p.parent.name}/{p.name}" for p, _ in CAPTURES])
def test_parse_verdicts_are_validate_verdicts_for_the_same_text(path: Path, fmt: str, profile: str):
    data = parsed_verdicts(path, fmt, profile)
    parse = data["verdicts"]["findings"]
    if fmt in DOMAIN_FORMATS:  # cluster-stage tools (mndiag, nvloom, imex-ctl): judged as their stage judges a run
        run = FORMATS[fmt](path.read_text(encoding="utf-8", errors="replace"))
        label = re.sub(r"[^\w.@:-]", "_", path.name)
        assert parse == [f.to_dict() for f in judge_pasted(fmt, run, CATALOG.get(profile), label)]
        return
    if fmt not in COLLECTOR_OF and fmt != "perftest":  # MIG layouts: no check judges them yet, and parse says so
        assert [(f["check"], f["verdict"]) for f in parse] == [("parse.unjudged", "SKIP")]
        return
    valid = validate_findings(path, fmt, profile)
    parsed = FORMATS[fmt](path.read_text(encoding="utf-8", errors="replace"))
    if _multinode_nccl(fmt, parsed, profile):  # validate's nccl judgement, without the node's rank count
        from nvdeploy.checks.nccl import assess
        from nvdeploy.collect.nccl_commands import expectation

        result = CommandResult(name="nccl_all_reduce", command="(captured)", rc=0, stdout=path.read_bytes())
        found = assess(parsed, result, ranks=None, exp=expectation(CATALOG.get(profile)), label="nccl-tests")
        assert [(f["verdict"], f["summary"]) for f in parse] == [(a.verdict.value, a.summary) for a in found]
        return
    if fmt == "dcgmi-diag" or (not data["fragment"] and fmt not in NO_COLLECTOR):
        # dcgmi diag pieces are judged by their own check, as validate judges a cut-off diag
        if fmt == "perftest":
            parse = [{k: f[k] for k in ("check", "verdict", "summary")} for f in parse]
        assert parse == valid  # the very same findings, field for field
        return
    pieces, wholes = _by_check(parse), _by_check(valid)
    assert [f["verdict"] for f in pieces.pop("parse.fragment", [])] == (["ERROR"] if data["fragment"] else [])
    assert set(pieces) == set(wholes), "a check parse ran that validate did not, or the other way round"
    for check, found in pieces.items():
        if all(f["verdict"] == "SKIP" and NOT_SHOWN in f["summary"] for f in found):
            continue  # what the paste does not show
        if data["fragment"] and check == "gpu.count" and "the pasted 'Attached GPUs'" in found[0]["summary"]:
            continue  # a piece shows some GPU sections; the number of GPUs is what its header says
        assert sorted(f["verdict"] for f in found) == sorted(f["verdict"] for f in wholes[check]), (check, found)
