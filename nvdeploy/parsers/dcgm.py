"""Parse ``dcgmi diag`` results (``-j`` JSON of DCGM 3.x/4.x, or the text table of DCGM 1.x-4.x) and
``dcgmi discovery -l``.

JSON is read with a lenient reader: text before the first ``{`` (warning lines) is skipped, ``null`` entries are
ignored, a truncated document yields everything up to the cut (``complete`` False). The text table is read cell
by cell; DCGM wraps long messages into 45-character chunks, which are joined back. Output printed twice (srun)
is read once. Verdicts are normalised to PASS / FAIL / WARN / SKIP. Never raises.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DcgmResult:
    """One verdict of one test. ``gpu`` is None when the result is for all GPUs (text ``Pass - All``, a
    Deployment row) or for a non-GPU entity; a JSON ``gpu_ids`` list is expanded into one result per GPU."""

    gpu: int | None
    verdict: str
    messages: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "verdict": self.verdict, "messages": list(self.messages)}


@dataclass(frozen=True)
class DcgmTest:
    """One test (plugin). ``verdict`` is the DCGM 4 ``test_summary`` status when present, else the worst of the
    results; ``messages`` are test-level (``test_summary``) messages."""

    name: str
    category: str | None = None
    results: tuple[DcgmResult, ...] = ()
    verdict: str | None = None
    messages: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "category": self.category, "results": [r.to_dict() for r in self.results],
                "verdict": self.verdict, "messages": list(self.messages)}


@dataclass(frozen=True)
class DcgmDiagFacts:
    """``overall``: ``Overall Result`` when printed, else the worst verdict, FAIL > WARN > PASS > SKIP (so PASS
    with every plugin skipped is PASS; look at ``tests``), None when no verdict was read. ``runtime_error``: the
    error dcgmi printed instead of results. ``complete``: False for truncated JSON or a table without its
    closing border."""

    format: str = "text"
    dcgm_version: str | None = None
    driver_version: str | None = None
    overall: str | None = None
    tests: tuple[DcgmTest, ...] = ()
    complete: bool = False
    warnings: tuple[str, ...] = ()
    hostengine_unreachable: bool = False
    runtime_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"format": self.format, "dcgm_version": self.dcgm_version, "driver_version": self.driver_version,
                "overall": self.overall, "tests": [t.to_dict() for t in self.tests], "complete": self.complete,
                "warnings": list(self.warnings), "hostengine_unreachable": self.hostengine_unreachable,
                "runtime_error": self.runtime_error}


@dataclass(frozen=True)
class DcgmGpu:
    id: int
    name: str | None = None
    pci_bus_id: str | None = None
    uuid: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "pci_bus_id": self.pci_bus_id, "uuid": self.uuid}


@dataclass(frozen=True)
class DcgmDiscoveryFacts:
    """``gpus_found`` / ``nvswitches_found``: the counts dcgmi printed ("4 GPUs found."), None when absent."""

    gpus: tuple[DcgmGpu, ...] = ()
    nvswitches: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    hostengine_unreachable: bool = False
    gpus_found: int | None = None
    nvswitches_found: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"gpus": [g.to_dict() for g in self.gpus], "nvswitches": list(self.nvswitches),
                "warnings": list(self.warnings), "hostengine_unreachable": self.hostengine_unreachable,
                "gpus_found": self.gpus_found, "nvswitches_found": self.nvswitches_found}


_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
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


def _prepare(text: Any) -> tuple[str, list[str]]:
    warnings: list[str] = []
    if text is None:
        text = ""
    elif isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    elif not isinstance(text, str):
        text = str(text)
    if "\x00" in text:
        warnings.append("input contained NUL bytes (removed)")
        text = text.replace("\x00", "")
    if "\ufffd" in text:
        warnings.append("input contained undecodable bytes (U+FFFD replacement characters)")
    return _ANSI_RE.sub("", text.replace("\r\n", "\n").replace("\r", "\n")), warnings


def _verdict(raw: Any) -> str | None:
    if not isinstance(raw, str) or not raw.strip():
        return None
    word = re.split(r"\s+-\s+|\s*:\s*", raw.strip(), maxsplit=1)[0].strip().lower()
    return _VERDICTS.get(word, raw.strip().upper())


def _worst(verdicts: Any) -> str | None:
    known = [v for v in verdicts if v in _RANK]
    return max(known, key=_RANK.__getitem__) if known else None


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


# ----------------------------------------------------------------------------------------------- lenient JSON
class _Json:
    """Recursive-descent JSON reader that returns what it read when the text is cut or malformed."""

    _LITERAL = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null")

    def __init__(self, text: str, start: int) -> None:
        self.s, self.i = text, start
        self.truncated = False
        self.problems: list[str] = []

    def _ws(self) -> bool:
        while self.i < len(self.s) and self.s[self.i] in " \t\n\r":
            self.i += 1
        if self.i >= len(self.s):
            self.truncated = True
            return False
        return True

    def value(self, depth: int = 0) -> Any:
        if not self._ws():
            return None
        c = self.s[self.i]
        if depth > 64:
            self.problems.append("JSON nested too deeply")
            self.i = len(self.s)
            return None
        if c in "{[":
            return self._container(depth, c == "{")
        if c == '"':
            return self._string()
        lit = self._LITERAL.match(self.s, self.i)
        if lit:
            self.i = lit.end()
            return json.loads(lit.group(0))
        self.problems.append(f"unexpected character {c!r} at offset {self.i}")
        self.i += 1
        return None

    def _string(self) -> str:
        try:
            value, self.i = json.decoder.scanstring(self.s, self.i + 1, False)
            return value
        except ValueError:  # unterminated (cut) or a bad escape: take the rest of the line
            newline = self.s.find("\n", self.i + 1)
            line_end = newline if newline >= 0 else len(self.s)
            end = self.s.find('"', self.i + 1, line_end)
            if end < 0:
                end = line_end
                self.truncated = self.truncated or newline < 0
            raw, self.i = self.s[self.i + 1:end], end + 1
            self.problems.append("malformed JSON string")
            return raw

    def _container(self, depth: int, is_object: bool) -> Any:
        close = "}" if is_object else "]"
        out: Any = {} if is_object else []
        self.i += 1
        while self._ws():
            c = self.s[self.i]
            if c == close:
                self.i += 1
                return out
            if c == ",":
                self.i += 1
            elif c in "}]":
                self.problems.append(f"mismatched {c!r} at offset {self.i}")
                self.i += 1
                return out
            elif not is_object:
                out.append(self.value(depth + 1))
            elif c != '"':
                self.problems.append(f"unexpected character {c!r} at offset {self.i}")
                self.i += 1
            else:
                key = self._string()
                if self._ws() and self.s[self.i] == ":":
                    self.i += 1
                    out[key] = self.value(depth + 1)
                elif not self.truncated:
                    self.problems.append(f"object key without a value: {key[:60]!r}")
        return out


def _messages(entry: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key in ("warnings", "warning", "errors", "error", "info"):
        value = entry.get(key)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, dict):
                item = item.get("warning", item.get("warnings", item.get("message", item.get("test_details"))))
            if isinstance(item, str) and item.strip():
                out.append(item.strip())
    return out


def _json_results(entry: dict[str, Any]) -> list[DcgmResult]:
    verdict = _verdict(entry.get("status")) or "UNKNOWN"
    messages = tuple(_messages(entry))
    ids = entry.get("gpu_ids", entry.get("gpu_id"))
    if ids is None and "entity_id" in entry:
        ids = entry["entity_id"] if str(entry.get("entity_group", "GPU")).upper() == "GPU" else None
    if isinstance(ids, str) and "," in ids:
        gpus = [_int(part) for part in ids.split(",") if part.strip()]
    else:
        gpus = [_int(ids)]
    return [DcgmResult(gpu, verdict, messages) for gpu in gpus or [None]]


def _json_tests(main: dict[str, Any], warnings: list[str]) -> list[DcgmTest]:
    tests: list[DcgmTest] = []
    categories = main.get("test_categories")
    for category in categories if isinstance(categories, list) else []:
        if not isinstance(category, dict):
            continue
        name = category.get("category") if isinstance(category.get("category"), str) else None
        for test in category.get("tests") if isinstance(category.get("tests"), list) else []:
            if not isinstance(test, dict):
                continue
            results: list[DcgmResult] = []
            for entry in test.get("results") if isinstance(test.get("results"), list) else []:
                if isinstance(entry, dict):
                    results.extend(_json_results(entry))
            summary = test.get("test_summary") if isinstance(test.get("test_summary"), dict) else {}
            verdict = _verdict(summary.get("status")) or _worst(r.verdict for r in results)
            unknown = [r.verdict for r in results if r.verdict not in _RANK]
            if unknown and len(warnings) < _MAX_WARNINGS:
                warnings.append(f"test {test.get('name')!r}: verdict not understood: {unknown[0]!r}")
            tests.append(DcgmTest(str(test.get("name", "?")), name, tuple(results), verdict,
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
    if not isinstance(root, dict):
        root = {}
    for problem in reader.problems[:5]:
        warnings.append(f"malformed JSON: {problem}")
    if reader.truncated:
        warnings.append("JSON is truncated")
    runs = [r for r in root.get("iterations", []) if isinstance(r, dict)] if isinstance(root.get("iterations"),
                                                                                         list) else [root]
    tests: list[DcgmTest] = []
    runtime_error = None
    for run in runs:
        main = run.get("DCGM GPU Diagnostic", run.get("DCGM Diagnostic", run))
        if isinstance(main, dict):
            tests.extend(_json_tests(main, warnings))
            runtime_error = runtime_error or _find(run, "runtime_error")
    if not tests and not runtime_error:
        warnings.append("no test results in the JSON")
    overall = _verdict(root.get("Overall Result")) or _worst(t.verdict for t in tests)
    return DcgmDiagFacts("json", _find(root, "version"), _find(root, "Driver Version Detected"), overall,
                         tuple(tests), not reader.truncated and bool(root), tuple(warnings),
                         unreachable or bool(runtime_error and _HOSTENGINE_RE.search(runtime_error)),
                         runtime_error)


# ------------------------------------------------------------------------------------------------ text table
_BORDER_RE = re.compile(r"^\+[-=+]+$")
_CATEGORY_RE = re.compile(r"^[|+]-+\s+([A-Za-z][\w /]*?)\s+-+[+|]")
_RESULT_CELL_RE = re.compile(r"^(Pass|Fail|Warn|Skip|Error|Not Run)\b\s*(?:-\s*(All|GPUs?\s*:\s*([\d,\s]+)))?",
                             re.IGNORECASE)
_GPU_VERDICT_RE = re.compile(r"^GPU\s*(\d+)\s*:\s*(Pass|Fail|Warn|Skip)\b\s*-?\s*(.*)$", re.IGNORECASE)
_MESSAGE_ROWS = {"warning": "WARN", "error": "FAIL", "info": None}
_GPU_PREFIX_RE = re.compile(r"^GPU\s*(\d+)\b")


class _TextTest:
    def __init__(self, name: str, category: str | None) -> None:
        self.name, self.category = name, category
        self.results: list[tuple[int | None, str, list[str]]] = []

    def add_message(self, message: str) -> None:
        gpu = _GPU_PREFIX_RE.match(message)
        target = next((r for r in self.results if gpu and r[0] == int(gpu.group(1))), None)
        target = target or next((r for r in self.results if r[0] is None), None) or (self.results or [None])[-1]
        if target is not None:
            target[2].append(message)

    def freeze(self) -> DcgmTest:
        results = tuple(DcgmResult(gpu, verdict, tuple(msgs)) for gpu, verdict, msgs in self.results)
        return DcgmTest(self.name, self.category, results, _worst(r.verdict for r in results))


def _cell_results(cell: str) -> list[tuple[int | None, str, list[str]]]:
    per_gpu = _GPU_VERDICT_RE.match(cell)
    if per_gpu:
        return [(int(per_gpu.group(1)), _verdict(per_gpu.group(2)) or "", [per_gpu.group(3)] if per_gpu.group(3)
                 else [])]
    match = _RESULT_CELL_RE.match(cell)
    if not match:
        return []
    verdict = _verdict(match.group(1)) or ""
    gpus = [int(g) for g in re.findall(r"\d+", match.group(3) or "")]
    return [(gpu, verdict, []) for gpu in gpus] or [(None, verdict, [])]


def _parse_text(text: str, warnings: list[str], unreachable: bool) -> DcgmDiagFacts:
    tables: list[tuple[list[_TextTest], bool]] = []
    meta: dict[str, str] = {}
    errors: list[str] = []
    tests: list[_TextTest] = []
    category: str | None = None
    in_table = False
    message: list[str] | None = None  # chunks of the message row being read
    message_kind = ""
    current: _TextTest | None = None

    def flush_message() -> None:
        nonlocal message, current
        if message is None:
            return
        joined = re.sub(r"\s+", " ", "".join(message)).strip()
        message = None
        if not joined:
            return
        if current is None:
            if _MESSAGE_ROWS.get(message_kind) is None:
                warnings.append(f"message row without a test: {joined[:200]!r}")
                return
            current = _TextTest(message_kind.capitalize(), category)
            gpu = _GPU_PREFIX_RE.match(joined)
            current.results.append((int(gpu.group(1)) if gpu else None, _MESSAGE_ROWS[message_kind] or "", []))
            tests.append(current)
            warnings.append(f"{message_kind.capitalize()!r} row without a preceding test row")
        current.add_message(joined)

    for raw in text.split("\n"):
        line = raw.strip()
        if not line:
            continue
        if not line.startswith(("|", "+")):
            if _ERROR_LINE_RE.match(line) and "Successfully" not in line:
                errors.append(line[:300])
            continue
        if _BORDER_RE.match(line):
            flush_message()
            if in_table and (tests or category):
                tables.append((tests, True))
                tests, category, current, in_table = [], None, None, False
            continue
        category_match = _CATEGORY_RE.match(line)
        if category_match:
            flush_message()
            category, current = category_match.group(1).strip(), None
            continue
        parts = line.split("|")
        name = parts[1].strip() if len(parts) > 1 else ""
        cell = "|".join(parts[2:-1] if line.endswith("|") and len(parts) > 3 else parts[2:])
        if name == "Diagnostic" and cell.strip() == "Result":
            flush_message()
            if in_table and (tests or category):
                tables.append((tests, False))
            tests, category, current, in_table = [], None, None, True
            continue
        if not in_table:
            continue
        chunk = cell[1:-2] if len(cell) > 3 and cell.endswith("  ") else cell[1:]
        if category and category.lower() == "metadata":
            if name:
                meta[name] = cell.strip()
            continue
        if not name and message is not None:
            message.append(chunk)
            continue
        flush_message()
        if name.lower() in _MESSAGE_ROWS:
            message, message_kind = [chunk], name.lower()
            continue
        results = _cell_results(cell.strip())
        if name:
            current = _TextTest(name, category)
            tests.append(current)
            if not results and len(warnings) < _MAX_WARNINGS:
                warnings.append(f"result of {name!r} not understood: {cell.strip()[:100]!r}")
        if current is not None:
            current.results.extend(results)
            if not results and not name and cell.strip():
                current.add_message(cell.strip())
    flush_message()
    if in_table and (tests or category):
        tables.append((tests, False))
    frozen = [(tuple(t.freeze() for t in table), done) for table, done in tables]
    if len(frozen) > 1 and all(tests_ == frozen[0][0] for tests_, _ in frozen):
        warnings.append(f"the same results table was printed {len(frozen)} times; read once")
        frozen = [(frozen[0][0], all(done for _, done in frozen))]
    all_tests = tuple(t for tests_, _ in frozen for t in tests_)
    runtime_error = "; ".join(errors) or None
    if not frozen and not runtime_error:
        warnings.append("no 'dcgmi diag' results table found")
    complete = bool(frozen) and frozen[-1][1]
    return DcgmDiagFacts("text", meta.get("DCGM Version") or None, meta.get("Driver Version Detected") or None,
                         _worst(t.verdict for t in all_tests), all_tests, complete, tuple(warnings),
                         unreachable or bool(runtime_error and _HOSTENGINE_RE.search(runtime_error)), runtime_error)


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
        if text[:start].strip():
            warnings.append(f"text before the JSON ignored: {text[:start].strip()[:200]!r}")
        return _parse_json(text, start, warnings, unreachable)
    return _parse_text(text, warnings, unreachable)


# ------------------------------------------------------------------------------------------------- discovery
_FOUND_RE = re.compile(r"^\s*(\d+)\s+(GPUs?|NvSwitch(?:es)?|CPUs?|CPU Cores?|[A-Za-z ]+?)\s+found\.?\s*$",
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
    section = ""
    null_names = 0
    for raw in text.split("\n"):
        line = raw.strip()
        found = _FOUND_RE.match(line)
        if found:
            word = found.group(2).lower()
            section = "gpu" if word.startswith("gpu") else "switch" if word.startswith("nvswitch") else word
            counts.setdefault(section, int(found.group(1)))
            continue
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] in ("GPU ID", "Switch ID", "CPU ID") or cells[0].startswith("Instance Hierarchy"):
            section = {"GPU ID": "gpu", "Switch ID": "switch"}.get(cells[0], "other")
            continue
        if section == "switch":
            if cells[0]:
                switches.append(cells[0])
            continue
        if section != "gpu":
            continue
        if cells[0]:
            if not cells[0].isdigit():
                warnings.append(f"GPU ID not understood: {cells[0][:40]!r}")
                continue
            gpus.append({"id": int(cells[0])})
        kv = _KV_CELL_RE.match(cells[1]) if len(cells) > 1 and gpus else None
        if kv:
            key, value = kv.group(1).lower(), kv.group(2)
            null = value.lower() in _NULL_VALUES
            if key == "name" and null:
                null_names += 1
            attr = {"name": "name", "pci bus id": "pci_bus_id", "device uuid": "uuid", "uuid": "uuid"}.get(key)
            if attr:
                gpus[-1][attr] = None if null else value
    if null_names:
        warnings.append(f"{null_names} GPU name(s) reported as <<<NULL>>> by DCGM")
    if counts.get("gpu") is not None and counts["gpu"] != len(gpus):
        warnings.append(f"dcgmi said {counts['gpu']} GPUs found but the table lists {len(gpus)}")
    if counts.get("switch") is not None and counts["switch"] != len(switches):
        warnings.append(f"dcgmi said {counts['switch']} NvSwitches found but the table lists {len(switches)}")
    if not gpus and "gpu" not in counts and not unreachable:
        warnings.append("no GPU table found")
    return DcgmDiscoveryFacts(tuple(DcgmGpu(g["id"], g.get("name"), g.get("pci_bus_id"), g.get("uuid")) for g in gpus),
                              tuple(switches), tuple(warnings), unreachable, counts.get("gpu"), counts.get("switch"))
