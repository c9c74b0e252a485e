"""``errors.mode``: a change the sync cannot carry stops it with one line (``fail``), or is set
aside in the dead-letter table while the rest is applied (``skip``), counted by ``sdk status``,
the sync's summary and the metrics, and brought across by ``sdk snapshot --skipped`` once its
cause is fixed. Real PostgreSQL source and target, real Spark."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from helpers.servers import drop_capture

from sdk import ChangeEvent, Column, LogicalType, Offset, TableId, TableSchema
from sdk.app.cli import main
from sdk.job.failures import Exit
from sdk.job.metrics import families
from sdk.job.target import Applier, Target
from sdk.spark.executor import deadletter
from sdk.spark.state.statestore import StateStore

FAR = "294276-12-31 23:59:59+00"
"""A timestamp PostgreSQL holds and Spark's TimestampType does not."""


def _rows(admin: Any, table: str) -> dict[int, Any]:
    with admin.cursor() as cur:
        cur.execute(f"SELECT id, at::text FROM {table}")
        return dict(cur.fetchall())


@pytest.fixture
def far(postgres_admin: Any, postgres_url: str) -> Any:
    """Source table public.far_ts (50 good rows, one beyond Spark's range at key 1000) and a
    target table far_target.far_ts that refuses key 7 (a CHECK the target adds); the source
    URL on a slot and publication of its own, dropped after."""
    admin = postgres_admin
    admin.execute("DROP TABLE IF EXISTS far_ts")
    admin.execute("DROP SCHEMA IF EXISTS far_target CASCADE")
    admin.execute("CREATE TABLE far_ts (id int PRIMARY KEY, at timestamptz)")
    admin.execute("INSERT INTO far_ts SELECT g, '2026-01-01'::timestamptz + g * interval '1 h' "
                  "FROM generate_series(1, 50) g")
    admin.execute(f"INSERT INTO far_ts VALUES (1000, '{FAR}')")
    admin.execute("ALTER TABLE far_ts OWNER TO sdk_cdc")
    admin.execute("CREATE SCHEMA far_target")
    admin.execute("CREATE TABLE far_target.far_ts (id int PRIMARY KEY, at timestamptz, "
                  "CONSTRAINT no_seven CHECK (id <> 7))")
    source = f"{postgres_url}{'&' if '?' in postgres_url else '?'}slot=far&publication=far"
    try:
        yield source
    finally:
        drop_capture(admin, "far")
        admin.execute("DROP TABLE IF EXISTS far_ts")
        admin.execute("DROP SCHEMA IF EXISTS far_target CASCADE")


@pytest.mark.postgres
@pytest.mark.spark
@pytest.mark.slow
def test_a_value_beyond_spark_stops_or_is_set_aside_then_brought_across(
        spark: Any, postgres_admin: Any, postgres_admin_url: str, far: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    admin, checkpoint = postgres_admin, tmp_path / "ck"
    sync = ["sync", "--source", far, "--target", postgres_admin_url, "--target-schema",
            "far_target", "--tables", "public.far_ts", "--checkpoint", str(checkpoint),
            "--until", "caught-up"]

    # errors.mode=fail (the default): one line naming table, key, column, value; exit 4
    assert main(sync) == Exit.DATA
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2, err
    assert err[0].startswith(f"sdk: error: table public.far_ts, key 1000, column 'at': "
                             f"'{FAR}' beyond what Spark's TimestampType (years -290308 to "
                             "294247) holds (in the snapshot at "), err
    assert "errors.mode=skip" in err[0] and "Traceback" not in err[0]
    assert _rows(admin, "far_target.far_ts") == {}

    # errors.mode=skip: the bad value and the row the target refuses are set aside
    skip = [*sync, "--option", "errors.mode=skip"]
    assert main(skip) == 0
    out = capsys.readouterr().out
    assert "skipped 2 (sdk status lists them)" in out.splitlines()[-1], out
    target = _rows(admin, "far_target.far_ts")
    assert sorted(target) == [i for i in range(1, 51) if i != 7]
    dead = deadletter.read(StateStore(str(checkpoint / "state")))
    records = sorted(dead.to_pylist(), key=lambda r: r["key"])
    assert [(r["key"], r["op"], r["column"], r["value"]) for r in records] == [
        ('{"id":1000}', "r", "at", FAR), ('{"id":7}', "r", None, None)]
    assert records[0]["reason"].startswith("beyond what Spark's TimestampType")
    assert "the target refused it: CheckViolation" in records[1]["reason"]
    assert '"lsn"' in records[0]["position"]

    # log changes: a bad one set aside, the good ones applied
    admin.execute(f"INSERT INTO far_ts VALUES (51, '2030-01-01'), (1001, '{FAR}')")
    admin.execute("UPDATE far_ts SET at = '2031-01-01' WHERE id = 8")
    assert main(skip) == 0
    assert "skipped 1 (sdk status lists them)" in capsys.readouterr().out
    target = _rows(admin, "far_target.far_ts")
    assert 51 in target and 1001 not in target and target[8].startswith("2031-01-01")

    assert main(["status", "--checkpoint", str(checkpoint)]) == 0
    status = capsys.readouterr().out
    assert "skipped (errors.mode=skip): 3 changes set aside" in status, status
    assert "public.far_ts: 3, for 2 reasons:" in status  # each with its own count
    assert re.search(r"\n    2: beyond what Spark's TimestampType .*\n    1: the target refused "
                     r"it: CheckViolation", status), status
    assert f"sdk snapshot --checkpoint {checkpoint} --table public.far_ts --source <URL> " \
           "--skipped" in status
    assert main(["status", "--checkpoint", str(checkpoint), "--json"]) == 0
    assert '"skipped": {"public.far_ts": 3}' in capsys.readouterr().out

    # fixed at the target (the constraint) and at the source (the far values: their update
    # flows through the log too, the re-read of the keys set aside makes sure of them all)
    admin.execute("ALTER TABLE far_target.far_ts DROP CONSTRAINT no_seven")
    admin.execute("UPDATE far_ts SET at = '2032-01-01' WHERE id IN (1000, 1001)")
    assert main(["snapshot", "--checkpoint", str(checkpoint), "--table", "public.far_ts",
                 "--source", far, "--skipped"]) == 0
    requested = capsys.readouterr().out
    assert "where id IN (" in requested and all(
        f"{k}" in requested.split("where id IN (")[1].split(")")[0] for k in (7, 1000, 1001))
    assert main(skip) == 0
    assert "skipped" not in capsys.readouterr().out
    assert _rows(admin, "far_target.far_ts") == _rows(admin, "public.far_ts")
    assert main(["status", "--checkpoint", str(checkpoint)]) == 0
    assert "skipped" not in capsys.readouterr().out


def test_the_metrics_count_what_was_set_aside() -> None:
    found = {f.name: f for f in families({"phase": "log", "skipped": 3})}
    assert found["sdk_sync_skipped"].samples[0].value == 3.0
    found = {f.name: f for f in families({"phase": "log"})}
    assert found["sdk_sync_skipped"].samples[0].value == 0.0


def test_a_where_of_the_keys_set_aside() -> None:
    assert deadletter.where_of([{"id": 7}, {"id": 1000}]) == "id IN (7, 1000)"
    assert deadletter.where_of([{"a": "x'y", "b": 2}]) == "(a, b) IN (('x''y', 2))"
    assert deadletter.where_of([{"Id": 7}]) is None  # a name that needs quoting
    assert deadletter.where_of([{"id": {"$date": "2026-01-01"}}]) is None


def test_a_refused_change_is_found_by_halves_and_a_replay_applies_nothing_twice(
        tmp_path: Path) -> None:
    """A SQLite target with a CHECK refusing key 7: the batch is applied in halves down to
    that change, which is handed over; the same batch again commits nothing new and finds
    the same change refused (the ledger holds the halves that committed)."""
    db = tmp_path / "t.db"
    with sqlite3.connect(db) as raw:
        raw.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, "
                    "CHECK (id <> 7))")
    table = TableSchema(TableId("main", "items"), (Column("id", LogicalType.INT64, "integer"),
                                                    Column("name", LogicalType.STRING, "text")),
                        ("id",))
    events = [ChangeEvent(table.table, "c", (i,), (i, f"n{i}"), Offset("t", n=i))
              for i in range(1, 21)]
    target = Target.of(f"sqlite:///{db}")
    target.create_tables([table])  # the ledger (the table exists, with the same columns)
    refused: list[tuple[Any, str]] = []

    def note(_: TableSchema, event: ChangeEvent, error: BaseException) -> None:
        refused.append((event.key, type(error).__name__))

    for attempt in range(2):
        refused.clear()
        applier = Applier(target)
        try:
            applier.apply(table, events, "b-0", refused=note)
        finally:
            applier.close()
        assert refused == [((7,), "IntegrityError")]
        assert applier.applied == {table.table: 19 if attempt == 0 else 0}
    with sqlite3.connect(db) as raw:
        assert [r[0] for r in raw.execute("SELECT id FROM items ORDER BY id")] == \
            [i for i in range(1, 21) if i != 7]
        ledger = {r[0] for r in raw.execute("SELECT batch_id FROM _sdk_applied")}
    assert "b-0" not in ledger and {"b-0/1", "b-0/0/0"} <= ledger
    applier = Applier(target)
    with pytest.raises(Exception, match="CHECK constraint failed"):
        applier.apply(table, events[5:8], "c-0")  # without refused: the refusal raises
    applier.close()


@pytest.mark.mysql
@pytest.mark.postgres
@pytest.mark.spark
@pytest.mark.slow
def test_text_a_postgresql_target_refuses_is_set_aside(
        spark: Any, mysql_admin: Any, mysql_url: str, postgres_admin: Any,
        postgres_admin_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """MariaDB text holding a NUL character, which PostgreSQL's text refuses: exit 4 naming
    the split by default; with errors.mode=skip that row (in the snapshot and in the log) is
    set aside and the rest lands."""
    name = "nul_text"
    with mysql_admin.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS `{name}`")
        cur.execute(f"CREATE TABLE `{name}` (id INT PRIMARY KEY, note VARCHAR(20))")
        cur.executemany(f"INSERT INTO `{name}` VALUES (%s, %s)",
                        [(i, "a\0b" if i == 3 else f"n{i}") for i in range(1, 11)])
    postgres_admin.execute("DROP SCHEMA IF EXISTS nul_target CASCADE")
    sync = ["sync", "--source", mysql_url, "--target", postgres_admin_url, "--target-schema",
            "nul_target", "--tables", f"sdk_test.{name}", "--checkpoint",
            str(tmp_path / "ck"), "--until", "caught-up"]
    try:
        assert main(sync) == Exit.DATA
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 2 and err[0].startswith(
            f"sdk: error: loading split sdk_test.{name}:0 (keys from the first to the "
            "last) into the target: CharacterNotInRepertoire"), err
        assert "0x00" in err[0] and "errors.mode=skip" in err[0]
        code = main([*sync, "--option", "errors.mode=skip"])
        assert code == 0, capsys.readouterr()
        assert "skipped 1" in capsys.readouterr().out
        with mysql_admin.cursor() as cur:
            cur.execute(f"INSERT INTO `{name}` VALUES (11, 'x\\0y'), (12, 'fine')")
        assert main([*sync, "--option", "errors.mode=skip"]) == 0
        assert "skipped 1" in capsys.readouterr().out
        got = _rows_text(postgres_admin, f"nul_target.{name}")
        assert got == {i: f"n{i}" for i in range(1, 11) if i != 3} | {12: "fine"}
        dead = deadletter.read(StateStore(str(tmp_path / "ck" / "state"))).to_pylist()
        assert sorted(r["key"] for r in dead) == ['{"id":11}', '{"id":3}']
        assert all("the target refused it" in r["reason"] for r in dead)
    finally:
        with mysql_admin.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS `{name}`")
        postgres_admin.execute("DROP SCHEMA IF EXISTS nul_target CASCADE")


def _rows_text(admin: Any, table: str) -> dict[int, str]:
    with admin.cursor() as cur:
        cur.execute(f"SELECT id, note FROM {table}")
        return dict(cur.fetchall())


def test_only_what_a_change_applies_decides() -> None:
    """A bad value in a before image alone (the update fixing it, a delete of its row) goes
    through, NULL there; one in the after image or key is stopped at (``fail``)."""
    from sdk import BadValue
    from sdk.dialect.errors import DataError
    from sdk.spark.executor.deadletter import Rejects

    table = TableSchema(TableId("db", "t"), (Column("id", LogicalType.INT64, "bigint"),
                                              Column("d", LogicalType.DATE, "date")), ("id",))
    mark = Rejects.mark()
    zero = BadValue("0000-00-00", "is not a date")
    fixed = ChangeEvent(table.table, "u", (1,), (1, None), Offset("t", n=1), before=(1, zero))
    gone = ChangeEvent(table.table, "d", (2,), None, Offset("t", n=2), before=(2, zero))
    rejects = Rejects("fail", None)
    kept = rejects.events({table.table: table}, [fixed, gone], mark)
    assert [e.before for e in kept] == [(1, None), (2, None)]
    bad = ChangeEvent(table.table, "c", (3,), (3, zero), Offset("t", n=3))
    with pytest.raises(DataError, match=r"table db.t, key 3, column 'd': '0000-00-00' is not "
                                        r"a date \(at log position "):
        rejects.events({table.table: table}, [bad], mark)


@pytest.mark.mysql
@pytest.mark.postgres
@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.exclusive  # the server's sql_mode is '' for every session started meanwhile
def test_a_key_longer_than_the_target_holds_is_refused_never_cut(
        spark: Any, postgres_admin: Any, postgres_url: str, mysql_admin: Any, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A PostgreSQL text key of 300 characters into MariaDB, whose key column is a
    VARCHAR(191), on a server whose sql_mode is not strict (a legacy server): the sync's
    writes are strict, so the row is refused (exit 4) or set aside, never cut to a key that
    could collide with another row's."""
    from helpers.servers import MYSQL_ADMIN_URL

    long_key = "k" * 300
    postgres_admin.execute("DROP TABLE IF EXISTS long_keys")
    postgres_admin.execute("CREATE TABLE long_keys (k text PRIMARY KEY, v int)")
    postgres_admin.execute("INSERT INTO long_keys VALUES ('short', 1), (%s, 2)", (long_key,))
    postgres_admin.execute("ALTER TABLE long_keys OWNER TO sdk_cdc")
    with mysql_admin.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.sql_mode")
        (mode,) = cur.fetchone()
        cur.execute("SET GLOBAL sql_mode = ''")
        cur.execute("DROP TABLE IF EXISTS sdk_test.long_keys")
    source = f"{postgres_url}{'&' if '?' in postgres_url else '?'}slot=long_keys&" \
             "publication=long_keys"
    sync = ["sync", "--source", source, "--target", MYSQL_ADMIN_URL, "--target-schema",
            "sdk_test", "--tables", "public.long_keys", "--checkpoint", str(tmp_path / "ck"),
            "--until", "caught-up"]
    try:
        assert main(sync) == Exit.DATA
        err = capsys.readouterr().err.strip().splitlines()
        assert "Data too long for column 'k'" in err[0], err
        assert main([*sync, "--option", "errors.mode=skip"]) == 0
        assert "skipped 1" in capsys.readouterr().out
        with mysql_admin.cursor() as cur:
            cur.execute("SELECT k, v FROM sdk_test.long_keys")
            assert cur.fetchall() == (("short", 1),)
        dead = deadletter.read(StateStore(str(tmp_path / "ck" / "state"))).to_pylist()
        assert [r["key"] for r in dead] == ['{"k":"' + long_key + '"}']
    finally:
        with mysql_admin.cursor() as cur:
            cur.execute("SET GLOBAL sql_mode = %s", (mode,))
            cur.execute("DROP TABLE IF EXISTS sdk_test.long_keys")
            cur.execute("DELETE FROM sdk_test._sdk_applied WHERE tbl = 'long_keys'")
        drop_capture(postgres_admin, "long_keys")
        postgres_admin.execute("DROP TABLE IF EXISTS long_keys")


def test_status_lists_each_reason_a_table_had_changes_set_aside_for() -> None:
    import pyarrow as pa

    from sdk.app.cli import _skipped_lines

    why = ["holds a NUL byte", "is a zero date", "holds a NUL byte", "holds a NUL byte",
           "the target refused it: CheckViolation"]
    dead = pa.table({"table": ["db.t"] * 5 + ["db.u"], "reason": [*why, "is a zero date"],
                     "key": [f'{{"id":{i}}}' for i in range(6)]})
    lines = _skipped_lines(dead, deadletter.counts(dead), "/ck", "/ck/state/deadletter")
    assert lines[1:5] == ["  db.t: 5, for 3 reasons:", "    3: holds a NUL byte",
                          "    1: is a zero date", "    1: the target refused it: CheckViolation"]
    assert "  db.u: 1 (is a zero date)" in lines
    many = pa.table({"table": ["db.t"] * 8, "reason": [f"reason {i}" for i in range(8)],
                     "key": [f'{{"id":{i}}}' for i in range(8)]})
    shown = _skipped_lines(many, deadletter.counts(many), "/ck", "/ck/state/deadletter")
    assert shown[-2] == "    3: 3 other reasons (each in the dead-letter table)", shown
