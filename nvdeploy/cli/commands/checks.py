"""``nvdeploy checks list|show|docs``: the check catalog as an operator reads it.

Every id a report can show is in it: the node checks (nvdeploy/checks/, their docstrings), the cluster stage's
(``CLUSTER_CHECKS``: multi-node NCCL, GPUDirect, power roll-ups, the version consistency checks, ...) and the ids
the run itself writes (``system.reachable`` and the like). ``docs`` prints the catalog as Markdown;
docs/checks.md is that output, and a test keeps it current.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import shlex
import shutil
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import click

from nvdeploy.results import Remediation

# Ids the run writes itself (not a check of the catalog): the connection, the node lock, nvdeploy's own failure,
# what Slurm says; and the one nvdeploy parse adds to a pasted piece of output. (stage, source, text)
RUN_STAGE: dict[str, tuple[str, str, str]] = {
    "system.reachable": ("run", "nvdeploy/runner/engine.py", (
        "The node answered: nvdeploy connected over its inventory ``connection`` (ssh, local, sim) within "
        "``--connect-timeout`` and ran its light batch. PASS: connected (the time it took). ERROR (INVESTIGATE) "
        "when the node cannot be reached or authenticated, or the connection dropped: the node is down, or its "
        "address, key, host key or sudo. A node that never started because the run was interrupted, or that had "
        "not finished, is ERROR interrupted with the action RESUME: ``nvdeploy validate --resume RUN_DIR`` checks "
        "only those nodes; one that did not start before the global ``--deadline`` is ERROR not_run.")),
    "system.lock": ("run", "nvdeploy/runner/engine.py", (
        "No other nvdeploy run was working on the node: each node runs one nvdeploy batch at a time under a node "
        "lock (/run/lock/nvdeploy, else $XDG_RUNTIME_DIR/nvdeploy). Not in a report when the lock was taken. "
        "ERROR busy (INVESTIGATE) naming the holder when another run holds it; "
        "ERROR lock naming the folder, owner and mode when the lock folder is not safe to use (a link, another "
        "user's, writable by others). Nothing was checked on that node; run again when the holder is done.")),
    "system.internal": ("run", "nvdeploy/runner/engine.py", (
        "nvdeploy itself failed while checking one node (a bug): ERROR (INVESTIGATE) naming the exception; the "
        "other nodes are checked as usual. Please report it with the node's evidence folder.")),
    "slurm.gres": ("slurm", "nvdeploy/slurm/findings.py", (
        "Slurm schedules as many GPUs on the node as its profile has: in a run that works with Slurm (a "
        "``slurm:`` inventory group, or the ``--drain-failed``/``--maintenance``/``--via slurm`` options), the "
        "node's GPU GRES as Slurm describes it is compared with the profile's GPU count. PASS: the same count. "
        "FAIL (INVESTIGATE: gres.conf/slurm.conf, or the node lost GPUs) when Slurm lists no GPU GRES or another "
        "count; SKIP when the profile states no count.")),
    "slurm.actions": ("slurm", "nvdeploy/slurm/window.py", (
        "Every scheduler step of a run that works with Slurm (reservation, drain, resume, the reservation "
        "deleted) was completed. PASS: all done (each step is recorded in results.json and the report). ERROR "
        "(INVESTIGATE, exit 3) for the cluster when a step could not be completed (slurmctld gone after the "
        "validation): a half-done drain is never silent; ``nvdeploy slurm recover RUN_DIR`` finishes it.")),
    "parse.fragment": ("parse", "nvdeploy/cli/commands/parse_fragment.py", (
        "The pasted text is a piece of a tool's output (no header, no XML root), so what it does not show cannot "
        "be judged: only ``nvdeploy parse --verdicts`` writes it, never a run. ERROR naming what the piece lacks; "
        "the checks whose input is in the piece judge only the GPUs or rows it shows, so a piece's verdict is FAIL "
        "when it shows a failure and ERROR otherwise, never PASS. Paste the whole output, or run "
        "``nvdeploy validate``, to judge the rest.")),
    "parse.unjudged": ("parse", "nvdeploy/cli/commands/parse.py", (
        "The pasted output is read (its facts are printed) but no check judges it yet: ``nvidia-smi mig -lgip`` "
        "and ``-lgi`` (the GPU instance profiles and instances of a MIG layout). Only ``nvdeploy parse --verdicts`` "
        "writes it, never a run. SKIP, never PASS: the MIG layout is not judged here.")),
}

LEVEL_ORDER = ("quick", "standard", "full", "cluster", "run", "slurm", "parse", "-")
LEVEL_WORDS = {
    "quick": "quick: seconds per node, no stress test",
    "standard": "standard: + DCGM diagnostics r2, single-node nccl-tests",
    "full": "full: + DCGM r3 instead of r2, multi-node nccl-tests, InfiniBand, GPUDirect RDMA",
    "cluster": "cluster: the cluster stage of every validation, from what the nodes reported (no level lists it)",
    "run": "run: written by the run itself for every node: the connection, the node lock",
    "slurm": "slurm: in a run that works with Slurm (a slurm: inventory group, --drain-failed, --maintenance ...)",
    "parse": "parse: only in nvdeploy parse --verdicts, on pasted output (not in a run's report)",
    "-": "-: in no level of playbooks/validate.yaml (a playbook of your own may list it)",
}
_ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "cf.", "approx.", "incl.")
_ACTIONS = tuple(r.value for r in Remediation if r is not Remediation.NONE)


@dataclass(frozen=True)
class Entry:
    """One id of the catalog as the command line shows it."""

    id: str
    level: str                       # the first level that runs it, else its stage (LEVEL_WORDS)
    levels: tuple[str, ...]          # every level that runs it
    stage: str                       # node, cluster, run or slurm
    doc: str
    collectors: tuple[str, ...]
    source: str                      # the module that implements it
    heavy: bool


def plain(text: str) -> str:
    """Docstring markup for a terminal: ``x`` and `x` become x."""
    return re.sub(r"`([^`]+)`", r"\1", re.sub(r"``(.+?)``", r"\1", text))


def first_sentence(text: str) -> str:
    """The whole first sentence: up to the first . ! or ? that ends it (followed by a space or the end), never inside
    parentheses or brackets, nor after e.g./i.e.; the text itself when it has no such end."""
    flat = " ".join(text.split())
    for match in re.finditer(r"[.!?](?=\s|$)", flat):
        head = flat[:match.end()]
        if head.lower().endswith(_ABBREVIATIONS):
            continue
        if head.count("(") > head.count(")") or head.count("[") > head.count("]") or head.count("``") % 2:
            continue
        return head
    return flat


def _sentences(text: str) -> list[str]:
    out, rest = [], " ".join(text.split())
    while rest:
        head = first_sentence(rest)
        out.append(head)
        rest = rest[len(head):].strip()
    return out


def _source_of(module: str) -> str:
    return module.replace(".", "/") + ".py"


def _cluster_sources() -> dict[str, str]:
    """The cluster checks' ids by the module that writes their text into ``CLUSTER_CHECKS`` and names them.

    Each module of nvdeploy/checks is imported first: a module fills in its cluster checks' text when it is
    imported, and not every one is imported by the node catalog (the cluster stage imports some lazily).
    """
    import nvdeploy.checks as package
    from nvdeploy.checks.registry import CLUSTER_CHECKS

    writers = []
    for info in pkgutil.iter_modules(package.__path__, "nvdeploy.checks."):
        module = importlib.import_module(info.name)
        text = Path(module.__file__ or "").read_text(encoding="utf-8") if module.__file__ else ""
        if "CLUSTER_CHECKS[" in text or "CLUSTER_CHECKS.update" in text or "CLUSTER_CHECKS: dict" in text:
            named = set(re.findall(r'"([a-z_0-9]+\.[a-z_0-9]+)"', text))
            # The registry's own entries last: a module that writes an id's text is its home, not the registry.
            writers.append((info.name.endswith(".registry"), info.name, named))
    sources: dict[str, str] = {}
    for _, name, literals in sorted(writers):
        for check_id in literals & set(CLUSTER_CHECKS):
            sources.setdefault(check_id, _source_of(name))
    # nccl.multinode's text is in the registry; its code is the multi-node phase.
    if sources.get("nccl.multinode", "").endswith("registry.py"):
        sources["nccl.multinode"] = "nvdeploy/phases/multinode.py"
    if sources.get("nccl.domain", "").endswith("registry.py"):
        sources["nccl.domain"] = "nvdeploy/phases/domain.py"
    return sources


def catalog_entries() -> list[Entry]:
    """Every id of the catalog, by level (quick, standard, full, cluster, run, slurm), in the playbook's order."""
    from nvdeploy.checks import CHECKS
    from nvdeploy.checks.registry import CLUSTER_CHECKS
    from nvdeploy.collect.catalog import COLLECTORS
    from nvdeploy.config.levels import LEVELS, load_levels

    sources = _cluster_sources()
    by_level = load_levels(known_checks=(*CHECKS, *CLUSTER_CHECKS))
    position: dict[str, int] = {}
    for level in LEVELS:
        for check_id in by_level[level]:
            position.setdefault(check_id, len(position))
    entries = []
    for index, check_id in enumerate([*CHECKS, *(c for c in CLUSTER_CHECKS if c not in CHECKS), *RUN_STAGE]):
        levels = tuple(level for level in LEVELS if check_id in by_level[level])
        if check_id in CHECKS:
            check = CHECKS[check_id]
            heavy = any(COLLECTORS[c].heavy for c in check.collectors if c in COLLECTORS)
            entry = Entry(check_id, levels[0] if levels else "-", levels, "node", check.doc, check.collectors,
                          _source_of(check.function.__module__), heavy)
        elif check_id in CLUSTER_CHECKS:
            entry = Entry(check_id, levels[0] if levels else "cluster", levels, "cluster",
                          CLUSTER_CHECKS[check_id], (), sources.get(check_id, "nvdeploy/checks/registry.py"), False)
        else:
            stage, source, doc = RUN_STAGE[check_id]
            entry = Entry(check_id, stage, levels, stage, doc, (), source, False)
        entries.append((LEVEL_ORDER.index(entry.level), position.get(check_id, len(position) + index), entry))
    return [entry for _, _, entry in sorted(entries, key=lambda t: (t[0], t[1]))]


def _collector_line(name: str) -> str:
    from nvdeploy.collect.catalog import COLLECTORS

    collector = COLLECTORS.get(name)
    if collector is None:
        return name
    command = shlex.join(collector.argv)
    # A command built per node, or a script, reads better as what it does than as its text.
    shown = f"``{command}``" if collector.build is None and len(command) <= 100 and "\n" not in command else name
    notes = [f"{collector.timeout_s:g} s", *(["heavy"] if collector.heavy else []),
             *(["as root with sudo: true"] if collector.needs_root else [])]
    return f"{shown} ({', '.join(notes)}): {collector.description}"


def _where_it_runs(entry: Entry) -> str:
    if entry.stage == "node":
        runs = ", ".join(entry.levels) if entry.levels else "no level"
        return f"{entry.level} (node check; runs at: {runs})"
    if entry.stage == "cluster":
        when = f"runs at: {', '.join(entry.levels)}" if entry.levels else "every validation"
        return f"{entry.level} (cluster stage, after every node's own checks; {when})"
    return f"{entry.level} ({LEVEL_WORDS[entry.stage].split(': ', 1)[1]})"


def list_lines(entries: list[Entry], width: Optional[int]) -> list[str]:
    """``ID  LEVEL  first sentence``; wrapped under the sentence column to ``width`` (a terminal), else one line
    per check (a pipe: one grep-able line each)."""
    id_width = max(len(e.id) for e in entries) + 2
    lead = id_width + 10
    lines = [f"{'CHECK':{id_width}}{'LEVEL':10}WHAT IT CHECKS"]
    for entry in entries:
        text = plain(first_sentence(entry.doc))
        head = f"{entry.id:{id_width}}{entry.level:10}"
        if width is None:
            lines.append(head + text)
        else:
            lines += textwrap.wrap(text, width=max(width, lead + 30), initial_indent=head,
                                   subsequent_indent=" " * lead, break_on_hyphens=False)
    return lines


def _wrapped(text: str, width: int = 116) -> str:
    """Paragraphs written as one long line wrapped to ``width``; a docstring's own line breaks kept."""
    paragraphs = text.split("\n\n")
    return "\n\n".join(textwrap.fill(p, width, break_on_hyphens=False, break_long_words=False)
                       if max(len(line) for line in p.splitlines() or [""]) > width + 4 else p for p in paragraphs)


def _heavy_rule(entry: Entry) -> str:
    """What keeps a heavy check from starting: the busy guard only holds one whose collector loads a GPU."""
    from nvdeploy.checks.heavy_gate import HEAVY_RULE, HEAVY_RULE_NO_GPU
    from nvdeploy.collect.catalog import COLLECTORS

    gpu = any(COLLECTORS[c].heavy and COLLECTORS[c].loads_gpu for c in entry.collectors if c in COLLECTORS)
    return HEAVY_RULE if gpu else HEAVY_RULE_NO_GPU


def show_text(entry: Entry) -> str:
    lines = [entry.id, f"level:  {_where_it_runs(entry)}"]
    if entry.collectors:
        lines.append(textwrap.fill("runs:   " + "; ".join(plain(_collector_line(c)) for c in entry.collectors),
                                   116, subsequent_indent=" " * 8, break_on_hyphens=False, break_long_words=False))
    lines += [f"source: {entry.source}", "", _wrapped(plain(entry.doc))]
    if entry.heavy:
        lines += ["", _wrapped(_heavy_rule(entry))]
    return "\n".join(lines)


def _pick(entry: Entry, words: tuple[str, ...]) -> str:
    """The sentences of the text that name one of ``words`` (a leading ``PASS:`` label dropped), else a pointer."""
    found = [re.sub(rf"^(?:{words[0]}):\s*", "", s) for s in _sentences(entry.doc)
             if any(re.search(rf"\b{w}\b", s) for w in words)]
    return " ".join(found) if found else "see the description"


_CODE_SPAN = re.compile(r"(``.+?``|`[^`\n]+`)", re.S)


def _md(text: str) -> str:
    """Text for Markdown: outside code spans, < > and * are shown as written (not HTML, not emphasis) and a line
    starting with # is not a heading."""
    parts = _CODE_SPAN.split(text)
    for index in range(0, len(parts), 2):
        parts[index] = parts[index].replace("<", "&lt;").replace(">", "&gt;").replace("*", "\\*")
    return re.sub(r"(?m)^(\s*)#", r"\1\\#", "".join(parts))


_CITATION = re.compile(r"https?://|\bGuide\b|\bManual\b|[Dd]ocumentation|docs\.nvidia|Release Notes|NVIDIA documents|"
                       r"NVIDIA's table|\bRFC\b|\bspecification\b")


def _sources(doc: str) -> str:
    """What the rule rests on: a ``Sources:`` paragraph, else the sentences that cite a document."""
    for paragraph in doc.split("\n\n"):
        head, _, rest = paragraph.partition(":")
        if head.strip() in ("Source", "Sources") and rest.strip():
            return " ".join(rest.split())
    cited = [s for s in _sentences(doc) if _CITATION.search(s)]
    return " ".join(cited) if cited else "none cited"


def _anchor(check_id: str) -> str:
    return re.sub(r"[^a-z0-9_-]", "", check_id.lower())


def markdown(entries: list[Entry]) -> str:
    """The catalog as docs/checks.md: an index, then each id with its level, what it runs, PASS, the remediation,
    the documents it cites and its code, and its whole text."""
    out = ["# The check catalog", "",
           "Generated by `nvdeploy checks docs > docs/checks.md` from the checks' own text and "
           "`playbooks/validate.yaml`; do not edit it by hand (a unit test fails when it is stale). "
           "`nvdeploy checks show ID` prints one entry on the terminal.", "",
           "Levels (`nvdeploy validate --level`): each level runs every check of the levels before it.", ""]
    out += [f"- {LEVEL_WORDS[level]}" for level in LEVEL_ORDER]
    out += ["", "| check | level | what it checks |", "|---|---|---|"]
    for entry in entries:
        summary = _md(first_sentence(entry.doc)).replace("|", "\\|")
        out.append(f"| [{entry.id}](#{_anchor(entry.id)}) | {entry.level} | {summary} |")
    for entry in entries:
        runs = "; ".join(_collector_line(c) for c in entry.collectors) if entry.collectors else (
            "see the description" if entry.stage in ("cluster", "slurm") else "nothing of its own")
        out += ["", f"## {entry.id}", "",
                f"- **level:** {_md(_where_it_runs(entry))}",
                f"- **runs:** {_md(runs)}",
                f"- **PASS:** {_md(_pick(entry, ('PASS', 'PASSes')))}",
                f"- **remediation:** {_md(_pick(entry, ('Remediation', *_ACTIONS)))}",
                f"- **sources:** {_md(_sources(entry.doc))}",
                f"- **code:** `{entry.source}`", "", _md(entry.doc)]
        if entry.heavy:
            out += ["", _md(_heavy_rule(entry))]
    return "\n".join(out) + "\n"


def _entries() -> list[Entry]:
    """The catalog for a command: a broken levels playbook is exit 2 naming its file and line, not a traceback."""
    from nvdeploy.cli.common import _fail
    from nvdeploy.config.yamlfile import ConfigError

    try:
        return catalog_entries()
    except ConfigError as exc:
        raise _fail(exc.render()) from None


def _entry(check_id: str) -> Entry:
    from nvdeploy.cli.common import _fail

    entries = _entries()
    for entry in entries:
        if entry.id == check_id:
            return entry
    import difflib

    close = difflib.get_close_matches(check_id, [e.id for e in entries], n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise _fail(f"unknown check {check_id!r}{hint} (see 'nvdeploy checks list')")


@click.group("checks")
def checks_group() -> None:
    """The check catalog: what each check runs, what PASS means, what to do when it fails."""


@checks_group.command("list")
def checks_list() -> None:
    """Every check with its level and its first sentence (node checks, the cluster stage, the run's own)."""
    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
    for line in list_lines(_entries(), width):
        click.echo(line)


@checks_group.command("show")
@click.argument("check_id", metavar="ID")
def checks_show(check_id: str) -> None:
    """What check ID runs, at which level, what PASS means, the remediation and where its code is."""
    click.echo(show_text(_entry(check_id)))


@checks_group.command("docs")
def checks_docs() -> None:
    """Print the whole catalog as Markdown (docs/checks.md is this output)."""
    click.echo(markdown(_entries()), nl=False)


def register(cli: click.Group) -> None:
    cli.add_command(checks_group)
