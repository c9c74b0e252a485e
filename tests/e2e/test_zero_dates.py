"""MariaDB zero dates through the real CLI: by default (``zero_dates=error``) a date Python cannot
hold stops the sync with one line naming table, key, column and value (``errors.mode=fail``) or
is set aside in the dead-letter table, in the snapshot and in the log (``errors.mode=skip``);
``zero_dates=null`` on the source URL reads it as NULL, as Debezium does. Real MariaDB, real
Spark, a SQLite mirror."""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.servers import with_query

from sdk.app.cli import main
from sdk.job.failures import Exit
from sdk.spark.executor import deadletter
from sdk.spark.state.statestore import StateStore

GOOD = {i: f"2024-01-{i:02d}" for i in range(1, 11) if i != 5}


@contextlib.contextmanager
def _zero_dates_allowed(admin: Any) -> Iterator[Any]:
    """A cursor of the administrator's session under an empty ``sql_mode`` (which stores zero
    dates), the shared session's own mode restored after."""
    with admin.cursor() as cur:
        cur.execute("SELECT @@SESSION.sql_mode")
        (mode,) = cur.fetchone()
        cur.execute("SET SESSION sql_mode = ''")
        try:
            yield cur
        finally:
            cur.execute("SET SESSION sql_mode = %s", (mode,))


def _insert(admin: Any, table: str, rows: list[tuple[int, str]]) -> None:
    with _zero_dates_allowed(admin) as cur:
        cur.executemany(f"INSERT INTO `{table}` VALUES (%s, %s, 'x')", rows)


@pytest.fixture
def zero_table(mysql_admin: Any) -> Iterator[str]:
    """Table sdk_test.<name> of nine good dates and a zero date at key 5; dropped after."""
    name = f"zero_dates_{uuid.uuid4().hex[:8]}"
    with mysql_admin.cursor() as cur:
        cur.execute(f"CREATE TABLE `{name}` (id INT PRIMARY KEY, d DATE, note VARCHAR(10))")
    try:
        _insert(mysql_admin, name, [*GOOD.items(), (5, "0000-00-00")])
        yield name
    finally:
        with mysql_admin.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS `{name}`")


def _mirror(db: Path, table: str) -> dict[int, Any]:
    with sqlite3.connect(db) as conn:
        return dict(conn.execute(f'SELECT id, d FROM "{table}"').fetchall())


@pytest.mark.mysql
@pytest.mark.spark
@pytest.mark.slow
def test_a_zero_date_stops_the_sync_or_is_set_aside_or_reads_as_null(
        spark: Any, mysql_admin: Any, mysql_url: str, zero_table: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    name = zero_table
    checkpoint, mirror = tmp_path / "ck", tmp_path / "m.db"
    sync = ["sync", "--source", mysql_url, "--target", f"sqlite:///{mirror}", "--tables",
            f"sdk_test.{name}", "--checkpoint", str(checkpoint), "--until", "caught-up"]

    # by default: exit 4, one line naming table, key, column, value and zero_dates=null
    assert main(sync) == Exit.DATA
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith(f"sdk: error: table sdk_test.{name}, key 5, column 'd': "
                             "'0000-00-00' is not a date"), err
    assert "zero_dates=null" in err[0] and "errors.mode=skip" in err[0], err
    assert "Traceback" not in "\n".join(err)

    # errors.mode=skip on the same checkpoint: the zero date is set aside, the rest lands
    skip = [*sync, "--option", "errors.mode=skip"]
    assert main(skip) == 0
    out = capsys.readouterr().out
    assert "skipped 1" in out.strip().splitlines()[-1], out
    got = _mirror(mirror, name)
    assert sorted(got) == sorted(GOOD) and all(str(got[k]).startswith(v)
                                               for k, v in GOOD.items())

    # in the log phase too: a zero date inserted later is set aside, a good row applied
    _insert(mysql_admin, name, [(11, "0000-00-00"), (12, "2024-02-29")])
    assert main(skip) == 0
    out = capsys.readouterr().out
    assert "skipped 1" in out.strip().splitlines()[-1], out
    got = _mirror(mirror, name)
    assert 12 in got and 11 not in got and 5 not in got
    dead = deadletter.read(StateStore(str(checkpoint / "state"))).to_pylist()
    assert sorted((r["key"], r["op"], r["column"], r["value"]) for r in dead) == [
        ('{"id":11}', "c", "d", "0000-00-00"), ('{"id":5}', "r", "d", "0000-00-00")]
    assert all(r["reason"].startswith("is not a date") and "zero_dates=null" in r["reason"]
               for r in dead)

    # fixed at the source: the rows set aside come across when asked for
    with mysql_admin.cursor() as cur:
        cur.execute(f"UPDATE `{name}` SET d = '2024-01-05' WHERE id IN (5, 11)")
    assert main(skip) == 0
    capsys.readouterr()
    assert main(["snapshot", "--checkpoint", str(checkpoint), "--table", f"sdk_test.{name}",
                 "--source", mysql_url, "--skipped"]) == 0
    assert "where id IN (" in capsys.readouterr().out
    assert main(skip) == 0
    capsys.readouterr()
    got = _mirror(mirror, name)
    assert sorted(got) == list(range(1, 13)) and str(got[5]).startswith("2024-01-05") and \
        str(got[11]).startswith("2024-01-05")
    with _zero_dates_allowed(mysql_admin) as cur:  # zero dates at 5 and 11 again
        cur.execute(f"UPDATE `{name}` SET d = '0000-00-00' WHERE id IN (5, 11)")

    # zero_dates=null on the source URL, a fresh checkpoint: NULL in the mirror, exit 0
    nulls = tmp_path / "nulls.db"
    fresh = ["sync", "--source", with_query(mysql_url, zero_dates="null"), "--target",
             f"sqlite:///{nulls}", "--tables", f"sdk_test.{name}", "--checkpoint",
             str(tmp_path / "ck-null"), "--until", "caught-up"]
    assert main(fresh) == 0, capsys.readouterr()
    assert "skipped" not in capsys.readouterr().out
    got = _mirror(nulls, name)
    assert sorted(got) == list(range(1, 13)) and got[5] is None and got[11] is None
    assert str(got[12]).startswith("2024-02-29")
