"""Deliberately broken copies of the reference SQLite dialect: each has one realistic bug, and
the conformance kit must fail the tests named for it (tests/dialects/test_conformance_kit.py).
:func:`mutant_of` makes such copies of other dialects too (tests/dialects/postgres)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Sequence
from types import ModuleType

import sdk_sqlite
from sdk import ChangeEvent, Heartbeat, Offset, Row, SnapshotSplit, SnapshotView, TableSchema
from sdk import hookimpl as impl


def mutant_of(base: ModuleType, name: str, **hooks: object) -> ModuleType:
    """A module with the hooks of dialect module ``base``, ``hooks`` replacing some of them."""
    module = ModuleType(f"{base.__name__}_{name}")
    for attr in dir(base):
        if not attr.startswith("__"):
            setattr(module, attr, getattr(base, attr))
    for hook, fn in hooks.items():
        setattr(module, hook, impl(fn))
    return module


def _mutant(name: str, **hooks: object) -> ModuleType:
    """A module with the reference dialect's hooks, ``hooks`` replacing some of them."""
    return mutant_of(sdk_sqlite, name, **hooks)


def _read_range_including_end(conn: sqlite3.Connection, table: TableSchema,
                              split: SnapshotSplit, fetch_size: int) -> Iterator[Sequence[Row]]:
    """Off by one: the split's end key is read too (``<=`` for ``<``)."""
    opened = SnapshotSplit(split.table, split.index, split.start, None)
    for batch in sdk_sqlite.read_range(conn, table, opened, fetch_size):
        kept = [r for r in batch if split.end is None or table.key_of(r) <= split.end]
        if kept:
            yield kept


def _begin_snapshot_offset_after_read(conn: sqlite3.Connection) -> SnapshotView:
    """The view's offset is taken after its read view was fixed, on another connection: the
    changes committed in between are neither in the view nor after its offset. The pause stands
    for the round trip a server dialect would make there; it hands the writer thread the GIL, so
    the kit sees the bug on every run rather than when the scheduler happens to switch."""
    conn.execute("BEGIN")
    (path,) = [r[2] for r in conn.execute("PRAGMA database_list") if r[1] == "main"]
    conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # fixes the read view
    time.sleep(0.005)
    other = sqlite3.connect(path)
    try:
        return SnapshotView(sdk_sqlite.current_offset(other))
    finally:
        other.close()


def _stream_log_including_end(conn: sqlite3.Connection, tables: Sequence[TableSchema],
                              start: Offset, end: Offset | None
                              ) -> Iterator[ChangeEvent | Heartbeat]:
    """A bounded read that also yields the change at ``end``."""
    inclusive = None if end is None else Offset("sqlite", seq=int(end["seq"] or 0) + 1)
    return sdk_sqlite.stream_log(conn, tables, start, inclusive)


def _current_offset_at_last_change(conn: sqlite3.Connection) -> Offset:
    """The last change's own sequence number: not strictly above it."""
    return Offset("sqlite", seq=int(sdk_sqlite.current_offset(conn)["seq"] or 1) - 1)


MUTANTS = {
    "range_end_included": _mutant("range_end_included", read_range=_read_range_including_end),
    "watermark_after_read": _mutant("watermark_after_read",
                                    begin_snapshot=_begin_snapshot_offset_after_read),
    "bounded_read_includes_end": _mutant("bounded_read_includes_end",
                                         stream_log=_stream_log_including_end),
    "offset_not_above_last_change": _mutant("offset_not_above_last_change",
                                            current_offset=_current_offset_at_last_change),
}
