"""MySQL/MariaDB as a sync target: mirror tables kept with idempotent batches.

Instants (``timestamp_tz``) are stored as UTC in ``DATETIME(6)``, since ``TIMESTAMP`` ends in
2038; intervals in ``TIME(6)`` (hours only, up to 838 either way); decimals wider than MySQL's 65
digits, and text or binary key columns, in types MySQL can index.

Values MySQL cannot hold (a NaN or infinite FLOAT/DOUBLE or DECIMAL, a date beyond years
1..9999 or infinity, an interval past 838 hours or with months or days, which are no fixed
number of hours) stop the batch before its transaction writes, with an error naming table, key
and column; with the target URL option ``out_of_range=null`` they are written as NULL instead
(never in a key column).

A batch is applied set-based: its net changes (:func:`sdk.dialect.apply.net_changes`) as multi-row
``DELETE ... WHERE key IN (...)`` statements, then multi-row ``INSERT ... ON DUPLICATE KEY
UPDATE`` statements (pymysql's ``executemany`` joins the rows of the upsert, whose form it
recognizes, into statements of up to ``max_stmt_length`` bytes).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from bisect import bisect_right
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from sdk import ChangeEvent, Column, ConfigurationError, DataError, LogicalType, TableSchema
from sdk.dialect.apply import Ledger, NetChanges
from sdk.dialect.temporal import Interval, WideTemporal

if TYPE_CHECKING:
    import pyarrow as pa

L = LogicalType

_TYPES = {
    L.BOOLEAN: "TINYINT(1)", L.INT8: "TINYINT", L.INT16: "SMALLINT", L.INT32: "INT",
    L.INT64: "BIGINT", L.FLOAT32: "FLOAT", L.FLOAT64: "DOUBLE", L.STRING: "LONGTEXT",
    L.BINARY: "LONGBLOB", L.DATE: "DATE", L.TIME: "TIME(6)", L.TIMESTAMP: "DATETIME(6)",
    L.TIMESTAMP_TZ: "DATETIME(6)", L.INTERVAL: "TIME(6)", L.JSON: "JSON",
}


def target_type(column: Column, in_key: bool) -> str:
    if column.type is L.DECIMAL:
        p, s = column.precision, column.scale or 0
        if p is None or p > 65 or s > 30:
            return "VARCHAR(191)" if in_key else "LONGTEXT"
        return f"DECIMAL({p},{s})"
    if in_key and column.type in (L.STRING, L.JSON):
        return "VARCHAR(191) COLLATE utf8mb4_bin"
    if in_key and column.type is L.BINARY:
        return "VARBINARY(255)"
    return _TYPES[column.type]


def create_sql(table: TableSchema, quoted: str, q: Any) -> str:
    columns = ", ".join(f"{q(c.name)} {target_type(c, c.name in table.key)}"
                        for c in table.columns)
    return (f"CREATE TABLE IF NOT EXISTS {quoted} ({columns}, "
            f"PRIMARY KEY ({', '.join(q(k) for k in table.key)})) CHARSET utf8mb4")


def upsert_parts(table: TableSchema, quoted: str, q: Any) -> tuple[str, str]:
    """The multi-row upsert around its rows: ``INSERT INTO t (columns) VALUES `` and
    `` ON DUPLICATE KEY UPDATE ...``."""
    updates = ", ".join(f"{q(c)} = VALUES({q(c)})" for c in table.column_names)
    names = ", ".join(q(c) for c in table.column_names)
    return f"INSERT INTO {quoted} ({names}) VALUES ", f" ON DUPLICATE KEY UPDATE {updates}"


def statements(table: TableSchema, quoted: str, q: Any) -> tuple[str, str]:
    delete = f"DELETE FROM {quoted} WHERE " + " AND ".join(f"{q(k)} = %s" for k in table.key)
    head, tail = upsert_parts(table, quoted, q)
    marks = ", ".join(["%s"] * len(table.columns))
    return delete, f"{head}({marks}){tail}"


DELETE_CHUNK = 1000
"""Keys per multi-row DELETE: 1000 of the longest keys MySQL indexes (191 characters or 255
bytes each, escaped) stay below the 4 MB ``max_allowed_packet`` of older servers."""


def delete_many_sql(table: TableSchema, quoted: str, q: Any, count: int) -> str:
    """The DELETE of ``count`` keys in one statement (with parameters: ``quoted`` and ``q`` as
    for :func:`statements`)."""
    one = ", ".join(["%s"] * len(table.key))
    if len(table.key) == 1:
        return f"DELETE FROM {quoted} WHERE {q(table.key[0])} IN ({', '.join([one] * count)})"
    return (f"DELETE FROM {quoted} WHERE ({', '.join(q(k) for k in table.key)}) IN ("
            + ", ".join([f"({one})"] * count) + ")")


def write(cursor: Any, table: TableSchema, quoted: str, net: NetChanges, q: Any) -> None:
    """Write ``net`` (a claimed batch's changes, values as :func:`value` gives them) to
    ``quoted`` (the target, quoted for parameters) with the pymysql ``cursor``, inside the
    caller's transaction: deletes first, then upserts (their keys differ). Upserts that
    meet a unique index besides the key are written by :func:`displacing`."""
    from pymysql.err import IntegrityError

    _delete(cursor, table, quoted, net.deletes, q)
    if not net.upserts:
        return
    upsert = statements(table, quoted, q)[1]
    cursor.execute("SAVEPOINT sdk_upsert")
    try:
        cursor.executemany(upsert, net.upserts)
    except IntegrityError as exc:
        if exc.args[0] != DUPLICATE_KEY:
            raise
        cursor.execute("ROLLBACK TO SAVEPOINT sdk_upsert")
        displacing(cursor, table, quoted, net.upserts, q, exc)
        cursor.executemany(upsert, net.upserts)
    cursor.execute("RELEASE SAVEPOINT sdk_upsert")


DUPLICATE_KEY = 1062
"""MySQL's error of a duplicate value in a unique index (ER_DUP_ENTRY)."""


def _delete(cursor: Any, table: TableSchema, quoted: str, keys: Sequence[tuple[Any, ...]],
            q: Any) -> None:
    for i in range(0, len(keys), DELETE_CHUNK):
        chunk = keys[i:i + DELETE_CHUNK]
        cursor.execute(delete_many_sql(table, quoted, q, len(chunk)),
                       [v for key in chunk for v in key])


def displacing(cursor: Any, table: TableSchema, quoted: str, rows: Sequence[tuple[Any, ...]],
               q: Any, error: Exception) -> None:
    """Make way for upserts ``rows`` that take values of a unique index besides the key from
    one another (two rows that swap an email in one source transaction): delete the rows of
    their keys, which the upserts then insert. Deleting must not run the target's foreign
    keys (their ``ON DELETE`` actions): done with ``foreign_key_checks = 0``
    (``apply_transaction``'s), or where none references the table; else the error, naming
    them."""
    cursor.execute("SELECT @@SESSION.foreign_key_checks, (SELECT GROUP_CONCAT(CONSTRAINT_NAME) "
                   "FROM information_schema.REFERENTIAL_CONSTRAINTS WHERE "
                   "UNIQUE_CONSTRAINT_SCHEMA = %s AND REFERENCED_TABLE_NAME = %s)",
                   (table.table.schema, table.table.name))
    checks, referencing = cursor.fetchone()
    if checks and referencing:
        raise ConfigurationError(
            f"the target table {table.table} has a unique index besides its key that this "
            f"batch's rows take from one another ({error}); the sync writes them by deleting "
            f"and inserting the rows, which would run foreign keys {referencing} of the "
            "target: apply inside the dialect's apply_transaction block, as sdk sync does "
            "(foreign_key_checks = 0, as a replica applies)")
    by_name = {name: i for i, name in enumerate(table.column_names)}
    _delete(cursor, table, quoted, [tuple(r[by_name[k]] for k in table.key) for r in rows], q)


def value(v: Any) -> Any:
    """A Python value as pymysql should send it: instants as naive UTC, an interval of hours
    (:func:`_holds` refuses months and days) as the timedelta pymysql writes as ``838:59:59``."""
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return v.astimezone(dt.UTC).replace(tzinfo=None)
    if isinstance(v, Interval):
        return dt.timedelta(microseconds=v.micros)
    return v


OUT_OF_RANGE = ("error", "null")
"""The values of the target URL option ``out_of_range``: what to do with a value MySQL cannot
hold."""
_MAX_TIME = dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=999999)
_MAX_TIME_MICROS = _MAX_TIME // dt.timedelta(microseconds=1)


def out_of_range(options: Mapping[str, str]) -> str:
    """The ``out_of_range`` URL option, checked."""
    choice = options.get("out_of_range", "error").lower()
    if choice not in OUT_OF_RANGE:
        raise ConfigurationError(f"out_of_range={choice!r}: use one of {', '.join(OUT_OF_RANGE)}")
    return choice


def _holds(column: Column, v: Any) -> bool:
    """Whether the column's MySQL type (:func:`target_type`) holds ``v`` exactly."""
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, Decimal):
        return v.is_finite() or target_type(column, False) == "LONGTEXT"
    if isinstance(v, WideTemporal):
        return v.type == L.TIME.value and v.units <= _MAX_TIME_MICROS
    if isinstance(v, (Interval, dt.timedelta)):  # TIME has hours only: no months, no days
        v = Interval.of(v)
        return not (v.months or v.days) and abs(v.micros) <= _MAX_TIME_MICROS
    return True


_PLAIN = frozenset({type(None), bool, int, str, bytes, dt.date, dt.time})
"""Value types that MySQL holds and pymysql sends as they are (:func:`_holds` and
:func:`value` leave them alone), so a row of only these needs no look at each value."""


def checked(table: TableSchema, events: Sequence[ChangeEvent], policy: str
            ) -> Sequence[ChangeEvent]:
    """``events`` with every value MySQL can hold as pymysql sends it (:func:`value`), checked
    before anything is written (:func:`checked_row`). Keys (``key``, ``old_key``) are left to
    the caller's :func:`value`."""
    out: list[ChangeEvent] = []
    for event in events:
        after = event.after
        row = after if after is None else checked_row(table, after, event.key, policy)
        out.append(event if row is after else replace(event, after=row))
    return out


def checked_row(table: TableSchema, row: tuple[Any, ...], key: Any, policy: str
                ) -> tuple[Any, ...]:
    """``row`` (of ``key``) with every value MySQL can hold as pymysql sends it
    (:func:`value`): a value it cannot hold is an error naming table, key and column, or NULL
    when ``policy`` is ``null`` (never in a key). ``row`` itself when nothing changed."""
    if _PLAIN.issuperset(map(type, row)):
        return row
    out = list(row)
    for i, v in enumerate(row):
        if type(v) in _PLAIN:
            continue
        column = table.columns[i]
        if _holds(column, v):
            out[i] = str(v) if isinstance(v, WideTemporal) else value(v)
            continue
        if policy != "null" or column.name in table.key:
            raise DataError(
                f"{table.table} key {key!r} column {column.name!r}: MySQL's "
                f"{target_type(column, column.name in table.key)} cannot hold {v}. Nothing "
                "of this table's batch was written. Fix: add out_of_range=null to the "
                "target URL to write NULL for such values (not in a key), or mirror into "
                "a target that holds them (PostgreSQL), or set errors.mode=skip to set such "
                "changes aside")
        out[i] = None
    changed = any(a is not b for a, b in zip(out, row, strict=True))
    return tuple(out) if changed else row


def checked_rows(table: TableSchema, rows: pa.Table, policy: str) -> list[tuple[Any, ...]]:
    """A snapshot split's Arrow rows as :func:`checked_row` leaves the values
    :func:`sdk.dialect.arrow.python_values` gives: the row path of :func:`literal_rows`."""
    from sdk.dialect.arrow import python_values

    columns = [python_values(rows.column(i), c.type) for i, c in enumerate(table.columns)]
    return [checked_row(table, row, table.key_of(row), policy)
            for row in zip(*columns, strict=True)]


STATEMENT_BYTES = 1_024_000
"""About the most bytes of one multi-row INSERT of a loaded split: pymysql's ``executemany``
cuts its statements there, far below any server's ``max_allowed_packet``."""
_INTEGERS = frozenset({L.INT8, L.INT16, L.INT32, L.INT64})
_ESCAPED = r"[\\'\x00]"
"""What a quoted literal escapes (by a backslash, as pymysql's ``escape_string``): a
backslash, a quote, and NUL; the rest of a string goes as it is."""


def _quoted(text: pa.ChunkedArray, escape: bool, plain_backslash: bool) -> pa.ChunkedArray:
    """``text`` as quoted literals; ``escape``: it may hold characters to escape, escaped with
    a backslash unless the session has ``NO_BACKSLASH_ESCAPES`` (then a quote is doubled)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if escape and pc.any(pc.match_substring_regex(text, _ESCAPED)).as_py():
        pairs = [("'", "''")] if plain_backslash else \
            [("\\", "\\\\"), ("'", "\\'"), ("\0", "\\0")]
        for char, escaped in pairs:
            text = pc.replace_substring(text, char, escaped)
    return pc.binary_join_element_wise(pa.scalar("'"), text, pa.scalar("'"), "")


def literal_column(values: pa.ChunkedArray, column: Column, plain_backslash: bool
                   ) -> pa.ChunkedArray | None:
    """One column of a snapshot split as MySQL literals (``NULL`` for a null) made by Arrow's
    kernels, for what pymysql would send of the values :func:`sdk.dialect.arrow.python_values`
    gives: integers and finite floats as numbers (a FLOAT's as the double it holds), booleans as 0
    or 1, text quoted and escaped, decimals as quoted text (MySQL reads ``'1.000E-7'``
    exactly), dates and timestamps of years 1-9999 as quoted text (an instant as its UTC wall
    time). None for what goes value by value (:func:`checked_rows`): bytes, times, intervals,
    a NaN or infinity, a date past those years."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from sdk.dialect.arrow import python_units

    kind, logical = values.type, column.type
    if logical is L.BOOLEAN and pa.types.is_boolean(kind):
        text = values.cast(pa.int8()).cast(pa.string())
    elif logical in _INTEGERS and pa.types.is_integer(kind):
        text = values.cast(pa.string())
    elif logical in (L.FLOAT32, L.FLOAT64) and pa.types.is_floating(kind):
        if pc.all(pc.is_finite(values)).as_py() is False:
            return None
        text = values.cast(pa.float64()).cast(pa.string())
    elif logical is L.DECIMAL and pa.types.is_decimal(kind):
        text = _quoted(values.cast(pa.string()), False, plain_backslash)
    elif logical in (L.STRING, L.JSON, L.DECIMAL) and pa.types.is_string(kind):
        text = _quoted(values, True, plain_backslash)  # a wide decimal: its text
    elif (units := python_units(values, logical)) is not None:
        stamps = units.cast(pa.date32() if logical is L.DATE else pa.timestamp("us"))
        text = _quoted(stamps.cast(pa.string()), False, plain_backslash)
    else:
        return None
    return pc.fill_null(text, "NULL")


def literal_rows(table: TableSchema, rows: pa.Table, plain_backslash: bool
                 ) -> pa.ChunkedArray | None:
    """Each row of a snapshot split as ``(v1,v2,...),`` (:func:`literal_column`), for
    :func:`insert_statements`; None when a column goes value by value."""
    import pyarrow as pa
    import pyarrow.compute as pc

    columns = []
    for i, column in enumerate(table.columns):
        text = literal_column(rows.column(i), column, plain_backslash)
        if text is None:
            return None
        columns.append(text)
    return pc.binary_join_element_wise(
        pa.scalar("("), pc.binary_join_element_wise(*columns, ","), pa.scalar("),"), "")


def insert_statements(rows: pa.ChunkedArray, head: str, tail: str, limit: int
                      ) -> Iterator[bytes]:
    """``head``, rows of :func:`literal_rows` (the last one's comma dropped), ``tail``: the
    statements, each of as many rows as fit ``limit`` bytes (at least one), cut from the
    bytes Arrow wrote without a Python string per row."""
    start, end = head.encode(), tail.encode()
    for chunk in rows.chunks:
        n = len(chunk)
        if not n:
            continue
        _, offsets, data = chunk.buffers()
        ends = memoryview(offsets).cast("i")[chunk.offset:chunk.offset + n + 1]
        body = memoryview(data)
        i = 0
        while i < n:
            j = max(bisect_right(ends, ends[i] + limit, i + 1, n + 1) - 1, i + 1)
            yield b"".join((start, body[ends[i]:ends[j] - 1], end))
            i = j


def ledger(schema: str) -> Ledger:
    """The applied-batch ledger of the mirror tables in ``schema`` (quoted): MySQL cannot key a
    TEXT column, and 191 utf8mb4 characters fit the 767-byte key of older InnoDB formats."""
    return Ledger(schema, "VARCHAR(191)", insert_ignore=True)


def alter_sql(new: TableSchema, quoted: str, existing: dict[str, str], q: Any) -> list[str]:
    """The statements that make table ``quoted`` (``existing``: its columns and their
    ``COLUMN_TYPE``) hold ``new``'s columns, in ``new``'s order: each missing one added where
    ``new`` has it, each one ``new`` lacks dropped, each whose type differs changed. None when
    it does already, so running them again after a replay changes nothing."""
    out = [f"ALTER TABLE {quoted} DROP COLUMN {q(name)}" for name in existing
           if name not in new.column_names]
    before = "FIRST"
    for column in new.columns:
        kind = target_type(column, column.name in new.key)
        if column.name not in existing:
            out.append(f"ALTER TABLE {quoted} ADD COLUMN {q(column.name)} {kind} {before}")
        elif _plain(existing[column.name]) != _plain(kind):
            out.append(f"ALTER TABLE {quoted} MODIFY COLUMN {q(column.name)} {kind}")
        before = f"AFTER {q(column.name)}"
    return out


def _plain(kind: str) -> str:
    """A column type as ``COLUMN_TYPE`` and ``target_type`` both spell it: lower case, no
    integer display width, no collation."""
    text = kind.lower().split(" collate ")[0].strip()
    return re.sub(r"^(tinyint|smallint|mediumint|int|bigint)\(\d+\)", r"\1", text)
