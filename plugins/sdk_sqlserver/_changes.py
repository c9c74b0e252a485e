"""Reading the change tables: capture instances, paged reads of
``cdc.fn_cdc_get_all_changes_<instance>(from, to, N'all update old')``, the merge of every
instance into one log order, and the pairing of update images into events.

Order: ``(__$start_lsn, __$seqval, __$operation)``, the commit LSN, then the change's place in
its transaction, then the operation (3, the before image, sorts before 4, the after image).
Each instance is read in pages of ``TOP (n)`` rows after the last key seen (keyset paging), so
one connection serves any number of instances (pymssql has no MARS) with bounded memory, even
for a transaction larger than a page; ``heapq.merge`` interleaves the pages.

Schema changes: a table has at most two capture instances. Each one is read only from its own
``start_lsn`` (``sys.sp_cdc_help_change_data_capture``) up to the next one's, so a change is
read from exactly one instance; columns an older instance lacks come as NULL.
"""

from __future__ import annotations

import datetime as dt
import heapq
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sdk import ChangeEvent, FatalSyncError, OffsetExpiredError, TableId, TableSchema

from ._lsn import ZERO, lsn_bytes, lsn_hex, make_offset
from ._types import q, row_converter, select_expression

Query = Callable[[str, Sequence[Any]], tuple[list[str], list[tuple[Any, ...]]]]
"""Runs one statement and returns its column names and all its rows."""

Position = tuple[str, str, int]
"""``(lsn, seq, op)`` in hex: compares like the log."""

DELETE, INSERT, BEFORE, AFTER = 1, 2, 3, 4
PAGE_ROWS = 5000
ERROR_LSN_RANGE = 313
_LOB_TYPES = ("text|", "native|ntext", "native|image")


@dataclass(frozen=True)
class CaptureInstance:
    """One capture instance of a source table, as ``sys.sp_cdc_help_change_data_capture``
    reports it. ``start_lsn`` is None until the capture job has established it."""

    name: str
    table: TableId
    start_lsn: str | None
    columns: tuple[str, ...]
    role: str | None


def parse_column_list(text: str | None) -> tuple[str, ...]:
    """``"[id], [a]]b]"`` (the procedure's ``captured_column_list``) -> ``("id", "a]b")``."""
    names: list[str] = []
    i, text = 0, text or ""
    while i < len(text):
        if text[i] != "[":
            i += 1
            continue
        j, name = i + 1, []
        while j < len(text):
            if text[j] == "]":
                if text[j + 1:j + 2] == "]":
                    name.append("]")
                    j += 2
                    continue
                break
            name.append(text[j])
            j += 1
        names.append("".join(name))
        i = j + 1
    return tuple(names)


def load_instances(query: Query) -> dict[TableId, list[CaptureInstance]]:
    """Every capture instance the login may read, per source table, oldest first."""
    names, rows = query("EXEC sys.sp_cdc_help_change_data_capture", ())
    out: dict[TableId, list[CaptureInstance]] = {}
    for row in rows:
        r = dict(zip(names, row, strict=True))
        start = r["start_lsn"]
        lsn = lsn_hex(start) if start is not None and any(bytes(start)) else None
        table = TableId(r["source_schema"], r["source_table"])
        out.setdefault(table, []).append(CaptureInstance(
            r["capture_instance"], table, lsn, parse_column_list(r["captured_column_list"]),
            r["role_name"]))
    for instances in out.values():
        instances.sort(key=lambda ci: ci.start_lsn or "f" * 20)
    return out


def is_lsn_range_error(exc: BaseException) -> bool:
    """Whether ``exc`` is SQL Server error 313, what a change function raises for a range
    outside its capture instance's validity interval."""
    number = getattr(exc, "number", None)
    if number is None and exc.args and isinstance(exc.args[0], int):
        number = exc.args[0]
    return number == ERROR_LSN_RANGE


def expired(instance: CaptureInstance, start: str, low: str | None) -> OffsetExpiredError:
    return OffsetExpiredError(
        f"the change data of {instance.table} (capture instance {instance.name}) before LSN "
        f"0x{low or '?'} was removed by the CDC cleanup job (retention), but the sync must read "
        f"from 0x{start}: take a new snapshot (startup mode initial), and keep changes longer "
        "with sys.sp_cdc_change_job @job_type = N'cleanup', @retention = <minutes>")


@dataclass
class _Plan:
    """How to read one instance: its SQL, the LSN range and the column mapping."""

    instance: CaptureInstance
    table: TableSchema
    sql: str
    low: str
    high: str
    stop: str | None
    lob_columns: tuple[int, ...]
    convert: Callable[[tuple[Any, ...]], tuple[Any, ...]]


def _plan(table: TableSchema, instance: CaptureInstance, low: str, high: str,
          stop: str | None) -> _Plan:
    captured = set(instance.columns)
    missing = [k for k in table.key if k not in captured]
    if missing:
        raise FatalSyncError(
            f"capture instance {instance.name} of {table.table} does not capture the key "
            f"column(s) {missing}: enable it with every key column in @captured_column_list")
    exprs, lobs = [], []
    for i, column in enumerate(table.columns):
        if column.name not in captured:
            exprs.append(f"NULL AS {q(column.name)}")
            continue
        exprs.append(f"{select_expression(column)} AS {q(column.name)}")
        if column.source_type.endswith("(max)") or column.source_type.startswith(_LOB_TYPES):
            lobs.append(i)
    # A NULL large value in a before image only means "unchanged" (Microsoft: (max) columns
    # are NULL when __$operation = 3 unless they changed); the update mask tells which.
    changed = [f"sys.fn_cdc_is_bit_set(sys.fn_cdc_get_column_ordinal(N'{_lit(instance.name)}',"
               f" N'{_lit(table.columns[i].name)}'), [__$update_mask]) AS [__sdk_changed_{i}]"
               for i in lobs]
    after = ("([__$start_lsn] > %s OR ([__$start_lsn] = %s AND ([__$seqval] > %s OR "
             "([__$seqval] = %s AND [__$operation] > %s))))")
    sql = (f"SELECT TOP ({PAGE_ROWS}) [__$start_lsn], [__$seqval], [__$operation], "
           "CONVERT(varchar(23), sys.fn_cdc_map_lsn_to_time([__$start_lsn]), 121) "
           "AS [__sdk_commit_time], " + ", ".join([*exprs, *changed]) +
           f" FROM cdc.{q('fn_cdc_get_all_changes_' + instance.name)}(%s, %s, "
           f"N'all update old') WHERE {after}"
           + (" AND [__$start_lsn] < %s" if stop else "") +
           " ORDER BY [__$start_lsn], [__$seqval], [__$operation]")
    return _Plan(instance, table, sql, low, high, stop, tuple(lobs),
                 row_converter(table.columns))


def _lit(text: str) -> str:
    return text.replace("'", "''")


Row = tuple[Position, int, str | None, tuple[Any, ...], tuple[bool, ...], _Plan]
"""A change row: position, operation, commit time text, values, LOB changed flags, its plan."""


def _pages(query: Query, plan: _Plan, start: Position) -> Iterator[Row]:
    """Every row of one instance from ``start`` on, in order, a page at a time."""
    last = (start[0], start[1], start[2] - 1)
    n = len(plan.table.columns)
    while True:
        args: list[Any] = [lsn_bytes(max(plan.low, last[0])), lsn_bytes(plan.high),
                           lsn_bytes(last[0]), lsn_bytes(last[0]), lsn_bytes(last[1]),
                           lsn_bytes(last[1]), last[2]]
        if plan.stop:
            args.append(lsn_bytes(plan.stop))
        try:
            _, rows = query(plan.sql, args)
        except Exception as exc:
            if is_lsn_range_error(exc):
                raise expired(plan.instance, start[0], None) from None
            raise
        for row in rows:
            position = (lsn_hex(row[0]), lsn_hex(row[1]), int(row[2]))
            values = plan.convert(tuple(row[4:4 + n]))
            yield position, int(row[2]), row[3], values, tuple(
                bool(v) for v in row[4 + n:]), plan
            last = position
        if len(rows) < PAGE_ROWS:
            return


def read_changes(query: Query, tables: Sequence[TableSchema],
                 instances: dict[TableId, list[CaptureInstance]], start: Position,
                 end: Position | None, to_lsn: str, utc_offset_minutes: int = 0
                 ) -> Iterator[ChangeEvent]:
    """The change events of ``tables`` with ``start <= position < end`` (None: no end) whose
    commit LSN is at most ``to_lsn`` (the capture job's maximum), in log order."""
    plans: list[_Plan] = []
    for table in tables:
        chain = instances.get(table.table)
        if not chain:
            raise FatalSyncError(
                f"{table.table} has no capture instance (or this login may not read it): "
                f"run sys.sp_cdc_enable_table for it (sdk check prints the statement)")
        for i, instance in enumerate(chain):
            if instance.start_lsn is None:
                continue  # the capture job has not started this instance yet: nothing in it
            stop = chain[i + 1].start_lsn if i + 1 < len(chain) else None
            if stop is not None and stop <= start[0]:
                continue  # superseded before the range starts
            low = instance.start_lsn if i > 0 else start[0]
            if low > to_lsn:
                continue
            plans.append(_plan(table, instance, low, to_lsn, stop))
    check_retention(query, plans, start[0])
    merged = heapq.merge(*(_pages(query, p, start) for p in plans), key=lambda r: r[0])
    yield from pair_rows(merged, end, utc_offset_minutes)


def check_retention(query: Query, plans: Sequence[_Plan], start: str) -> None:
    """Raise :class:`OffsetExpiredError` when an instance no longer holds its part of the
    range (``sys.fn_cdc_get_min_lsn`` above where the read must begin)."""
    for plan in plans:
        _, rows = query("SELECT sys.fn_cdc_get_min_lsn(%s)", [plan.instance.name])
        raw = rows[0][0] if rows else None
        low = lsn_hex(raw) if raw is not None and any(bytes(raw)) else None
        begin = max(start, plan.low)
        if low is not None and begin < low:
            raise expired(plan.instance, begin, low)


def commit_micros(text: str | None, utc_offset_minutes: int) -> int | None:
    """``fn_cdc_map_lsn_to_time`` (server local time, style 121) as UTC microseconds."""
    if not text:
        return None
    from ._types import parse_timestamp

    local = parse_timestamp(text).replace(tzinfo=dt.UTC)
    utc = local - dt.timedelta(minutes=utc_offset_minutes)
    return (utc - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)


def pair_rows(rows: Iterator[Row], end: Position | None, utc_offset_minutes: int = 0
              ) -> Iterator[ChangeEvent]:
    """Change rows (in log order) as events: deletes, inserts, and each update's before (3)
    and after (4) image as one event. Stops at the first row at or past ``end``."""
    before: Row | None = None
    for row in rows:
        position, op, when, values, _, plan = row
        table = plan.table
        if before is not None:
            if op != AFTER or position[:2] != before[0][:2] or plan is not before[5]:
                raise FatalSyncError(
                    f"the update before image of {table.table} at LSN 0x{before[0][0]} seq "
                    f"0x{before[0][1]} has no after image next to it (got operation {op})")
            old = list(before[3])
            for flag, i in zip(before[4], plan.lob_columns, strict=True):
                if old[i] is None and not flag:
                    old[i] = values[i]  # unchanged large value: the log left it out
            old_row = tuple(old)
            key, old_key = table.key_of(values), table.key_of(old_row)
            yield ChangeEvent(table.table, "u", key, values, make_offset(*before[0]), old_row,
                              old_key if old_key != key else None,
                              commit_micros(before[2], utc_offset_minutes))
            before = None
            continue
        if end is not None and position >= end:
            return
        if op == BEFORE:
            before = row
        elif op == INSERT:
            yield ChangeEvent(table.table, "c", table.key_of(values), values,
                              make_offset(*position), commit_ts=commit_micros(
                                  when, utc_offset_minutes))
        elif op == DELETE:
            yield ChangeEvent(table.table, "d", table.key_of(values), None,
                              make_offset(*position), values,
                              commit_ts=commit_micros(when, utc_offset_minutes))
        else:
            raise FatalSyncError(f"unexpected __$operation {op} in {table.table} at LSN "
                                 f"0x{position[0]}")
    if before is not None:
        raise FatalSyncError(f"the update of {before[5].table.table} at LSN 0x{before[0][0]} "
                             "ends without its after image")


__all__ = ["ZERO", "CaptureInstance", "load_instances", "pair_rows", "read_changes"]
