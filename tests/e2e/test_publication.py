"""A captured PostgreSQL table taken out of the sync's publication (a DBA tidying up) has
changes pgoutput never sends: the sync reads it again whole, whether it was taken out while
the sync was stopped (putting it back at the start would hide that) or while it ran. Real
PostgreSQL 15 clusters of the tests' own."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.instances import Postgres, pg15_available, server_dir, start_postgres15, stopping

from sdk.app.cli import main

pytestmark = [pytest.mark.postgres, pytest.mark.spark, pytest.mark.slow,
              pytest.mark.skipif(not pg15_available(), reason="needs PostgreSQL 15 binaries "
                                 "(/usr/lib/postgresql/15/bin)")]


@pytest.fixture
def postgres() -> Iterator[Postgres]:
    root = server_dir()
    try:
        server = start_postgres15(root / "pg")
        with stopping(server):
            server.execute("CREATE TABLE items (id INT PRIMARY KEY, v INT)",
                           "INSERT INTO items SELECT i, i FROM generate_series(1, 300) i",
                           "GRANT SELECT ON items TO sdk_cdc", "ALTER TABLE items OWNER TO sdk_cdc")
            yield server
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _source(server: Postgres) -> dict[int, int]:
    with server.admin() as conn:
        return dict(conn.execute("SELECT id, v FROM items").fetchall())


def _mirror(path: Path) -> dict[int, int]:
    with sqlite3.connect(path) as conn:
        return dict(conn.execute("SELECT id, v FROM items").fetchall())


def _sync(server: Postgres, mirror: Path, checkpoint: Path, until: str) -> list[str]:
    return ["sync", "--source", server.url(), "--target", f"sqlite:///{mirror}", "--tables",
            "public.items", "--checkpoint", str(checkpoint), "--until", until,
            "--option", "tables.discovery-interval.ms=300"]


def _take_out_and_change(server: Postgres) -> None:
    server.execute("ALTER PUBLICATION sdk_pub DROP TABLE items",
                   "UPDATE items SET v = v + 1000 WHERE id <= 100",
                   "INSERT INTO items SELECT i, i FROM generate_series(301, 310) i",
                   "DELETE FROM items WHERE id BETWEEN 200 AND 204")


def _published(server: Postgres) -> bool:
    with server.admin() as conn:
        return bool(conn.execute("SELECT 1 FROM pg_publication_tables WHERE pubname = "
                                 "'sdk_pub' AND tablename = 'items'").fetchall())


def test_a_table_taken_out_while_the_sync_was_stopped_is_read_again(
        spark: Any, postgres: Postgres, tmp_path: Path,
        capfd: pytest.CaptureFixture[str]) -> None:
    mirror, checkpoint = tmp_path / "mirror.db", tmp_path / "ck"
    assert main(_sync(postgres, mirror, checkpoint, "caught-up")) == 0
    _take_out_and_change(postgres)
    assert not _published(postgres)
    assert main(_sync(postgres, mirror, checkpoint, "caught-up")) == 0
    assert _published(postgres)
    assert _mirror(mirror) == _source(postgres)
    pending = json.loads((checkpoint / "state" / "rereads-pending.json").read_text())
    assert pending == []  # the read was taken up, and is held by the state
    capfd.readouterr()
    postgres.execute("UPDATE items SET v = -1 WHERE id = 1")  # published again: in the log
    assert main(_sync(postgres, mirror, checkpoint, "caught-up")) == 0
    assert _mirror(mirror) == _source(postgres)
    assert "read again" not in capfd.readouterr().err  # once is enough


def test_a_table_taken_out_while_the_sync_runs_is_read_again(
        spark: Any, postgres: Postgres, tmp_path: Path) -> None:
    mirror, checkpoint = tmp_path / "mirror.db", tmp_path / "ck"
    assert main(_sync(postgres, mirror, checkpoint, "caught-up")) == 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    process = subprocess.Popen([sys.executable, "-m", "sdk.app.cli",
                                *_sync(postgres, mirror, checkpoint, "never")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (checkpoint / "state" / "applied.json").exists() and \
                time.monotonic() < deadline:  # the resumed sync runs
            time.sleep(0.2)
        _take_out_and_change(postgres)
        while _mirror(mirror) != _source(postgres):
            assert time.monotonic() < deadline, "the mirror never got the changes"
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            time.sleep(0.5)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    assert "taken out of what captures it" in err
    assert _published(postgres)
