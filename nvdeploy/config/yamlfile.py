"""Strict YAML reading for every file a person writes (inventories, profiles, playbooks).

``yaml.safe_load`` only, with three additions: every mapping and list remembers the line of each key/item so
errors can name file, line and key; files and alias expansion are bounded (no 100 MB file, no billion-laughs);
and duplicate keys are an error instead of the last one silently winning.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

if TYPE_CHECKING:
    import yaml

# PyYAML is imported where a file is read, not with this module: the simulator's fake tools (one Python process per
# simulated command) import the profile types, and PyYAML's import was a fifth of each call.

MAX_FILE_BYTES = 8 * 1024 * 1024
MAX_NODES = 200_000
_PLAIN_TAGS = {"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"}


class ConfigError(Exception):
    """Bad input from a person: names the file, line and key. The CLI turns it into exit code 2."""

    def __init__(self, message: str, file: Optional[Union[str, Path]] = None, line: Optional[int] = None,
                 key: Optional[str] = None) -> None:
        self.file = str(file) if file is not None else None
        self.line = line
        self.key = key
        self.message = message
        super().__init__(self.render())

    def render(self) -> str:
        where = self.file or "<input>"
        if self.line is not None:
            where += f":{self.line}"
        what = f"key '{self.key}': " if self.key else ""
        return f"{where}: {what}{self.message}"


class LocDict(dict):  # type: ignore[type-arg]
    """A dict that remembers the 1-based line of itself and of each key."""

    line: int = 0
    key_lines: dict[Any, int]


class LocList(list):  # type: ignore[type-arg]
    line: int = 0
    item_lines: list[int]


def line_of(container: Any, key: Any = None) -> Optional[int]:
    if isinstance(container, LocDict):
        return container.key_lines.get(key, container.line) if key is not None else container.line
    if isinstance(container, LocList):
        if isinstance(key, int) and 0 <= key < len(container.item_lines):
            return container.item_lines[key]
        return container.line
    return None


class _Builder:
    def __init__(self, file: str) -> None:
        self.file = file
        self.count = 0
        import yaml

        self.constructor = yaml.SafeLoader("")

    def build(self, node: yaml.Node) -> Any:
        import yaml

        self.count += 1
        if self.count > MAX_NODES:
            raise ConfigError(f"too many YAML values (over {MAX_NODES}; an alias bomb?)", self.file,
                              node.start_mark.line + 1)
        if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and node.tag not in _PLAIN_TAGS:
            raise ConfigError(f"unsupported YAML tag {node.tag!r} (only plain YAML is accepted)", self.file,
                              node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            self.constructor.flatten_mapping(node)
            out = LocDict()
            out.line = node.start_mark.line + 1
            out.key_lines = {}
            for key_node, value_node in node.value:
                key = self.build(key_node)
                if isinstance(key, (dict, list)):
                    raise ConfigError("a mapping key must be a plain value", self.file, key_node.start_mark.line + 1)
                if key in out:
                    raise ConfigError("duplicate key", self.file, key_node.start_mark.line + 1, str(key))
                out[key] = self.build(value_node)
                out.key_lines[key] = key_node.start_mark.line + 1
            return out
        if isinstance(node, yaml.SequenceNode):
            items = LocList()
            items.line = node.start_mark.line + 1
            items.item_lines = []
            for item in node.value:
                items.append(self.build(item))
                items.item_lines.append(item.start_mark.line + 1)
            return items
        try:
            return self.constructor.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            raise ConfigError(f"invalid value: {exc}", self.file, node.start_mark.line + 1) from None
        except (ValueError, OverflowError) as exc:
            # PyYAML makes a date of any YYYY-MM-DD scalar and raises ValueError for 2027-13-01: bad input.
            raise ConfigError(f"invalid value {node.value!r}: {exc}", self.file, node.start_mark.line + 1) from None


def load_yaml_text(text: str, file: str = "<input>") -> Any:
    """Parse YAML text with safe types, line tracking and bounds. Raises ConfigError, never YAMLError."""
    import yaml

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = exc.problem or str(exc)
        raise ConfigError(f"malformed YAML: {problem}", file, line) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"malformed YAML: {exc}", file) from None
    except RecursionError:
        raise ConfigError("YAML nested too deeply", file) from None
    if node is None:
        return None
    try:
        return _Builder(file).build(node)
    except RecursionError:
        raise ConfigError("YAML nested too deeply", file) from None


def load_yaml_file(path: Union[str, Path]) -> Any:
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ConfigError(f"cannot read file: {exc.strerror}", path) from None
    if size > MAX_FILE_BYTES:
        raise ConfigError(f"file is {size} bytes; the limit is {MAX_FILE_BYTES}", path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read file: {exc.strerror}", path) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text (byte offset {exc.start})", path) from None
    return load_yaml_text(text, str(path))


def require_str(container: Any, key: str, file: str, what: str = "a string") -> str:
    """Return container[key] if it is a string; versions must be quoted so YAML does not turn 550.120 into 550.12."""
    value = container[key]
    if not isinstance(value, str):
        hint = " (quote it: YAML reads 550.120 as the number 550.12)" if isinstance(value, (int, float)) else ""
        raise ConfigError(f"must be {what}, got {type(value).__name__} {value!r}{hint}", file,
                          line_of(container, key), key)
    return value
