"""JSON laid out as DCGM's tools print it: jsoncpp's ``Json::Value::toStyledString()`` (DCGM 4.6 builds jsoncpp
1.9.6, NVIDIA/DCGM commit 72fa3fe dcgmbuild/container-images/dcgmbuild/scripts/urls.txt), whose default stream
writer indents with a tab, writes ``"key" : value``, puts every non-empty object and array on lines of its own
(the ``{``/``[`` on the line after its key, as the real captures in tests/fixtures/real/dcgmi-diag-json show), and
orders an object's keys bytewise, since jsoncpp keeps them in a map. The layout is written from those rules and the
captures, not from jsoncpp's code.
"""

from __future__ import annotations

import json
from typing import Any


def styled(value: Any) -> str:
    """``value`` (dicts, lists, strings, ints, bools, None) as ``toStyledString()`` returns it."""
    out: list[str] = []
    _Writer(out).value(value)
    return "".join(out) + "\n"


class _Writer:
    def __init__(self, out: list[str]) -> None:
        self.out = out
        self.depth = 0
        self.indented = True  # the root starts where the output starts

    def _newline(self) -> None:
        self.out.append("\n" + "\t" * self.depth)

    def _with_indent(self, text: str) -> None:
        if not self.indented:
            self._newline()
        self.out.append(text)
        self.indented = False

    def value(self, value: Any) -> None:
        if isinstance(value, dict):
            if not value:
                self.out.append("{}")
                return
            self._with_indent("{")
            self.depth += 1
            keys = sorted(value, key=lambda k: str(k).encode())
            for i, key in enumerate(keys):
                self._with_indent(json.dumps(str(key)))
                self.out.append(" : ")
                self.value(value[key])
                if i < len(keys) - 1:
                    self.out.append(",")
            self.depth -= 1
            self._with_indent("}")
        elif isinstance(value, (list, tuple)):
            if not value:
                self.out.append("[]")
                return
            self._with_indent("[")
            self.depth += 1
            for i, item in enumerate(value):
                if not self.indented:
                    self._newline()
                self.indented = True
                self.value(item)
                self.indented = False
                if i < len(value) - 1:
                    self.out.append(",")
            self.depth -= 1
            self._with_indent("]")
        else:
            self.out.append(json.dumps(value))
