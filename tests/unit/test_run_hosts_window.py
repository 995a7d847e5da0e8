"""run_hosts keeps a window of submitted hosts: with every host submitted at once, nodes finishing while
the main thread waited for the GIL queued up with their whole results, and a 10,000-node simulated run peaked at
~300 MiB. Deterministic: the runner counts, it never sleeps."""

from __future__ import annotations

import threading

from nvdeploy.config.inventory import Host
from nvdeploy.results import ErrorReason, Finding, NodeResult, Verdict
from nvdeploy.runner.engine import run_hosts


class _CountingRunner:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started = 0
        self.taken = 0
        self.most_ahead = 0

    def run(self, host: Host) -> NodeResult:
        with self.lock:
            self.started += 1
            self.most_ahead = max(self.most_ahead, self.started - self.taken)
        return NodeResult(host.name, (Finding("gpu.count", Verdict.PASS, "8 GPUs", node=host.name),))

    def abort_all(self) -> None:
        pass


def test_no_more_than_twice_the_forks_are_started_ahead_of_the_results_taken():
    runner = _CountingRunner()
    hosts = [Host(f"gpu{i:04d}", {"address": "127.0.0.1"}) for i in range(500)]
    names = []

    def on_result(node: NodeResult) -> None:
        names.append(node.name)
        with runner.lock:
            runner.taken += 1

    results, interrupt = run_hosts(hosts, runner, forks=4, on_result=on_result, keep=False)  # type: ignore[arg-type]
    assert interrupt is None and results == {}
    assert sorted(names) == [h.name for h in hosts]  # every host ran once
    assert runner.started == 500
    assert runner.most_ahead <= 2 * 4, runner.most_ahead


def test_hosts_never_submitted_before_an_interrupt_are_error_interrupted():
    runner = _CountingRunner()
    hosts = [Host(f"gpu{i:04d}", {"address": "127.0.0.1"}) for i in range(200)]

    def on_result(node: NodeResult) -> None:
        with runner.lock:
            runner.taken += 1
        if runner.taken == 3:
            raise KeyboardInterrupt  # Ctrl-C reaches the main thread, which is the one taking results

    results, interrupt = run_hosts(hosts, runner, forks=2, on_result=on_result, keep=False)  # type: ignore[arg-type]
    assert interrupt is not None and interrupt.exit_code == 130
    assert runner.started < 200  # the rest were never submitted
    assert len(results) + runner.taken == 200  # every host has a result: taken, or ERROR interrupted
    assert all(f.reason is ErrorReason.INTERRUPTED for node in results.values() for f in node.findings)


def test_a_ctrl_c_while_a_result_is_handed_on_waits_until_that_node_is_recorded():
    """A real SIGINT, sent from inside on_result: Python would raise it at the next line, between the journal and
    the spool; run_hosts raises it only where it waits, so the node is recorded whole (one in 400 was lost)."""
    import os
    import signal

    runner = _CountingRunner()
    hosts = [Host(f"gpu{i:04d}", {"address": "127.0.0.1"}) for i in range(200)]
    begun: list[str] = []
    recorded: list[str] = []

    def on_result(node: NodeResult) -> None:
        begun.append(node.name)
        if len(begun) == 3:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # many lines on which the old code raised KeyboardInterrupt
                pass
        recorded.append(node.name)

    results, interrupt = run_hosts(hosts, runner, forks=2, on_result=on_result, keep=False)  # type: ignore[arg-type]
    assert interrupt is not None and interrupt.exit_code == 130
    assert begun == recorded and len(recorded) >= 3
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the run's own handler is back
    assert {n.findings[0].reason for n in results.values()} == {ErrorReason.INTERRUPTED}
    assert len(results) + len(recorded) == 200
