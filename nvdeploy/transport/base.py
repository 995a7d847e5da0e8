"""The transport interface: the only layer that reaches a node.

A non-zero exit status is data (it comes back in a CommandResult); only "could not reach, authenticate or
keep the connection" raises :class:`TransportError`, which the engine turns into a node-level ERROR.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence

from nvdeploy.results import CommandResult, ErrorReason

if TYPE_CHECKING:
    from nvdeploy.transport.sudo_gate import SudoGate

DEFAULT_MAX_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class CommandSpec:
    """One command to run on a node: an argv (never a shell string), its own timeout and output cap."""

    name: str
    argv: tuple[str, ...]
    timeout_s: float
    sudo: bool = False
    max_bytes: int = DEFAULT_MAX_BYTES
    # Over ``max_bytes``, keep the LAST bytes of stdout instead of the first (a kernel log: the newest lines
    # matter). Either way the node writes at most ``max_bytes`` to its disk and reports the true size.
    keep_tail: bool = False

    @property
    def display(self) -> str:
        import shlex

        prefix = "sudo -n -- " if self.sudo else ""
        return prefix + shlex.join(_short(arg) for arg in self.argv)


_MAX_SHOWN_ARG = 256


def _short(arg: str) -> str:
    """A long argument (the shipped NVML probe is ~70 KB) stands in records and reports as its size and hash."""
    if len(arg) <= _MAX_SHOWN_ARG:
        return arg
    import hashlib

    return f"<{len(arg.encode())} bytes sha256:{hashlib.sha256(arg.encode()).hexdigest()[:12]}>"


class TransportError(Exception):
    """The node could not be reached, authenticated, or the connection was lost."""

    def __init__(self, reason: ErrorReason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class Transport(abc.ABC):
    """A connection to one node, reused for every command of a run."""

    name: str = "base"
    # Set by bind(): the inventory name (for messages other nodes see), the run id (written next to the node
    # lock, so a refused run can name the holder) and the run's shared sudo gate.
    node: str = ""
    run_id: str = ""
    sudo_gate: Optional[SudoGate] = None
    # The node-side batch in the node's system Python where it has one (transport/batch_runner.py); False: always
    # the POSIX sh batch (the inventory's node_python: false).
    python_batch: bool = True

    def bind(self, node: str, run_id: str = "", sudo_gate: Optional[SudoGate] = None) -> Transport:
        """Attach this transport to one node of one run; returns self."""
        self.node = node
        self.run_id = run_id
        self.sudo_gate = sudo_gate
        return self

    @abc.abstractmethod
    def connect(self) -> None:
        """Open the connection; raise TransportError when the node cannot be reached or authenticated."""

    @abc.abstractmethod
    def run_batch(self, commands: Sequence[CommandSpec], deadline_s: Optional[float] = None) -> list[CommandResult]:
        """Run commands side by side on the node in one round trip, each with its own timeout.

        Returns one CommandResult per spec, in order. ``deadline_s`` bounds the whole batch (the engine's
        remaining global deadline); a command still running then is reported as timed out.
        """

    def run(self, spec: CommandSpec) -> CommandResult:
        return self.run_batch([spec])[0]

    def close(self) -> None:  # noqa: B027 - optional for transports without state
        """Release the connection. Safe to call twice, and from another thread to abort a run."""

    def __enter__(self) -> Transport:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
