"""The reference SQLite dialect keeps the four hooks' guarantees (docs/design.md, 'The dialect
contract').

Real SQLite files, real triggers, and a writer in another process where concurrency matters.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
import time
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest

from sdk import (
    ChangeEvent,
    ConnectionConfig,
    Dialect,
    Heartbeat,
    Offset,
    OffsetExpiredError,
    SnapshotSplit,
    TableSchema,
)
from sdk_sqlite import read_target

Source = tuple[sqlite3.Connection, dict[str, TableSchema]]


def changes(dialect: Dialect, conn: sqlite3.Connection, tables: list[TableSchema],
            start: Offset, end: Offset) -> list[ChangeEvent]:
    items = list(dialect.stream_log(conn, tables, start, end))
    assert all(isinstance(i, ChangeEvent) for i in items)
    return items  # type: ignore[return-value]


def cut_splits(dialect: Dialect, conn: sqlite3.Connection, table: TableSchema, size: int
               ) -> list[SnapshotSplit]:
    bounds: list[tuple[object, ...] | None] = [None]
    while (nxt := dialect.next_boundary(conn, table, bounds[-1], size)) is not None:
        assert bounds[-1] is None or nxt > bounds[-1]
        bounds.append(nxt)
    bounds.append(None)
    return [SnapshotSplit(table.table, i, lo, hi) for i, (lo, hi) in enumerate(pairwise(bounds))]


def test_describe_reports_columns_keys_and_unique_keys(sqlite_dialect: Dialect,
                                                       sqlite_source: Source) -> None:
    conn, schemas = sqlite_source
    conn.execute("CREATE TABLE nokey (code TEXT NOT NULL UNIQUE, v INTEGER)")
    items, pairs = schemas["items"], schemas["pairs"]
    assert items.column_names == ("id", "name", "price", "data") and items.key == ("id",)
    assert [c.type.value for c in items.columns] == ["int64", "string", "float64", "binary"]
    assert pairs.primary_key == ("a", "b")
    nokey = sqlite_dialect.describe_table(conn, sqlite_dialect.list_tables(conn)[1])
    assert nokey.table.name == "nokey" and nokey.key == () and nokey.unique_keys == (("code",),)
    assert [t.name for t in sqlite_dialect.list_tables(conn)] == ["items", "nokey", "pairs"]


def test_current_offset_is_monotonic_and_above_every_committed_change(
        sqlite_dialect: Dialect, sqlite_source: Source) -> None:
    conn, schemas = sqlite_source
    cmp = sqlite_dialect.compare_offset
    start = sqlite_dialect.current_offset(conn)
    seen = [start]
    for i in range(5):
        conn.execute("INSERT INTO items (id, name) VALUES (?, 'x')", (i,))
        seen.append(sqlite_dialect.current_offset(conn))
    assert all(cmp(a, b) < 0 for a, b in pairwise(seen))
    events = changes(sqlite_dialect, conn, [schemas["items"]], start, seen[-1])
    assert len(events) == 5
    assert all(cmp(e.offset, seen[-1]) < 0 for e in events)
    assert all(cmp(e.offset, after) < 0 for e, after in zip(events, seen[1:], strict=True))


def test_read_range_returns_every_row_exactly_once_over_half_open_splits(
        sqlite_dialect: Dialect, sqlite_source: Source) -> None:
    conn, schemas = sqlite_source
    pairs = schemas["pairs"]
    rows = [(a, b, f"{a}{b}") for a in ("", "a", "b", "é", "😀") for b in range(-3, 7)]
    conn.executemany("INSERT INTO pairs VALUES (?, ?, ?)", rows)
    for size in (1, 3, 7, 50, 1000):
        splits = cut_splits(sqlite_dialect, conn, pairs, size)
        assert splits[0].start is None and splits[-1].end is None
        read = [r for s in splits for batch in sqlite_dialect.read_range(conn, pairs, s, 4)
                for r in batch]
        assert sorted(read) == sorted(rows), size
        for split in splits:
            got = [r for b in sqlite_dialect.read_range(conn, pairs, split, 100) for r in b]
            assert all(split.contains(pairs.key_of(r)) for r in got)
            if split.end is not None:
                assert len(got) == size


def test_read_range_on_empty_table(sqlite_dialect: Dialect, sqlite_source: Source) -> None:
    conn, schemas = sqlite_source
    assert sqlite_dialect.next_boundary(conn, schemas["items"], None, 10) is None
    stats = sqlite_dialect.table_stats(conn, schemas["items"])
    assert (stats.min_key, stats.max_key, stats.approx_rows) == (None, None, 0)
    whole = SnapshotSplit(schemas["items"].table, 0, None, None)
    assert list(sqlite_dialect.read_range(conn, schemas["items"], whole, 10)) == []


def test_bounded_stream_is_exact_ordered_repeatable_and_skips_rollbacks(
        sqlite_dialect: Dialect, sqlite_source: Source) -> None:
    conn, schemas = sqlite_source
    items, pairs = schemas["items"], schemas["pairs"]
    conn.execute("INSERT INTO items (id, name) VALUES (1, 'before window')")
    low = sqlite_dialect.current_offset(conn)
    conn.execute("INSERT INTO items (id, name) VALUES (2, 'two')")
    conn.execute("INSERT INTO pairs VALUES ('k', 1, 'other table')")
    conn.execute("BEGIN")
    conn.execute("INSERT INTO items (id, name) VALUES (3, 'rolled back')")
    conn.execute("ROLLBACK")
    conn.execute("UPDATE items SET id = 20, name = 'moved' WHERE id = 2")
    conn.execute("DELETE FROM items WHERE id = 1")
    high = sqlite_dialect.current_offset(conn)
    conn.execute("INSERT INTO items (id, name) VALUES (4, 'after window')")

    events = changes(sqlite_dialect, conn, [items], low, high)
    assert [(e.op, e.key, e.old_key) for e in events] == \
        [("c", (2,), None), ("u", (20,), (2,)), ("d", (1,), None)]
    assert events[1].before == (2, "two", None, None)
    assert events[1].after == (20, "moved", None, None)
    assert changes(sqlite_dialect, conn, [items], low, high) == events
    both = changes(sqlite_dialect, conn, [items, pairs], low, high)
    assert [e.table.name for e in both] == ["items", "pairs", "items", "items"]
    # An end with no change at or after it still ends the read.
    tail = changes(sqlite_dialect, conn, [items], high, sqlite_dialect.current_offset(conn))
    assert [e.key for e in tail] == [(4,)]


def test_log_values_equal_snapshot_values(sqlite_dialect: Dialect,
                                          sqlite_source: Source) -> None:
    conn, schemas = sqlite_source
    items = schemas["items"]
    low = sqlite_dialect.current_offset(conn)
    rows = [(1, "😀 ünïcode 'q\"", 0.1 + 0.2, b"\x00\xff\x10"),
            (2, None, -0.0, b""), (3, "", 1e300, None),
            (9223372036854775807, "max", 5e-324, bytes(range(256)))]
    conn.executemany("INSERT INTO items VALUES (?, ?, ?, ?)", rows)
    events = changes(sqlite_dialect, conn, [items], low, sqlite_dialect.current_offset(conn))
    snapshot = [r for b in sqlite_dialect.read_range(
        conn, items, SnapshotSplit(items.table, 0, None, None), 10) for r in b]
    assert [e.after for e in events] == rows == sorted(snapshot)
    for logged, read in zip([e.after for e in events], sorted(snapshot), strict=True):
        assert logged is not None
        assert [type(v) for v in logged] == [type(v) for v in read]


def test_compare_offset_is_a_total_order(sqlite_dialect: Dialect) -> None:
    cmp = sqlite_dialect.compare_offset
    offsets = [Offset("sqlite", seq=n) for n in (1, 2, 2, 10, 11)]
    for a in offsets:
        for b in offsets:
            assert cmp(a, b) == -cmp(b, a)
            assert (cmp(a, b) == 0) == (a == b)
    assert sorted(offsets, key=lambda o: o["seq"]) == offsets


def _writer(url: str, first: int, count: int, pause: float) -> None:
    conn = sqlite3.connect(ConnectionConfig.from_url(url).database or "", timeout=60)
    for i in range(first, first + count):
        with conn:
            conn.execute("INSERT INTO items (id, name) VALUES (?, 'w')", (i,))
        time.sleep(pause)
    conn.close()


def start_writer(url: str, first: int, count: int, pause: float = 0.0
                 ) -> multiprocessing.process.BaseProcess:
    process = multiprocessing.get_context("spawn").Process(
        target=_writer, args=(url, first, count, pause))
    process.start()
    return process


def test_open_ended_stream_follows_another_process_and_heartbeats(
        sqlite_dialect: Dialect, sqlite_source: Source, sqlite_url: str) -> None:
    conn, schemas = sqlite_source
    start = sqlite_dialect.current_offset(conn)
    writer = start_writer(sqlite_url, 0, 40, 0.01)
    stream: Iterator[ChangeEvent | Heartbeat] = sqlite_dialect.stream_log(
        conn, [schemas["items"]], start, None)
    keys: list[int] = []
    heartbeats = 0
    deadline = time.monotonic() + 60
    for item in stream:
        if isinstance(item, Heartbeat):
            heartbeats += 1
            if len(keys) == 40 and heartbeats > 1:
                break
        else:
            keys.append(item.key[0])
        assert time.monotonic() < deadline, keys
    stream.close()  # type: ignore[attr-defined]
    writer.join()
    assert keys == list(range(40))
    assert heartbeats >= 2


def test_atomic_snapshot_view_is_exact_under_a_concurrent_writer(
        sqlite_dialect: Dialect, sqlite_source: Source, sqlite_url: str) -> None:
    conn, schemas = sqlite_source
    items = schemas["items"]
    writer = start_writer(sqlite_url, 0, 2000, 0.001)
    while conn.execute("SELECT count(*) FROM items").fetchone()[0] < 10:
        time.sleep(0.01)
    view = sqlite_dialect.begin_snapshot(conn)
    assert view is not None
    time.sleep(0.2)  # the writer keeps committing; the view must not see it
    seen = {r[0] for b in sqlite_dialect.read_range(
        conn, items, SnapshotSplit(items.table, 0, None, None), 50) for r in b}
    sqlite_dialect.end_snapshot(conn)
    writer.join()
    logged = changes(sqlite_dialect, conn, [items], Offset("sqlite", seq=1), view.offset)
    assert seen == {e.key[0] for e in logged}
    assert 10 <= len(seen) < 2000


def test_purged_offset_is_a_fatal_error(sqlite_dialect: Dialect, sqlite_source: Source) -> None:
    conn, schemas = sqlite_source
    start = sqlite_dialect.current_offset(conn)
    conn.execute("INSERT INTO items (id) VALUES (1)")
    conn.execute("INSERT INTO items (id) VALUES (2)")
    mid = sqlite_dialect.current_offset(conn)
    assert sqlite_dialect.earliest_offset(conn) == Offset("sqlite", seq=1)
    sqlite_dialect.acknowledge_offset(conn, mid)
    sqlite_dialect.acknowledge_offset(conn, start)  # never moves backwards
    assert sqlite_dialect.earliest_offset(conn) == mid
    with pytest.raises(OffsetExpiredError, match="take a new snapshot"):
        list(sqlite_dialect.stream_log(conn, [schemas["items"]], start, mid))
    conn.execute("INSERT INTO items (id) VALUES (3)")
    later = changes(sqlite_dialect, conn, [schemas["items"]], mid,
                    sqlite_dialect.current_offset(conn))
    assert [e.key for e in later] == [(3,)]


def test_preflight_reports_missing_triggers_with_the_fix(sqlite_dialect: Dialect,
                                                         tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}"
    conn = sqlite_dialect.connect(ConnectionConfig.from_url(url))
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    table = sqlite_dialect.list_tables(conn)
    missing = [r for r in sqlite_dialect.preflight(conn, table) if not r.ok]
    assert [r.name for r in missing] == ["capture triggers on main.t"]
    assert "prepare_capture" in missing[0].fix
    sqlite_dialect.prepare_capture(conn, [sqlite_dialect.describe_table(conn, table[0])])
    assert all(r.ok for r in sqlite_dialect.preflight(conn, table))
    conn.close()


def test_apply_changes_is_idempotent_per_batch(sqlite_dialect: Dialect,
                                               sqlite_source: Source, tmp_path: Path) -> None:
    conn, schemas = sqlite_source
    items = schemas["items"]
    low = sqlite_dialect.current_offset(conn)
    conn.execute("INSERT INTO items VALUES (1, 'a', 1.5, x'00')")
    conn.execute("INSERT INTO items VALUES (2, 'b', 2.5, NULL)")
    conn.execute("UPDATE items SET id = 3 WHERE id = 2")
    conn.execute("DELETE FROM items WHERE id = 1")
    events = changes(sqlite_dialect, conn, [items], low, sqlite_dialect.current_offset(conn))

    target = sqlite_dialect.connect(ConnectionConfig.from_url(f"sqlite:///{tmp_path}/t.db"))
    sqlite_dialect.create_table(target, items)
    sqlite_dialect.create_table(target, items)  # idempotent
    assert sqlite_dialect.apply_changes(target, items, events, "batch-1") is True
    assert sqlite_dialect.apply_changes(target, items, events[:1], "batch-1") is False
    assert read_target(target, items) == {(3,): (3, "b", 2.5, None)}
    target.close()
