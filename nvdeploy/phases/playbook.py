"""Install/optimize playbooks: strict YAML, Jinja2 templating from inventory and profile variables, per-host plans.

```yaml
name: install
version: "2026.11.1"
vars:                                   # defaults; the inventory's host vars override them
  driver_branch: "{{ (driver_version or profile.driver.version or '550.0').split('.')[0] }}"
steps:
  - id: driver                          # optional (default: from the action); unique
    name: NVIDIA driver {{ driver_branch }}
    action: driver.install              # see `nvdeploy actions list`
    params: {branch: "{{ driver_branch }}"}
    when: "gpu.count > 0"               # a Jinja2 expression; the step is SKIPPED when false
    changes: true                       # must say whether the action changes the node
    tags: [driver]
revalidate: {level: quick}              # optimize: the validate level run before and after tuning
```

Everything is checked before any connection (:func:`load_playbook`, then :func:`plan_hosts` for every host): an
unknown key, action or parameter, a wrong type, a template that does not compile or uses an undefined variable,
a value that fails its parameter's pattern: a :class:`ConfigError` naming file, line and key (exit 2).

Templates render in a :class:`jinja2.sandbox.SandboxedEnvironment` with ``StrictUndefined``. Rendered values are
plain strings converted to the parameter's type and checked against its pattern; actions pass them to the node as
single argv words, never through a shell.

Template variables: every host var of the inventory (``driver_version``, ``package_mirror``, ...), ``host`` (the
node name), ``profile`` (the host's profile itself: name, version, gpu, driver, nvlink, pcie, nccl, ib, mig, ...),
``gpu`` (the profile's gpu section), ``nvswitch``, ``ib_hcas`` (the host var, else the profile's ib.hcas, else 0),
then the playbook's vars (a host var of the same name wins).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

import jinja2
from jinja2.sandbox import SandboxedEnvironment

from nvdeploy.actions import ACTIONS, Action, Param
from nvdeploy.config.builtin import data_dir
from nvdeploy.config.inventory import Host
from nvdeploy.config.levels import LEVELS
from nvdeploy.config.profiles import Profile
from nvdeploy.config.yamlfile import ConfigError, line_of, load_yaml_file

_TOP_KEYS = {"name", "version", "description", "vars", "steps", "revalidate"}
_STEP_KEYS = {"id", "name", "action", "params", "when", "changes", "tags"}
_ID = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
_TAG = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
_VAR = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_ENV = SandboxedEnvironment(undefined=jinja2.StrictUndefined, autoescape=False,  # noqa: S701 - argv words, not HTML
                            keep_trailing_newline=False)


@dataclass(frozen=True)
class Step:
    """One step as written: templates not rendered yet."""

    id: str
    name: str
    action: str
    params: Mapping[str, Any]
    when: Optional[str]
    changes: bool
    tags: tuple[str, ...]
    line: int
    param_lines: Mapping[str, int] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"steps.{self.id}"


@dataclass(frozen=True)
class Playbook:
    name: str
    version: str
    path: str
    steps: tuple[Step, ...]
    vars: tuple[tuple[str, Any, int], ...] = ()
    revalidate: Optional[str] = None

    @property
    def tags(self) -> set[str]:
        return {t for s in self.steps for t in s.tags}


@dataclass(frozen=True)
class PlannedStep:
    """A step rendered for one host: concrete params, or skipped (``skip`` says why)."""

    step: Step
    params: Mapping[str, Any]
    skip: Optional[str] = None


def _compile(text: str, file: str, line: Optional[int], key: str, expression: bool = False) -> None:
    try:
        if expression:
            _ENV.compile_expression(text)
        else:
            _ENV.from_string(text)
    except jinja2.TemplateSyntaxError as exc:
        raise ConfigError(f"template error: {exc.message}", file, line, key) from None


def _check_templates(value: Any, file: str, line: Optional[int], key: str) -> None:
    if isinstance(value, str):
        _compile(value, file, line, key)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_templates(item, file, line_of(value, index) or line, f"{key}[{index}]")
    elif isinstance(value, dict):
        raise ConfigError("must be a plain value or a list, not a mapping", file, line, key)


def _static_type_ok(param: Param, value: Any) -> bool:
    """Before rendering: the YAML value has a shape the parameter can take (a string may be a template)."""
    if isinstance(value, str):
        return param.kind != "list"
    if param.kind == "list":
        return isinstance(value, list) and all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in value)
    if param.kind == "bool":
        return isinstance(value, bool)
    if param.kind in ("int", "number"):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, (int, float)) and not isinstance(value, bool) and param.kind == "str"


def _load_step(raw: Any, index: int, steps: Any, file: str, seen: set[str]) -> Step:
    where = f"steps[{index}]"
    line = line_of(steps, index)
    if not isinstance(raw, dict):
        raise ConfigError("a step must be a mapping with action, params, changes ...", file, line, where)
    for key in raw:
        if key not in _STEP_KEYS:
            raise ConfigError(f"unknown key in step (allowed: {', '.join(sorted(_STEP_KEYS))})", file,
                              line_of(raw, key), f"{where}.{key}")
    if "action" not in raw:
        raise ConfigError("missing required key", file, line, f"{where}.action")
    action_name = raw["action"]
    if not isinstance(action_name, str) or action_name not in ACTIONS:
        raise ConfigError(f"unknown action {action_name!r} (known: {', '.join(sorted(ACTIONS))})", file,
                          line_of(raw, "action"), f"{where}.action")
    action = ACTIONS[action_name]
    step_id = raw.get("id", action_name.replace(".", "_"))
    if not isinstance(step_id, str) or not _ID.fullmatch(step_id):
        raise ConfigError("must be an id of lower-case letters, digits, '_', '.', '-'", file, line_of(raw, "id"),
                          f"{where}.id")
    if step_id in seen:
        raise ConfigError(f"duplicate step id {step_id!r} (give the step an 'id:')", file,
                          line_of(raw, "id") if "id" in raw else line, f"{where}.id")
    seen.add(step_id)
    where = f"steps.{step_id}"
    if "changes" not in raw:
        raise ConfigError("missing required key: say whether the step changes the node (changes: true/false)", file,
                          line, f"{where}.changes")
    if not isinstance(raw["changes"], bool):
        raise ConfigError("must be true or false", file, line_of(raw, "changes"), f"{where}.changes")
    if raw["changes"] != action.mutates:
        verb = "changes" if action.mutates else "does not change"
        raise ConfigError(f"action {action_name} {verb} the node: declare changes: {str(action.mutates).lower()}", file,
                          line_of(raw, "changes"), f"{where}.changes")
    name = raw.get("name", action_name)
    if not isinstance(name, str):
        raise ConfigError("must be a string", file, line_of(raw, "name"), f"{where}.name")
    _compile(name, file, line_of(raw, "name"), f"{where}.name")
    when = raw.get("when")
    if when is not None:
        if isinstance(when, bool):
            when = "true" if when else "false"
        if not isinstance(when, str) or not when.strip():
            raise ConfigError("must be a Jinja2 expression (a string)", file, line_of(raw, "when"), f"{where}.when")
        _compile(when, file, line_of(raw, "when"), f"{where}.when", expression=True)
    tags = raw.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) and _TAG.fullmatch(t) for t in tags):
        raise ConfigError("must be a list of tags (lower-case letters, digits, '_', '-')", file, line_of(raw, "tags"),
                          f"{where}.tags")
    params = raw.get("params") or {}
    if not isinstance(params, dict):
        raise ConfigError("must be a mapping of parameters", file, line_of(raw, "params"), f"{where}.params")
    known = {p.name: p for p in action.params}
    for key, value in params.items():
        if key not in known:
            raise ConfigError(f"unknown parameter of {action_name} (known: {', '.join(sorted(known)) or 'none'})", file,
                              line_of(params, key), f"{where}.params.{key}")
        if not _static_type_ok(known[key], value):
            raise ConfigError(f"must be {_describe(known[key])}, got {type(value).__name__} {value!r}", file,
                              line_of(params, key), f"{where}.params.{key}")
        _check_templates(value, file, line_of(params, key), f"{where}.params.{key}")
    for param in action.params:
        if param.required and param.name not in params:
            raise ConfigError(f"missing required parameter of {action_name}", file, line_of(raw, "params") or line,
                              f"{where}.params.{param.name}")
    return Step(id=step_id, name=name, action=action_name, params=dict(params), when=when,
                changes=raw["changes"], tags=tuple(tags), line=line or 0,
                param_lines={k: line_of(params, k) or line or 0 for k in params})


def _describe(param: Param) -> str:
    if param.kind == "choice":
        return "one of " + ", ".join(param.choices)
    return {"str": "a string", "bool": "true or false", "int": "an integer", "number": "a number",
            "list": "a list of strings"}.get(param.kind, param.kind)


def load_playbook(path: Union[str, Path]) -> Playbook:
    """Read and check a playbook: structure, actions, parameter names and types, template syntax."""
    file = str(path)
    data = load_yaml_file(path)
    if not isinstance(data, dict):
        raise ConfigError("a playbook must be a mapping with 'steps:'", file, line_of(data))
    for key in data:
        if key not in _TOP_KEYS:
            raise ConfigError(f"unknown top-level key (allowed: {', '.join(sorted(_TOP_KEYS))})", file,
                              line_of(data, key), str(key))
    steps = data.get("steps")
    if not isinstance(steps, list) or not steps:
        raise ConfigError("must be a non-empty list of steps", file, line_of(data, "steps") or line_of(data), "steps")
    variables = data.get("vars") or {}
    if not isinstance(variables, dict):
        raise ConfigError("must be a mapping of variable names to values", file, line_of(data, "vars"), "vars")
    var_list = []
    for name, value in variables.items():
        if not isinstance(name, str) or not _VAR.fullmatch(name):
            raise ConfigError("a variable name must be an identifier", file, line_of(variables, name), f"vars.{name}")
        if isinstance(value, dict):
            raise ConfigError("must be a plain value or a list", file, line_of(variables, name), f"vars.{name}")
        _check_templates(value, file, line_of(variables, name), f"vars.{name}")
        var_list.append((name, value, line_of(variables, name) or 0))
    for key in ("name", "version", "description"):
        if key in data and not isinstance(data[key], str):
            raise ConfigError("must be a quoted string", file, line_of(data, key), key)
    revalidate = None
    if "revalidate" in data:
        body = data["revalidate"]
        if not isinstance(body, dict) or set(body) != {"level"} or body["level"] not in LEVELS:
            raise ConfigError(f"must be {{level: {'|'.join(LEVELS)}}}", file, line_of(data, "revalidate"), "revalidate")
        revalidate = body["level"]
    seen: set[str] = set()
    loaded = tuple(_load_step(raw, index, steps, file, seen) for index, raw in enumerate(steps))
    return Playbook(name=str(data.get("name", Path(file).stem)), version=str(data.get("version", "")), path=file,
                    steps=loaded, vars=tuple(var_list), revalidate=revalidate)


def builtin_playbook(name: str) -> Path:
    return data_dir("playbooks") / f"{name}.yaml"


def resolve_playbook(value: Optional[str], default: str) -> Path:
    """A path, or the name of a built-in playbook (install, optimize) when no such file exists."""
    if not value:
        return builtin_playbook(default)
    path = Path(value)
    if path.exists():
        return path
    builtin = builtin_playbook(value.removesuffix(".yaml"))
    return builtin if builtin.is_file() else path


def check_tags(playbook: Playbook, tags: Sequence[str], skip_tags: Sequence[str]) -> None:
    """A --tags/--skip-tags value that no step carries is a typo, not an empty run."""
    known = playbook.tags
    for option, values in (("--tags", tags), ("--skip-tags", skip_tags)):
        for tag in values:
            if tag not in known:
                raise ConfigError(f"{option} {tag!r} matches no step of {playbook.path} (tags: "
                                  f"{', '.join(sorted(known)) or 'none'})")


# ---------------------------------------------------------------------------------------------------------------
# Rendering for one host


def profile_vars(profile: Profile) -> dict[str, Any]:
    gpu = profile.gpu
    data: dict[str, Any] = {
        "name": profile.name, "version": profile.version,
        "gpu": {"count": gpu.count, "model": gpu.model, "memory_mib": gpu.memory_mib, "nvswitch": gpu.nvswitch,
                "nvlsm": gpu.nvlsm, "power_limit_w": gpu.power_limit_w, "ecc_required": gpu.ecc_required},
        "driver": {"version": profile.driver_version, "min_version": profile.driver_min_version,
                   "flavour": profile.driver_flavour},
    }
    for key, value in profile.extra.items():
        data[key] = _plain(value)
    return data


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def host_context(host: Host, profile: Profile) -> dict[str, Any]:
    prof = profile_vars(profile)
    context: dict[str, Any] = {k: _plain(v) for k, v in host.vars.items()}
    ib = prof.get("ib") or {}
    # The host's ``profile`` var (a name) becomes the profile itself: its name is profile.name.
    context.update(host=host.name, inventory_hostname=host.name, profile=prof, gpu=prof["gpu"],
                   nvswitch=bool(profile.gpu.nvswitch),
                   ib_hcas=int(host.vars.get("ib_hcas", ib.get("hcas", 0) or 0)))
    return context


class _RenderError(Exception):
    pass


def _render(value: Any, context: Mapping[str, Any]) -> Any:
    if isinstance(value, str):
        try:
            return _ENV.from_string(value).render(context)
        except jinja2.UndefinedError as exc:
            raise _RenderError(f"undefined variable: {exc.message}") from None
        except jinja2.TemplateError as exc:
            raise _RenderError(f"template error: {exc}") from None
        except (TypeError, ValueError, AttributeError, KeyError, IndexError, ZeroDivisionError) as exc:
            raise _RenderError(f"template error: {type(exc).__name__}: {exc}") from None
    if isinstance(value, list):
        return [_render(v, context) for v in value]
    return value


def _coerce(param: Param, value: Any) -> Any:
    """A rendered value (a string, or the YAML value) as the parameter's type; ValueError says what is wrong."""
    if param.kind == "list":
        items = [str(v).strip() for v in value] if isinstance(value, list) else None
        if items is None:
            raise ValueError(f"must be {_describe(param)}")
        for item in items:
            if param.pattern and not re.fullmatch(param.pattern, item):
                raise ValueError(f"item {item!r} is not allowed (pattern {param.pattern})")
        return items
    if param.kind == "bool":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "yes", "1"):
            return True
        if text in ("false", "no", "0", "none", ""):
            return False
        raise ValueError(f"must be true or false, got {value!r}")
    if param.kind in ("int", "number"):
        try:
            number = float(str(value).strip()) if not isinstance(value, (int, float)) else float(value)
        except ValueError:
            raise ValueError(f"must be {_describe(param)}, got {value!r}") from None
        if param.kind == "int":
            if number != int(number):
                raise ValueError(f"must be an integer, got {value!r}")
            return int(number)
        return number
    text = str(value).strip()
    if param.kind == "choice":
        if text not in param.choices:
            raise ValueError(f"must be one of {', '.join(param.choices)}, got {text!r}")
        return text
    if param.pattern and not re.fullmatch(param.pattern, text):
        raise ValueError(f"{text!r} is not allowed here (pattern {param.pattern})")
    return text


def _plan_step(step: Step, action: Action, context: Mapping[str, Any], playbook: Playbook, host: Host,
               tags: Sequence[str], skip_tags: Sequence[str]) -> PlannedStep:
    file = playbook.path
    if tags and not set(step.tags) & set(tags):
        return PlannedStep(step, {}, skip=f"not selected by --tags {','.join(tags)}")
    if set(step.tags) & set(skip_tags):
        return PlannedStep(step, {}, skip=f"skipped by --skip-tags {','.join(sorted(set(step.tags) & set(skip_tags)))}")
    if step.when is not None:
        try:
            outcome = _ENV.compile_expression(step.when, undefined_to_none=False)(**context)
        except jinja2.UndefinedError as exc:
            raise ConfigError(f"host {host.name}: undefined variable in when: {exc.message}", file, step.line,
                              f"{step.key}.when") from None
        except (jinja2.TemplateError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(f"host {host.name}: when: {exc}", file, step.line, f"{step.key}.when") from None
        if not outcome:
            return PlannedStep(step, {}, skip=f"when: {step.when.strip()} is false")
    params: dict[str, Any] = {}
    for param in action.params:
        line = step.param_lines.get(param.name, step.line)
        key = f"{step.key}.params.{param.name}"
        raw = step.params.get(param.name, param.default)
        if raw is None:
            params[param.name] = None
            continue
        try:
            params[param.name] = _coerce(param, _render(raw, context))
        except _RenderError as exc:
            raise ConfigError(f"host {host.name}: {exc}", file, line, key) from None
        except ValueError as exc:
            raise ConfigError(f"host {host.name}: {exc}", file, line, key) from None
    return PlannedStep(step, params)


def plan_host(playbook: Playbook, host: Host, profile: Profile, tags: Sequence[str] = (),
              skip_tags: Sequence[str] = (), extra: Optional[Mapping[str, Any]] = None) -> list[PlannedStep]:
    """Render every step for ``host``: vars first (in order), then each step's when and params. ``extra``: values
    that depend on other hosts of the inventory (the IMEX domain's node list)."""
    context = host_context(host, profile)
    # Without the inventory's other hosts, the host is a domain of its own.
    context.update(extra if extra is not None else imex_context([host], _OneProfile(profile))[host.name])
    for name, value, line in playbook.vars:
        if name in host.vars:
            continue  # the inventory wins over the playbook's defaults
        try:
            rendered = _render(value, context)
        except _RenderError as exc:
            raise ConfigError(f"host {host.name}: {exc}", playbook.path, line, f"vars.{name}") from None
        context[name] = rendered
    planned = []
    for step in playbook.steps:
        item = _plan_step(step, ACTIONS[step.action], context, playbook, host, tags, skip_tags)
        try:
            name = _render(step.name, context)
        except _RenderError as exc:
            if item.skip is not None:
                name = step.id  # a skipped step's name may use variables only its when: guarantees
            else:
                raise ConfigError(f"host {host.name}: {exc}", playbook.path, step.line, f"{step.key}.name") from None
        item = PlannedStep(Step(step.id, name, step.action, step.params, step.when, step.changes, step.tags,
                                step.line, step.param_lines), item.params, item.skip)
        planned.append(item)
    return planned


def plan_hosts(playbook: Playbook, hosts: Sequence[Host], catalog: Any, tags: Sequence[str] = (),
               skip_tags: Sequence[str] = (), everyone: Optional[Sequence[Host]] = None
               ) -> dict[str, list[PlannedStep]]:
    """Plans for every host, before any connection (the first problem is a ConfigError). ``everyone``: the
    inventory's hosts before ``--limit`` (default ``hosts``): an IMEX node list names every tray of the domain,
    also those this run does not touch."""
    check_tags(playbook, tags, skip_tags)
    extra = imex_context(everyone if everyone is not None else hosts, catalog)
    return {h.name: plan_host(playbook, h, catalog.get(h.profile or ""), tags, skip_tags, extra.get(h.name))
            for h in hosts}


class _OneProfile:
    """A catalog of one profile, for a host planned alone."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile

    def get(self, name: str) -> Profile:
        return self.profile


def imex_context(hosts: Sequence[Host], catalog: Any) -> dict[str, dict[str, Any]]:
    """Per host: ``imex_mode`` (host, dra or off: nvdeploy.collect.stack_commands.imex_mode) and, on trays that run IMEX
    themselves, ``imex_nodes``: their domain's addresses in inventory order (the node list every tray gets)."""
    from nvdeploy.collect.stack_commands import imex_address, imex_domains, imex_mode

    out = {h.name: {"imex_mode": imex_mode(h.vars, catalog.get(h.profile or ""))[0], "imex_nodes": []}
           for h in hosts}
    for members in imex_domains(hosts, lambda h: catalog.get(h.profile or "")).values():
        addresses = [imex_address(m) for m in members]
        for member in members:
            out[member.name]["imex_nodes"] = addresses
    return out
