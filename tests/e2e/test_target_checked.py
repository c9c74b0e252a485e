"""The target is checked, not trusted: a resumed ``sdk sync`` reads again whole each table the
target lost since the last run (its table dropped, its database or schema dropped and made
again, its ledger dropped), and leaves a target that is fine alone."""

from __future__ import annotations

import logging
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sdk.app.cli import main

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROWS = 301


def make_source(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)")
        conn.executemany("INSERT INTO items VALUES (?, ?)",
                         [(i, f"item {i}") for i in range(ROWS)])
    return f"sqlite:///{path}"


def change_source(path: Path) -> None:
    """One row inserted and one updated: what a resumed sync applies from the log."""
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO items VALUES (1000, 'new')")
        conn.execute("UPDATE items SET name = 'changed' WHERE id = 7")


def source_rows(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT id, name FROM items ORDER BY id").fetchall()


def sqlite_rows(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT id, name FROM items ORDER BY id").fetchall()


def sync_args(src: str, dst: str, checkpoint: Path, *more: str) -> list[str]:
    return ["sync", "--source", src, "--target", dst, "--checkpoint", str(checkpoint),
            "--until", "caught-up", "--option", "snapshot.split.size=100", *more]


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def lost_and_read_again(args: list[str], source: Path,
                        mirrored: Callable[[], list[tuple[Any, ...]]], drop: Callable[[], None],
                        caplog: pytest.LogCaptureFixture) -> None:
    """Sync, ``drop`` the target's database or schema (and make it again, empty), change the
    source, resume: every row comes back, and one warning names the table."""
    assert main(args) == 0
    assert len(mirrored()) == ROWS
    drop()
    change_source(source)
    caplog.clear()
    assert main(args) == 0
    assert mirrored() == source_rows(source) and len(mirrored()) == ROWS + 1
    said = [w for w in warnings_of(caplog) if "read again whole" in w]
    assert len(said) == 1 and "is missing from the target" in said[0]


def applied(capsys: pytest.CaptureFixture[str]) -> str:
    return capsys.readouterr().out


def test_a_target_table_dropped_between_runs_is_read_again(
        spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    source, mirror = tmp_path / "src.db", tmp_path / "mirror.db"
    args = sync_args(make_source(source), f"sqlite:///{mirror}", tmp_path / "ck")
    assert main(args) == 0
    assert f"applied {ROWS} rows" in applied(capsys)
    with sqlite3.connect(mirror) as conn:
        conn.execute("DROP TABLE items")
    change_source(source)
    caplog.clear()
    assert main(args) == 0
    assert sqlite_rows(mirror) == source_rows(source) and len(source_rows(source)) == ROWS + 1
    said = [w for w in warnings_of(caplog) if "read again whole" in w]
    assert len(said) == 1 and "table main.items is missing from the target" in said[0]
    assert main(args) == 0  # the next start finds it fine: nothing read again
    assert "applied 0 rows" in applied(capsys)
    assert sqlite_rows(mirror) == source_rows(source)


def test_a_target_whose_ledger_was_dropped_is_read_again(
        spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    """The table is there (emptied, as a database made again by a migration tool would hold
    it) but the ledger is gone: the rows it held cannot be trusted."""
    source, mirror = tmp_path / "src.db", tmp_path / "mirror.db"
    args = sync_args(make_source(source), f"sqlite:///{mirror}", tmp_path / "ck")
    assert main(args) == 0
    with sqlite3.connect(mirror) as conn:
        conn.execute("DELETE FROM items")
        conn.execute("DROP TABLE _sdk_applied")
    change_source(source)
    caplog.clear()
    assert main(args) == 0
    assert sqlite_rows(mirror) == source_rows(source)
    said = [w for w in warnings_of(caplog) if "read again whole" in w]
    assert len(said) == 1 and "main.items" in said[0] and "_sdk_applied" in said[0]


def test_a_target_table_emptied_behind_the_sync_is_read_again(
        spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    """The table and its ledger are there, the table's rows gone (a TRUNCATE at the target):
    read again whole; a table empty when read that gained rows while the sync was stopped is
    read again too, saying so (not "emptied"); a table empty at the source too is left alone;
    once done, nothing is read again."""
    source, mirror = tmp_path / "src.db", tmp_path / "mirror.db"
    src = make_source(source)
    with sqlite3.connect(source) as conn:
        conn.execute("CREATE TABLE vacant (id INTEGER PRIMARY KEY)")
        conn.execute("CREATE TABLE later (id INTEGER PRIMARY KEY)")
    args = sync_args(src, f"sqlite:///{mirror}", tmp_path / "ck")
    assert main(args) == 0
    with sqlite3.connect(mirror) as conn:
        conn.execute("DELETE FROM items")
    change_source(source)
    with sqlite3.connect(source) as conn:  # rows the source gained while the sync was stopped
        conn.execute("INSERT INTO later VALUES (1), (2)")
    caplog.clear()
    assert main(args) == 0
    assert sqlite_rows(mirror) == source_rows(source)
    with sqlite3.connect(mirror) as conn:
        assert conn.execute("SELECT id FROM later ORDER BY id").fetchall() == [(1,), (2,)]
    said = sorted(w for w in warnings_of(caplog) if "read again whole" in w)
    assert len(said) == 2, said
    assert said[0].startswith("table main.items is empty in the target while the source has "
                              "rows")
    assert said[1].startswith("table main.later had no rows when the sync read it and has "
                              "rows at the source now"), said  # nothing was emptied
    caplog.clear()
    assert main(args) == 0
    assert not [w for w in warnings_of(caplog) if "read again" in w]


def test_a_target_that_is_fine_is_not_read_again(
        spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    source, mirror = tmp_path / "src.db", tmp_path / "mirror.db"
    args = sync_args(make_source(source), f"sqlite:///{mirror}", tmp_path / "ck")
    assert main(args) == 0
    applied(capsys)
    change_source(source)
    caplog.clear()
    assert main(args) == 0
    assert "applied 2 rows" in applied(capsys)  # the two changes, no table read again
    assert not [w for w in warnings_of(caplog) if "read again" in w]
    assert sqlite_rows(mirror) == source_rows(source)


def test_a_snapshot_only_sync_stops_when_its_target_lost_a_table(
        spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A one-off snapshot has no log phase to read the table again in: the sync stops, in
    one line, rather than end with the rows missing."""
    source, mirror = tmp_path / "src.db", tmp_path / "mirror.db"
    args = sync_args(make_source(source), f"sqlite:///{mirror}", tmp_path / "ck",
                     "--option", "startup.mode=snapshot")
    assert main(args) == 0
    with sqlite3.connect(mirror) as conn:
        conn.execute("DROP TABLE items")
    capsys.readouterr()
    assert main(args) != 0
    err = capsys.readouterr().err
    assert "table main.items is missing from the target" in err
    assert "take a new snapshot" in err


@pytest.fixture
def pg_schema(postgres_admin_url: str) -> Iterator[tuple[str, Any]]:
    """A fresh PostgreSQL schema to mirror into, and an admin connection; dropped after."""
    import psycopg

    schema = f"tgt_{uuid.uuid4().hex[:10]}"
    conn = psycopg.connect(postgres_admin_url.replace("postgresql://", "postgresql://", 1),
                           autocommit=True)
    try:
        yield schema, conn
    finally:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.close()


@pytest.mark.postgres
def test_a_target_schema_dropped_and_made_again_is_read_again(
        spark: Any, tmp_path: Path, postgres_admin_url: str, pg_schema: tuple[str, Any],
        capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    """PostgreSQL target: its schema dropped and made again (its ledger with it), and once
    more with the table made again empty by hand: both times all rows come back."""
    schema, admin = pg_schema
    source = tmp_path / "src.db"
    args = sync_args(make_source(source), postgres_admin_url, tmp_path / "ck",
                     "--target-schema", schema)

    def mirrored() -> list[tuple[Any, ...]]:
        return [tuple(r) for r in admin.execute(
            f"SELECT id, name FROM {schema}.items ORDER BY id").fetchall()]

    def drop() -> None:
        admin.execute(f"DROP SCHEMA {schema} CASCADE")
        admin.execute(f"CREATE SCHEMA {schema}")

    lost_and_read_again(args, source, mirrored, drop, caplog)

    admin.execute(f"DROP SCHEMA {schema} CASCADE")  # and a tool makes the table again, empty
    admin.execute(f"CREATE SCHEMA {schema}")
    admin.execute(f"CREATE TABLE {schema}.items (id bigint PRIMARY KEY, name text)")
    with sqlite3.connect(source) as conn:
        conn.execute("DELETE FROM items WHERE id = 3")
    caplog.clear()
    assert main(args) == 0
    assert mirrored() == source_rows(source) and len(mirrored()) == ROWS
    said = [w for w in warnings_of(caplog) if "read again whole" in w]
    assert len(said) == 1 and "holds none of the batches" in said[0]


@pytest.mark.mysql
def test_a_mysql_target_database_dropped_and_made_again_is_read_again(
        spark: Any, tmp_path: Path, mysql_admin: Any, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    """MariaDB target: its database dropped and made again (its ledger with it): all rows
    come back, one warning names the table."""
    from helpers.servers import MYSQL_ADMIN_URL

    database = f"tgt_{uuid.uuid4().hex[:10]}"
    source = tmp_path / "src.db"
    args = sync_args(make_source(source), MYSQL_ADMIN_URL, tmp_path / "ck",
                     "--target-schema", database)

    def mirrored() -> list[tuple[Any, ...]]:
        with mysql_admin.cursor() as cur:
            cur.execute(f"SELECT id, name FROM `{database}`.items ORDER BY id")
            return [tuple(r) for r in cur.fetchall()]

    try:
        def drop() -> None:
            with mysql_admin.cursor() as cur:
                cur.execute(f"DROP DATABASE `{database}`")
                cur.execute(f"CREATE DATABASE `{database}`")

        lost_and_read_again(args, source, mirrored, drop, caplog)
    finally:
        with mysql_admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{database}`")


@pytest.mark.postgres
def test_a_read_only_target_is_one_line_and_a_rerun_once_writable_ends_equal(
        spark: Any, tmp_path: Path, postgres_admin: Any, postgres_admin_url: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A PostgreSQL target database made read-only between runs (as a standby is): exit 3,
    one line saying so; writable again, the rerun applies the changes once."""
    database = f"ro_{uuid.uuid4().hex[:10]}"
    postgres_admin.execute(f"CREATE DATABASE {database}")
    target = postgres_admin_url.rsplit("/", 1)[0] + f"/{database}"
    source = tmp_path / "src.db"
    args = sync_args(make_source(source), target, tmp_path / "ck")
    try:
        assert main(args) == 0
        postgres_admin.execute(f"ALTER DATABASE {database} SET default_transaction_read_only "
                               "= on")
        change_source(source)
        capsys.readouterr()
        assert main(args) == 3
        err = capsys.readouterr().err.strip().splitlines()
        assert err[0].startswith("sdk: error: a database refused a write: it is read-only ("
                                 "cannot execute "), err
        assert "in a read-only transaction): point the URL at a writable server" in err[0]
        postgres_admin.execute(f"ALTER DATABASE {database} RESET default_transaction_read_only")
        assert main(args) == 0
        assert "applied 2 rows" in capsys.readouterr().out
        import psycopg

        with psycopg.connect(target) as conn:
            mirrored = conn.execute("SELECT id, name FROM main.items ORDER BY id").fetchall()
        assert [tuple(r) for r in mirrored] == source_rows(source)
    finally:
        postgres_admin.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


@pytest.mark.parametrize("changes", [False, True], ids=["chained", "mirror"])
def test_a_new_sync_into_a_target_an_earlier_sync_wrote_applies_its_own_batches(
        spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: bool) -> None:
    """The checkpoint deleted to start over, the target kept (its rows changed meanwhile): the
    new sync's batches have ids of their own, so the earlier sync's ledger rows never make
    them look applied (they did: the same tables at the same positions gave the same ids)."""
    import shutil

    source, mirror = tmp_path / "src.db", tmp_path / "mirror.db"
    more = ("--changes", str(tmp_path / "changes")) if changes else ()
    args = sync_args(make_source(source), f"sqlite:///{mirror}", tmp_path / "ck", *more)
    assert main(args) == 0
    shutil.rmtree(tmp_path / "ck")
    if changes:
        shutil.rmtree(tmp_path / "changes")
    with sqlite3.connect(mirror) as conn:
        conn.execute("UPDATE items SET name = 'stale'")
    capsys.readouterr()
    assert main(args) == 0
    assert f"applied {ROWS} rows" in capsys.readouterr().out
    assert sqlite_rows(mirror) == source_rows(source)
