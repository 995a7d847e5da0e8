"""What nvdeploy reads of Ansible's inventories: its connection variables, its INI format, ``ansible-inventory`` JSON.

Ansible's connection variables are accepted under their own names and resolved with Ansible's precedence; only the
merged result is mapped to nvdeploy's keys (``ansible_host`` -> ``address``, ...), so a deeper group's
``ansible_ssh_common_args`` replaces an outer one whole, as in Ansible. An inventory uses one name per setting: both
``ansible_user`` and ``ssh_user`` in one file is refused, since neither tool would read it as the other does.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Optional, Protocol

from nvdeploy.config.yamlfile import ConfigError

ANSIBLE_SOURCE_PREFIX = "ansible:"
ANSIBLE_INVENTORY_TIMEOUT_S = 300


def _port(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 65535


def _text(value: Any) -> bool:
    return isinstance(value, str) and value != ""


_SSH_CONNECTIONS = {"ssh": "ssh", "paramiko": "ssh", "smart": "ssh", "local": "local"}

# Ansible name -> (nvdeploy key, validator, description, value mapping)
ALIASES: dict[str, tuple[str, Callable[[Any], bool], str, Callable[[Any], Any]]] = {
    "ansible_host": ("address", _text, "a host name or IP address", str),
    "ansible_ssh_host": ("address", _text, "a host name or IP address", str),
    "ansible_port": ("ssh_port", _port, "an integer port 1-65535", int),
    "ansible_ssh_port": ("ssh_port", _port, "an integer port 1-65535", int),
    "ansible_user": ("ssh_user", _text, "a user name", str),
    "ansible_ssh_user": ("ssh_user", _text, "a user name", str),
    "ansible_ssh_private_key_file": ("ssh_key", _text, "a path to a private key", str),
    "ansible_private_key_file": ("ssh_key", _text, "a path to a private key", str),
    "ansible_connection": ("connection", lambda v: v in _SSH_CONNECTIONS,
                           "ssh, paramiko, smart or local", lambda v: _SSH_CONNECTIONS[v]),
    "ansible_become": ("sudo", lambda v: isinstance(v, bool), "true or false (yes/no, 1/0 in INI)", bool),
}
# Ansible's own spellings of a boolean (module_utils/parsing/convert_bool.py BOOLEANS_TRUE/FALSE): an INI value is
# text unless it is a Python literal, and Ansible reads ``become=yes``, ``true`` or ``1`` as true.
BOOLEANS_TRUE = frozenset({"y", "yes", "on", "1", "true", "t"})
BOOLEANS_FALSE = frozenset({"n", "no", "off", "0", "false", "f"})


def boolean_value(value: Any) -> Any:
    """``value`` as Ansible reads a boolean setting: True/False for its spellings (any case, and 1/0), else as is
    (for the schema to refuse, naming it)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in BOOLEANS_TRUE:
            return True
        if lowered in BOOLEANS_FALSE:
            return False
    return value


COMMON_ARGS = "ansible_ssh_common_args"
GROUP_PRIORITY = "ansible_group_priority"
# Read by Ansible's modules on the node, not by a connection nvdeploy makes: accepted and left out.
IGNORED = {"ansible_python_interpreter"}
ANSIBLE_KEYS = set(ALIASES) | {COMMON_ARGS, GROUP_PRIORITY} | IGNORED


def targets(key: str) -> tuple[str, ...]:
    """The nvdeploy keys an Ansible variable sets (none for an ignored one)."""
    if key in ALIASES:
        return (ALIASES[key][0],)
    if key == COMMON_ARGS:
        return ("ssh_jump", "ssh_known_hosts")
    return ()


def check(key: str, value: Any) -> Optional[str]:
    """A problem with an Ansible variable's value, or None."""
    if key in ALIASES:
        _, valid, description, _ = ALIASES[key]
        return None if valid(value) else f"must be {description}, got {type(value).__name__} {value!r}"
    if key == COMMON_ARGS:
        if not isinstance(value, str):
            return f"must be a string of ssh options, got {type(value).__name__} {value!r}"
        try:
            ssh_args(value)
        except ValueError as exc:
            return str(exc)
        return None
    if key in IGNORED:
        return None if isinstance(value, str) else f"must be a string, got {type(value).__name__} {value!r}"
    return None


def priority(value: Any) -> Optional[int]:
    """``ansible_group_priority`` as Ansible reads it (``int(value)``), or None when it is not a whole number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
        return int(value)
    return None


_JUMP = re.compile(r"^(?:[A-Za-z0-9._-]+@)?[A-Za-z0-9.-]+(?::\d{1,5})?$")


def ssh_args(text: str) -> dict[str, str]:
    """The nvdeploy keys that ``ansible_ssh_common_args`` sets; ValueError for an option nvdeploy cannot honour.

    ``-J``/``-o ProxyJump=`` and ``ssh -W %h:%p`` ProxyCommands give ``ssh_jump``; ``-o UserKnownHostsFile=`` gives
    ``ssh_known_hosts``. Any other option would be silently dropped, so it is refused.
    """
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"cannot split the ssh options: {exc}") from None
    out: dict[str, str] = {}
    index = 0
    while index < len(words):
        word = words[index]
        if word in ("-o", "-J"):
            if index + 1 >= len(words):
                raise ValueError(f"{word} has no value")
            option, index = (word, words[index + 1]), index + 2
        elif word.startswith("-o") or word.startswith("-J"):
            option, index = (word[:2], word[2:]), index + 1
        else:
            raise ValueError(f"nvdeploy cannot apply the ssh argument {word!r} (supported: -J, -o ProxyJump=, "
                             "-o ProxyCommand='ssh -W %h:%p ...', -o UserKnownHostsFile=)")
        flag, value = option
        if flag == "-J":
            name, setting = "proxyjump", value
        else:
            name, _, setting = value.partition("=")
            name = name.strip().lower()
            setting = setting.strip()
        if name == "proxyjump":
            if not _JUMP.match(setting):
                raise ValueError(f"ProxyJump {setting!r} is not one [user@]host[:port] (nvdeploy takes one jump host)")
            out["ssh_jump"] = setting
        elif name == "proxycommand":
            out["ssh_jump"] = _proxy_command(setting)
        elif name == "userknownhostsfile":
            if not setting or " " in setting:
                raise ValueError(f"UserKnownHostsFile {setting!r} must be one path")
            out["ssh_known_hosts"] = setting
        elif name == "stricthostkeychecking":
            raise ValueError("StrictHostKeyChecking is not taken from the inventory: nvdeploy checks host keys "
                             "against known_hosts (--accept-new-host-keys is the explicit opt-in)")
        else:
            raise ValueError(f"nvdeploy cannot apply the ssh option {value!r} (supported: ProxyJump, ProxyCommand "
                             "'ssh -W %h:%p ...', UserKnownHostsFile)")
    return out


def _proxy_command(command: str) -> str:
    words = shlex.split(command)
    if len(words) < 3 or words[0] != "ssh" or "-W" not in words:
        raise ValueError(f"ProxyCommand {command!r} is not 'ssh -W %h:%p [-p PORT] [user@]host'")
    user_host: Optional[str] = None
    port: Optional[str] = None
    index = 1
    while index < len(words):
        word = words[index]
        if word == "-W" and index + 1 < len(words) and words[index + 1] == "%h:%p":
            index += 2
        elif word == "-q":
            index += 1
        elif word == "-p" and index + 1 < len(words) and words[index + 1].isdigit():
            port, index = words[index + 1], index + 2
        elif not word.startswith("-") and user_host is None:
            user_host, index = word, index + 1
        else:
            raise ValueError(f"ProxyCommand {command!r}: nvdeploy cannot apply {word!r}")
    jump = f"{user_host}:{port}" if port else str(user_host)
    if user_host is None or not _JUMP.match(jump):
        raise ValueError(f"ProxyCommand {command!r} names no jump host")
    return jump


def translate(values: dict[str, Any], lines: dict[str, int]) -> tuple[dict[str, Any], dict[str, int]]:
    """Merged variables under Ansible's names -> nvdeploy's keys (values already checked)."""
    out: dict[str, Any] = {}
    out_lines: dict[str, int] = {}
    for key, value in values.items():
        line = lines.get(key, 0)
        if key in IGNORED:
            continue
        if key == COMMON_ARGS:
            for target, setting in ssh_args(value).items():
                out[target], out_lines[target] = setting, line
        elif key in ALIASES:
            target, _, _, convert = ALIASES[key]
            out[target], out_lines[target] = convert(value), line
        else:
            out[key], out_lines[key] = value, line
    return out, out_lines


class Sink(Protocol):
    """What a reader hands the inventory builder (nvdeploy.config.inventory), in the order Ansible's parser does."""

    def add_group(self, name: str, line: Optional[int]) -> None: ...

    def add_child(self, parent: str, child: str, line: Optional[int]) -> None: ...

    def set_group_var(self, group: str, key: str, value: Any, line: Optional[int]) -> None: ...

    def add_hosts(self, group: str, pattern: str, line: Optional[int]) -> list[str]: ...

    def set_host_var(self, host: str, key: str, value: Any, line: Optional[int]) -> None: ...


_SECTION = re.compile(r"^\[([^:\]\s]+)(?::(\w+))?\]\s*(?:[#;].*)?$")
_GROUPNAME = re.compile(r"^([^:\]\s]+)\s*(?:[#;].*)?$")


def _ini_value(text: str) -> Any:
    """Ansible's INI value: a Python literal where it is one (``2222``, ``True``, ``'550.120'``), else the text."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text
    if value is ... or isinstance(value, complex):
        return str(value) if value is not ... else "..."
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return value


def read_ini(text: str, file: str, sink: Sink) -> None:
    """Ansible's INI inventory format: ``[group]`` host lines, ``[group:vars]``, ``[group:children]``.

    Sections may come in any order, as Ansible's parser allows: a child named before its own section is linked
    when that section comes, and one that never comes is an error.
    """
    pending: dict[str, tuple[str, int, list[str]]] = {}  # group -> (state, line, parents), as Ansible keeps them
    known = {"all", "ungrouped"}
    group, state = "ungrouped", "hosts"
    sink.add_group("ungrouped", None)

    def link_pending(name: str, number: int) -> None:
        for parent in pending[name][2]:
            sink.add_child(parent, name, number)
            if parent in pending and pending[parent][0] == "children":
                link_pending(parent, number)
        del pending[name]

    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        section = _SECTION.match(line)
        if section:
            group, state = section.group(1), section.group(2) or "hosts"
            if state not in ("hosts", "children", "vars"):
                raise ConfigError(f"section [{group}:{state}] has an unknown type (hosts, children or vars)", file,
                                  number, f"[{group}:{state}]")
            if group not in known:
                if state == "vars" and group not in pending:
                    pending[group] = ("vars", number, [])
                known.add(group)
                sink.add_group(group, number)
            if group in pending and state != "vars":
                if pending[group][0] == "children":
                    link_pending(group, number)
                else:
                    del pending[group]
            continue
        if line.startswith("[") and line.endswith("]"):
            raise ConfigError(f"invalid section {line!r} (no spaces or other characters in a section name)", file,
                              number, line)
        if state == "hosts":
            try:
                words = shlex.split(line, comments=True)
            except ValueError as exc:
                raise ConfigError(f"cannot read the host line: {exc}", file, number) from None
            if not words:
                continue
            names = sink.add_hosts(group, words[0], number)
            for word in words[1:]:
                if "=" not in word:
                    raise ConfigError(f"expected key=value host variable, got {word!r}", file, number, word)
                key, value = word.split("=", 1)
                for name in names:
                    sink.set_host_var(name, key, _ini_value(value), number)
        elif state == "vars":
            if "=" not in line:
                raise ConfigError(f"expected key=value, got {line!r}", file, number)
            key, value = (part.strip() for part in line.split("=", 1))
            sink.set_group_var(group, key, _ini_value(value), number)
        else:
            match = _GROUPNAME.match(line)
            if not match:
                raise ConfigError(f"expected a group name, got {line!r}", file, number)
            child = match.group(1)
            if child in known:
                sink.add_child(group, child, number)
            elif child in pending:
                pending[child][2].append(group)
            else:
                pending[child] = ("children", number, [group])
    for name, (kind, number, parents) in pending.items():
        if kind == "vars":
            raise ConfigError(f"section [{name}:vars] is for a group that no [{name}] or [{name}:children] "
                              "section declares", file, number, name)
        raise ConfigError(f"section [{parents[-1]}:children] includes the undefined group {name!r}", file, number,
                          name)


def read_ansible_source(source: str, sink: Sink, file: str) -> None:
    """Any source Ansible reads (plugins, constructed groups, directories), through ``ansible-inventory --list``."""
    # Installed beside nvdeploy in a virtualenv that is not activated, it is not on the PATH.
    beside = Path(sys.executable).parent / "ansible-inventory"
    binary = str(beside) if beside.is_file() else shutil.which("ansible-inventory")
    if binary is None:
        raise ConfigError("ansible-inventory is not on the PATH (install ansible-core to read an ansible: source)",
                          file)
    try:
        done = subprocess.run([binary, "-i", source, "--list"], capture_output=True, text=True,
                              timeout=ANSIBLE_INVENTORY_TIMEOUT_S, env=_ansible_env(), stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ConfigError(f"ansible-inventory gave no answer within {ANSIBLE_INVENTORY_TIMEOUT_S} s", file) from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise ConfigError(f"ansible-inventory failed (exit {done.returncode}): {last}", file)
    try:
        data = json.loads(done.stdout)
    except ValueError as exc:
        raise ConfigError(f"ansible-inventory printed no JSON: {exc}", file) from None
    read_inventory_json(data, sink, file)


def _ansible_env() -> dict[str, str]:
    import os

    env = dict(os.environ)
    # A source Ansible cannot parse is a warning and an empty inventory by default: here it must be an error.
    env["ANSIBLE_INVENTORY_UNPARSED_FAILED"] = "True"
    env.setdefault("ANSIBLE_NOCOLOR", "1")
    return env


def read_inventory_json(data: Any, sink: Sink, file: str) -> None:
    """``ansible-inventory --list`` output: groups with hosts and children, merged variables per host."""
    if not isinstance(data, dict):
        raise ConfigError("ansible-inventory --list did not print a JSON object", file)
    meta = data.get("_meta") if isinstance(data.get("_meta"), dict) else {}
    hostvars = meta.get("hostvars") if isinstance(meta.get("hostvars"), dict) else {}
    for name in data:
        if name != "_meta":
            sink.add_group(str(name), None)
    for name, body in data.items():
        if name == "_meta" or not isinstance(body, dict):
            continue
        for child in body.get("children", []) or []:
            sink.add_child(str(name), str(child), None)
        for host in body.get("hosts", []) or []:
            sink.add_hosts(str(name), str(host), None)
        for key, value in (body.get("vars") or {}).items():
            sink.set_group_var(str(name), str(key), value, None)
    for host, values in hostvars.items():
        if isinstance(values, dict):
            for key, value in values.items():
                sink.set_host_var(str(host), str(key), value, None)
