"""Crash tests: SIGKILL of the whole Spark driver (Python and JVM) at the worst moments, then a
restart from the checkpoint. Each time the mirror must equal the source (nothing lost) and
every snapshot row and change must have been delivered once (an upserting mirror would hide a
change applied twice, so the batches' deliveries are counted too)."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.changes import assert_once
from helpers.paths import ROOT
from helpers.sources import make_source, random_change

from sdk import ConnectionConfig, get_dialect
from sdk_sqlite import read_target

pytestmark = [pytest.mark.spark, pytest.mark.slow]
CHILD = ROOT / "tests" / "helpers" / "spark_child.py"


def newest_offset(work: Path) -> tuple[int, str] | None:
    """The newest batch id in the checkpoint's offset log and the phase it is in."""
    folder = work / "ck" / "offsets"
    if not folder.exists():
        return None
    ids = sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())
    if not ids:
        return None
    lines = (folder / str(ids[-1])).read_text().splitlines()
    return ids[-1], json.loads(lines[-1])["phase"]


def run_child(url: str, mirror: str, work: Path,
              kill_when: Callable[[str, Path], bool] | None = None, chained: bool = False
              ) -> bool:
    """Run the child; SIGKILL its process group once ``kill_when(line, work)`` holds.
    Returns whether it was killed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    errors = work / "child-stderr.txt"
    with errors.open("a") as stderr:
        child = subprocess.Popen([sys.executable, str(CHILD), url, mirror, str(work),
                                  *(["chained"] if chained else [])],
                                 stdout=subprocess.PIPE, stderr=stderr, text=True,
                                 env=env, start_new_session=True)
    assert child.stdout is not None
    try:
        for line in child.stdout:
            if kill_when is not None and kill_when(line.strip(), work):
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
                return True
        assert child.wait() == 0, f"the child failed: {errors.read_text()[-3000:]}"
        return False
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()


def during_snapshot(batch: int) -> Callable[[str, Path], bool]:
    def check(line: str, work: Path) -> bool:
        newest = newest_offset(work)
        return line == f"APPLIED {batch}" and newest is not None and newest[1] == "snapshot"
    return check


def at_log_phase_start(line: str, work: Path) -> bool:
    newest = newest_offset(work)
    return line.startswith("APPLIED") and newest is not None and newest[1] == "log"


def during_log(batches: int) -> Callable[[str, Path], bool]:
    seen: list[str] = []

    def check(line: str, work: Path) -> bool:
        newest = newest_offset(work)
        if line.startswith("APPLIED") and newest is not None and newest[1] == "log":
            seen.append(line)
        return len(seen) >= batches
    return check


def inside_mirror_write(batch: int, delay: float) -> Callable[[str, Path], bool]:
    def check(line: str, work: Path) -> bool:
        if line == f"APPLY {batch}":
            time.sleep(delay)
            return True
        return False
    return check


SCENARIOS = {
    "snapshot-early": during_snapshot(1),
    "snapshot-late": during_snapshot(4),
    "snapshot-to-log": at_log_phase_start,
    "log-phase-early": during_log(1),
    "log-phase-late": during_log(4),
    "mirror-write-snapshot": inside_mirror_write(2, 0.05),
    "mirror-write-log": inside_mirror_write(9, 0.02),
}


def _writer_until(path: str, stop: Any, seed: int) -> None:
    """Insert, update, move and delete rows until told to stop (at most 90 s)."""
    rng = random.Random(seed)
    conn = sqlite3.connect(path, timeout=60)
    deadline = time.monotonic() + 90
    while not stop.is_set() and time.monotonic() < deadline:
        random_change(conn, rng, 1500)
        time.sleep(0.003)
    conn.close()


CHAINED = ("snapshot-late", "log-phase-early", "mirror-write-snapshot")
"""Kill points for a chained stream too (its tasks apply what they read themselves)."""


EXHAUSTIVE = {("snapshot-early", False), ("log-phase-late", False),
              ("mirror-write-snapshot", False), ("log-phase-early", True)}
"""Kill points whose neighbours cover them in the test command's run; ``-m exhaustive`` (or
``-m "slow or exhaustive"``) runs them too."""


@pytest.mark.parametrize(("scenario", "chained"), [
    pytest.param(s, c, marks=[pytest.mark.exhaustive] if (s, c) in EXHAUSTIVE else [])
    for s, c in [*((s, False) for s in SCENARIOS), *((s, True) for s in CHAINED)]])
def test_sigkill_and_restart_keeps_the_mirror_exact(tmp_path: Path, scenario: str,
                                                     chained: bool) -> None:
    url = make_source(tmp_path, rows=1000)
    mirror = f"sqlite:///{tmp_path}/mirror.db"
    work = tmp_path / "work"
    work.mkdir()
    dialect = get_dialect("sqlite")
    source = dialect.connect(ConnectionConfig.from_url(url))
    schemas = [dialect.describe_table(source, t) for t in dialect.list_tables(source)]
    dialect.prepare_capture(source, schemas)
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    writer = context.Process(target=_writer_until,
                             args=(str(tmp_path / "src.db"), stop, random.randrange(1000)))
    writer.start()
    try:
        killed = run_child(url, mirror, work, SCENARIOS[scenario], chained)
        assert killed, "the kill point was never reached"

        def stop_writer_after_two_log_batches(line: str, work: Path) -> bool:
            if during_log_two(line, work) and not stop.is_set():
                stop.set()
                writer.join()
                (work / "stop").touch()
            return False

        during_log_two = during_log(2)
        run_child(url, mirror, work, stop_writer_after_two_log_batches, chained)  # resume
    finally:
        stop.set()
        writer.join()
    target = dialect.connect(ConnectionConfig.from_url(mirror))
    for schema in schemas:
        assert read_target(target, schema) == read_target(source, schema), schema.table
    target.close()
    source.close()
    if chained:  # no rows reach Spark: the target's ledger is what keeps each batch once
        return
    # the mirror upserts, so it would look right with a change applied twice: count them
    snapshot_rows, changes = assert_once(work / "changes", "sqlite")
    assert snapshot_rows >= 1000 and changes > 0
