"""``sdk`` commands run as a user runs them, in processes of their own: run to the end, or
stopped (SIGKILL) in the middle of a sync's snapshot while a writer changes the source."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

from sdk import ConnectionConfig, get_dialect
from sdk_sqlite import read_target

SPLITS = re.compile(r"(\d+)/(\d+) splits")
"""Where a progress line says how many splits of a table are read."""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def run_cli(args: list[str], seconds: float = 600) -> subprocess.CompletedProcess[str]:
    """``sdk ARGS`` to its end, its output kept."""
    return subprocess.run([sys.executable, "-m", "sdk.app.cli", *args], capture_output=True,
                          text=True, env=_env(), timeout=seconds)


def stop_mid_snapshot(args: list[str], write: Callable[[int], None], splits: int = 10) -> int:
    """Run ``sdk ARGS`` (a sync) while ``write(round)`` runs round after round in a thread,
    and SIGKILL it once a progress line shows ``splits`` splits read but not all; returns how
    many were read then (0: the snapshot ended first, or the sync did)."""
    stop = threading.Event()

    def writer() -> None:
        round = 0
        while not stop.is_set():
            write(round)
            round += 1

    thread = threading.Thread(target=writer)
    process = subprocess.Popen([sys.executable, "-m", "sdk.app.cli", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True, env=_env(),
                               start_new_session=True)
    thread.start()
    try:
        assert process.stdout is not None
        for line in process.stdout:
            found = SPLITS.search(line)
            if found and int(found.group(1)) >= int(found.group(2)):
                return 0  # too late: the caller fails, rather than wait for ever
            if found and int(found.group(1)) >= splits:
                return int(found.group(1))
        return 0
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        stop.set()
        thread.join()


def rows(url: str) -> dict[str, Any]:
    dialect = get_dialect("sqlite")
    conn = dialect.connect(ConnectionConfig.from_url(url))
    out = {t.name: read_target(conn, dialect.describe_table(conn, t))
           for t in dialect.list_tables(conn)}
    conn.close()
    return out
