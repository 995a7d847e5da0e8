"""What an install/optimize action is, and how one runs on a node: probe, apply only what is missing, verify.

An :class:`Action` declares its parameters (name, type, pattern, default) so a playbook is checked before any
connection, and whether it changes the node. Running one (:func:`run_action`):

1. ``probe``: read the node's current state as ``current`` items next to the ``desired`` ones (``fnmatch`` patterns:
   ``"550.*"``), or a ``failure`` (a refused preflight, an unsupported OS);
2. nothing differs: ``ok``, no command that changes anything is run;
3. ``plan``: the commands that bring the differing items to their desired values. With ``--dry-run`` they are
   recorded as "would run" and the step ends ``would_change``; nothing else happens;
4. ``apply``: run them in order (root ones through sudo), stop at the first that fails;
5. ``verify``: probe again; every item must now match, or the step FAILs. Each change is recorded with its value
   before and after.

Commands are argv lists (never shell strings); values from inventories and playbooks are single argv words.
"""

from __future__ import annotations

import enum
import fnmatch
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Mapping, Optional, Sequence

from nvdeploy.actions.osinfo import OS_READS, os_facts
from nvdeploy.config.inventory import Host
from nvdeploy.config.profiles import Profile
from nvdeploy.results import CommandResult, ErrorReason
from nvdeploy.transport.base import CommandSpec, Transport

READ_TIMEOUT_S = 60.0
OUTPUT_TAIL = 2000
SUDO_ERRORS = ("a password is required", "incorrect password", "is not in the sudoers", "may not run sudo",
               "no tty present", "a terminal is required", "Sorry, try again")


class StepStatus(str, enum.Enum):
    OK = "ok"  # already as desired: nothing changed
    CHANGED = "changed"
    WOULD_CHANGE = "would_change"  # dry-run: these commands would run
    FAILED = "failed"
    SKIPPED = "skipped"  # when: false, --tags/--skip-tags, or not applicable to the node
    NOT_RUN = "not_run"  # an earlier step failed, the node was unreachable, or the rollout stopped


@dataclass(frozen=True)
class Param:
    """One parameter of an action. ``kind``: str, bool, int, number, list (of str), choice."""

    name: str
    kind: str = "str"
    required: bool = False
    default: Any = None
    doc: str = ""
    pattern: Optional[str] = None  # a str (or every list item) must match it in full after rendering
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class Change:
    """One item changed (or that would change) on the node: its value before and after."""

    item: str
    before: str
    after: str

    def to_dict(self) -> dict[str, str]:
        return {"item": self.item, "before": self.before, "after": self.after}

    def __str__(self) -> str:
        return f"{self.item}: {self.before} -> {self.after}"


@dataclass(frozen=True)
class CommandRecord:
    """A command of a step: what ran (or would have run), as whom, with what result."""

    name: str
    command: str
    sudo: bool
    mutates: bool
    executed: bool
    rc: Optional[int] = None
    error: Optional[str] = None
    duration_s: float = 0.0
    output: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "command": self.command, "sudo": self.sudo, "mutates": self.mutates,
                "executed": self.executed, "rc": self.rc, "error": self.error,
                "duration_s": round(self.duration_s, 3), "output": self.output}


@dataclass(frozen=True)
class StepResult:
    """The outcome of one playbook step on one node."""

    step: str
    name: str
    action: str
    status: StepStatus
    message: str = ""
    changes: tuple[Change, ...] = ()
    commands: tuple[CommandRecord, ...] = ()
    duration_s: float = 0.0
    reason: Optional[ErrorReason] = None
    output: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "name": self.name, "action": self.action, "status": self.status.value,
                "message": self.message, "changes": [c.to_dict() for c in self.changes],
                "commands": [c.to_dict() for c in self.commands], "duration_s": round(self.duration_s, 3),
                "reason": self.reason.value if self.reason else None, "output": self.output}


@dataclass(frozen=True)
class Cmd:
    """A command an action plans: argv words, root or not, whether it changes the node, its timeout."""

    name: str
    argv: tuple[str, ...]
    sudo: bool = True
    mutates: bool = True
    timeout_s: float = 600.0
    allow_fail: bool = False


@dataclass
class Probe:
    """What an action found: ``current`` vs ``desired`` items (desired values are fnmatch patterns)."""

    current: dict[str, str] = field(default_factory=dict)
    desired: dict[str, str] = field(default_factory=dict)
    failure: Optional[str] = None
    reason: Optional[ErrorReason] = None
    note: str = ""
    skip: Optional[str] = None  # the step does not apply to this node (why)
    facts: dict[str, Any] = field(default_factory=dict)
    # Desired items the step verifies but does not set (DCGM listing every GPU: a GPU that fell off the bus stays
    # off): a dry-run names them as what would be checked, never as a change it would make.
    checked: tuple[str, ...] = ()

    def differing(self) -> list[str]:
        return [k for k, want in self.desired.items() if not fnmatch.fnmatchcase(self.current.get(k, "absent"), want)]

    @property
    def needed(self) -> bool:
        return bool(self.differing())


class StepFailed(Exception):
    """An action cannot go on: the step FAILs with this message (and the failing command's output)."""

    def __init__(self, message: str, result: Optional[CommandResult] = None,
                 reason: Optional[ErrorReason] = None) -> None:
        super().__init__(message)
        self.message = message
        self.result = result
        self.reason = reason


def tail(text: str, limit: int = OUTPUT_TAIL) -> str:
    return text if len(text) <= limit else "..." + text[-limit:]


def output_of(result: CommandResult) -> str:
    return tail((result.text + result.err_text).strip())


class ActionContext:
    """One node during one phase: runs commands through its transport and remembers facts between steps."""

    def __init__(self, host: Host, profile: Profile, transport: Transport, *, dry_run: bool, become: bool,
                 allow_reboot: bool, facts: dict[str, Any], reconnect: Callable[[], Transport],
                 remaining: Callable[[], Optional[float]], stopping: Callable[[], bool],
                 sleep: Callable[[float], bool]) -> None:
        self.host = host
        self.profile = profile
        self.transport = transport
        self.dry_run = dry_run
        self.become = become
        self.allow_reboot = allow_reboot
        self.facts = facts
        self._reconnect = reconnect
        self.remaining = remaining
        self.stopping = stopping
        self.sleep = sleep
        self.records: list[CommandRecord] = []
        self.results: list[CommandResult] = []
        self.step_id = ""
        # Reads are answered from here until a command changes the node (or the node reconnects after a reboot).
        self._cache: dict[tuple[bool, tuple[str, ...]], CommandResult] = {}

    def planning(self) -> ActionContext:
        """A dry-run twin on the same connection, with facts of its own: the plan a real run checks first."""
        return ActionContext(self.host, self.profile, self.transport, dry_run=True, become=self.become,
                             allow_reboot=self.allow_reboot, facts={}, reconnect=self._reconnect,
                             remaining=self.remaining, stopping=self.stopping, sleep=self.sleep)

    # -- commands ------------------------------------------------------------------------------------------

    def _spec(self, name: str, argv: Sequence[str], sudo: bool, timeout_s: float) -> CommandSpec:
        label = f"{self.step_id}.{name}" if self.step_id else name
        return CommandSpec(label, tuple(str(a) for a in argv), timeout_s, sudo=sudo and self.become)

    def execute(self, name: str, argv: Sequence[str], *, sudo: bool = False, mutates: bool = False,
                timeout_s: float = READ_TIMEOUT_S) -> CommandResult:
        """Run one command now (one round trip) and record it. Used for reads, and by apply for changes."""
        return self._batch([(name, argv)], sudo=sudo, mutates=mutates, timeout_s=timeout_s)[0]

    def _batch(self, items: Sequence[tuple[str, Sequence[str]]], *, sudo: bool, mutates: bool,
               timeout_s: float) -> list[CommandResult]:
        if mutates and self.dry_run:
            raise RuntimeError("a command that changes the node was about to run in dry-run")  # a bug: never run it
        if mutates:
            self._cache.clear()
        specs = [self._spec(name, argv, sudo, timeout_s) for name, argv in items]
        started = time.monotonic()
        results = self.transport.run_batch(specs, self.remaining())
        elapsed = time.monotonic() - started
        for spec, result in zip(specs, results):
            self.results.append(result)
            self.records.append(CommandRecord(
                name=spec.name, command=spec.display, sudo=spec.sudo, mutates=mutates, executed=True, rc=result.rc,
                error=(result.error.value + (f": {result.error_detail}" if result.error_detail else ""))
                if result.error else None, duration_s=elapsed, output=output_of(result)))
        return results

    def read(self, name: str, argv: Sequence[str], *, sudo: bool = False,
             timeout_s: float = READ_TIMEOUT_S) -> CommandResult:
        """A read-only command: runs in dry-run too. A transport failure (timeout, lost connection) fails the step."""
        return self.read_many([(name, argv)], sudo=sudo, timeout_s=timeout_s)[0]

    def read_many(self, items: Sequence[tuple[str, Sequence[str]]], *, sudo: bool = False,
                  timeout_s: float = READ_TIMEOUT_S) -> list[CommandResult]:
        """Read-only commands side by side in one round trip; an answer read since the last change is reused."""
        keys = [(sudo, tuple(str(a) for a in argv)) for _, argv in items]
        todo = [(item, key) for item, key in zip(items, keys) if key not in self._cache]
        if todo:
            fresh = self._batch([item for item, _ in todo], sudo=sudo, mutates=False, timeout_s=timeout_s)
            for (_, key), result in zip(todo, fresh):
                if result.error is None:
                    self._cache[key] = result
                else:
                    raise StepFailed(f"{result.name}: {result.error_detail or result.error.value}", result,
                                     result.error)
        return [self._cache[key] for key in keys]

    def would_run(self, cmd: Cmd) -> None:
        spec = self._spec(cmd.name, cmd.argv, cmd.sudo, cmd.timeout_s)
        self.records.append(CommandRecord(name=spec.name, command=spec.display, sudo=spec.sudo, mutates=cmd.mutates,
                                          executed=False))

    def run_cmd(self, cmd: Cmd) -> CommandResult:
        """Run a planned command; raise StepFailed when it fails (unless it may)."""
        result = self.execute(cmd.name, cmd.argv, sudo=cmd.sudo, mutates=cmd.mutates, timeout_s=cmd.timeout_s)
        if result.ok or (cmd.allow_fail and result.error is None):
            return result
        raise StepFailed(f"{' '.join(cmd.argv[:4])}{' ...' if len(cmd.argv) > 4 else ''} failed: "
                         f"{describe_failure(result)}", result, failure_reason(result))

    def reconnect(self) -> Transport:
        self._cache.clear()
        self.transport = self._reconnect()
        return self.transport

    # -- facts shared between steps --------------------------------------------------------------------------

    def os_family(self) -> str:
        """apt or dnf, detecting the OS on first use (the os.detect step makes it explicit)."""
        if "os_family" not in self.facts:
            detect_os(self)
        family = self.facts.get("os_family")
        if family not in ("apt", "dnf"):
            raise StepFailed(self.facts.get("os_problem", "unsupported operating system"))
        return str(family)


def describe_failure(result: CommandResult) -> str:
    if result.error is not None:
        return result.error_detail or result.error.value
    first = next((line.strip() for line in (result.err_text + "\n" + result.text).splitlines()
                  if line.strip() and not line.startswith(("Reading", "Building", "WARNING: apt"))), "")
    return f"exit {result.rc}" + (f": {first[:300]}" if first else "")


def failure_reason(result: CommandResult) -> Optional[ErrorReason]:
    if result.error is not None:
        return result.error
    if any(marker in result.err_text for marker in SUDO_ERRORS) and result.command.startswith("sudo"):
        return ErrorReason.SUDO
    return None


def detect_os(ctx: ActionContext) -> None:
    """Read /etc/os-release, the kernel and the machine into ctx.facts (os_id, os_version, os_family, kernel,
    distro_tag, arch: NVIDIA's repository folder, x86_64 or sbsa for aarch64/Grace)."""
    release, kernel, machine = ctx.read_many(list(OS_READS))
    if not release.ok:
        ctx.facts["os_family"] = None
        ctx.facts["os_problem"] = f"cannot read /etc/os-release: {describe_failure(release)}"
        return
    ctx.facts.update(os_facts(release.text, kernel.text if kernel.ok else None, machine.text if machine.ok else None))


class Action:
    """Base of every action; subclasses set ``name``, ``params``, ``mutates`` and implement probe/plan."""

    name: ClassVar[str] = ""
    params: ClassVar[tuple[Param, ...]] = ()
    mutates: ClassVar[bool] = True
    doc: ClassVar[str] = ""

    def probe(self, ctx: ActionContext, p: Mapping[str, Any]) -> Probe:
        raise NotImplementedError

    def plan(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> list[Cmd]:
        return []

    def apply(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> None:
        for cmd in self.plan(ctx, p, probe):
            ctx.run_cmd(cmd)

    def verify(self, ctx: ActionContext, p: Mapping[str, Any], before: Probe) -> Probe:
        return self.probe(ctx, p)

    def planned(self, ctx: ActionContext, p: Mapping[str, Any], probe: Probe) -> None:
        """Dry-run: what the planned change will do that later steps must see, in ``ctx.facts`` (as Ansible's check
        mode carries a task's result to the next): a driver that only a reboot loads, the driver a reboot then
        loads. The real run learns the same facts from the node after ``apply``."""


ACTIONS: dict[str, Action] = {}


def register(cls: type[Action]) -> type[Action]:
    if cls.name in ACTIONS:
        raise ValueError(f"duplicate action {cls.name!r}")
    ACTIONS[cls.name] = cls()
    return cls


def shown(pattern: str) -> str:
    """A desired value as people read it: literal characters unescaped (``[[]`` -> ``[``)."""
    if pattern == "[0-9]*":
        return "installed"
    return re.sub(r"\[(.)\]", r"\1", pattern)


def _changes(before: Probe, after: Optional[Probe]) -> tuple[Change, ...]:
    keys = before.differing()
    if after is None:
        return tuple(Change(k, before.current.get(k, "absent"), shown(before.desired[k])) for k in keys
                     if k not in before.checked)
    return tuple(Change(k, before.current.get(k, "absent"), after.current.get(k, "absent")) for k in keys
                 if before.current.get(k, "absent") != after.current.get(k, "absent"))


def run_action(action: Action, ctx: ActionContext, step_id: str, name: str, params: Mapping[str, Any]) -> StepResult:
    """Probe, apply what is missing (unless dry-run), verify: one StepResult."""
    ctx.step_id = step_id
    first = len(ctx.records)
    started = time.monotonic()

    def result(status: StepStatus, message: str, changes: tuple[Change, ...] = (),
               reason: Optional[ErrorReason] = None, output: str = "") -> StepResult:
        return StepResult(step_id, name, action.name, status, message, changes, tuple(ctx.records[first:]),
                          time.monotonic() - started, reason, output)

    pending = ctx.dry_run and bool(ctx.facts.get("dry_run_pending"))
    if pending and not action.mutates:
        return result(StepStatus.SKIPPED, "dry-run: checked only once the changes above are applied")
    try:
        before = action.probe(ctx, params)
        if before.skip:
            return result(StepStatus.SKIPPED, before.skip)
        if before.failure and before.reason is ErrorReason.REBOOT_REQUIRED:
            # The plan itself needs a reboot nvdeploy may not do: the real run stops here, and so does the plan.
            return result(StepStatus.FAILED, ("dry-run: the run would stop here: " if ctx.dry_run else "")
                          + before.failure, reason=before.reason)
        if before.failure and pending:
            return result(StepStatus.WOULD_CHANGE, f"dry-run: planned only once the changes above are applied "
                          f"(now: {before.failure})")
        if before.failure:
            return result(StepStatus.FAILED, before.failure, reason=before.reason)
        if not before.needed:
            return result(StepStatus.OK, before.note or "already as desired")
        if ctx.dry_run:
            for cmd in action.plan(ctx, params, before):
                ctx.would_run(cmd)
            action.planned(ctx, params, before)
            ctx.facts["dry_run_pending"] = True
            changes = _changes(before, None)
            checks = [f"{k} is {before.current.get(k, 'absent')} now, {shown(before.desired[k])} expected"
                      for k in before.differing() if k in before.checked]
            text = "would change: " + "; ".join(str(c) for c in changes) if changes else "would run its commands"
            return result(StepStatus.WOULD_CHANGE, text + (f"; then would check: {'; '.join(checks)}" if checks else
                                                           ""), changes)
        action.apply(ctx, params, before)
        after = action.verify(ctx, params, before)
        changes = _changes(before, after)
        if after.failure:
            return result(StepStatus.FAILED, f"verify: {after.failure}", changes, after.reason)
        left = after.differing()
        if left:
            detail = "; ".join(f"{k} is {after.current.get(k, 'absent')}, expected {after.desired[k]}" for k in left)
            return result(StepStatus.FAILED, f"verify: {detail}", changes)
        note = f" ({after.note})" if after.note else ""
        return result(StepStatus.CHANGED, "changed: " + "; ".join(str(c) for c in changes) + note
                      if changes else "applied" + note, changes)
    except StepFailed as exc:
        output = output_of(exc.result) if exc.result is not None else ""
        if pending and exc.reason is None:
            return result(StepStatus.WOULD_CHANGE, f"dry-run: planned only once the changes above are applied "
                          f"(now: {exc.message})")
        return result(StepStatus.FAILED, exc.message, reason=exc.reason, output=output)


def literal(text: str) -> str:
    """A desired value matched literally: fnmatch would read [, ], * and ? as a pattern."""
    return re.sub(r"([\[\]*?])", r"[\1]", text)


SAFE_WORD = r"[A-Za-z0-9][A-Za-z0-9+._:~=@/-]*"
URL = r"(https?|file)://[^\s'\"\\]+"
BRANCH = r"\d{3}"


def is_safe_word(value: str) -> bool:
    return re.fullmatch(SAFE_WORD, value) is not None
