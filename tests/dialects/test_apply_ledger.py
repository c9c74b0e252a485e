"""The shared applied-batch ledger (``sdk.dialect.apply.Ledger``): its SQL in each target's style,
and a replayed batch applied once, through a recording cursor and through a real SQLite database."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

import pytest

from sdk import ChangeEvent, Column, LogicalType, Offset, Op, TableId, TableSchema
from sdk.dialect.apply import LEDGER, Ledger
from sdk_mysql import _target as mysql_target
from sdk_postgres import _target as postgres_target

TABLE = TableSchema(TableId("main", "t"), (Column("id", LogicalType.INT64, "integer"),
                                           Column("v", LogicalType.STRING, "text")), ("id",))
DELETE = "DELETE FROM t WHERE id = ?"
UPSERT = "INSERT OR REPLACE INTO t VALUES (?, ?)"


def event(op: Op, key: int, value: str | None = None, old_key: int | None = None
          ) -> ChangeEvent:
    after = None if op == "d" else (key, value)
    return ChangeEvent(TABLE.table, op, (key,), after, Offset("test", seq=key),
                       old_key=None if old_key is None else (old_key,))


EVENTS = [event("c", 1, "a"), event("u", 3, "b", old_key=2), event("d", 4)]


class RecordingCursor:
    """A cursor whose ledger is a set: records every statement, claims like a real database."""

    def __init__(self) -> None:
        self.claimed: set[tuple[Any, ...]] = set()
        self.log: list[tuple[str, list[tuple[Any, ...]]]] = []
        self.rowcount = -1

    def execute(self, sql: str, params: Sequence[Any], /) -> None:
        row = tuple(params)
        self.rowcount = 0 if row in self.claimed else 1
        self.claimed.add(row)
        self.log.append((sql, [row]))

    def executemany(self, sql: str, params: Iterable[Sequence[Any]], /) -> None:
        self.log.append((sql, [tuple(p) for p in params]))


def test_sql_in_each_target_style() -> None:
    assert Ledger(param="?").name == LEDGER == "_sdk_applied"
    assert Ledger(param="?").create_sql() == (
        "CREATE TABLE IF NOT EXISTS _sdk_applied (tbl TEXT, batch_id TEXT, "
        "PRIMARY KEY (tbl, batch_id))")
    assert Ledger(param="?").claim_sql() == (
        "INSERT INTO _sdk_applied VALUES (?, ?) ON CONFLICT DO NOTHING")
    pg = postgres_target.ledger('"s"')
    assert pg.create_sql() == ('CREATE TABLE IF NOT EXISTS "s"._sdk_applied (tbl text, '
                               "batch_id text, PRIMARY KEY (tbl, batch_id))")
    assert pg.claim_sql() == 'INSERT INTO "s"._sdk_applied VALUES (%s, %s) ON CONFLICT DO NOTHING'
    my = mysql_target.ledger("`s`")
    assert my.create_sql() == ("CREATE TABLE IF NOT EXISTS `s`._sdk_applied (tbl VARCHAR(191), "
                               "batch_id VARCHAR(191), PRIMARY KEY (tbl, batch_id))")
    assert my.claim_sql() == "INSERT IGNORE INTO `s`._sdk_applied VALUES (%s, %s)"


def test_claims_first_then_writes_the_runs_and_a_replay_writes_nothing() -> None:
    ledger, cursor = Ledger(param="?"), RecordingCursor()
    assert ledger.apply(cursor, TABLE, EVENTS, "7-0", DELETE, UPSERT, str)
    assert cursor.log == [
        (ledger.claim_sql(), [("t", "7-0")]),
        (UPSERT, [("1", "a")]),
        (DELETE, [("2",)]),  # the update moved its key: the old one goes first
        (UPSERT, [("3", "b")]),
        (DELETE, [("4",)]),
    ]
    cursor.log.clear()
    assert not ledger.apply(cursor, TABLE, EVENTS, "7-0", DELETE, UPSERT)
    assert cursor.log == [(ledger.claim_sql(), [("t", "7-0")])]
    assert ledger.apply(cursor, TABLE, EVENTS[:1], "7-1", DELETE, UPSERT)  # another task


def test_sqlite_replay_is_a_no_op_and_a_failed_batch_is_not_recorded() -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    ledger = Ledger(param="?")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    conn.execute(ledger.create_sql())
    conn.execute(ledger.create_sql())  # idempotent

    def apply(events: Sequence[ChangeEvent], batch_id: str, upsert: str = UPSERT) -> bool:
        conn.execute("BEGIN IMMEDIATE")
        try:
            done = ledger.apply(conn.cursor(), TABLE, events, batch_id, DELETE, upsert)
            conn.execute("COMMIT")
            return done
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    conn.execute("INSERT INTO t VALUES (2, 'old'), (4, 'gone')")
    assert apply(EVENTS, "1-0")
    assert conn.execute("SELECT * FROM t ORDER BY id").fetchall() == [(1, "a"), (3, "b")]
    conn.execute("DELETE FROM t")
    assert not apply(EVENTS, "1-0")  # a replay changes nothing
    assert conn.execute("SELECT * FROM t").fetchall() == []
    with pytest.raises(sqlite3.OperationalError):
        apply(EVENTS, "2-0", upsert="INSERT INTO missing VALUES (?, ?)")
    assert conn.execute(f"SELECT * FROM {LEDGER} ORDER BY batch_id").fetchall() == [("t", "1-0")]
    assert apply(EVENTS, "2-0")  # the failed batch left no record, so its retry applies
    conn.close()


def test_a_target_of_600_tables_is_checked_in_queries_sqlite_takes(tmp_path: Any) -> None:
    """SQLite refuses a compound SELECT of more than 500 terms: the ledger of a target of
    600 tables is asked in parts (a sync of 1,000 tables into SQLite could not resume)."""
    import sqlite3

    from sdk import Column, LogicalType, TableId, TableSchema
    from sdk.job.target import Target

    db = tmp_path / "t.db"
    tables = [TableSchema(TableId("main", f"t{i}"), (Column("id", LogicalType.INT64,
                                                            "integer"),), ("id",))
              for i in range(600)]
    target = Target.of(f"sqlite:///{db}")
    target.create_tables(tables)
    with sqlite3.connect(db) as raw:
        raw.executemany("INSERT INTO _sdk_applied VALUES (?, 'b')",
                        [(t.table.name,) for t in tables[:599]])
    lost = target.lost(tables)
    assert list(lost) == [] and len(tables) == 600  # one schema: some batch of it is there
