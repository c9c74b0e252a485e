"""``sdk sync`` in a child process, SIGKILLed at a moment its output shows."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def sync_process(args: list[str]) -> subprocess.Popen[str]:
    """``sdk sync`` in a process group of its own; its errors go to ``sync-errors.txt`` next
    to the checkpoint (appended), so a failed test can show them."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    checkpoint = Path(args[args.index("--checkpoint") + 1]) if "--checkpoint" in args else None
    errors: Any = subprocess.DEVNULL
    if checkpoint is not None:
        checkpoint.parent.mkdir(parents=True, exist_ok=True)
        errors = (checkpoint.parent / "sync-errors.txt").open("a")
    return subprocess.Popen([sys.executable, "-m", "sdk.app.cli", *args], stdout=subprocess.PIPE,
                            stderr=errors, text=True, env=env, start_new_session=True)


def kill_when(process: subprocess.Popen[str], moment: Callable[[str], bool],
              past: Callable[[str], bool] | None = None) -> None:
    """SIGKILL the whole process group once a progress line shows the moment; fail (the
    sync killed too) if a line shows it ``past`` that moment first."""
    assert process.stdout is not None
    for line in process.stdout:
        reached = moment(line)
        if reached or (past is not None and past(line)):
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            assert reached, f"the sync went past the kill point unseen: {line}"
            return
    raise AssertionError(f"the sync ended before the kill point (exit {process.wait()})")


def mid_snapshot(line: str) -> bool:
    found = re.search(r"(\d+)/(\d+) splits, \d+ rows, snapshotting \|", line)
    return found is not None and int(found.group(1)) >= 2


def in_log_phase(line: str) -> bool:
    return "phase log" in line


def paced(rows: int) -> list[str]:
    """The option for a run to be killed in the middle of its snapshot of ``rows`` rows: about
    8 s of it, so the progress lines (every 2 s) show it there however fast batches go."""
    return ["--option", f"snapshot.rows-per-second={rows // 8}"]
