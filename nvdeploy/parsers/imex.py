"""Parse what the IMEX daemon's tools print (pure): ``nvidia-imex-ctl -q``, ``nvidia-imex-ctl -N -j`` and the
``imex_files`` listing (nvdeploy/collect/stack_commands.py IMEX_FILES_ARGV).

Formats, from public captures (tests/fixtures/real/imex/, PROVENANCE.tsv):

- ``-q`` prints the local daemon's state as one word: ``READY`` when it serves imports and exports, else one of
  INITIALIZING, STARTING_AUTH_SERVER, WAITING_FOR_PEERS, WAITING_FOR_RECOVERY, INIT_GPU, SHUTTING_DOWN, UNAVAILABLE
  (the states DCGM's IMEX field reads from it). Without a node list it says ``Failed to read node configuration
  file``.
- ``-N -j`` prints the whole domain as the daemon sees it: ``{"nodes": {"<index>": {"status": "READY", "host":
  "<address>", "connections": {"<index>": {"host": ..., "status": "CONNECTED", "changed": ...}}, "version": ...,
  "hostName": ...}}, "timestamp": ..., "status": "UP"}``; the domain status is UP, DEGRADED or DOWN, a node that
  does not answer is ``UNAVAILABLE`` with its connections ``INVALID``. The text form (``-N``) shows the same as a
  ``Nodes From\\To`` matrix of C (connected), I, N, R, D, A, !V!, !M!.

Each parser never raises: odd input gives None or a result with warnings, never a guess.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

IMEX_STATES = ("INITIALIZING", "STARTING_AUTH_SERVER", "WAITING_FOR_PEERS", "WAITING_FOR_RECOVERY", "INIT_GPU",
               "READY", "SHUTTING_DOWN", "UNAVAILABLE")
READY = "READY"
CONNECTED = "CONNECTED"
DOMAIN_UP = "UP"
NO_NODE_CONFIG = "Failed to read node configuration file"


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8", errors="replace")
    return str(value).replace("\x00", "").replace("\r\n", "\n")


def parse_imex_query(text: Any) -> Optional[str]:
    """The daemon state ``nvidia-imex-ctl -q`` printed (upper case), None when the output is not one."""
    for line in _text(text).split("\n"):
        word = line.strip().upper()
        if word:
            return word if word in IMEX_STATES else None
    return None


@dataclass(frozen=True)
class ImexConnection:
    """One cell of the connectivity matrix: from a node to ``host`` (index ``peer``), and its status."""

    peer: str
    host: str
    status: str


@dataclass(frozen=True)
class ImexNode:
    index: str
    host: str
    status: str
    version: str = ""
    hostname: str = ""
    connections: tuple[ImexConnection, ...] = ()


@dataclass(frozen=True)
class ImexDomainView:
    """The IMEX domain as one daemon reports it (``nvidia-imex-ctl -N -j``)."""

    status: Optional[str]
    nodes: tuple[ImexNode, ...]
    timestamp: str = ""
    warnings: tuple[str, ...] = ()

    def hosts(self) -> list[str]:
        return [n.host for n in self.nodes]

    def not_ready(self) -> list[ImexNode]:
        return [n for n in self.nodes if n.status != READY]

    def broken(self) -> list[tuple[ImexNode, ImexConnection]]:
        """Every connection that is not CONNECTED, by the node that reports it."""
        return [(n, c) for n in self.nodes for c in n.connections if c.status != CONNECTED]


def _index_key(key: str) -> tuple[int, str]:
    return (int(key), key) if key.isdigit() else (1 << 30, key)


def parse_imex_domain_json(text: Any) -> Optional[ImexDomainView]:
    """The domain view from ``nvidia-imex-ctl -N -j``; None when the output is not a JSON object with ``nodes``
    (the tool printed an error instead). Nodes and connections are in index order."""
    body = _text(text).strip()
    start = body.find("{")
    if start < 0:
        return None
    try:
        data = json.loads(body[start:])
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), dict):
        return None
    warnings: list[str] = []
    nodes = []
    for key in sorted(data["nodes"], key=_index_key):
        entry = data["nodes"][key]
        if not isinstance(entry, dict):
            warnings.append(f"node {key}: not an object")
            continue
        connections = []
        raw = entry.get("connections") if isinstance(entry.get("connections"), dict) else {}
        for peer in sorted(raw, key=_index_key):
            cell = raw[peer]
            if isinstance(cell, dict):
                connections.append(ImexConnection(str(peer), str(cell.get("host", "")),
                                                  str(cell.get("status", "")).upper()))
            else:
                warnings.append(f"node {key}: connection {peer} is not an object")
        nodes.append(ImexNode(str(key), str(entry.get("host", "")), str(entry.get("status", "")).upper(),
                              str(entry.get("version", "")), str(entry.get("hostName", "") or ""),
                              tuple(connections)))
    status = data.get("status")
    return ImexDomainView(str(status).upper() if isinstance(status, str) else None, tuple(nodes),
                          str(data.get("timestamp", "")), tuple(warnings))


# The -N text form's matrix letters (its "Connectivity Table Legend"), as the JSON form names the states.
_LETTERS = {"C": CONNECTED, "I": "INVALID", "N": "NEVER_CONNECTED", "R": "RECOVERING", "D": "DISCONNECTED",
            "A": "AUTHENTICATING", "!V!": "VERSION_MISMATCH", "!M!": "NODE_MAP_MISMATCH"}
_NODE_RE = re.compile(r"^Node #(\d+)\s+-\s+(\S+)\s+-\s+([A-Z_]+)(?:\s+-\s+Version:\s*(\S*))?\s*$")
_MATRIX_RE = re.compile(r"^\s*Nodes From\\To((?:\s+\d+)+)\s*$")
_DOMAIN_RE = re.compile(r"^Domain State:\s*(\S+)\s*$")


def parse_imex_domain_text(text: Any) -> Optional[ImexDomainView]:
    """The domain view from ``nvidia-imex-ctl -N`` (text): the ``Nodes:`` list, the ``Nodes From\\To`` matrix
    and ``Domain State``; None when there is no node list."""
    hosts: dict[str, tuple[str, str, str]] = {}
    cells: dict[str, dict[str, str]] = {}
    columns: list[str] = []
    status = None
    warnings: list[str] = []
    for line in _text(text).split("\n"):
        node = _NODE_RE.match(line.strip())
        if node:
            hosts[node.group(1)] = (node.group(2), node.group(3), node.group(4) or "")
            continue
        header = _MATRIX_RE.match(line)
        if header:
            columns = header.group(1).split()
            continue
        domain = _DOMAIN_RE.match(line.strip())
        if domain:
            status = domain.group(1).upper()
            continue
        words = line.split()
        if columns and words and words[0].isdigit() and len(words) == len(columns) + 1:
            cells[words[0]] = {peer: _LETTERS.get(letter, letter) for peer, letter in zip(columns, words[1:])}
    if not hosts:
        return None
    nodes = []
    for key in sorted(hosts, key=_index_key):
        host, state, version = hosts[key]
        row = cells.get(key)
        if row is None and cells:
            warnings.append(f"node {key}: no row in the connectivity matrix")
        connections = tuple(ImexConnection(peer, hosts.get(peer, ("", "", ""))[0], cell)
                            for peer, cell in sorted((row or {}).items(), key=lambda kv: _index_key(kv[0])))
        nodes.append(ImexNode(key, host, state, version, "", connections))
    return ImexDomainView(status, tuple(nodes), "", tuple(warnings))


@dataclass(frozen=True)
class ImexCtlOutput:
    """What a pasted ``nvidia-imex-ctl`` output holds (``nvdeploy parse nvidia-imex-ctl``): the domain view of
    ``-N -j`` or ``-N``, or the daemon state of ``-q``."""

    form: str = ""  # "-N -j", "-N" or "-q"; "" when none was recognised
    view: Optional[ImexDomainView] = None
    state: Optional[str] = None
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_imex_ctl(text: Any) -> ImexCtlOutput:
    """Any of ``nvidia-imex-ctl``'s outputs this project reads, told apart by their content."""
    view = parse_imex_domain_json(text)
    if view is not None:
        return ImexCtlOutput("-N -j", view, warnings=view.warnings)
    view = parse_imex_domain_text(text)
    if view is not None:
        return ImexCtlOutput("-N", view, warnings=view.warnings)
    state = parse_imex_query(text)
    if state is not None:
        return ImexCtlOutput("-q", state=state)
    said = next((line.strip() for line in _text(text).split("\n") if line.strip()), "")
    return ImexCtlOutput(warnings=(f"not an nvidia-imex-ctl -q, -N or -N -j output: {said[:120]!r}",))


@dataclass(frozen=True)
class ImexFiles:
    """What the ``imex_files`` listing found: each listed path's find type (``c``, ``f``, ``d``, ``l``...) and the
    node list's sha256; a path absent from ``types`` does not exist."""

    types: dict[str, str] = field(default_factory=dict)
    config_sha256: Optional[str] = None

    def kind(self, path: str) -> Optional[str]:
        return self.types.get(path)


_MARK_RE = re.compile(r"^== (/\S*) (\w)$")
_SHA_RE = re.compile(r"^([0-9a-f]{64})\s+\*?(/\S+)$")


def parse_imex_files(text: Any, config_path: str = "/etc/nvidia-imex/nodes_config.cfg") -> ImexFiles:
    """Marker lines ``== PATH TYPE`` and the ``sha256sum`` line of the node list."""
    types: dict[str, str] = {}
    sha = None
    for line in _text(text).split("\n"):
        line = line.strip()
        mark = _MARK_RE.match(line)
        if mark:
            types[mark.group(1)] = mark.group(2)
            continue
        digest = _SHA_RE.match(line)
        if digest and digest.group(2) == config_path:
            sha = digest.group(1)
    return ImexFiles(types, sha)
