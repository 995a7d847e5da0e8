"""Input normalisation shared by the parsers: whatever a node or a paste gives, one clean ``str``."""

from __future__ import annotations

import re
from typing import Any

ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Za-z0-9]")


def prepare(text: Any) -> tuple[str, list[str]]:
    """Decode bytes leniently, drop NUL bytes and terminal escape codes, unify line ends; say what was odd."""
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
    return ANSI_RE.sub("", text.replace("\r\n", "\n").replace("\r", "\n")), warnings
