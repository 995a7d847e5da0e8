"""One sudo password per run, tried once: a wrong password must not lock the operator's account fleet-wide.

With faillock, or a central (LDAP/AD) account, every failed PAM attempt counts against the account. A run
therefore tries the password on ONE node first (the prober); the other nodes wait until that node's sudo said
yes or no. Once it was accepted, every node uses it (each node still checks it once, serially, before its sudo
commands: see transport/batch.py). Once it was rejected anywhere, no node is sent it again: their sudo commands
are ERROR ``sudo`` "password rejected on gpu001; not tried here". A probe that ended without an answer about the
password (node unreachable, sudo hung) hands the prober role to the next node.

The gate is shared by every transport of one run and is thread-safe. It never logs or shows the password.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional

from nvdeploy.results import ErrorReason

# How often a waiting node re-checks whether its own run was interrupted.
_POLL_S = 0.2


@dataclass(frozen=True)
class SudoTicket:
    """What one batch may do: send ``password`` (None: do not), and why not (``reason``/``detail``)."""

    password: Optional[str]
    probing: bool = False
    reason: Optional[ErrorReason] = None
    detail: str = ""

    def __repr__(self) -> str:  # never show the password
        return f"SudoTicket(probing={self.probing}, reason={self.reason}, detail={self.detail!r})"


class SudoGate:
    """The run's sudo password and what the nodes said about it."""

    def __init__(self, password: Optional[str]) -> None:
        self._password = password
        self._cond = threading.Condition()
        self._accepted = False
        self._rejected_on: Optional[str] = None
        self._prober: Optional[str] = None

    def __repr__(self) -> str:  # never show the password
        return f"SudoGate(accepted={self._accepted}, rejected_on={self._rejected_on!r})"

    @property
    def rejected_on(self) -> Optional[str]:
        """The node whose sudo rejected the password first; None while it was not rejected."""
        with self._cond:
            return self._rejected_on

    def password(self) -> Optional[str]:
        """The password, or None once it was rejected anywhere (or when none was given)."""
        with self._cond:
            return None if self._rejected_on is not None else self._password

    def claim(self, node: str, wait_s: float, stopped: Callable[[], bool] = lambda: False) -> SudoTicket:
        """May ``node`` send the password now? Waits (at most ``wait_s``) while another node is probing it."""
        end = time.monotonic() + max(0.0, wait_s)
        with self._cond:
            while True:
                if self._password is None:
                    return SudoTicket(None)
                if self._rejected_on is not None:
                    return SudoTicket(None, reason=ErrorReason.SUDO,
                                      detail=f"password rejected on {self._rejected_on}; not tried here")
                if self._accepted:
                    return SudoTicket(self._password)
                if self._prober is None:
                    self._prober = node
                    return SudoTicket(self._password, probing=True)
                if stopped():
                    return SudoTicket(None, reason=ErrorReason.INTERRUPTED, detail="run interrupted")
                left = end - time.monotonic()
                if left <= 0:
                    return SudoTicket(None, reason=ErrorReason.SUDO,
                                      detail=f"password not tried here: its check on {self._prober} did not "
                                             f"finish within {wait_s:.0f} s")
                self._cond.wait(min(left, _POLL_S))

    def report(self, node: str, rejected: Optional[bool]) -> None:
        """What ``node``'s sudo said: True rejected, False accepted, None no answer about the password."""
        with self._cond:
            if rejected is True and self._rejected_on is None:
                self._rejected_on = node
            elif rejected is False:
                self._accepted = True
            if self._prober == node:
                self._prober = None
            self._cond.notify_all()

    def release(self, node: str) -> None:
        """``node`` stops probing without an answer (its batch ended early): the next node may probe."""
        self.report(node, None)
