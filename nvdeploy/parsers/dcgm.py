"""Parse ``dcgmi diag`` results (``-j`` JSON of DCGM 3.x/4.x, or the text table of DCGM 1.x-4.x) and
``dcgmi discovery -l``.

JSON is read with a lenient reader: text before the first ``{`` (warning lines) is skipped, ``null`` entries are
ignored, a truncated document yields everything up to the cut (``complete`` False). The text table is read cell
by cell; DCGM wraps long messages into 45-character chunks, which are joined back. Output printed twice (srun)
is read once. Verdicts are normalised to PASS / FAIL / WARN / SKIP. Never raises.

Pasted *fragments* are read too (``fragment`` True, never ``complete``): table rows without the ``| Diagnostic |
Result |`` header, and JSON that starts inside the document (a test object, a ``"results"`` entity list, a trailing
comma). They give what they show, test by test and GPU by GPU; what lies outside them is unknown.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from nvdeploy.parsers.text import prepare as _prepare


def _plain(value: Any) -> Any:
    """Dataclasses to dicts and tuples to lists, recursively (what every ``to_dict`` here returns)."""
    if hasattr(value, "__dataclass_fields__"):
        return {name: _plain(getattr(value, name)) for name in value.__dataclass_fields__}
    return [_plain(v) for v in value] if isinstance(value, (tuple, list)) else value


class _Facts:
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values: nested facts as dicts, tuples as lists."""
        return _plain(self)


@dataclass(frozen=True)
class DcgmResult(_Facts):
    """One verdict of one test. ``gpu`` is None when the result is for all GPUs (text ``Pass - All``, a
    Deployment row) or for a non-GPU entity; a JSON ``gpu_ids`` list is expanded into one result per GPU."""

    gpu: int | None
    verdict: str
    messages: tuple[str, ...] = ()


@dataclass(frozen=True)
class DcgmTest(_Facts):
    """One test (plugin). ``verdict`` is the DCGM 4 ``test_summary`` status when present, else the worst of the
    results; ``messages`` are test-level (``test_summary``) messages."""

    name: str
    category: str | None = None
    results: tuple[DcgmResult, ...] = ()
    verdict: str | None = None
    messages: tuple[str, ...] = ()


@dataclass(frozen=True)
class DcgmDiagFacts(_Facts):
    """``overall``: ``Overall Result`` when printed, else the worst verdict, FAIL > WARN > PASS > SKIP (so PASS
    with every plugin skipped is PASS; look at ``tests``), None when no verdict was read. ``runtime_error``: the
    error dcgmi printed instead of results. ``complete``: False for truncated JSON or a table without its
    closing border. ``fragment``: the input is a piece cut out of the output (table rows without the header, JSON
    without its root object): never ``complete``, and ``overall`` is only a FAIL or WARN it shows (the whole run's
    result is at least that), else None."""

    format: str = "text"
    dcgm_version: str | None = None
    driver_version: str | None = None
    overall: str | None = None
    tests: tuple[DcgmTest, ...] = ()
    complete: bool = False
    warnings: tuple[str, ...] = ()
    hostengine_unreachable: bool = False
    runtime_error: str | None = None
    fragment: bool = False


@dataclass(frozen=True)
class DcgmGpu(_Facts):
    id: int
    name: str | None = None
    pci_bus_id: str | None = None
    uuid: str | None = None


@dataclass(frozen=True)
class DcgmDiscoveryFacts(_Facts):
    """``gpus_found`` / ``nvswitches_found``: the counts dcgmi printed ("4 GPUs found."), None when absent."""

    gpus: tuple[DcgmGpu, ...] = ()
    nvswitches: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    hostengine_unreachable: bool = False
    gpus_found: int | None = None
    nvswitches_found: int | None = None


_HOSTENGINE_RE = re.compile(
    r"unable to establish a connection to the specified host|unable to connect to (?:the )?host ?engine"
    r"|host ?engine connection (?:is )?(?:invalid|disconnected)|connection to (?:the )?host ?engine (?:failed|lost)",
    re.IGNORECASE,
)
_ERROR_LINE_RE = re.compile(r"^\s*Error\s*:\s*(.+)$|^(.*\b(?:Unable to|Could not) .*)$", re.IGNORECASE)
_VERDICTS = {"pass": "PASS", "passed": "PASS", "fail": "FAIL", "failed": "FAIL", "error": "FAIL", "warn": "WARN",
             "warning": "WARN", "skip": "SKIP", "skipped": "SKIP", "not run": "SKIP", "notrun": "SKIP"}
_RANK = {"FAIL": 4, "WARN": 3, "PASS": 2, "SKIP": 1}
_MAX_WARNINGS = 20




def _verdict(raw: Any) -> str | None:
    if not isinstance(raw, str) or not raw.strip():
        return None
    word = re.split(r"\s+-\s+|\s*:\s*", raw.strip(), maxsplit=1)[0].strip().lower()
    return _VERDICTS.get(word, raw.strip().upper())


def _worst(verdicts: Any) -> str | None:
    known = [v for v in verdicts if v in _RANK]
    return max(known, key=_RANK.__getitem__) if known else None


def _int(value: Any) -> int | None:
    text = str(value).strip() if isinstance(value, (int, str)) and not isinstance(value, bool) else ""
    return int(text) if re.fullmatch(r"[0-9]{1,18}", text) else None


# ----------------------------------------------------------------------------------------------- lenient JSON
class _Json:
    """Recursive-descent JSON reader that keeps what it read when the text is cut short or malformed."""

    _LITERAL = re.compile(r"-?(?:0|[1-9]\d{0,300})(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null")  # valid JSON only

    def __init__(self, text: str, start: int) -> None:
        self.s, self.i, self.truncated = text, start, False
        self.problems: list[str] = []

    def _more(self) -> bool:
        """Skip whitespace; False (and ``truncated``) at the end of the text."""
        while self.i < len(self.s) and self.s[self.i] in " \t\n\r":
            self.i += 1
        self.truncated = self.truncated or self.i >= len(self.s)
        return self.i < len(self.s)

    def value(self, depth: int = 0) -> Any:
        if not self._more():
            return None
        c = self.s[self.i]
        if depth > 100:
            self.problems.append("JSON nested too deeply")
            self.i, self.truncated = len(self.s), True
        elif c in "{[":
            return self._container(depth, c == "{")
        elif c == '"':
            return self._string()
        elif lit := self._LITERAL.match(self.s, self.i):
            self.i = lit.end()
            return json.loads(lit.group(0))
        else:
            self._problem(f"unexpected character {c!r} at offset {self.i}")
            self.i += 1
        return None

    def _problem(self, problem: str) -> None:
        if len(self.problems) < 10:
            self.problems.append(problem)

    def _string(self) -> str:
        try:
            value, self.i = json.decoder.scanstring(self.s, self.i + 1, False)
            return value
        except ValueError:  # unterminated (cut short) or a bad escape: take the rest of the line
            newline = self.s.find("\n", self.i + 1)
            line_end = newline if newline >= 0 else len(self.s)
            end = self.s.find('"', self.i + 1, line_end)
            if end < 0:
                end, self.truncated = line_end, self.truncated or newline < 0
            raw, self.i = self.s[self.i + 1:end], end + 1
            self._problem("malformed JSON string")
            return raw

    def _container(self, depth: int, is_object: bool) -> Any:
        out: Any = {} if is_object else []
        self.i += 1
        while self._more():
            c = self.s[self.i]
            if c in "}]" or c == ",":
                self.i += 1
                if c != ",":
                    if c != ("}" if is_object else "]"):
                        self._problem(f"mismatched {c!r} at offset {self.i - 1}")
                    return out
            elif not is_object:
                out.append(self.value(depth + 1))
            elif c != '"':
                self._problem(f"unexpected character {c!r} at offset {self.i}")
                self.i += 1
            else:
                key = self._string()
                if self._more() and self.s[self.i] == ":":
                    self.i += 1
                    out[key] = self.value(depth + 1)
                elif not self.truncated:
                    self._problem(f"object key without a value: {key[:60]!r}")
        return out


def _dicts(value: Any) -> list[dict[str, Any]]:
    """The dict entries of a JSON list (DCGM 3.1 puts ``null`` between tests); [] for anything else."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _messages(entry: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key in ("warnings", "warning", "errors", "error", "info"):
        value = entry.get(key)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, dict):  # 3.x nests the text under "warning", the deployment tests under "warnings"
                item = next((item[k] for k in ("warning", "warnings", "message", "test_details") if k in item), None)
            if isinstance(item, str) and item.strip():
                out.append(item.strip())
    return out


def _json_results(entry: dict[str, Any]) -> list[DcgmResult]:
    verdict, messages = _verdict(entry.get("status")) or "UNKNOWN", tuple(_messages(entry))
    ids = entry.get("gpu_ids", entry.get("gpu_id"))
    if ids is None and str(entry.get("entity_group", "GPU")).upper() == "GPU":
        ids = entry.get("entity_id")
    parts = ids.split(",") if isinstance(ids, str) else [ids]
    return [DcgmResult(_int(part), verdict, messages) for part in parts if str(part).strip()] or [
        DcgmResult(None, verdict, messages)]


def _json_tests(main: dict[str, Any], warnings: list[str]) -> list[DcgmTest]:
    tests: list[DcgmTest] = []
    for category in _dicts(main.get("test_categories")):
        name = category.get("category") if isinstance(category.get("category"), str) else None
        for test in _dicts(category.get("tests")):
            results = [result for entry in _dicts(test.get("results")) for result in _json_results(entry)]
            summary = test.get("test_summary") if isinstance(test.get("test_summary"), dict) else {}
            unknown = [r.verdict for r in results if r.verdict not in _RANK]
            if unknown and len(warnings) < _MAX_WARNINGS:
                warnings.append(f"test {test.get('name')!r}: verdict not understood: {unknown[0]!r}")
            tests.append(DcgmTest(str(test.get("name", "?")), name, tuple(results),
                                  _verdict(summary.get("status")) or _worst(r.verdict for r in results),
                                  tuple(_messages(summary))))
    return tests


def _find(tree: dict[str, Any], key: str) -> str | None:
    for node in (tree, tree.get("metadata"), tree.get("DCGM GPU Diagnostic"), tree.get("DCGM Diagnostic")):
        if isinstance(node, dict) and isinstance(node.get(key), (str, int, float)):
            return str(node[key])
    return None


def _parse_json(text: str, start: int, warnings: list[str], unreachable: bool) -> DcgmDiagFacts:
    reader = _Json(text, start)
    root = reader.value()
    root = root if isinstance(root, dict) else {}
    warnings.extend(f"malformed JSON: {problem}" for problem in reader.problems[:5])
    if reader.truncated:
        warnings.append("JSON is truncated")
    tests: list[DcgmTest] = []
    runtime_error = None
    for run in _dicts(root["iterations"]) if isinstance(root.get("iterations"), list) else [root]:
        main = run.get("DCGM GPU Diagnostic", run.get("DCGM Diagnostic", run))
        tests.extend(_json_tests(main, warnings) if isinstance(main, dict) else [])
        runtime_error = runtime_error or _find(run, "runtime_error")
    if not tests and not runtime_error:
        warnings.append("no test results in the JSON")
    overall = _verdict(root.get("Overall Result")) or _worst(t.verdict for t in tests)
    return DcgmDiagFacts("json", _find(root, "version"), _find(root, "Driver Version Detected"), overall,
                         tuple(tests), not reader.truncated and bool(root), tuple(warnings),
                         unreachable or bool(runtime_error and _HOSTENGINE_RE.search(runtime_error)), runtime_error)


# ------------------------------------------------------------------------------------------ pasted fragments
UNNAMED_TEST = "(test name not in the fragment)"
_ENTITY_KEYS = ("entity_id", "gpu_id", "gpu_ids")
_JSON_STATUS_RE = re.compile(r'"status"\s*:\s*"')
_JSON_RESULT_KEY_RE = re.compile(r'"(?:entity_id|entity_group|gpu_ids?|test_summary)"\s*:')
# where a JSON fragment starts: a line opening an object or list, or a line starting with a "key":
_JSON_PIECE_RE = re.compile(r'^[ \t]*(?=[{\[]|"[^"\n]{1,200}"\s*:)', re.MULTILINE)
_FRAGMENT_NOTE = "input is a fragment of dcgmi diag output ({}): only the tests and GPUs it shows are read"
_MAX_PIECES = 100_000


def _looks_like_json_fragment(text: str) -> bool:
    return bool(_JSON_STATUS_RE.search(text) and _JSON_RESULT_KEY_RE.search(text))


def _json_pieces(reader: _Json) -> list[Any]:
    """The values of a JSON fragment, in order. ``"key": value`` pairs outside any object (the fragment began
    inside one) are gathered into a dict; closing brackets whose openers lie before the fragment, and commas, are
    skipped."""
    pieces: list[Any] = []
    loose: dict[str, Any] | None = None
    while reader._more() and len(pieces) < _MAX_PIECES:
        c = reader.s[reader.i]
        if c in ",]}":
            reader.i += 1
            continue
        if c != '"':
            loose = None
            pieces.append(reader.value(1))
            continue
        key = reader._string()
        if reader._more() and reader.s[reader.i] == ":":
            reader.i += 1
            if loose is None:
                loose = {}
                pieces.append(loose)
            loose.setdefault(key, reader.value(1))
        else:
            loose = None
    return pieces


class _FragmentTests:
    """Finds tests in the values of a JSON fragment: whole test categories, test objects (``name`` + ``results``),
    and entity results whose test object began before the fragment (gathered under ``UNNAMED_TEST``)."""

    def __init__(self, warnings: list[str]) -> None:
        self.warnings = warnings
        self.tests: list[DcgmTest] = []
        self.orphans: list[DcgmResult] = []
        self.orphan_at = -1  # where the unnamed test goes among the named ones (it came first in the text)
        self.summary: dict[str, Any] = {}

    def visit(self, value: Any, depth: int = 0) -> None:
        if depth > 60:
            return
        if isinstance(value, list):
            for item in value:
                self.visit(item, depth + 1)
            return
        if not isinstance(value, dict):
            return
        if isinstance(value.get("test_categories"), list):
            self.tests.extend(_json_tests(value, self.warnings))
        elif isinstance(value.get("tests"), list):
            self.tests.extend(_json_tests({"test_categories": [value]}, self.warnings))
        elif isinstance(value.get("name"), str) and isinstance(value.get("results"), list):
            self.tests.extend(_json_tests({"test_categories": [{"tests": [value]}]}, self.warnings))
        elif "status" in value and any(key in value for key in _ENTITY_KEYS):
            if self.orphan_at < 0:
                self.orphan_at = len(self.tests)
            self.orphans.extend(_json_results(value))
        else:
            if isinstance(value.get("test_summary"), dict) and not self.summary:
                self.summary = value["test_summary"]
            for item in value.values():
                self.visit(item, depth + 1)

    def result(self) -> list[DcgmTest]:
        if not self.orphans:
            return self.tests
        unknown = [r.verdict for r in self.orphans if r.verdict not in _RANK]
        if unknown and len(self.warnings) < _MAX_WARNINGS:
            self.warnings.append(f"verdict not understood: {unknown[0]!r}")
        unnamed = DcgmTest(UNNAMED_TEST, None, tuple(self.orphans),
                           _verdict(self.summary.get("status")) or _worst(r.verdict for r in self.orphans),
                           tuple(_messages(self.summary)))
        return [*self.tests[:self.orphan_at], unnamed, *self.tests[self.orphan_at:]]


def _fragment_overall(tests: Any) -> str | None:
    """A fragment proves at most that the run's result is no better than the worst verdict it shows."""
    worst = _worst(t.verdict for t in tests)
    return worst if worst in ("FAIL", "WARN") else None


def _parse_json_fragment(text: str, warnings: list[str], unreachable: bool) -> DcgmDiagFacts | None:
    """A JSON excerpt that starts inside the document; None when it holds no test result."""
    first = _JSON_PIECE_RE.search(text)
    if first is None:
        return None
    start = first.end()
    reader = _Json(text, start)
    found = _FragmentTests(list(warnings))
    found.visit(_json_pieces(reader))
    tests = found.result()
    if not any(r.verdict in _RANK for t in tests for r in t.results):
        return None
    out = found.warnings
    if text[:start].strip():
        out.append(f"text before the JSON ignored: {text[:start].strip()[:200]!r}")
    out.append(_FRAGMENT_NOTE.format("JSON without its root object"))
    out.extend(f"malformed JSON: {problem}" for problem in reader.problems[:5])
    return DcgmDiagFacts("json", None, None, _fragment_overall(tests), tuple(tests), False, tuple(out),
                         unreachable, None, True)


# ------------------------------------------------------------------------------------------------ text table
_BORDER_RE = re.compile(r"^\+[-=+]+$")
_CATEGORY_RE = re.compile(r"^[|+]-+\s+([A-Za-z][\w /]*?)\s+-+[+|]")
_RESULT_CELL_RE = re.compile(r"^(Pass|Fail|Warn|Skip|Error|Not Run)\b\s*(?:-\s*(All|GPUs?\s*:\s*([\d,\s]+)))?",
                             re.IGNORECASE)
# DCGM 4 prints one "GPU0: Pass" (or "CPU1: Fail") row per entity under the test row
_ENTITY_VERDICT_RE = re.compile(r"^([A-Za-z_]+?)\s*(\d{1,9})\s*:\s*(Pass|Fail|Warn|Skip)\b\s*-?\s*(.*)$", re.IGNORECASE)
# message rows: "Warning", "Info", "Error" (DCGM 1.x-3.x), "Warning: GPU0" (DCGM 4)
_MESSAGE_NAME_RE = re.compile(r"^(Warning|Info|Error)\s*(?::\s*([A-Za-z_]+?)\s*(\d{1,9}))?$", re.IGNORECASE)
_MESSAGE_ROWS = {"warning": "WARN", "error": "FAIL", "info": None}  # verdict implied when no test row precedes
_GPU_PREFIX_RE = re.compile(r"^GPU\s*(\d{1,9})\b")


def _cell_results(cell: str) -> list[tuple[int | None, str, list[str]]]:
    entity = _ENTITY_VERDICT_RE.match(cell)  # "GPU0: Fail - message"
    if entity:
        is_gpu = entity.group(1).upper() == "GPU"
        messages = [m for m in (None if is_gpu else entity.group(1) + entity.group(2), entity.group(4)) if m]
        return [(int(entity.group(2)) if is_gpu else None, _verdict(entity.group(3)) or "", messages)]
    match = _RESULT_CELL_RE.match(cell)  # "Pass", "Skip - All", "Fail - GPUs: 0, 2"
    verdict = _verdict(match.group(1)) or "" if match else ""
    gpus = [int(g) for g in re.findall(r"\d{1,9}", match.group(3) or "")] if match else []
    return [(gpu, verdict, []) for gpu in gpus] or ([(None, verdict, [])] if match else [])


def _message_gpu(message: str, hint: int | None = None) -> int | None:
    gpu = _GPU_PREFIX_RE.match(message)
    return hint if hint is not None else int(gpu.group(1)) if gpu else None


def _add_message(results: list[tuple[int | None, str, list[str]]], message: str, hint: int | None = None) -> None:
    """To the named GPU's result, else the all-GPU result, else the last one."""
    gpu = _message_gpu(message, hint)
    targets = [r for r in results if gpu is not None and r[0] == gpu] or [r for r in results if r[0] is None]
    (targets or results)[-1 if not targets else 0][2].append(message)


class _Table:
    """Reads one ``dcgmi diag`` table; ``tests`` holds [name, category, results] lists. A ``fragment`` table began
    without its header: verdict rows above its first test row go to ``UNNAMED_TEST``."""

    def __init__(self, fragment: bool = False) -> None:
        self.fragment = fragment
        self.tests: list[list[Any]] = []
        self.category: str | None = None
        self.closed = False
        self.message: list[str] | None = None  # 45-character chunks of the message row being read
        self.kind = ""
        self.target: int | None = None  # the GPU named by a DCGM 4 "Warning: GPU0" row

    def flush(self, warnings: list[str]) -> None:
        joined = re.sub(r"\s+", " ", "".join(self.message or [])).strip()
        self.message = None
        if not joined:
            return
        if not self.tests or self.tests[-1][1] != self.category:
            if _MESSAGE_ROWS.get(self.kind) is None:
                warnings.append(f"message row without a test: {joined[:200]!r}")
                return
            gpu = _message_gpu(joined, self.target)
            self.tests.append([self.kind.capitalize(), self.category, [(gpu, _MESSAGE_ROWS[self.kind], [])]])
            warnings.append(f"{self.kind.capitalize()!r} row without a preceding test row")
        if self.tests[-1][2]:
            _add_message(self.tests[-1][2], joined, self.target)

    def row(self, name: str, cell: str, warnings: list[str]) -> None:
        chunk = cell[1:-2] if len(cell) > 3 and cell.endswith("  ") else cell[1:]
        if not name and self.message is not None:
            self.message.append(chunk)
            return
        self.flush(warnings)
        kind = _MESSAGE_NAME_RE.match(name)
        if kind:
            gpu = kind.group(2) and kind.group(2).upper() == "GPU"
            self.message, self.kind = [chunk], kind.group(1).lower()
            self.target = int(kind.group(3)) if gpu else None
            return
        results = _cell_results(cell.strip())
        if name:
            self.tests.append([name, self.category, []])
            if not results and len(warnings) < _MAX_WARNINGS:
                warnings.append(f"result of {name!r} not understood: {cell.strip()[:100]!r}")
        if results and self.fragment and not (self.tests and self.tests[-1][1] == self.category):
            self.tests.append([UNNAMED_TEST, self.category, []])  # "|  | Fail - GPU: 0 |" on the first line
        if self.tests and self.tests[-1][1] == self.category:
            self.tests[-1][2].extend(results)
            if not results and not name and cell.strip() and self.tests[-1][2]:
                _add_message(self.tests[-1][2], cell.strip())  # e.g. "  Code: (000000000000)"

    def freeze(self) -> tuple[DcgmTest, ...]:
        tests = [(name, category, tuple(DcgmResult(*r[:2], tuple(r[2])) for r in rows))
                 for name, category, rows in self.tests]
        return tuple(DcgmTest(*t, _worst(r.verdict for r in t[2])) for t in tests)


def _read_tables(text: str, warnings: list[str], meta: dict[str, str], errors: list[str],
                 fragment: bool) -> list[_Table]:
    """The tables of ``text``: each opened by its ``| Diagnostic | Result |`` header or, for a ``fragment``, by
    the first table row after prose (a paste may hold several pieces)."""
    tables: list[_Table] = []
    table: _Table | None = None
    for raw in text.split("\n"):
        line = raw.strip()
        if line and not line.startswith(("|", "+")):
            if _ERROR_LINE_RE.match(line) and "Successfully" not in line:
                errors.append(line[:300])
            continue
        parts = line.split("|")
        name = parts[1].strip() if len(parts) > 1 else ""
        cell = "|".join(parts[2:-1] if line.endswith("|") and len(parts) > 3 else parts[2:])
        if name == "Diagnostic" and cell.strip() == "Result":
            table = _Table()
            tables.append(table)
            continue
        if fragment and line and (table is None or table.closed) and not _BORDER_RE.match(line):
            table = _Table(fragment=True)
            tables.append(table)
        if table is None or table.closed or not line:
            continue
        if _BORDER_RE.match(line):
            table.flush(warnings)
            table.closed = bool(table.tests or table.category)  # the border under the header opens, not closes
        elif category := _CATEGORY_RE.match(line):
            table.flush(warnings)
            table.category = category.group(1).strip()
        elif (table.category or "").lower() == "metadata":
            if name:
                meta.setdefault(name, cell.strip())
        else:
            table.row(name, cell, warnings)
    for table in tables:
        table.flush(warnings)
    return tables


def _parse_text(text: str, warnings: list[str], unreachable: bool) -> DcgmDiagFacts:
    meta: dict[str, str] = {}
    errors: list[str] = []
    base = list(warnings)
    tables = _read_tables(text, warnings, meta, errors, fragment=False)
    fragment = False
    if not tables:  # no header: read the rows a paste holds, if they show any verdict
        piece_warnings, piece_meta, piece_errors = list(base), {}, []  # type: ignore[var-annotated]
        pieces = _read_tables(text, piece_warnings, piece_meta, piece_errors, fragment=True)
        if any(r[1] in _RANK for t in pieces for test in t.tests for r in test[2]):
            tables, meta, errors, warnings, fragment = pieces, piece_meta, piece_errors, piece_warnings, True
            warnings.append(_FRAGMENT_NOTE.format("table rows without the 'Diagnostic | Result' header"))
    frozen = [(t.freeze(), t.closed and not fragment) for t in tables]
    if len(frozen) > 1 and all(tests == frozen[0][0] for tests, _ in frozen):
        warnings.append(f"the same results table was printed {len(frozen)} times; read once")
        frozen = [(frozen[0][0], all(done for _, done in frozen))]
    all_tests = tuple(t for tests, _ in frozen for t in tests)
    runtime_error = "; ".join(errors) or None
    if not frozen and not runtime_error:
        warnings.append("no 'dcgmi diag' results table found")
    overall = _fragment_overall(all_tests) if fragment else _worst(t.verdict for t in all_tests)
    return DcgmDiagFacts("text", meta.get("DCGM Version") or None, meta.get("Driver Version Detected") or None,
                         overall, all_tests, bool(frozen) and frozen[-1][1], tuple(warnings),
                         unreachable or bool(runtime_error and _HOSTENGINE_RE.search(runtime_error)),
                         runtime_error, fragment)


def parse_dcgm_diag(text: str) -> DcgmDiagFacts:
    """Read ``dcgmi diag`` output, JSON (``-j``) or text table, whichever the input is. Never raises."""
    text, warnings = _prepare(text)
    unreachable = bool(_HOSTENGINE_RE.search(text))
    if not text.strip():
        return DcgmDiagFacts(warnings=(*warnings, "empty input"))
    json_start = re.search(r"^\s*\{\s*(?:\"|$)", text, re.MULTILINE)
    table_start = re.search(r"^\s*\|\s*Diagnostic\s*\|", text, re.MULTILINE)
    if json_start and (not table_start or json_start.start() < table_start.start()):
        start = text.index("{", json_start.start())
        base = list(warnings)
        if text[:start].strip():
            warnings.append(f"text before the JSON ignored: {text[:start].strip()[:200]!r}")
        facts = _parse_json(text, start, warnings, unreachable)
        if facts.tests or facts.runtime_error or not _looks_like_json_fragment(text):
            return facts
        return _parse_json_fragment(text, base, unreachable) or facts  # e.g. a test object, then a comma
    if not table_start and _looks_like_json_fragment(text):  # e.g. starts at '"results" : ['
        fragment = _parse_json_fragment(text, warnings, unreachable)
        if fragment is not None:
            return fragment
    return _parse_text(text, warnings, unreachable)


# ------------------------------------------------------------------------------------------------- discovery
_FOUND_RE = re.compile(r"^\s*(\d{1,9})\s+(GPUs?|NvSwitch(?:es)?|CPUs?|CPU Cores?|[A-Za-z ]+?)\s+found\.?\s*$",
                       re.IGNORECASE)
_KV_CELL_RE = re.compile(r"^\s*([A-Za-z][A-Za-z ]*?)\s*:\s*(.*?)\s*$")
_NULL_VALUES = {"<<<null>>>", "", "n/a", "<<<not_supported>>>", "<<<blank>>>"}


def parse_dcgm_discovery(text: str) -> DcgmDiscoveryFacts:
    """Read the GPU and NvSwitch tables of ``dcgmi discovery -l``. Never raises."""
    text, warnings = _prepare(text)
    unreachable = bool(_HOSTENGINE_RE.search(text))
    if not text.strip():
        return DcgmDiscoveryFacts(warnings=(*warnings, "empty input"), hostengine_unreachable=unreachable)
    gpus: list[dict[str, Any]] = []
    switches: list[str] = []
    counts: dict[str, int] = {}
    section, null_names = "", 0
    for raw in text.split("\n"):
        line = raw.strip()
        found = _FOUND_RE.match(line)
        if found:
            section = {"g": "gpu", "n": "switch"}.get(found.group(2)[0].lower(), "other")
            counts.setdefault(section, int(found.group(1)))
            continue
        cells = [c.strip() for c in line.strip("|").split("|")] if line.startswith("|") else []
        if not cells:
            continue
        if not section and _int(cells[0]) is not None and len(cells) > 1 and _KV_CELL_RE.match(cells[1]):
            section = "gpu"  # a pasted GPU row, without the table's header
        if cells[0] in ("GPU ID", "Switch ID", "CPU ID") or cells[0].startswith("Instance Hierarchy"):
            section = {"GPU ID": "gpu", "Switch ID": "switch"}.get(cells[0], "other")
        elif section == "switch" and cells[0]:
            switches.append(cells[0])
        elif section == "gpu" and cells[0] and _int(cells[0]) is None:
            warnings.append(f"GPU ID not understood: {cells[0][:40]!r}")
        elif section == "gpu":
            if cells[0]:
                gpus.append({"id": _int(cells[0])})
            kv = _KV_CELL_RE.match(cells[1]) if len(cells) > 1 and gpus else None
            attr = {"name": "name", "pci bus id": "pci_bus_id", "device uuid": "uuid"}.get(kv.group(1).lower()) if (
                kv) else None
            if kv and attr:
                null = kv.group(2).lower() in _NULL_VALUES
                gpus[-1][attr] = None if null else kv.group(2)
                null_names += int(attr == "name" and null)
    if null_names:
        warnings.append(f"{null_names} GPU name(s) reported as <<<NULL>>> by DCGM")
    for key, listed, what in (("gpu", len(gpus), "GPUs"), ("switch", len(switches), "NvSwitches")):
        if counts.get(key, listed) != listed:
            warnings.append(f"dcgmi said {counts[key]} {what} found but the table lists {listed}")
    if not gpus and "gpu" not in counts and not unreachable:
        warnings.append("no GPU table found")
    return DcgmDiscoveryFacts(tuple(DcgmGpu(g["id"], g.get("name"), g.get("pci_bus_id"), g.get("uuid")) for g in gpus),
                              tuple(switches), tuple(warnings), unreachable, counts.get("gpu"), counts.get("switch"))


# DCGM's Diagnostic (GEMM) plugin reports each GPU's figure as an info message of that GPU's result
# (tests/fixtures/real/fragments/dcgmi-diag-json-dcgm4-r3-8gpu-diagnostic-test-object-trailing-comma.json).
_GFLOPS = re.compile(r"GPU (\d+) calculated at approximately ([0-9]+(?:\.[0-9]+)?) gigaflops")


def diagnostic_gflops(diag: DcgmDiagFacts) -> dict[str, float]:
    """{GPU index (str): gigaflops} that one diag run's Diagnostic test printed; {} when it printed none (r1/r2 have
    no Diagnostic test; DCGM 3's text output has no info messages)."""
    out: dict[str, float] = {}
    for test in diag.tests:
        if test.name.lower() not in ("diagnostic", "diagnostics"):
            continue
        for result in test.results:
            for message in result.messages:
                match = _GFLOPS.search(message)
                # The GPU the message names: a result for "all GPUs" still carries one figure per GPU.
                if match and (result.gpu is None or int(match.group(1)) == result.gpu):
                    out[match.group(1)] = float(match.group(2))
    return out
