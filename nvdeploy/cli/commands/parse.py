"""``nvdeploy parse FORMAT FILE [--verdicts --profile NAME]``: day-2 triage of a pasted log.

Prints the parsed facts as JSON on stdout. Exit 0 whatever the content shows (failures, or nothing readable: the
JSON's ``warnings`` say so); exit 2 when FORMAT is unknown, the file cannot be read, or the options are wrong.
Never a traceback: a parser bug becomes a warning.

``--verdicts --profile NAME`` also runs the checks that read this kind of output and prints their findings under
``"verdicts"``: the capture is the node's collector output and goes through validate's own evaluation
(nvdeploy/runner/evaluate.py), so a whole capture gets the findings validate would give it. A check runs when its
evidence is in the paste (one it reads only to say more, such as nvlink.fabric's time since boot, may be absent:
the finding says so). perftest output is judged as the GPUDirect RDMA pair run judges it; MIG listings
(``nvidia-smi mig -lgip`` / ``-lgi`` / ``-lci``) are read, and ``parse.unjudged`` says no check judges them without
a layout (gpu.mig compares them with the host's ``mig_config`` in validate). A section,
cell or column that pasted ``-q`` text, the default table or CSV does not print is SKIP "not in the pasted
text", whatever its header says.

``dcgmi diag`` output also gets ``"gpu_verdicts"`` (GPU -> test -> verdict, "all" for a verdict not tied to a GPU):
the per-GPU picture of a pasted piece at a glance. A pasted *fragment* (rows without the table header, JSON without
its root) says ``"fragment": true``; ``--verdicts`` then reports the FAIL it shows and stays ERROR for the rest.
Every other format's fragment too (``-q`` blocks without their header, XML without its root, table rows without
the title, nccl-tests rows, a kernel log that does not start at boot): it FAILs what it shows and judges nothing
else (SKIP "not in the pasted text"; see parse_fragment.py).

On a terminal, ``--verdicts`` prints a short summary (the verdict, then FAIL/ERROR/WARN/PASS findings, then the
skipped checks on one line); ``--json``, or output that is not a terminal, gives the JSON.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any, Optional

import click

from nvdeploy.cli.commands.parse_domain import FORMATS as DOMAIN_FORMATS
from nvdeploy.cli.commands.parse_domain import judge_pasted
from nvdeploy.cli.commands.parse_fragment import (
    discovery_check,
    fragment_finding,
    ib_check,
    is_fragment,
    kmsg_check,
    nccl_floor_bytes,
    nvlink_check,
    shown_only,
    size_text,
    smi_check,
    text_check,
    topo_check,
)
from nvdeploy.results import CommandResult, ExitCode, Finding, Verdict

# FORMAT -> the collector whose output it is (what the checks read).
COLLECTOR_OF = {
    "nvidia-smi-xml": "nvidia_smi_xml",
    "nvidia-smi-text": "nvidia_smi_xml",
    "nvidia-smi-csv": "nvidia_smi_xml",
    "nvidia-smi-topo": "nvidia_smi_topo",
    "nvidia-smi-nvlink": "nvidia_smi_nvlink",
    "dcgmi-diag": "dcgm_diag_r1",  # the level is read from the tests present
    "dcgmi-discovery": "dcgm_discovery",
    "dcgmi-health": "dcgm_health",
    "nccl-tests": "nccl_all_reduce",
    "ibstat": "ibstat",
    "kmsg": "kmsg",
    "nvbandwidth": "nvbandwidth",
}
# A format whose facts no check judges yet (--verdicts says so).
UNJUDGED_CHECK = "parse.unjudged"
MAX_BYTES = 256 * 1024 * 1024
SMI_FORMATS = ("nvidia-smi-xml", "nvidia-smi-text", "nvidia-smi-csv")
PIECE_CHECKS = {"nvlink.topology": topo_check, "nvlink.links": nvlink_check, "ib.ports": ib_check,
                "dcgm.discovery": discovery_check}


def _fail(message: str) -> click.exceptions.Exit:
    click.echo(f"nvdeploy: error: {message}", err=True)
    return click.exceptions.Exit(ExitCode.USAGE)


def _plain(facts: Any) -> dict[str, Any]:
    if hasattr(facts, "to_dict"):
        data = facts.to_dict()
    elif is_dataclass(facts) and not isinstance(facts, type):
        data = asdict(facts)
    else:
        data = {"value": facts}
    data.setdefault("warnings", [])
    data["warnings"] = list(data["warnings"] or [])
    return data


def gpu_verdicts(facts: Any) -> dict[str, dict[str, str]]:
    """``dcgmi diag`` facts as GPU -> test -> verdict (the worst when a test lists a GPU twice)."""
    rank = {"FAIL": 4, "WARN": 3, "PASS": 2, "SKIP": 1}
    out: dict[str, dict[str, str]] = {}
    for test in getattr(facts, "tests", ()):
        for result in test.results:
            row = out.setdefault("all" if result.gpu is None else str(result.gpu), {})
            old = row.get(test.name)
            if old is None or rank.get(result.verdict, 5) > rank.get(old, 5):
                row[test.name] = result.verdict
    return dict(sorted(out.items(), key=lambda kv: (kv[0] == "all", int(kv[0]) if kv[0].isdigit() else 0)))


def _read(file: str) -> str:
    try:
        if file == "-":
            raw = sys.stdin.buffer.read(MAX_BYTES + 1)
        else:
            path = Path(file)
            if path.is_dir():
                raise _fail(f"{file}: is a directory")
            with path.open("rb") as handle:
                raw = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise _fail(f"cannot read {file}: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise _fail(f"{file}: larger than {MAX_BYTES // (1024 * 1024)} MiB")
    return raw.decode("utf-8", errors="replace")


def dcgm_level(facts: Any) -> int:
    """The ``dcgmi diag -r`` level a result comes from, judged by the tests it holds."""
    from nvdeploy.checks.dcgm import REQUIRED_TESTS, test_key

    keys = {test_key(t.name) for t in getattr(facts, "tests", ())}
    for level in (4, 3, 2):
        if keys & (REQUIRED_TESTS[level] - REQUIRED_TESTS[level - 1]):
            return level
    return 1


def pasted_checks(collector: str) -> tuple[str, ...]:
    """The checks a capture of ``collector`` feeds, in catalog order: those that need no other collector's output
    (one they read only to say more, such as nvlink.fabric's time since boot, aside: the finding says it is not
    there)."""
    from nvdeploy.checks import CHECKS

    return tuple(check.id for check in CHECKS.values()
                 if collector in check.collectors and set(check.collectors) - set(check.optional) == {collector})


def evaluate(fmt: str, text: str, parsed: Any, profile: Any, label: str) -> list[Finding]:
    """Judge one captured output as validate does: the capture is the node's ``fmt`` collector result, and the
    checks it feeds run through validate's own evaluation (nvdeploy/runner/evaluate.py); a piece's checks are
    narrowed to what it shows (parse_fragment.py)."""
    from nvdeploy.checks import NodeContext
    from nvdeploy.parsers.smi_status import SmiStatus
    from nvdeploy.runner.evaluate import EvaluationJob
    from nvdeploy.runner.evaluate import evaluate as evaluate_node

    if fmt == "perftest":
        return [_perftest(parsed, profile, label)]
    if fmt in DOMAIN_FORMATS:  # dcgmi mndiag, nvloom, nvidia-imex-ctl: judged as their domain stages judge a run
        return judge_pasted(fmt, parsed, profile, label)
    if fmt not in COLLECTOR_OF:
        return [Finding(UNJUDGED_CHECK, Verdict.SKIP, f"no check judges {fmt} output yet: its facts are printed, "
                        "not judged", node=label, profile=profile.stamp)]
    collector = COLLECTOR_OF[fmt]
    if fmt == "dcgmi-diag":
        collector = f"dcgm_diag_r{dcgm_level(parsed)}"
    result = CommandResult(name=collector, command=f"(captured) {label}", rc=0, stdout=text.encode("utf-8"))
    # a dcgmi diag piece is judged by its own check
    fragment = is_fragment(parsed, fmt, profile) and fmt != "dcgmi-diag"
    given: dict[str, Any] = {}
    if fmt in ("nvidia-smi-text", "nvidia-smi-csv") or (fmt == "nvidia-smi-xml" and fragment):
        # no collector prints -q text or CSV, and validate reads whole XML only: these facts are the parser's
        usable = bool(getattr(parsed, "gpus", ()))
        given = {"smi": parsed if usable else None,
                 "smi_status": SmiStatus(None) if usable else SmiStatus(
                     Verdict.ERROR, "no GPU could be read from the capture", None)}

    def judge(check: Any, ctx: Any) -> list[Finding]:
        def run(context: Any) -> list[Finding]:
            return list(check(context))

        if fmt == "nccl-tests" and not node_nccl(parsed, profile):
            return _nccl(ctx, parsed, profile)
        if fragment and fmt in SMI_FORMATS:
            return smi_check(check.id, ctx, run)
        if fmt in ("nvidia-smi-text", "nvidia-smi-csv"):
            return text_check(check.id, ctx, run)
        if fragment and fmt == "kmsg":
            return kmsg_check(check.id, ctx, run)
        if fragment and check.id in PIECE_CHECKS:
            return PIECE_CHECKS[check.id](ctx, run)
        return run(ctx)

    job = EvaluationJob(label, {}, profile, (result,), {collector: label}, pasted_checks(collector))
    findings = list(evaluate_node(job, given=given, judge=judge).findings)
    if fragment:
        findings.append(fragment_finding(NodeContext(label, {}, profile, {}, {}), fmt, parsed))
    return findings


def _perftest(parsed: Any, profile: Any, label: str) -> Finding:
    """perftest (``ib_write_bw``) as the GPUDirect RDMA pair run judges its client's output (checks/rdma.py)."""
    from nvdeploy.checks.rdma import CHECK_ID, expectation, judge_pair

    result = CommandResult(name="gpudirect_client", command=f"(captured) {label}", rc=0)
    rate, pct = expectation(profile, {})
    verdict = judge_pair(f"pasted {parsed.test or 'perftest'} output", result, parsed, result, rate, pct)
    return Finding(CHECK_ID, verdict.verdict, verdict.summary, node=label, observed=verdict.observed,
                   expected=verdict.expected, unit="Gb/s" if verdict.observed is not None else "",
                   reason=verdict.reason, remediation=verdict.remediation, profile=profile.stamp)


def node_nccl(parsed: Any, profile: Any) -> bool:
    """Whether a nccl-tests log could be the node's own collector output (all_reduce, or a collective it does not
    name, on at most the node's GPUs, whole): then validate's check judges it, as it would on the node."""
    collective = (parsed.collective or "").replace("_perf", "")
    return collective in ("all_reduce", "") and (parsed.nranks is None or parsed.nranks <= profile.gpu.count) \
        and not is_fragment(parsed, "nccl-tests")


def _nccl(ctx: Any, parsed: Any, profile: Any) -> list[Finding]:
    """nccl-tests: the all_reduce floor applies to all_reduce only; a multi-node log is not held to one node's
    rank count."""
    from nvdeploy.checks.nccl import NcclExpectation, assess, expectation

    collective = (parsed.collective or "").replace("_perf", "")
    exp = expectation(profile) if collective in ("all_reduce", "") else NcclExpectation()
    count = profile.gpu.count
    ranks = count if parsed.nranks is None or parsed.nranks <= count else None
    label = f"{collective}_perf" if collective else "nccl-tests"
    if is_fragment(parsed, "nccl-tests"):
        return _nccl_fragment(ctx, parsed, exp, collective, label)
    found = assess(parsed, ctx.results["nccl_all_reduce"], ranks=ranks, exp=exp, label=label)
    return [ctx.finding("nccl.all_reduce" if collective in ("all_reduce", "") else f"nccl.{collective}", a.verdict,
                        a.summary, observed=a.observed, expected=a.expected, unit=a.unit, reason=a.reason,
                        remediation=a.remediation, collector="nccl_all_reduce") for a in found]


def _nccl_fragment(ctx: Any, parsed: Any, exp: Any, collective: str, label: str) -> list[Finding]:
    """nccl-tests rows without their header: #wrong and a run without validation are judged on the rows shown;
    the busbw floor only when the rows reach the sizes validate runs and the collective is named (a floor read
    off an 8 MiB row, or off reduce_scatter rows taken for all_reduce, would be a false FAIL); the rank count and
    the summary footer are not in the piece."""
    from dataclasses import replace

    from nvdeploy.checks.nccl import NcclExpectation, assess

    check_id = "nccl.all_reduce" if collective in ("all_reduce", "") else f"nccl.{collective}"
    largest = max(row.size_bytes for row in parsed.rows)
    floor_size = nccl_floor_bytes()
    judged = bool(collective) and largest >= floor_size
    found = assess(replace(parsed, complete=True), ctx.results["nccl_all_reduce"], ranks=None,
                   exp=exp if judged else NcclExpectation(), label=label)
    out = []
    for a in found:
        finding = ctx.finding(check_id, a.verdict, a.summary, observed=a.observed, expected=a.expected, unit=a.unit,
                              reason=a.reason, remediation=a.remediation, collector="nccl_all_reduce")
        if a.verdict is Verdict.PASS and not judged:
            why = ("the collective (no header names it)" if not collective else
                   f"busbw at {size_text(floor_size)} and above (largest row shown: {size_text(largest)})")
            finding = replace(finding, verdict=Verdict.SKIP, observed=None, expected=None,
                              summary=f"{label}: {why} is not in the pasted text; #wrong 0 in the "
                              f"{len(parsed.rows)} row(s) shown")
        out.append(finding)
    return shown_only(out, f"{len(parsed.rows)} row(s) in the pasted text")


def _on_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


_ORDER = (Verdict.FAIL, Verdict.ERROR, Verdict.WARN)


def summary_lines(out: dict[str, Any]) -> list[str]:
    """The terminal summary of ``parse --verdicts``: the verdict first, then each FAIL, ERROR and WARN finding
    (most severe first), the passed and the skipped checks on one line each, and how to get the JSON."""
    judged = out["verdicts"]
    piece = ", a fragment (a pasted piece)" if out.get("fragment") else ""
    lines = [f"{judged['verdict']}  {out['file']}: {out['input_format']}{piece}, judged against {judged['profile']}"]
    findings = judged["findings"]
    shown = [f for verdict in _ORDER for f in findings if f["verdict"] == verdict.value]
    width = max((len(f["check"]) for f in shown), default=0)
    for f in shown:
        gpu = f"GPU{f['gpu']}: " if f.get("gpu") is not None and f"GPU{f['gpu']}" not in f["summary"] else ""
        lines.append(f"  {f['verdict']:<5}  {f['check']:<{width}}  {gpu}{f['summary']}")
    unseen = out.get("fragment") or any("not in the pasted text" in f["summary"] for f in findings)
    why = "not in the pasted text, or not applicable" if unseen else "not applicable"
    for verdict, words in ((Verdict.PASS, "passed"), (Verdict.SKIP, f"not judged ({why})")):
        checks = sorted({f["check"] for f in findings if f["verdict"] == verdict.value} - {f["check"] for f in shown})
        if checks:
            lines.append(f"  {verdict.value:<5}  {len(checks)} check(s) {words}: {', '.join(checks)}")
    for warning in out.get("warnings", [])[:3]:
        lines.append(f"  note: {warning}")
    lines.append("  (facts and findings as JSON: add --json)")
    return lines


@click.command("parse")
@click.argument("fmt", metavar="FORMAT")
@click.argument("file", metavar="FILE")
@click.option("--verdicts", is_flag=True, help="Also run the matching checks and print their findings.")
@click.option("--profile", "profile_name", default=None, help="The profile to judge against (with --verdicts).")
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON even on a terminal (where --verdicts otherwise prints a short summary).")
def parse_command(fmt: str, file: str, verdicts: bool, profile_name: Optional[str], as_json: bool) -> None:
    """Parse FILE (a captured tool output; '-' for stdin) as FORMAT and print the facts as JSON.

    FORMAT: nvidia-smi-xml, nvidia-smi-text, nvidia-smi-csv, nvidia-smi-topo, nvidia-smi-nvlink, nvidia-smi-mig
    (mig -lgip / -lgi / -lci), dcgmi-diag, dcgmi-discovery, dcgmi-health, nccl-tests, ibstat, kmsg, nvbandwidth,
    perftest (ib_write_bw), dcgmi-mndiag (--json), nvloom (nvloom_cli), nvidia-imex-ctl (-q, -N, -N -j), or auto
    (detected from the content). A pasted piece (no header) FAILs what it shows and leaves
    the rest SKIP, never PASS; what pasted text does not print is SKIP "not in the pasted text". On a terminal,
    --verdicts prints a short summary (--json for the JSON). Exit 0 even when the content shows failures; 2 when
    FORMAT is unknown or FILE unreadable.
    """
    from nvdeploy.parsers.detect import FORMATS, detect_format

    if fmt != "auto" and fmt not in FORMATS:
        raise _fail(f"unknown FORMAT {fmt!r} (known: {', '.join(FORMATS)}, auto)")
    profile = None
    if verdicts:
        if not profile_name:
            raise _fail("--verdicts needs --profile NAME (see checks/profiles/)")
        from nvdeploy.config.profiles import ProfileCatalog
        from nvdeploy.config.yamlfile import ConfigError

        catalog = ProfileCatalog()
        try:
            profile = catalog.get(profile_name)
        except KeyError:
            raise _fail(f"unknown profile {profile_name!r} (known: {', '.join(catalog.names())})") from None
        except ConfigError as exc:
            raise _fail(exc.render()) from None
    elif profile_name:
        raise _fail("--profile is only used with --verdicts")
    text = _read(file)
    name = detect_format(text) if fmt == "auto" else fmt
    out: dict[str, Any] = {"input_format": name, "file": file}
    if name is None:
        out["warnings"] = ["the content matches no known format (" + ", ".join(FORMATS) + ")"]
        if verdicts and not as_json and _on_terminal():
            click.echo(f"ERROR  {file}: {out['warnings'][0]}; nothing judged (name the format: nvdeploy parse FORMAT)")
            return
        click.echo(json.dumps(out, indent=2, default=str))
        return
    try:
        parsed = FORMATS[name](text)
        out.update(_plain(parsed))
        out["fragment"] = is_fragment(parsed, name)
        if name == "dcgmi-diag":
            out["gpu_verdicts"] = gpu_verdicts(parsed)
    except Exception as exc:  # noqa: BLE001 - parsers never raise; if one does, say so instead of a traceback
        parsed = None
        out["warnings"] = [f"parser error ({type(exc).__name__}: {exc}); please report it with the input"]
    if verdicts and profile is not None:
        if parsed is None:
            findings: list[Finding] = []
        else:
            label = re.sub(r"[^\w.@:-]", "_", Path(file).name if file != "-" else "stdin")
            findings = evaluate(name, text, parsed, profile, label)
        worst = Verdict.worst((f.verdict for f in findings), default=Verdict.ERROR)
        if parsed is not None:  # against the profile, a cut can show that did not show alone (NVLink lists)
            out["fragment"] = is_fragment(parsed, name, profile)
        out["verdicts"] = {"profile": profile.stamp, "verdict": worst.value, "fragment": bool(out.get("fragment")),
                           "findings": [f.to_dict() for f in findings]}
        if not as_json and _on_terminal():
            click.echo("\n".join(summary_lines(out)))
            return
    click.echo(json.dumps(out, indent=2, default=str))


def register(cli: click.Group) -> None:
    cli.add_command(parse_command)
