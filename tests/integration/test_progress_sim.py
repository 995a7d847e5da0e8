"""Progress of `nvdeploy validate` over simulated nodes, as an operator sees it: in a pipe, and on a terminal."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

# b runs for 3 s (the simulated tools answer late), so a run outlasts a few progress intervals on any machine.
INVENTORY = """\
all:
  vars:
    connection: sim
    profile: h100-sxm-8x
    driver_version: "550.90.07"
  hosts:
    a: {}
    b: {sim_faults: ["slow:3"]}
    c: {sim_faults: ["xid79"]}
    d: {sim_faults: ["unreachable"]}
"""
FINAL_COUNTS = "4/4 done, 0 running, 0 left | FAIL 1 ERROR 1 |"


def _command(tmp_path: Path, *extra: str, inventory_text: str = INVENTORY) -> list[str]:
    inventory = tmp_path / "cluster.yaml"
    inventory.write_text(inventory_text)
    return [sys.executable, "-m", "nvdeploy", "validate", "-i", str(inventory), "--out", str(tmp_path / "reports"),
            "--no-history", *extra]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


def screen(text: str) -> list[str]:
    """What a terminal shows for ``text``: each line with carriage returns applied, trailing blanks dropped."""
    shown = []
    for raw in text.split("\n"):
        cells: list[str] = []
        col = 0
        for char in raw:
            if char == "\r":
                col = 0
                continue
            if col < len(cells):
                cells[col] = char
            else:
                cells.append(char)
            col += 1
        shown.append("".join(cells).rstrip())
    return shown


def test_progress_in_a_pipe_prints_plain_lines_ending_with_the_final_counts(tmp_path):
    done = subprocess.run(_command(tmp_path, "--progress", "1"), capture_output=True, text=True, timeout=300,
                          env=_env())
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("nvdeploy: ") and " done, " in line]
    assert len(lines) >= 2, done.stderr  # at least one while b runs, and the last one
    assert "\r" not in done.stderr
    assert lines[-1].startswith("nvdeploy: " + FINAL_COUNTS)
    # While b was the last one running, the line named it and what it ran.
    assert any("slowest b " in line and " in light batch" in line for line in lines[:-1]), lines
    assert "NOT_READY" in done.stdout


def test_no_progress_in_a_pipe_without_the_flag(tmp_path):
    done = subprocess.run(_command(tmp_path, inventory_text=INVENTORY.replace('["slow:3"]', "[]")),
                          capture_output=True, text=True, timeout=300, env=_env())
    assert done.returncode == 1, done.stderr
    assert " done, " not in done.stderr and "\r" not in done.stderr + done.stdout
    assert done.stderr.startswith("nvdeploy 0") and "validating 4 node(s)" in done.stderr


def _read_all(fd: int, proc: subprocess.Popen, limit_s: float) -> bytes:
    out = b""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if not ready:
            if proc.poll() is not None:
                break
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    return out


def test_on_a_terminal_one_live_line_is_redrawn_and_erased_before_the_summary(tmp_path):
    master, slave = pty.openpty()
    # A wide terminal: the full line fits and is not cut.
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 200, 0, 0))
    proc = subprocess.Popen(_command(tmp_path), stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=_env())
    os.close(slave)
    try:
        raw = _read_all(master, proc, 300).decode("utf-8", "replace")
        assert proc.wait(timeout=60) == 1, raw
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    text = raw.replace("\r\n", "\n")  # the terminal's own line endings; what remains is the status line's \r
    frames = [f for f in text.split("\r") if " done, " in f]
    assert len(frames) >= 2, raw  # drawn at once, and again while b runs
    assert any("slowest b " in f and " in light batch" in f for f in frames), raw
    # The summary is coloured on a terminal (NO_COLOR unset): compare its text.
    shown = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in screen(text)]
    # Erased at the end: no status text left on screen, and the summary reads cleanly from column 0.
    assert not [line for line in shown if " running, " in line], shown
    assert any(line.startswith("FAIL  c  kmsg.xid") for line in shown), shown
    assert any(line.startswith("NOT_READY: 1 of 4 nodes failed") for line in shown), shown


def test_on_an_80_column_terminal_the_live_line_never_wraps(tmp_path):
    long = "rack17-chassis04-sled2-a-very-long-inventory-name-of-a-gpu-node-"
    inventory = INVENTORY.replace("    a: {}", f"    {long}0001: {{}}").replace("    b: {", f"    {long}0002: {{")
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    proc = subprocess.Popen(_command(tmp_path, inventory_text=inventory), stdin=subprocess.DEVNULL, stdout=slave,
                            stderr=slave, env=_env())
    os.close(slave)
    try:
        raw = _read_all(master, proc, 300).decode("utf-8", "replace")
        assert proc.wait(timeout=60) == 1, raw
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    text = raw.replace("\r\n", "\n")
    frames = [f.split("\n")[0] for f in text.split("\r")[1:] if " done" in f.split("\n")[0]]
    assert frames, raw
    # One column short of the edge (a terminal may wrap on the last one); the slow node named by its number.
    assert all(len(f.rstrip()) <= 79 for f in frames), [f for f in frames if len(f.rstrip()) > 79]
    assert any("...-0002 0:0" in f for f in frames), frames
