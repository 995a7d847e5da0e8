"""Package sources of a node, read from one ``grep -rsH ^ DIR...`` (every line, prefixed with its file): pure parsers.

apt reads ``/etc/apt/sources.list`` and ``sources.list.d/*.list`` (one-line ``deb [signed-by=KEY] URL SUITE``) and
``*.sources`` (deb822 stanzas: ``URIs``, ``Suites``, ``Signed-By``); two entries for the same URL and suite with
different ``Signed-By`` make apt refuse every command ("Conflicting values set for option Signed-By ... The list of
sources could not be read"). dnf reads ``/etc/yum.repos.d/*.repo`` (``baseurl=``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The probe: every line of the source files, as ``path:line`` (-r folders, -s no error for a missing one, -H names).
APT_SOURCES_PROBE = ("sources", ("grep", "-rsH", "^", "/etc/apt/sources.list", "/etc/apt/sources.list.d"))
DNF_SOURCES_PROBE = ("sources", ("grep", "-rsH", "^", "/etc/yum.repos.d"))


@dataclass(frozen=True)
class Source:
    """One repository entry: the file it is in, its URL, suite (apt) and signing keyring (apt, '' when unset)."""

    path: str
    url: str
    suite: str = ""
    signed_by: str = ""

    def points_at(self, url: str) -> bool:
        return same_url(self.url, url)


def same_url(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


def split_files(text: str) -> dict[str, list[str]]:
    """``path:line`` lines -> {path: lines} (a path holds no ':' here: sources live under /etc)."""
    files: dict[str, list[str]] = {}
    for line in text.splitlines():
        path, sep, rest = line.partition(":")
        if sep and path.startswith("/"):
            files.setdefault(path, []).append(rest)
    return files


def _deb822(lines: list[str]) -> list[dict[str, str]]:
    stanzas, current = [], {}
    key = ""
    for line in lines + [""]:
        if not line.strip():
            if current:
                stanzas.append(current)
            current, key = {}, ""
        elif line.startswith("#"):
            continue
        elif line[:1] in (" ", "\t") and key:
            current[key] += " " + line.strip()  # a continuation line (an inline key block)
        elif ":" in line:
            name, _, value = line.partition(":")
            key = name.strip().lower()
            current[key] = value.strip()
    return stanzas


def apt_sources(files: dict[str, list[str]]) -> list[Source]:
    """Every apt entry of .list and .sources files, in the order apt reads them."""
    out = []
    order = sorted(files, key=lambda p: (p != "/etc/apt/sources.list", p))
    for path in order:
        lines = files[path]
        if path.endswith(".sources"):
            for stanza in _deb822(lines):
                if stanza.get("enabled", "yes").lower() == "no":
                    continue
                signed = stanza.get("signed-by", "")
                signed = signed if signed.startswith("/") else ("(inline key)" if signed else "")
                for url in stanza.get("uris", "").split():
                    for suite in stanza.get("suites", "").split() or [""]:
                        out.append(Source(path, url, suite, signed))
        elif path.endswith(".list") or path == "/etc/apt/sources.list":
            for line in lines:
                match = re.match(r"\s*deb\s+(?:\[([^\]]*)\]\s+)?(\S+)\s+(\S+)", line)
                if match:
                    signed = re.search(r"signed-by=(\S+)", match.group(1) or "")
                    out.append(Source(path, match.group(2), match.group(3), signed.group(1) if signed else ""))
    return out


def dnf_sources(files: dict[str, list[str]]) -> list[Source]:
    out = []
    for path in sorted(files):
        if not path.endswith(".repo"):
            continue
        for line in files[path]:
            match = re.match(r"\s*baseurl\s*=\s*(\S+)", line)
            if match:
                out.append(Source(path, match.group(1)))
    return out


def conflicts(sources: list[Source], url: str) -> list[Source]:
    """The entries for ``url`` when they disagree on Signed-By (apt then reads no source at all), else []."""
    matching = [s for s in sources if s.points_at(url)]
    return matching if len({(s.suite, s.signed_by) for s in matching}) > len({s.suite for s in matching}) else []
