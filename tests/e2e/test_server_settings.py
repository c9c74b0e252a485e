"""A source whose server is not set up for change capture: ``sdk sync`` stops before anything
is made, exit 3, with each missing setting and the statement that fixes it; once fixed, the
rerun syncs and ends equal. Servers of the test's own (MariaDB from the system binaries,
PostgreSQL 15), so their settings can be wrong."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from helpers.instances import (
    PG15_BIN,
    pg15_available,
    server_dir,
    start_mariadb,
    start_postgres15,
    stopping,
)

from sdk.app.cli import main
from sdk.job.failures import Exit

pytestmark = [pytest.mark.spark, pytest.mark.slow]

needs_mariadb = pytest.mark.skipif(shutil.which("mariadbd") is None,
                                   reason="no mariadbd binary to start a server of our own")


def _sync(source: str, tmp_path: Path, table: str) -> list[str]:
    return ["sync", "--source", source, "--target", f"sqlite:///{tmp_path}/m.db", "--tables",
            table, "--checkpoint", str(tmp_path / "ck"), "--until", "caught-up"]


def _refused(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and "is not ready for change capture" in err, err
    return err


def _mirrored(tmp_path: Path, table: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(tmp_path / "m.db") as conn:
        return conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()


@needs_mariadb
def test_mariadb_with_its_binlog_off(spark: Any, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    with stopping(start_mariadb(server_dir() / "nobinlog", extra=("--skip-log-bin",))) as \
            (server,):
        server.execute("CREATE TABLE sdk_test.t (id INT PRIMARY KEY, v TEXT)",
                       "INSERT INTO sdk_test.t VALUES (1, 'a')")
        assert main(_sync(server.url(), tmp_path, "sdk_test.t")) == Exit.REFUSED
        err = _refused(capsys)
        assert "[MISSING] log_bin" in err and "log_bin" in err.split("[MISSING] log_bin", 1)[1]


@needs_mariadb
def test_mariadb_logging_statements_or_minimal_rows_then_fixed(
        spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    extra = ("--binlog-format=STATEMENT", "--binlog-row-image=MINIMAL")
    with stopping(start_mariadb(server_dir() / "statement", extra=extra)) as (server,):
        server.execute("CREATE TABLE sdk_test.t (id INT PRIMARY KEY, v TEXT)",
                       "INSERT INTO sdk_test.t VALUES (1, 'a'), (2, 'b')")
        args = _sync(server.url(), tmp_path, "sdk_test.t")
        assert main(args) == Exit.REFUSED
        err = _refused(capsys)
        assert "[MISSING] binlog_format" in err and "SET GLOBAL binlog_format = 'ROW'" in err
        assert "[MISSING] binlog_row_image" in err and \
            "SET GLOBAL binlog_row_image = 'FULL'" in err
        assert not (tmp_path / "m.db").exists() or not _mirrored_tables(tmp_path)
        server.execute("SET GLOBAL binlog_format = 'ROW'",
                       "SET GLOBAL binlog_row_image = 'FULL'")
        assert main(args) == 0
        server.execute("INSERT INTO sdk_test.t VALUES (3, 'c')")
        assert main(args) == 0
        assert _mirrored(tmp_path, "t") == [(1, "a"), (2, "b"), (3, "c")]


def _mirrored_tables(tmp_path: Path) -> list[str]:
    with sqlite3.connect(tmp_path / "m.db") as conn:
        return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' "
                                           "AND name <> '_sdk_applied'")]


@pytest.mark.postgres
@pytest.mark.skipif(not pg15_available(), reason=f"no PostgreSQL 15 binaries in {PG15_BIN}")
def test_postgres_with_wal_level_replica_then_fixed(spark: Any, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    with stopping(start_postgres15(server_dir() / "replica")) as (server,):
        server.execute("ALTER SYSTEM SET wal_level = 'replica'", database="postgres")
        server.stop()
        server.start()
        server.execute("CREATE TABLE t (id int PRIMARY KEY, v text)",
                       "INSERT INTO t VALUES (1, 'a'), (2, 'b')", "ALTER TABLE t OWNER TO sdk_cdc")
        args = _sync(server.url(), tmp_path, "public.t")
        assert main(args) == Exit.REFUSED
        err = _refused(capsys)
        assert "[MISSING] wal_level=logical" in err and \
            "ALTER SYSTEM SET wal_level = logical" in err, err
        server.execute("ALTER SYSTEM SET wal_level = 'logical'", database="postgres")
        server.stop()
        server.start()
        assert main(args) == 0
        server.execute("INSERT INTO t VALUES (3, 'c')")
        assert main(args) == 0
        assert _mirrored(tmp_path, "t") == [(1, "a"), (2, "b"), (3, "c")]
