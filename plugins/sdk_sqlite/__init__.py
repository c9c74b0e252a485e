"""The reference dialect: SQLite, with triggers writing every change to a change table.

A real, if simple, change-data-capture source and target that needs no server: each captured
table gets AFTER INSERT/UPDATE/DELETE triggers that append the row images to ``_sdk_changes``
in the same transaction as the change. The change's sequence number is the offset. SQLite has
one writer at a time and WAL readers see whole commits, so a sequence number read from the
committed change table is also a visibility point (the hazard of docs/design.md, 'The visibility
hazard' cannot happen here), and a read transaction is an exact snapshot (``begin_snapshot``).

This module is the worked example of CONTRIBUTING.md: each hook is as short as it can be.
Limitations: text keys compare with SQLite's default BINARY collation; values keep SQLite's
storage classes (integer, real, text, blob), so dates are whatever text the application stored.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from sdk import (
    Capability,
    ChangeEvent,
    Column,
    ConfigurationError,
    ConnectionConfig,
    DialectInfo,
    Heartbeat,
    Key,
    LogicalType,
    Offset,
    OffsetExpiredError,
    Requirement,
    Row,
    SnapshotSplit,
    SnapshotView,
    TableId,
    TableSchema,
    TableStats,
    hookimpl,
)
from sdk.dialect.apply import (
    LEDGER,
    Ledger,
    check_target_columns,
    ledger_tables,
    write_transaction,
)
from sdk.dialect.sqlbase import SqlDialect

from ._sql import (
    CHANGES,
    META,
    decode_row,
    form_of,
    from_target_value,
    one_form,
    q,
    target_column,
    target_type,
    to_target_value,
    trigger_sql,
)

if TYPE_CHECKING:
    import pyarrow as pa

NAME = "sqlite"
SCHEMA = "main"
POLL_SECONDS = 0.2


@hookimpl
def dialect_info() -> DialectInfo:
    return DialectInfo(
        name=NAME,
        title="SQLite (trigger-maintained change table)",
        drivers=("sqlite3",),
        capabilities=frozenset({Capability.BEFORE_IMAGES, Capability.FILTERED_READS}),
        url_options=(),
    )


@hookimpl
def connect(config: ConnectionConfig) -> sqlite3.Connection:
    if not config.database:
        raise ConfigurationError("a sqlite URL names a file: sqlite:///path/to/file.db")
    conn = sqlite3.connect(config.database, timeout=60, isolation_level=None,
                           check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    return conn


@hookimpl
def is_retriable(error: BaseException) -> bool:
    """Another process holding the database's lock past the busy timeout: try again later."""
    return isinstance(error, sqlite3.OperationalError) and "locked" in str(error)


@hookimpl
def preflight(conn: sqlite3.Connection, tables: Sequence[TableId]) -> list[Requirement]:
    (mode,) = conn.execute("PRAGMA journal_mode").fetchone()
    checks = [Requirement("journal_mode=wal", mode == "wal", f"journal_mode is {mode}",
                          "PRAGMA journal_mode=WAL")]
    triggers = {r[0] for r in conn.execute("SELECT tbl_name FROM sqlite_master "
                                           "WHERE type='trigger' AND name LIKE '_sdk_%'")}
    for table in tables:
        checks.append(Requirement(
            f"capture triggers on {table}", table.name in triggers,
            fix="they are created by prepare_capture (sdk sync does it before starting)"))
    return checks


@contextmanager
def _writing(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction (the database's write lock taken at once), committed when the
    block ends, rolled back when it raises; a savepoint inside an open one
    (:func:`apply_transaction`)."""
    with write_transaction(conn.execute, conn.in_transaction, "BEGIN IMMEDIATE"):
        yield


@hookimpl
def apply_transaction(conn: sqlite3.Connection) -> AbstractContextManager[object]:
    """One write transaction the apply hooks inside it join (SQLite's DDL is transactional,
    so an ``alter_table`` inside commits nothing either)."""
    return _writing(conn)


@hookimpl
def prepare_capture(conn: sqlite3.Connection, tables: Sequence[TableSchema]) -> None:
    with _writing(conn):
        conn.execute(f"CREATE TABLE IF NOT EXISTS {CHANGES} (seq INTEGER PRIMARY KEY "
                     "AUTOINCREMENT, tbl TEXT NOT NULL, op TEXT NOT NULL, old_row TEXT, "
                     "new_row TEXT, ts INTEGER NOT NULL)")
        conn.execute(f"CREATE TABLE IF NOT EXISTS {META} (name TEXT PRIMARY KEY, value)")
        # the change log's identity (server_identity): made with the log, once
        conn.execute(f"INSERT OR IGNORE INTO {META} VALUES ('log_id', ?)",
                     (uuid.uuid4().hex,))
        for table in tables:
            for statement in trigger_sql(table):
                conn.execute(statement)


@hookimpl
def list_tables(conn: sqlite3.Connection) -> list[TableId]:
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE "
                        "'sqlite\\_%' ESCAPE '\\' AND name NOT LIKE '\\_sdk\\_%' ESCAPE '\\' "
                        "ORDER BY name")
    return [TableId(SCHEMA, name) for (name,) in rows]


_AFFINITY = [("INT", LogicalType.INT64), ("CHAR", LogicalType.STRING),
             ("CLOB", LogicalType.STRING), ("TEXT", LogicalType.STRING),
             ("BLOB", LogicalType.BINARY), ("REAL", LogicalType.FLOAT64),
             ("FLOA", LogicalType.FLOAT64), ("DOUB", LogicalType.FLOAT64)]


def _logical_type(declared: str) -> LogicalType:
    """SQLite's column affinity rules (section 3.1 of its datatype doc) as logical types."""
    upper = declared.upper()
    for fragment, logical in _AFFINITY:
        if fragment in upper:
            return logical
    return LogicalType.BINARY if not upper else LogicalType.FLOAT64


@hookimpl
def describe_table(conn: sqlite3.Connection, table: TableId) -> TableSchema:
    info = conn.execute(f"PRAGMA table_info({q(table.name)})").fetchall()
    if not info:
        raise ConfigurationError(f"table {table} does not exist in {SCHEMA}")
    columns = tuple(Column(name, _logical_type(decl), decl or "ANY", not notnull or pk > 0)
                    for _, name, decl, notnull, _, pk in info)
    primary_key = tuple(name for *_, name, _, _, _, pk in sorted(info, key=lambda r: r[5])
                        if pk > 0)
    not_null = {c.name for c in columns if not c.nullable}
    unique_keys = []
    for _, index, unique, origin, _ in conn.execute(f"PRAGMA index_list({q(table.name)})"):
        cols = tuple(r[2] for r in conn.execute(f"PRAGMA index_info({q(index)})"))
        if unique and origin != "pk" and cols and set(cols) <= not_null:
            unique_keys.append(cols)
    return TableSchema(table, columns, primary_key, tuple(unique_keys))


COUNT_LIMIT = 100_000
"""Rows ``table_stats`` counts at most, to estimate a table ``ANALYZE`` has not measured."""


class _Keyset(SqlDialect):
    """Key ends, split boundaries and keyset reads as any DB-API database does them
    (``sdk.dialect.sqlbase``), with SQLite's parameter marker."""

    mark = "?"

    def qualified(self, table: TableId) -> str:
        return q(table.name)

    def estimate_rows(self, conn: Any, table: TableSchema) -> int:
        """SQLite's own statistic when ``ANALYZE`` measured the table (``sqlite_stat1``: as
        stale as the last ``ANALYZE``), else a count that stops at :data:`COUNT_LIMIT` rows:
        exact for a smaller table, a lower bound for a larger one (whose factor then looks
        sparse, so it is cut by index seeks: correct, only slower). SQLite keeps no other
        row estimate, and a full ``count(*)`` reads the whole table."""
        name = table.table.name
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_stat1'").fetchone():
            row = conn.execute("SELECT stat FROM sqlite_stat1 WHERE tbl = ? "
                               "ORDER BY idx IS NOT NULL LIMIT 1", (name,)).fetchone()
            if row and str(row[0]).split()[0].isdigit():
                return int(str(row[0]).split()[0])
        (count,) = conn.execute(f"SELECT count(*) FROM (SELECT 1 FROM {q(name)} "
                                f"LIMIT {int(COUNT_LIMIT)})").fetchone()
        return int(count)


_KEYSET = _Keyset()


@hookimpl
def table_stats(conn: sqlite3.Connection, table: TableSchema) -> TableStats:
    """The key's ends by its index, and the estimate of :meth:`_Keyset.estimate_rows`."""
    return _KEYSET.table_stats(conn, table)


@hookimpl
def next_boundary(conn: sqlite3.Connection, table: TableSchema, start: Key | None, size: int
                  ) -> Key | None:
    return _KEYSET.next_boundary(conn, table, start, size)


@hookimpl
def current_offset(conn: sqlite3.Connection) -> Offset:
    """The change log's next sequence number; 1 before capture made it (a batch read, which
    prepares no capture, reads its splits in views at that offset)."""
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_sequence'"
                        ).fetchone():
        return Offset(NAME, seq=1)
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = ?", (CHANGES,)).fetchone()
    return Offset(NAME, seq=(row[0] if row else 0) + 1)


@hookimpl
def read_range(conn: sqlite3.Connection, table: TableSchema, split: SnapshotSplit,
               fetch_size: int) -> Iterator[Sequence[Row]]:
    return _KEYSET.read_range(conn, table, split, fetch_size)


@hookimpl
def server_identity(conn: sqlite3.Connection) -> dict[str, str]:
    """The change log's id, made with it by ``prepare_capture``: a file whose capture tables
    were dropped and made again, or another file, has another."""
    try:
        row = conn.execute(f"SELECT value FROM {META} WHERE name = 'log_id'").fetchone()
    except sqlite3.OperationalError:  # no capture tables (yet)
        return {}
    return {"log_id": str(row[0])} if row else {}


@hookimpl
def check_offset(conn: sqlite3.Connection, offset: Offset) -> None:
    """Refuse a position the change table no longer holds (purged by acknowledgements)."""
    _check_not_purged(conn, _seq(offset))


def _check_not_purged(conn: sqlite3.Connection, position: int) -> None:
    purged = conn.execute(f"SELECT value FROM {META} WHERE name = 'purged_below'").fetchone()
    if purged and position < purged[0]:
        raise OffsetExpiredError(
            f"sqlite change table was purged below seq {purged[0]}; cannot resume from "
            f"seq {position}: take a new snapshot")


@hookimpl
def stream_log(conn: sqlite3.Connection, tables: Sequence[TableSchema], start: Offset,
               end: Offset | None) -> Iterator[ChangeEvent | Heartbeat]:
    by_name = {t.table.name: t for t in tables}
    position = _seq(start)
    _check_not_purged(conn, position)
    while True:
        # Read up to a committed head, so a heartbeat there never skips a change.
        head = _seq(end) if end is not None else _seq(current_offset(conn))
        marks = ", ".join("?" * len(by_name))
        cursor = conn.execute(
            f"SELECT seq, tbl, op, old_row, new_row, ts FROM {CHANGES} WHERE seq >= ? AND "
            f"seq < ? AND tbl IN ({marks}) ORDER BY seq", [position, head, *by_name])
        for seq, tbl, op, old_json, new_json, ts in cursor:
            yield _event(by_name[tbl], seq, op, old_json, new_json, ts)
        position = max(position, head)
        if end is not None:
            return
        yield Heartbeat(Offset(NAME, seq=position))
        time.sleep(POLL_SECONDS)


def _event(table: TableSchema, seq: int, op: Any, old_json: str | None,
           new_json: str | None, ts: int) -> ChangeEvent:
    before, after = decode_row(old_json), decode_row(new_json)
    if op == "d":
        assert before is not None
        return ChangeEvent(table.table, "d", table.key_of(before), None, Offset(NAME, seq=seq),
                           before, commit_ts=ts)
    assert after is not None
    key = table.key_of(after)
    old_key = table.key_of(before) if before is not None else None
    return ChangeEvent(table.table, op, key, after, Offset(NAME, seq=seq), before,
                       old_key if old_key != key else None, ts)


def _seq(offset: Offset) -> int:
    seq = offset["seq"]
    assert isinstance(seq, int), offset
    return seq


@hookimpl
def compare_offset(a: Offset, b: Offset) -> int:
    x, y = a["seq"], b["seq"]
    assert isinstance(x, int) and isinstance(y, int)
    return (x > y) - (x < y)


@hookimpl
def begin_snapshot(conn: sqlite3.Connection) -> SnapshotView:
    conn.execute("BEGIN")  # the first read fixes the snapshot; the offset read is that read
    return SnapshotView(current_offset(conn))


@hookimpl
def end_snapshot(conn: sqlite3.Connection) -> None:
    conn.execute("COMMIT")


@hookimpl
def earliest_offset(conn: sqlite3.Connection) -> Offset:
    row = conn.execute(f"SELECT value FROM {META} WHERE name = 'purged_below'").fetchone()
    return Offset(NAME, seq=row[0] if row else 1)


@hookimpl
def acknowledge_offset(conn: sqlite3.Connection, offset: Offset) -> None:
    with _writing(conn):
        conn.execute(f"INSERT INTO {META} VALUES ('purged_below', ?) ON CONFLICT(name) DO "
                     "UPDATE SET value = max(value, excluded.value)", (_seq(offset),))
        conn.execute(f"DELETE FROM {CHANGES} WHERE seq < (SELECT value FROM {META} "
                     "WHERE name = 'purged_below')")


# --- the dialect as a sync target ------------------------------------------------------------

APPLIED = Ledger(param="?")


@hookimpl
def create_table(conn: sqlite3.Connection, table: TableSchema) -> None:
    name = q(table.table.name)
    check_target_columns([r[1] for r in conn.execute(f"PRAGMA table_info({name})")], table)
    columns = ", ".join(f"{q(c.name)} {target_type(c)}" for c in table.columns)
    conn.execute(f"CREATE TABLE IF NOT EXISTS {name} ({columns}, "
                 f"PRIMARY KEY ({', '.join(map(q, table.key))}))")
    conn.execute(APPLIED.create_sql())


@hookimpl
def trim_ledger(conn: sqlite3.Connection, table: TableSchema, low: str, high: str) -> None:
    with _writing(conn):
        conn.execute(APPLIED.trim_sql(), (table.table.name, low, high))


@hookimpl
def applied_tables(conn: sqlite3.Connection, tables: Sequence[TableSchema]
                   ) -> dict[TableId, bool]:
    """One look at ``sqlite_master``, and one probe of the ledger per table (its key)."""
    names = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE "
                                              "type = 'table'")}
    existing = {(t.table.schema, n) for t in tables for n in (t.table.name, LEDGER)
                if n in names}

    def held(_schema: str, wanted: list[str]) -> list[str | None]:
        return [r[0] for r in conn.execute(APPLIED.holding_sql(len(wanted)), wanted)]
    return ledger_tables(tables, existing, held)


@hookimpl
def alter_table(conn: sqlite3.Connection, old: TableSchema, new: TableSchema) -> None:
    """Add and drop columns so the mirror table holds ``new``'s rows (a wider type needs
    nothing: SQLite keeps any value in any column)."""
    name = q(new.table.name)
    existing = [r[1] for r in conn.execute(f"PRAGMA table_info({name})")]
    for column in existing:
        if column not in new.column_names:
            conn.execute(f"ALTER TABLE {name} DROP COLUMN {q(column)}")
    for column in new.columns:
        if column.name not in existing:
            conn.execute(f"ALTER TABLE {name} ADD COLUMN {q(column.name)} {target_type(column)}")


def _statements(table: TableSchema) -> tuple[str, str]:
    """The DELETE by key and the upsert of a row of mirror table ``table``."""
    name = q(table.table.name)
    delete = f"DELETE FROM {name} WHERE " + " AND ".join(f"{q(k)} = ?" for k in table.key)
    upsert = (f"INSERT OR REPLACE INTO {name} ({', '.join(map(q, table.column_names))}) "
              f"VALUES ({', '.join('?' * len(table.columns))})")
    return delete, upsert


@hookimpl
def apply_changes(conn: sqlite3.Connection, table: TableSchema,
                  events: Sequence[ChangeEvent], batch_id: str) -> bool:
    delete, upsert = _statements(table)
    with _writing(conn):
        return APPLIED.apply(conn.cursor(), table, _one_form(table, events), batch_id,
                             delete, upsert, to_target_value)


def _one_form(table: TableSchema, events: Sequence[ChangeEvent]) -> Sequence[ChangeEvent]:
    """``events`` with each value in the form ``load_snapshot`` stores it (:func:`._sql.form_of`:
    a float32 as the double its shortest text parses to, a decimal's text positional): one form
    of a value whether its row came by the snapshot or the log."""
    forms = [(i, f) for i, c in enumerate(table.columns) if (f := form_of(c)) is not None]
    if not forms:
        return events
    names = table.column_names
    keyed = [(table.key.index(names[i]), f) for i, f in forms if names[i] in table.key]
    return [dataclasses.replace(
        e, key=one_form(e.key, keyed) or (), after=one_form(e.after, forms),
        before=one_form(e.before, forms), old_key=one_form(e.old_key, keyed))
        for e in events]


@hookimpl
def load_snapshot(conn: sqlite3.Connection, table: TableSchema, rows: pa.Table,
                  batch_id: str) -> bool:
    """The split's rows as ``apply_changes`` writes ``r`` events, their values made from
    whole Arrow columns (:func:`._sql.target_column`), not a ChangeEvent per row."""
    upsert = _statements(table)[1]
    columns = [target_column(rows.column(i), c) for i, c in enumerate(table.columns)]
    with _writing(conn):
        if not APPLIED.claim(conn.cursor(), table, batch_id):
            return False
        conn.executemany(upsert, zip(*columns, strict=True))
        return True


_KEYS_IN_ORDER = frozenset({LogicalType.BOOLEAN, LogicalType.INT8, LogicalType.INT16,
                            LogicalType.INT32, LogicalType.INT64, LogicalType.STRING,
                            LogicalType.BINARY})
"""Key types whose stored values (:func:`._sql.to_target_value`) order as the values do, so
a split's range is read by its SQL; a decimal's text, say, does not (``'10' < '9'``)."""


@hookimpl
def read_target_range(conn: sqlite3.Connection, table: TableSchema, split: SnapshotSplit,
                      fetch_size: int) -> Iterator[Sequence[Row]]:
    """The mirror table's rows in ``split`` decoded as :func:`read_target` decodes them: the
    range in SQL (its bounds stored as the keys are) where the stored keys order as the
    values do, else every row (meeting the split's ``where``) and the range in Python."""
    by_name = {c.name: c for c in table.columns}
    in_order = all(by_name[k].type in _KEYS_IN_ORDER for k in table.key)

    def stored(bound: Key | None) -> Key | None:
        return None if bound is None or not in_order else tuple(map(to_target_value, bound))
    read = SnapshotSplit(split.table, split.index, stored(split.start), stored(split.end),
                         split.where)
    types = [c.type for c in table.columns]
    for batch in _KEYSET.read_range(conn, table, read, fetch_size):
        rows = [tuple(from_target_value(v, t) for v, t in zip(raw, types, strict=True))
                for raw in batch]
        if not in_order:
            rows = [r for r in rows if split.contains(table.key_of(r))]
        if rows:
            yield rows


def read_target(conn: sqlite3.Connection, table: TableSchema) -> dict[Key, Row]:
    """Every row of a mirror table by key, with values decoded back to Python (for checks)."""
    types = [c.type for c in table.columns]
    rows = conn.execute(f"SELECT {', '.join(map(q, table.column_names))} "
                        f"FROM {q(table.table.name)}")
    out = {}
    for raw in rows:
        row = tuple(from_target_value(v, t) for v, t in zip(raw, types, strict=True))
        out[table.key_of(row)] = row
    return out


__all__ = ["NAME", "read_target"]
