"""MySQL/MariaDB as a sync target: mirror tables kept with idempotent batches.

Instants (``timestamp_tz``) are stored as UTC in ``DATETIME(6)``, since ``TIMESTAMP`` ends in
2038; intervals in ``TIME(6)`` (up to 838 hours either way); decimals wider than MySQL's 65
digits, and text or binary key columns, in types MySQL can index.

Values MySQL cannot hold (a NaN or infinite FLOAT/DOUBLE or DECIMAL, a date beyond years
1..9999 or infinity, an interval past 838 hours) stop the batch before its transaction writes,
with an error naming table, key and column; with the target URL option ``out_of_range=null``
they are written as NULL instead (never in a key column).

A batch is applied set-based: its net changes (:func:`sdk.apply.net_changes`) as multi-row
``DELETE ... WHERE key IN (...)`` statements, then multi-row ``INSERT ... ON DUPLICATE KEY
UPDATE`` statements (pymysql's ``executemany`` joins the rows of the upsert, whose form it
recognizes, into statements of up to ``max_stmt_length`` bytes).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from decimal import Decimal
from typing import Any

from sdk import ChangeEvent, Column, ConfigurationError, FatalSyncError, LogicalType, TableSchema
from sdk.apply import Ledger, NetChanges
from sdk.temporal import WideTemporal

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


def statements(table: TableSchema, quoted: str, q: Any) -> tuple[str, str]:
    delete = f"DELETE FROM {quoted} WHERE " + " AND ".join(f"{q(k)} = %s" for k in table.key)
    updates = ", ".join(f"{q(c)} = VALUES({q(c)})" for c in table.column_names)
    names = ", ".join(q(c) for c in table.column_names)
    marks = ", ".join(["%s"] * len(table.columns))
    upsert = (f"INSERT INTO {quoted} ({names}) VALUES ({marks}) "
              f"ON DUPLICATE KEY UPDATE {updates}")
    return delete, upsert


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
    caller's transaction: deletes first, then upserts (their keys differ)."""
    for i in range(0, len(net.deletes), DELETE_CHUNK):
        keys = net.deletes[i:i + DELETE_CHUNK]
        cursor.execute(delete_many_sql(table, quoted, q, len(keys)),
                       [v for key in keys for v in key])
    if net.upserts:
        cursor.executemany(statements(table, quoted, q)[1], net.upserts)


def value(v: Any) -> Any:
    """A Python value as pymysql should send it: instants as naive UTC."""
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return v.astimezone(dt.UTC).replace(tzinfo=None)
    return v


OUT_OF_RANGE = ("error", "null")
"""The values of the target URL option ``out_of_range``: what to do with a value MySQL cannot
hold."""
_MAX_TIME = dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=999999)


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
        return v.type == L.TIME.value and v.units <= _MAX_TIME // dt.timedelta(microseconds=1)
    if isinstance(v, dt.timedelta):
        return -_MAX_TIME <= v <= _MAX_TIME
    return True


_PLAIN = frozenset({type(None), bool, int, str, bytes, dt.date, dt.time})
"""Value types that MySQL holds and pymysql sends as they are (:func:`_holds` and
:func:`value` leave them alone), so a row of only these needs no look at each value."""


def checked(table: TableSchema, events: Sequence[ChangeEvent], policy: str
            ) -> Sequence[ChangeEvent]:
    """``events`` with every value MySQL can hold as pymysql sends it (:func:`value`), checked
    before anything is written: a value it cannot hold is an error naming table, key and
    column, or NULL when ``policy`` is ``null`` (never in a key). Keys (``key``, ``old_key``)
    are left to the caller's :func:`value`."""
    out: list[ChangeEvent] = []
    plain = _PLAIN.issuperset
    for event in events:
        after = event.after
        if after is None or plain(map(type, after)):
            out.append(event)
            continue
        row = list(after)
        for i, v in enumerate(after):
            if type(v) in _PLAIN:
                continue
            column = table.columns[i]
            if _holds(column, v):
                row[i] = str(v) if isinstance(v, WideTemporal) else value(v)
                continue
            if policy != "null" or column.name in table.key:
                raise FatalSyncError(
                    f"{table.table} key {event.key!r} column {column.name!r}: MySQL's "
                    f"{target_type(column, column.name in table.key)} cannot hold {v}. Nothing "
                    "of this table's batch was written. Fix: add out_of_range=null to the "
                    "target URL to write NULL for such values (not in a key), or mirror into "
                    "a target that holds them (PostgreSQL)")
            row[i] = None
        changed = any(a is not b for a, b in zip(row, after, strict=True))
        out.append(replace(event, after=tuple(row)) if changed else event)
    return out


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
