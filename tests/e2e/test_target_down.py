"""A target that goes down in the middle of a batch (an immediate shutdown, as a crash) and
comes back: ``sdk sync`` retries from its checkpoint and ends equal, each batch applied once.
The target is a PostgreSQL 15 cluster of the test's own."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.instances import (
    PG15_BIN,
    _as_postgres,
    pg15_available,
    server_dir,
    start_postgres15,
    stopping,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.postgres]

ROWS = 120_000


@pytest.mark.skipif(not pg15_available(), reason="no PostgreSQL 15 binaries in "
                    f"{PG15_BIN} to start a target of the test's own")
@pytest.mark.parametrize("head_start", ["auto", "off"], ids=["head-start", "stream"])
def test_a_target_down_mid_batch_is_retried_and_the_sync_ends_equal(tmp_path: Path,
                                                                    head_start: str) -> None:
    """In the driver's head start (Spark then starts from the checkpoint) or in Spark's
    stream (the query restarted)."""
    source = tmp_path / "src.db"
    with sqlite3.connect(source) as conn:
        conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)")
        conn.executemany("INSERT INTO items VALUES (?, ?)",
                         [(i, f"item {i}") for i in range(ROWS)])
    with stopping(start_postgres15(server_dir() / "target")) as (target,):
        url = target.url(user="postgres", password="")
        sync = subprocess.Popen(
            [sys.executable, "-m", "sdk.app.cli", "sync", "--source", f"sqlite:///{source}",
             "--target", url, "--checkpoint", str(tmp_path / "ck"), "--until", "caught-up",
             "--option", "snapshot.split.size=4000", "--option", "snapshot.batch.rows=8000",
             "--head-start", head_start],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable})
        try:
            deadline = time.monotonic() + 120
            while _count(target) == 0:  # some batches applied, more to come
                assert sync.poll() is None and time.monotonic() < deadline, sync.communicate()
                time.sleep(0.2)
            subprocess.run(_as_postgres([str(PG15_BIN / "pg_ctl"), "-D", str(target.pgdata),
                                         "stop", "-m", "immediate"]), check=True,
                           capture_output=True)
            target.process = None
            time.sleep(4)  # the sync meets the target gone, and waits for it
            assert sync.poll() is None, sync.communicate()
            target.start()
            _, err = sync.communicate(timeout=300)
        finally:
            if sync.poll() is None:
                sync.kill()
        assert sync.returncode == 0, err[-3000:]
        said = [line for line in err.splitlines() if "restarting from the checkpoint" in line]
        # each retry says the target's own error (a connection cut, or refused), no code line
        assert said and all(line.startswith("sync: ") and "raise " not in line and
                            ("server closed the connection" in line or
                             "cannot connect to postgres://postgres@" in line)
                            for line in said), said
        with target.admin() as conn:
            rows = conn.execute("SELECT id, name FROM main.items ORDER BY id").fetchall()
            claimed = conn.execute("SELECT count(*), count(DISTINCT batch_id) FROM "
                                   "main._sdk_applied").fetchone()
        assert [tuple(r) for r in rows] == [(i, f"item {i}") for i in range(ROWS)]
        assert claimed[0] == claimed[1]


def _count(target: object) -> int:
    try:
        with target.admin() as conn:  # type: ignore[attr-defined]
            found = conn.execute("SELECT count(*) FROM main.items").fetchone()
            return int(found[0])
    except Exception:  # not made yet
        return 0
