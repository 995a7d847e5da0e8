"""How long the controller waits for a batch's answer: a bounded time per stage, each counted from when the node
said the stage began (the batch prints a line when every command has started and when every command has ended;
see :mod:`nvdeploy.transport.batch`).

The node's own ``timeout -k`` is what stops a hung command: its "timed out after N s" is the finding. The
controller's limit is only the backstop for a node that does not answer. Counted from when the batch was SENT, it
fired first on a loaded machine: the node's shell started seconds late, so the controller gave up ("no complete
answer within 23 s") before the node's 15 s timeout of a hung nvidia-smi did. So:

- start: from the request until every command has started (the shell's start, the temp folder, the lock, the
  password check): the commands' own limit (what the whole batch had before), and at least :data:`START_S`, plus
  the password check's limit when there is one. A node whose shell never starts is ERROR after that, never a hang.
- run: from the start until every command has ended: the longest command's timeout plus the kill grace and a
  margin (``run_s``). The node's timeouts all end inside it.
- wrap-up: from then until the answer is complete (the stray sweep and its grace, the frames, their transfer):
  :data:`WRAP_S`, and never less than what was left of the run stage (all the old limit allowed).

A deadline (the run's ``--deadline``) bounds the whole, counted from when the batch was sent.
"""

from __future__ import annotations

import time
from typing import Optional, Sequence

from nvdeploy.transport import batch
from nvdeploy.transport.base import CommandSpec

# A shell that has not started its commands this long after the request (a hung /tmp, a node thrashing) will not.
START_S = 30.0
# After the longest command's timeout: its kill grace (timeout -k), and the time for wait to return.
RUN_SLACK_S = batch.KILL_GRACE_S + 5
# The sweep of what the tools left (TERM, a grace, KILL), the frames and their transfer.
WRAP_S = 30.0


def batch_budget(specs: Sequence[CommandSpec], password: bool, deadline_s: Optional[float],
                 asked: float) -> BatchBudget:
    """The budget of a batch of ``specs`` sent now (``password``: with one, so with its check if a spec uses
    sudo); ``deadline_s``, the run's time left when the batch was asked for at ``asked``, bounds it."""
    now = time.monotonic()
    total = None if deadline_s is None else max(deadline_s - (now - asked), 0.1)
    return BatchBudget(max(spec.timeout_s for spec in specs) + RUN_SLACK_S, now, total,
                       sudo_check=password and any(spec.sudo for spec in specs))


class BatchBudget:
    """The controller's clock for one batch. ``observe`` the output as it grows; ``left`` says how long to wait.

    Not a result: a small mutable object owned by the one thread that reads the batch. Times are the caller's
    (``time.monotonic()``), passed in, so the stages can be tested without a clock.
    """

    def __init__(self, run_s: float, now: float, total_s: Optional[float] = None, sudo_check: bool = False,
                 start_s: Optional[float] = None, wrap_s: Optional[float] = None) -> None:
        self.run_s = run_s
        self.total_s = total_s
        start = START_S if start_s is None else start_s
        self.start_s = max(start, run_s) + (batch.SUDO_CHECK_TIMEOUT_S + batch.KILL_GRACE_S if sudo_check else 0)
        self.wrap_s = WRAP_S if wrap_s is None else wrap_s
        self.sent = now
        self.stage = batch.NOT_STARTED
        self._until = now + self.start_s  # when the current stage's time is up
        self._staged = True

    @classmethod
    def fixed(cls, limit_s: float, now: float) -> BatchBudget:
        """One limit from ``now``, whatever the output says (a command that is not a batch)."""
        budget = cls(limit_s, now)
        budget._staged = False
        budget._until = now + limit_s
        return budget

    def observe(self, raw: bytes, now: float) -> None:
        """Note how far the node got, from the output read so far (cheap: it stops looking at the last stage)."""
        if not self._staged or self.stage == batch.RAN:
            return
        stage = batch.stage_of(raw)
        if stage <= self.stage:
            return
        if self.stage == batch.NOT_STARTED:
            self._until = now + self.run_s
        if stage == batch.RAN:
            self._until = max(now + self.wrap_s, self._until)
        self.stage = stage

    def left(self, now: float) -> float:
        """Seconds the controller still waits (0 or less: give up)."""
        return min(self._until, self._deadline()) - now

    def expired(self) -> str:
        """Why the controller gave up, for the commands' ERROR (once ``left`` is 0 or less)."""
        if not self._staged:
            return f"no complete answer within {self.run_s:.0f} s"
        if self._deadline() <= self._until:
            return f"no complete answer within {self.total_s:.0f} s (the run's --deadline)"
        if self.stage == batch.NOT_STARTED:
            return f"no answer: the node had not started the commands {self.start_s:.0f} s after the request"
        if self.stage == batch.STARTED:
            return (f"no complete answer: the commands were still running {self.run_s:.0f} s after the node started "
                    "them (a process their timeout could not end, such as one in D state)")
        return f"no complete answer: the commands ended, but their output did not arrive within {self.wrap_s:.0f} s"

    def _deadline(self) -> float:
        return float("inf") if self.total_s is None else self.sent + self.total_s
