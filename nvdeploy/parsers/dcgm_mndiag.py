"""Parser for ``dcgmi mndiag --json`` (DCGM 4.3+, GB200/GB300 NVL: the multi-node diagnostic, mnubergemm).

No public capture of a real run was found, so the layout is taken from DCGM's source (NVIDIA/DCGM 4.6.0, commit
72fa3fe: dcgmi/MnDiag.cpp HelperJsonBuildOutput and its helpers, key names from nvvs/include/NvvsJsonStrings.h):

- ``"DCGM Diagnostic": "DCGM Multi-Node Diagnostic"``, ``metadata: {num_hosts, num_entities}``;
- ``hosts``: ``{host_id, hostname, dcgm_version, driver_version, num_entities, entities: [{entity_group_id,
  entity_group, entity_id, serial_num?, device_id?}]}`` (left out when the run failed);
- ``test_categories[0].tests``: ``{name, status, test_summary: {status}, mpi_error?: {warning, error_category},
  results: [{host_id, entity_group_id, entity_group, entity_id, status, warnings?: [{warning, error_id,
  error_category, error_severity}], info?: [..]}]}``; statuses ``Pass``, ``Fail``, ``Warn``, ``Skip``, ``Not Run``;
- ``global_errors``: ``[{warning, error_id?, error_category, error_severity?, host_id?}]``;
- ``runtime_error``: the message when dcgmi could not complete the diagnostic.

Pure: never raises; what it cannot read is said in ``problems``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Optional


@dataclass(frozen=True)
class MnDiagEntityResult:
    """One GPU's (entity's) result: the host it is on (its hostname from ``hosts``), entity id and group, status,
    DCGM's error messages and info lines."""

    host_id: int
    hostname: str
    entity_group: str
    entity_id: int
    status: str
    errors: tuple[str, ...] = ()
    info: tuple[str, ...] = ()


@dataclass(frozen=True)
class MnDiagTest:
    name: str
    status: str
    results: tuple[MnDiagEntityResult, ...] = ()
    mpi_error: str = ""


@dataclass(frozen=True)
class MnDiagRun:
    json_ok: bool = False
    num_hosts: Optional[int] = None
    hosts: tuple[tuple[int, str], ...] = ()
    tests: tuple[MnDiagTest, ...] = ()
    global_errors: tuple[str, ...] = ()
    runtime_error: str = ""
    problems: tuple[str, ...] = ()

    def hostname(self, host_id: int) -> str:
        return dict(self.hosts).get(host_id, f"host {host_id}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _int(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _first_json(text: str) -> Optional[dict]:
    # dcgmi may print a line before the JSON object (or after it): read from the first brace.
    start = text.find("{")
    if start < 0:
        return None
    try:
        value, _ = json.JSONDecoder().raw_decode(text[start:])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def parse_mndiag(text: str) -> MnDiagRun:
    data = _first_json(text or "")
    if data is None:
        return MnDiagRun(problems=("no JSON object in the output",))
    problems: list[str] = []
    meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    hosts: list[tuple[int, str]] = []
    for entry in data.get("hosts") or []:
        if isinstance(entry, dict) and _int(entry.get("host_id")) is not None:
            hosts.append((entry["host_id"], str(entry.get("hostname") or "")))
    names = dict(hosts)
    tests: list[MnDiagTest] = []
    categories = data.get("test_categories") if isinstance(data.get("test_categories"), list) else []
    for category in categories:
        for test in (category.get("tests") or []) if isinstance(category, dict) else []:
            if not isinstance(test, dict):
                continue
            results = []
            for result in test.get("results") or []:
                if not isinstance(result, dict) or _int(result.get("host_id")) is None:
                    problems.append("a result without a host_id")
                    continue
                errors = tuple(str(w.get("warning", "")) for w in result.get("warnings") or [] if isinstance(w, dict))
                info = tuple(str(i) for i in result.get("info") or [])
                host_id = result["host_id"]
                results.append(MnDiagEntityResult(host_id, names.get(host_id, f"host {host_id}"),
                                                  str(result.get("entity_group") or ""),
                                                  _int(result.get("entity_id")) if _int(result.get("entity_id"))
                                                  is not None else -1, str(result.get("status") or ""), errors, info))
            mpi = test.get("mpi_error") if isinstance(test.get("mpi_error"), dict) else {}
            tests.append(MnDiagTest(str(test.get("name") or ""), str(test.get("status") or ""), tuple(results),
                                    str(mpi.get("warning") or "")))
    global_errors = tuple(str(e.get("warning", "")) for e in data.get("global_errors") or [] if isinstance(e, dict))
    return MnDiagRun(True, _int(meta.get("num_hosts")), tuple(hosts), tuple(tests), global_errors,
                     str(data.get("runtime_error") or ""), tuple(problems))
