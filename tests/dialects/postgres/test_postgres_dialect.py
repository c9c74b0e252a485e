"""The PostgreSQL dialect against the real server (scripts/services.sh sets it up): the hooks'
guarantees, pgoutput decoding, the type contract both ways, slots, and end to end."""

from __future__ import annotations

import datetime as dt
import os
import random
import threading
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from itertools import pairwise
from typing import Any

import pytest
from helpers.servers import with_query

from sdk import (
    ChangeEvent,
    ConnectionConfig,
    Dialect,
    FatalSyncError,
    OffsetExpiredError,
    SchemaChange,
    SnapshotSplit,
    TableId,
    TableSchema,
    TableTruncated,
    get_dialect,
)
from sdk.algorithm import Phase, SyncOptions, SyncRunner
from sdk.dialect.temporal import Interval

pytestmark = pytest.mark.postgres


@pytest.fixture
def pg() -> Dialect:
    return get_dialect("postgres")


@pytest.fixture
def names() -> dict[str, str]:
    tag = uuid.uuid4().hex[:10]
    return {"slot": f"sdk_s_{tag}", "publication": f"sdk_p_{tag}"}


@pytest.fixture
def url(postgres_url: str, names: dict[str, str]) -> str:
    return with_query(postgres_url, slot=names["slot"], publication=names["publication"])


@pytest.fixture
def capture(pg: Dialect, url: str, postgres_admin: Any, names: dict[str, str]
            ) -> Iterator[Any]:
    """``capture(ddl, rows)`` creates a table as its owner, publishes it and prepares the slot;
    yields (connection, schema). Everything is dropped afterwards."""
    conn = pg.connect(ConnectionConfig.from_url(url))
    made: list[str] = []

    def make(ddl: str, rows: list[tuple[Any, ...]] = ()) -> TableSchema:  # type: ignore[assignment]
        name = f"t_{uuid.uuid4().hex[:10]}"
        postgres_admin.execute(ddl.format(name=f'"{name}"'))
        if rows:
            marks = ", ".join(["%s"] * len(rows[0]))
            with postgres_admin.cursor() as cur:
                cur.executemany(f'INSERT INTO "{name}" VALUES ({marks})', rows)
        made.append(name)
        # added to, never dropped and made again: a slot decoding a change (any session's)
        # made while the publication did not exist fails with "publication does not exist"
        publish = "CREATE PUBLICATION {} FOR" if len(made) == 1 else "ALTER PUBLICATION {} ADD"
        postgres_admin.execute(f'{publish.format(names["publication"])} TABLE "{name}"')
        schema = pg.describe_table(conn, TableId("public", name))
        pg.prepare_capture(conn, [schema])
        return schema

    yield conn, make
    postgres_admin.execute("SELECT pg_drop_replication_slot(slot_name) FROM "
                           "pg_replication_slots WHERE slot_name = %s", (names["slot"],))
    postgres_admin.execute(f"DROP PUBLICATION IF EXISTS {names['publication']}")
    for name in made:
        postgres_admin.execute(f'DROP TABLE IF EXISTS "{name}"')
    conn.close()


def log(pg: Dialect, conn: Any, tables: list[TableSchema], start: Any, end: Any
        ) -> list[ChangeEvent]:
    return [e for e in pg.stream_log(conn, tables, start, end) if isinstance(e, ChangeEvent)]


def run(admin: Any, sql: str, args: Any = None) -> None:
    admin.execute(sql, args)


GOLDEN = """CREATE TABLE {name} (
  id int8 PRIMARY KEY, b bool, i2 int2, i4 int4, f4 float4, f8 float8,
  n numeric(12,3), nw numeric, tx text, vc varchar(10), ch char(3), by bytea, u uuid,
  j json, jb jsonb, arr int4[], d date, t time(6), tz timetz, ts timestamp(6),
  tstz timestamptz(6), iv interval)"""


def test_golden_types_read_the_same_both_ways(pg: Dialect, capture: Any,
                                              postgres_admin: Any) -> None:
    conn, make = capture
    schema = make(GOLDEN)
    assert [c.type.value for c in schema.columns] == [
        "int64", "boolean", "int16", "int32", "float32", "float64", "decimal", "decimal",
        "string", "string", "string", "binary", "string", "json", "json", "string", "date",
        "time", "string", "timestamp", "timestamp_tz", "interval"]
    assert schema.columns[6].precision == 12 and schema.columns[7].precision is None
    start = pg.current_offset(conn)
    rows = [
        (1, True, -32768, -2147483648, 1.1, 0.1 + 0.2, "-123456789.125",
         "NaN", "😀 é ' \"", "ab", "x", b"\x00\xff", str(uuid.UUID(int=7)),
         '{"k": [1, 2.5]}', '{"b": 1, "a": "é"}', [1, None, 3], "2024-02-29",
         "23:59:59.999999", "12:00:00+05:30", "2024-01-02 03:04:05.123456",
         "2024-01-02 03:04:05.654321+02", "1 day -02:03:04.5"),
        (2,) + (None,) * 21,
        (3, False, 0, 0, 0.0, -0.0, "0", "1" + "0" * 60 + ".5", "", "", "", b"", None, "null",
         "[]", [], "0001-01-01", "00:00:00", "00:00:00+00", "1970-01-01 00:00:00",
         "1970-01-01 00:00:00+00", "0"),
    ]
    with postgres_admin.cursor() as cur:
        cur.executemany(f'INSERT INTO "{schema.table.name}" VALUES '
                        f"({', '.join(['%s'] * 22)})", rows)
    end = pg.current_offset(conn)
    whole = SnapshotSplit(schema.table, 0, None, None)
    snapshot = {r[0]: r for b in pg.read_range(conn, schema, whole, 10) for r in b}
    logged = {e.key[0]: e.after for e in log(pg, conn, [schema], start, end)}
    assert set(snapshot) == set(logged) == {1, 2, 3}
    def comparable(row: Any) -> list[Any]:  # Decimal('NaN') != itself
        return [str(v) if isinstance(v, Decimal) else v for v in row]

    for key, row in snapshot.items():
        assert comparable(logged[key]) == comparable(row), key
        assert [type(v) for v in logged[key]] == [type(v) for v in row]  # type: ignore[union-attr]
    first = snapshot[1]
    assert first[6] == Decimal("-123456789.125") and first[7].is_nan()
    assert first[12] == "00000000-0000-0000-0000-000000000007"
    assert first[14] == '{"a": "é", "b": 1}' and first[15] == "{1,NULL,3}"
    assert first[20] == dt.datetime(2024, 1, 2, 1, 4, 5, 654321, tzinfo=dt.UTC)
    assert first[21] == Interval(0, 1, -7_384_500_000)  # 1 day -02:03:04.5, not 21:56:55.5
    assert snapshot[3][7] == Decimal("1" + "0" * 60 + ".5")


def test_offsets_are_monotonic_and_above_committed_changes(pg: Dialect, capture: Any,
                                                           postgres_admin: Any) -> None:
    conn, make = capture
    schema = make("CREATE TABLE {name} (id int PRIMARY KEY, v text)")
    marks = [pg.current_offset(conn)]
    for i in range(4):
        run(postgres_admin, f'INSERT INTO "{schema.table.name}" VALUES (%s, %s)', (i, "x"))
        marks.append(pg.current_offset(conn))
    assert all(pg.compare_offset(a, b) < 0 for a, b in pairwise(marks))
    events = log(pg, conn, [schema], marks[0], marks[-1])
    assert [e.key for e in events] == [(0,), (1,), (2,), (3,)]
    assert all(pg.compare_offset(e.offset, m) < 0 for e, m in zip(events, marks[1:],
                                                                    strict=True))


def test_read_range_compound_text_keys_exactly_once(pg: Dialect, capture: Any) -> None:
    conn, make = capture
    rows = [(a, b, "v") for a in ("", "A", "a", "B", "b", "é", "😀") for b in (-1, 0, 7)]
    schema = make("CREATE TABLE {name} (a text, b int, v text, PRIMARY KEY (a, b))", rows)
    for size in (1, 4, 100):
        bounds: list[Any] = [None]
        while (nxt := pg.next_boundary(conn, schema, bounds[-1], size)) is not None:
            assert bounds[-1] is None or nxt > bounds[-1]
            bounds.append(nxt)
        bounds.append(None)
        got = []
        for i, (lo, hi) in enumerate(pairwise(bounds)):
            split = SnapshotSplit(schema.table, i, lo, hi)
            part = [r for b in pg.read_range(conn, schema, split, 3) for r in b]
            assert all(split.contains(schema.key_of(r)) for r in part)
            got += part
        assert sorted(got) == sorted(rows)


def test_bounded_stream_is_exact_ordered_repeatable(pg: Dialect, capture: Any,
                                                    postgres_admin: Any) -> None:
    conn, make = capture
    schema = make("CREATE TABLE {name} (id int PRIMARY KEY, v text)")
    name = schema.table.name
    run(postgres_admin, f'INSERT INTO "{name}" VALUES (1, %s)', ("before",))
    low = pg.current_offset(conn)
    run(postgres_admin, f'INSERT INTO "{name}" VALUES (2, %s), (3, %s)', ("two", "three"))
    with postgres_admin.transaction():
        postgres_admin.execute(f'INSERT INTO "{name}" VALUES (4, %s)', ("kept",))
    try:
        with postgres_admin.transaction():
            postgres_admin.execute(f'INSERT INTO "{name}" VALUES (5, %s)', ("rolled back",))
            raise RuntimeError
    except RuntimeError:
        pass
    run(postgres_admin, f'UPDATE "{name}" SET id = 20 WHERE id = 2')
    run(postgres_admin, f'DELETE FROM "{name}" WHERE id = 1')
    high = pg.current_offset(conn)
    run(postgres_admin, f'INSERT INTO "{name}" VALUES (6, %s)', ("after",))
    events = log(pg, conn, [schema], low, high)
    assert [(e.op, e.key, e.old_key) for e in events] == [
        ("c", (2,), None), ("c", (3,), None), ("c", (4,), None), ("u", (20,), (2,)),
        ("d", (1,), None)]
    assert log(pg, conn, [schema], low, high) == events
    assert [e.key for e in log(pg, conn, [schema], high, pg.current_offset(conn))] == [(6,)]
    third = events[1].offset
    assert [e.key for e in log(pg, conn, [schema], third, high)] == [(3,), (4,), (20,), (1,)]


def test_a_bounded_read_is_repeatable_under_asynchronous_commits(
        pg: Dialect, capture: Any, postgres_admin_url: str) -> None:
    """A writer with ``synchronous_commit = off`` commits before its WAL is flushed, and
    logical decoding reads only flushed WAL: a head past the flushed WAL gave a bounded read
    that missed those changes, the next batch started after them, and they were lost (seen as
    462 of 40,000 updates missing in benchmarks/log_steady.py). The head is the flushed WAL."""
    import psycopg

    conn, make = capture
    schema = make("CREATE TABLE {name} (id int PRIMARY KEY, v int)")
    writer = psycopg.connect(postgres_admin_url, autocommit=True)
    writer.execute("SET synchronous_commit = off")
    start = pg.current_offset(conn)
    heads = []
    for i in range(40):
        writer.execute(f'INSERT INTO "{schema.table.name}" VALUES (%s, 0)', (i,))
        heads.append(pg.current_offset(conn))
    first = [[e.key for e in log(pg, conn, [schema], start, head)] for head in heads]
    writer.execute("SET synchronous_commit = on")
    writer.execute(f'INSERT INTO "{schema.table.name}" VALUES (-1, 0)')  # flushes all before
    writer.close()
    again = [[e.key for e in log(pg, conn, [schema], start, head)] for head in heads]
    assert first == again
    assert again[-1] == [(i,) for i in range(len(again[-1]))]


def test_transaction_open_at_the_watermark_is_waited_for(pg: Dialect, capture: Any,
                                                         postgres_admin_url: str,
                                                         postgres_admin: Any) -> None:
    import psycopg

    conn, make = capture
    schema = make("CREATE TABLE {name} (id int PRIMARY KEY)")
    writer = psycopg.connect(postgres_admin_url)
    writer.execute(f'INSERT INTO "{schema.table.name}" VALUES (1)')  # opens a transaction
    timer = threading.Timer(0.5, writer.commit)
    timer.start()
    t0 = time.monotonic()
    low = pg.current_offset(conn)  # waits for the open transaction to end
    waited = time.monotonic() - t0
    timer.join()
    writer.close()
    whole = SnapshotSplit(schema.table, 0, None, None)
    assert [r for b in pg.read_range(conn, schema, whole, 10) for r in b] == [(1,)]
    assert waited >= 0.4
    # it committed after the WAL position was read: at or above the mark, and already visible
    assert [e.key for e in log(pg, conn, [schema], low, pg.current_offset(conn))] == [(1,)]


@pytest.mark.exclusive  # every commit on the server waits for the missing standby meanwhile
def test_a_commit_in_the_log_but_not_yet_visible_is_waited_for(
        pg: Dialect, capture: Any, postgres_admin_url: str, postgres_admin: Any) -> None:
    """A commit's WAL record is flushed before the transaction leaves the proc array (a
    synchronous standby's answer is awaited between the two: here one that never comes, so
    the writer stays there until cancelled). An offset above that record may only be given
    once the row is visible: a read taken right after it sees the row."""
    import psycopg

    conn, make = capture
    schema = make("CREATE TABLE {name} (id int PRIMARY KEY)")
    start = pg.current_offset(conn)
    conn.raw.execute("SET synchronous_commit = local")  # its own fence must not wait too
    writer = psycopg.connect(postgres_admin_url)
    writer.execute(f'INSERT INTO "{schema.table.name}" VALUES (1)')
    pid = writer.info.backend_pid
    whole = SnapshotSplit(schema.table, 0, None, None)
    seen: list[Any] = []
    postgres_admin.execute("ALTER SYSTEM SET synchronous_standby_names = 'sdk_nobody'")
    try:
        postgres_admin.execute("SELECT pg_reload_conf()")
        time.sleep(0.3)  # the server's processes read the file again
        committing = threading.Thread(target=writer.commit)
        committing.start()
        deadline = time.monotonic() + 10
        while not postgres_admin.execute(
                "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND wait_event = 'SyncRep'",
                (pid,)).fetchone():
            assert time.monotonic() < deadline, "the commit did not wait for the standby"
            time.sleep(0.02)
        asking = threading.Thread(target=lambda: seen.append(
            (pg.current_offset(conn), [r for b in pg.read_range(conn, schema, whole, 10)
                                       for r in b])))
        asking.start()
        asking.join(0.5)
        postgres_admin.execute("SELECT pg_cancel_backend(%s)", (pid,))  # committed locally
        committing.join(10)
        asking.join(10)
    finally:
        postgres_admin.execute("ALTER SYSTEM RESET synchronous_standby_names")
        postgres_admin.execute("SELECT pg_reload_conf()")
        writer.close()
    (low, rows), = seen
    assert rows == [(1,)]
    assert [e.key for e in log(pg, conn, [schema], start, low)] == [(1,)]


def test_a_transaction_larger_than_decoding_memory(pg: Dialect, capture: Any,
                                                   postgres_admin: Any) -> None:
    conn, make = capture
    schema = make("CREATE TABLE {name} (id int PRIMARY KEY, pad text)")
    low = pg.current_offset(conn)
    run(postgres_admin, f'INSERT INTO "{schema.table.name}" SELECT g, repeat(%s, 100) '
        "FROM generate_series(1, 20000) g", ("x",))
    events = log(pg, conn, [schema], low, pg.current_offset(conn))
    assert [e.key[0] for e in events] == list(range(1, 20001))
    assert len({e.offset for e in events}) == 20000


def test_acknowledged_and_lost_slots_are_fatal(pg: Dialect, capture: Any,
                                               postgres_admin: Any, names: dict[str, str]
                                               ) -> None:
    conn, make = capture
    schema = make("CREATE TABLE {name} (id int PRIMARY KEY)")
    start = pg.current_offset(conn)
    run(postgres_admin, f'INSERT INTO "{schema.table.name}" VALUES (1)')
    mid = pg.current_offset(conn)
    run(postgres_admin, f'INSERT INTO "{schema.table.name}" VALUES (2)')
    pg.acknowledge_offset(conn, mid)
    pg.acknowledge_offset(conn, start)  # never backwards
    assert [e.key for e in log(pg, conn, [schema], mid, pg.current_offset(conn))] == [(2,)]
    with pytest.raises(OffsetExpiredError, match="advanced"):
        log(pg, conn, [schema], start, mid)
    postgres_admin.execute("SELECT pg_drop_replication_slot(%s)", (names["slot"],))
    with pytest.raises(OffsetExpiredError, match="does not exist"):
        log(pg, conn, [schema], mid, pg.current_offset(conn))
    pg.prepare_capture(conn, [schema])


def test_preflight_refuses_a_table_without_key_or_identity(pg: Dialect, capture: Any) -> None:
    conn, make = capture
    keyless = make("CREATE TABLE {name} (v text)")
    checks = {c.name: c for c in pg.preflight(conn, [keyless.table])}
    identity = checks[f"replica identity of {keyless.table}"]
    assert not identity.ok and "REPLICA IDENTITY FULL" in identity.fix
    assert checks["wal_level=logical"].ok and checks["role may replicate"].ok


def test_identifiers_with_spaces_quotes_and_accents(pg: Dialect, capture: Any,
                                                    postgres_admin: Any) -> None:
    conn, make = capture
    schema = make('CREATE TABLE {name} ("k ey" int PRIMARY KEY, "va""l`ue é" text)')
    assert schema.column_names == ("k ey", 'va"l`ue é')
    low = pg.current_offset(conn)
    run(postgres_admin, f'INSERT INTO "{schema.table.name}" VALUES (1, %s), (2, %s)', ("x", "y"))
    events = log(pg, conn, [schema], low, pg.current_offset(conn))
    assert [e.after for e in events] == [(1, "x"), (2, "y")]
    assert pg.next_boundary(conn, schema, None, 1) == (2,)


def test_parallel_reads_of_one_slot_wait_for_each_other(pg: Dialect, capture: Any, url: str,
                                                        postgres_admin: Any) -> None:
    conn, make = capture
    schema = make("CREATE TABLE {name} (id int PRIMARY KEY, pad text)")
    low = pg.current_offset(conn)
    run(postgres_admin, f'INSERT INTO "{schema.table.name}" SELECT g, repeat(%s, 200) '
        "FROM generate_series(1, 30000) g", ("x",))
    high = pg.current_offset(conn)
    results: list[int] = []
    errors: list[BaseException] = []

    def read() -> None:
        reader = pg.connect(ConnectionConfig.from_url(url))
        try:
            results.append(len(log(pg, reader, [schema], low, high)))
        except BaseException as exc:
            errors.append(exc)
        finally:
            reader.close()

    threads = [threading.Thread(target=read) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and results == [30000] * 4


def test_drop_capture_drops_the_slot_and_names_the_publication_owner(
        pg: Dialect, capture: Any, names: dict[str, str]) -> None:
    from sdk import ConfigurationError
    from sdk_postgres import drop_capture

    conn, make = capture
    make("CREATE TABLE {name} (id int PRIMARY KEY)")
    with pytest.raises(ConfigurationError, match="its owner must run DROP PUBLICATION"):
        drop_capture(conn)  # the publication belongs to the tables' owner
    assert not conn.query("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s",
                          (names["slot"],))


# --- exported snapshots ------------------------------------------------------------------------


def _temporary_slots(admin: Any) -> list[str]:
    """The temporary export slots this test process holds (named ``sdk_snap_<pid>_...``)."""
    return [s for (s,) in admin.execute(
        "SELECT slot_name FROM pg_replication_slots WHERE slot_name LIKE %s",
        (f"sdk\\_snap\\_{os.getpid()}\\_%",)).fetchall()]  # not another pid's prefix


def _rows(pg: Dialect, conn: Any, schema: TableSchema, start: Any, end: Any) -> list[Any]:
    split = SnapshotSplit(schema.table, 0, start, end)
    return [tuple(r) for b in pg.read_range(conn, schema, split, 100) for r in b]


def test_exported_snapshot_splits_plus_stream_from_its_offset_equal_the_source(
        pg: Dialect, capture: Any, url: str, postgres_admin: Any,
        postgres_admin_url: str) -> None:
    """Two connections read two splits in one exported snapshot (one creates it, one joins it
    by token) while a writer inserts, updates (moving keys too) and deletes; the rows plus
    the log from the view's offset replay to exactly the table's final content."""
    import psycopg

    conn, make = capture
    schema = make("CREATE TABLE {name} (id int PRIMARY KEY, v text)",
                  [(i, f"initial {i}") for i in range(2000)])
    name = schema.table.name
    stop = threading.Event()
    failures: list[BaseException] = []
    writes = [0]

    def write() -> None:
        rng = random.Random(5)
        try:
            with psycopg.connect(postgres_admin_url, autocommit=True) as w:
                while not stop.is_set():
                    k = rng.randrange(4000)
                    op = rng.random()
                    with w.transaction():
                        if op < 0.4:
                            w.execute(f'INSERT INTO "{name}" VALUES (%s, %s) ON CONFLICT (id) '
                                      "DO UPDATE SET v = excluded.v", (k, f"w {k}"))
                        elif op < 0.7:
                            w.execute(f'UPDATE "{name}" SET v = v || %s WHERE id = %s',
                                      ("+", k))
                        elif op < 0.8:
                            w.execute(f'UPDATE "{name}" SET id = %s WHERE id = %s '
                                      f'AND NOT EXISTS (SELECT 1 FROM "{name}" WHERE id = %s)',
                                      (k + 4000, k, k + 4000))
                        else:
                            w.execute(f'DELETE FROM "{name}" WHERE id = %s', (k,))
                    writes[0] += 1
        except BaseException as exc:
            failures.append(exc)

    start = pg.current_offset(conn)
    thread = threading.Thread(target=write)
    thread.start()
    joiner = pg.connect(ConnectionConfig.from_url(url))
    try:
        while writes[0] < 50:
            time.sleep(0.01)
        view = pg.begin_snapshot(conn, None)
        assert view is not None and view.token
        assert len(_temporary_slots(postgres_admin)) == 1
        # a change committed after the view was taken: the view must not see it
        run(postgres_admin, f'INSERT INTO "{name}" VALUES (-1, %s)', ("after the view",))
        run(postgres_admin, f'INSERT INTO "{name}" VALUES (9999, %s)', ("after the view",))
        first = _rows(pg, conn, schema, None, (1000,))
        time.sleep(0.2)  # the writer keeps going between the two splits
        joined = pg.begin_snapshot(joiner, view.token)
        assert joined is not None and pg.compare_offset(joined.offset, view.offset) == 0
        second = _rows(pg, joiner, schema, (1000,), None)
        pg.end_snapshot(joiner)
        pg.end_snapshot(conn)
        assert _temporary_slots(postgres_admin) == []
        time.sleep(0.2)
    finally:
        stop.set()
        thread.join()
        joiner.close()
    assert not failures
    assert (-1, "after the view") not in first and (9999, "after the view") not in second
    end = pg.current_offset(conn)

    def replay(mirror: dict[Any, Any], events: list[ChangeEvent]) -> list[Any]:
        for event in events:
            if event.old_key is not None:
                mirror.pop(event.old_key, None)
            if event.op == "d":
                mirror.pop(event.key, None)
            else:
                mirror[event.key] = event.after
        return sorted(mirror.values())

    # the view holds exactly the changes below its offset...
    before = log(pg, conn, [schema], start, view.offset)
    assert len(before) >= 20
    initial = {(i,): (i, f"initial {i}") for i in range(2000)}
    assert replay(initial, before) == sorted(first + second)
    # ...and the log from its offset on brings it to the table's content
    after = log(pg, conn, [schema], view.offset, end)
    assert {(-1,), (9999,)} <= {e.key for e in after}
    mirror = {schema.key_of(r): r for r in first + second}
    assert len(mirror) == len(first) + len(second)
    source = postgres_admin.execute(f'SELECT id, v FROM "{name}"').fetchall()
    assert replay(mirror, after) == sorted(tuple(r) for r in source)


def test_a_token_is_valid_while_its_owner_holds_the_view(pg: Dialect, capture: Any, url: str,
                                                         postgres_admin: Any) -> None:
    conn, make = capture
    schema = make("CREATE TABLE {name} (id int PRIMARY KEY)", [(1,), (2,)])
    view = pg.begin_snapshot(conn, None)
    assert view is not None and view.token is not None
    other = pg.connect(ConnectionConfig.from_url(url))
    try:
        run(postgres_admin, f'INSERT INTO "{schema.table.name}" VALUES (3)')
        joined = pg.begin_snapshot(other, view.token)
        assert joined is not None and joined.offset == view.offset
        assert sorted(_rows(pg, other, schema, None, None)) == [(1,), (2,)]
        pg.end_snapshot(other)
        # a joiner ending its view leaves the owner's intact
        assert pg.begin_snapshot(other, view.token) is not None
        pg.end_snapshot(other)
        pg.end_snapshot(conn)  # the owner ends it: the exported snapshot is gone
        assert pg.begin_snapshot(other, view.token) is None
        for garbage in ("nonsense", "0/0@", "0/1@00000003-0000FFFF-1", "zz@x"):
            assert pg.begin_snapshot(other, garbage) is None
        # no transaction left open by the refused joins: the connection reads the present
        assert sorted(_rows(pg, other, schema, None, None)) == [(1,), (2,), (3,)]
    finally:
        other.close()
    assert _temporary_slots(postgres_admin) == []


def test_a_view_without_the_sync_slot_stands_alone(pg: Dialect, capture: Any,
                                                   postgres_url: str,
                                                   postgres_admin: Any) -> None:
    """With no slot of the sync's at all (a batch read makes none: it reads no log), the view
    is given, exact as ever, and ending it leaves no temporary slot behind."""
    _, make = capture
    make("CREATE TABLE {name} (id int PRIMARY KEY)")
    slot = f"sdk_none_{uuid.uuid4().hex[:8]}"
    lone = pg.connect(ConnectionConfig.from_url(with_query(postgres_url, slot=slot)))
    try:
        view = pg.begin_snapshot(lone, None)
        assert view is not None
        pg.end_snapshot(lone)
    finally:
        lone.close()
    assert _temporary_slots(postgres_admin) == []
    assert not postgres_admin.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s",
                                      (slot,)).fetchall()


# --- TOAST, TRUNCATE, heartbeats -------------------------------------------------------------


BIG = "(SELECT string_agg(md5(random()::text || g), '') FROM generate_series(1, 200) g)"
"""6400 characters of hex digests: too random for pglz to shrink below the TOAST threshold,
so the value is stored out of line and an update that leaves it alone logs it as unchanged."""


def _toasted_table(make: Any, admin: Any) -> tuple[TableSchema, str]:
    schema = make("CREATE TABLE {name} (id int PRIMARY KEY, n int, big text, raw bytea)")
    name = schema.table.name
    run(admin, f'INSERT INTO "{name}" VALUES (1, 0, {BIG}, convert_to({BIG}, \'UTF8\'))')
    (size, stored) = admin.execute(
        f"SELECT pg_column_size(big), (SELECT count(*) FROM pg_toast.pg_toast_{{}}) "
        f'FROM "{name}"'.format(admin.execute("SELECT %s::regclass::oid",
                                              (f'"{name}"',)).fetchone()[0])).fetchone()
    assert size > 2000 and stored > 0, "the value must really be TOASTed out of line"
    (big,) = admin.execute(f'SELECT big FROM "{name}"').fetchone()
    return schema, big


def test_unchanged_toast_without_before_image_stops_with_the_fix(
        pg: Dialect, capture: Any, postgres_admin: Any) -> None:
    conn, make = capture
    schema, _ = _toasted_table(make, postgres_admin)
    name = schema.table.name
    advice = {c.name: c for c in pg.preflight(conn, [schema.table])}[
        f"before images for the TOAST-able columns of {schema.table}"]
    assert not advice.ok and not advice.required and "REPLICA IDENTITY FULL" in advice.fix
    assert "big, raw" in advice.detail
    small = make("CREATE TABLE {name} (id int PRIMARY KEY, code varchar(20), n numeric(12,2))")
    assert not [c for c in pg.preflight(conn, [small.table]) if "TOAST" in c.name]
    for update in (f'UPDATE "{name}" SET n = n + 1', f'UPDATE "{name}" SET id = id + 10'):
        low = pg.current_offset(conn)
        run(postgres_admin, update)
        # a key-only old tuple (the key moved) has NULL for big: never taken as its value
        with pytest.raises(FatalSyncError, match="REPLICA IDENTITY FULL"):
            log(pg, conn, [schema], low, pg.current_offset(conn))


def test_unchanged_toast_is_taken_from_the_full_before_image(
        pg: Dialect, capture: Any, postgres_admin: Any) -> None:
    conn, make = capture
    schema, big = _toasted_table(make, postgres_admin)
    name = schema.table.name
    run(postgres_admin, f'ALTER TABLE "{name}" REPLICA IDENTITY FULL')
    assert {c.name: c for c in pg.preflight(conn, [schema.table])}[
        f"before images for the TOAST-able columns of {schema.table}"].ok
    low = pg.current_offset(conn)
    run(postgres_admin, f'UPDATE "{name}" SET n = 5')
    run(postgres_admin, f'UPDATE "{name}" SET id = 2')
    events = log(pg, conn, [schema], low, pg.current_offset(conn))
    assert [(e.op, e.key, e.old_key) for e in events] == [("u", (1,), None), ("u", (2,), (1,))]
    source = postgres_admin.execute(f'SELECT id, n, big, raw FROM "{name}"').fetchone()
    assert events[-1].after == tuple(source) and events[-1].after[2] == big
    assert events[0].after is not None and events[0].after[2] == big


@pytest.mark.parametrize("identity", ["DEFAULT", "FULL"])
def test_every_change_shape_under_each_replica_identity(pg: Dialect, capture: Any,
                                                        postgres_admin: Any,
                                                        identity: str) -> None:
    """Keys come from the new tuple, the key-only old tuple or the full before image; the
    before image only under FULL; a compound key mixing a text-carried type (uuid) and int."""
    conn, make = capture
    schema = make("CREATE TABLE {name} (u uuid, k int, v numeric(6,2), PRIMARY KEY (u, k))")
    name = schema.table.name
    run(postgres_admin, f'ALTER TABLE "{name}" REPLICA IDENTITY {identity}')
    u = str(uuid.uuid4())
    low = pg.current_offset(conn)
    run(postgres_admin, f'INSERT INTO "{name}" VALUES (%s, 1, 1.5)', (u,))
    run(postgres_admin, f'UPDATE "{name}" SET v = 2.5')
    run(postgres_admin, f'UPDATE "{name}" SET k = 2')
    run(postgres_admin, f'DELETE FROM "{name}"')
    events = log(pg, conn, [schema], low, pg.current_offset(conn))
    full = identity == "FULL"
    one, two = Decimal("1.50"), Decimal("2.50")
    assert [(e.op, e.key, e.after, e.before, e.old_key) for e in events] == [
        ("c", (u, 1), (u, 1, one), None, None),
        ("u", (u, 1), (u, 1, two), (u, 1, one) if full else None, None),
        ("u", (u, 2), (u, 2, two), (u, 1, two) if full else None, (u, 1)),
        ("d", (u, 2), None, (u, 2, two) if full else None, None)]
    assert all(e.commit_ts is not None for e in events)


def test_columns_added_or_dropped_later_change_the_schema(
        pg: Dialect, capture: Any, postgres_admin: Any) -> None:
    """A column added or dropped after the sync read the schema yields a SchemaChange before
    the first row in the new shape, whose rows then have the new columns (more in
    tests/dialects/postgres/test_postgres_schema_changes.py)."""
    from sdk import SchemaChange

    conn, make = capture
    schema = make("CREATE TABLE {name} (id int PRIMARY KEY, v text, w int)")
    name = schema.table.name
    low = pg.current_offset(conn)
    run(postgres_admin, f'INSERT INTO "{name}" VALUES (1, %s, 10)', ("a",))
    run(postgres_admin, f'ALTER TABLE "{name}" ADD COLUMN x int')
    run(postgres_admin, f'INSERT INTO "{name}" VALUES (2, %s, 20, 99)', ("b",))
    mid = pg.current_offset(conn)
    added = pg.describe_table(conn, schema.table)
    items = list(pg.stream_log(conn, [schema], low, mid))
    assert [getattr(i, "after", None) for i in items] == [(1, "a", 10), None, (2, "b", 20, 99)]
    assert isinstance(items[1], SchemaChange) and items[1].schema == added
    run(postgres_admin, f'ALTER TABLE "{name}" DROP COLUMN w')
    run(postgres_admin, f'INSERT INTO "{name}" VALUES (3, %s, 98)', ("c",))
    items = list(pg.stream_log(conn, [added], mid, pg.current_offset(conn)))
    assert isinstance(items[0], SchemaChange)
    assert items[0].schema.column_names == ("id", "v", "x")
    assert [getattr(i, "after", None) for i in items] == [None, (3, "c", 98)]


def test_truncate_is_a_table_truncated_item_in_log_order(pg: Dialect, capture: Any,
                                                          postgres_admin: Any) -> None:
    """A TRUNCATE of a captured table (alone or with others) is yielded where it lies among
    the changes, once per captured table; one of another table is not; a batch cut at it
    yields it in the batch after."""
    conn, make = capture
    schema = make("CREATE TABLE {name} (id int PRIMARY KEY)", [(1,)])
    other = make("CREATE TABLE {name} (id int PRIMARY KEY)", [(1,)])
    low = pg.current_offset(conn)
    run(postgres_admin, f'TRUNCATE "{other.table.name}"')
    run(postgres_admin, f'INSERT INTO "{schema.table.name}" VALUES (2)')
    run(postgres_admin, f'BEGIN; INSERT INTO "{schema.table.name}" VALUES (3); '
        f'TRUNCATE "{schema.table.name}", "{other.table.name}"; '
        f'INSERT INTO "{schema.table.name}" VALUES (4); COMMIT')
    high = pg.current_offset(conn)
    items = [i for i in pg.stream_log(conn, [schema], low, high)
             if isinstance(i, (ChangeEvent, TableTruncated))]
    assert [(type(i).__name__, getattr(i, "key", None)) for i in items] == [
        ("ChangeEvent", (2,)), ("ChangeEvent", (3,)), ("TableTruncated", None),
        ("ChangeEvent", (4,))]
    cut = items[2]
    assert isinstance(cut, TableTruncated) and cut.table == schema.table
    assert pg.compare_offset(items[1].offset, cut.offset) < 0
    assert pg.compare_offset(cut.offset, items[3].offset) == 0  # the next change's place
    before = [i for i in pg.stream_log(conn, [schema], low, cut.offset)
              if isinstance(i, (ChangeEvent, TableTruncated))]
    after = [i for i in pg.stream_log(conn, [schema], cut.offset, high)
             if isinstance(i, (ChangeEvent, TableTruncated))]
    assert before + after == items


def test_open_stream_heartbeats_let_an_idle_slot_advance(pg: Dialect, capture: Any,
                                                         postgres_admin: Any,
                                                         names: dict[str, str]) -> None:
    """With no change to the captured tables, the open-ended stream's heartbeats still move to
    the WAL head (other tables, other databases write WAL), and acknowledging one advances
    the slot, so an idle captured table does not pin the WAL."""
    from sdk import Heartbeat

    conn, make = capture
    schema = make("CREATE TABLE {name} (id int PRIMARY KEY)")
    unrelated = f"t_{uuid.uuid4().hex[:10]}"
    run(postgres_admin, f'CREATE TABLE "{unrelated}" (id int)')
    try:
        start = pg.current_offset(conn)
        stream = pg.stream_log(conn, [schema], start, None)
        beats: list[Any] = []
        try:
            for item in stream:
                assert isinstance(item, Heartbeat), item
                beats.append(item.offset)
                run(postgres_admin, f'INSERT INTO "{unrelated}" VALUES (1)')
                if len(beats) == 4:
                    break
        finally:
            stream.close()  # type: ignore[attr-defined]
    finally:
        run(postgres_admin, f'DROP TABLE "{unrelated}"')
    assert all(pg.compare_offset(a, b) < 0 for a, b in pairwise(beats[1:]))
    assert pg.compare_offset(beats[-1], start) > 0
    pg.acknowledge_offset(conn, beats[-1])
    (confirmed,) = postgres_admin.execute(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
        (names["slot"],)).fetchone()
    high, low = confirmed.split("/")
    assert (int(high, 16) << 32 | int(low, 16)) == beats[-1]["lsn"]


def test_tcp_keepalives_are_set_on_the_socket(pg: Dialect, url: str) -> None:
    """A server that vanishes without closing the connection is noticed in about a minute: the
    libpq keepalive settings reach the real socket, and each can be set from the URL."""
    import socket

    from sdk import ConfigurationError

    def options(conn: Any) -> tuple[int, ...]:
        sock = socket.socket(fileno=os.dup(conn.raw.pgconn.socket))
        try:
            if sock.family == socket.AF_UNIX:
                pytest.skip("a Unix socket (embedded PostgreSQL) has no TCP keepalives")
            return (sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
                    sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
                    sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
                    sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
                    sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT))
        finally:
            sock.close()

    conn = pg.connect(ConnectionConfig.from_url(url))
    try:
        assert options(conn) == (1, 30, 10, 3, 60_000)
    finally:
        conn.close()
    conn = pg.connect(ConnectionConfig.from_url(
        with_query(url, keepalives_idle="5", tcp_user_timeout="7000")))
    try:
        assert options(conn) == (1, 5, 10, 3, 7000)
    finally:
        conn.close()
    with pytest.raises(ConfigurationError, match="keepalives_count"):
        pg.connect(ConnectionConfig.from_url(with_query(url, keepalives_count="few")))


def test_a_lost_connection_mid_stream_is_retriable(pg: Dialect, capture: Any,
                                                   postgres_admin: Any) -> None:
    from sdk import Heartbeat, RetriableError

    conn, make = capture
    schema = make("CREATE TABLE {name} (id int PRIMARY KEY)")
    stream = pg.stream_log(conn, [schema], pg.current_offset(conn), None)
    assert isinstance(next(stream), Heartbeat)
    run(postgres_admin, "SELECT pg_terminate_backend(%s)", (conn.raw.info.backend_pid,))
    with pytest.raises(RetriableError, match="was lost while reading the slot"):
        for _ in stream:
            pass
    with pytest.raises(Exception) as lost:  # whatever the driver raises
        conn.raw.execute("SELECT 1")
    assert pg.is_retriable(lost.value)
    with pytest.raises(Exception) as bad:
        postgres_admin.execute("SELEC 1")
    assert not pg.is_retriable(bad.value)


def test_the_runner_shares_one_exported_view_across_splits(pg: Dialect, capture: Any,
                                                            url: str, postgres_admin: Any
                                                            ) -> None:
    """One view for the whole snapshot: every split has the view's offset as its watermark,
    a change committed mid-snapshot is not in any split, and the view is gone afterwards."""
    _, make = capture
    schema = make("CREATE TABLE {name} (id int PRIMARY KEY, v text)",
                  [(i, f"v{i}") for i in range(1000)])
    runner = SyncRunner(pg, lambda: pg.connect(ConnectionConfig.from_url(url)),
                        SyncOptions(split_size=150))
    state = runner.start([schema])
    snapshot: list[ChangeEvent] = []
    while state.phase is Phase.SNAPSHOT:
        events, state = runner.step(state)
        snapshot += events
        if len(snapshot) == 300:  # two splits in: a change the later splits must not see
            run(postgres_admin, f'UPDATE "{schema.table.name}" SET v = \'late\' WHERE id = 999')
            assert _temporary_slots(postgres_admin) != []  # the shared view is open
    assert _temporary_slots(postgres_admin) == []  # closed when the snapshot ended
    assert len(snapshot) == 1000 and {e.offset for e in snapshot} == {snapshot[0].offset}
    assert [e.after for e in snapshot if e.key == (999,)] == [(999, "v999")]
    changes, _ = runner.step(state)
    assert [(e.op, e.after) for e in changes] == [("u", (999, "late"))]
    runner.close()


ARROW = """CREATE TABLE {name} (
  id int8 PRIMARY KEY, b bool, i2 int2, i4 int4, o oid, f4 float4, f8 float8, n numeric(12,3),
  n38 numeric(38,10), tx text, vc varchar(10), ch char(3), nm name, by bytea, d date,
  ts timestamp(6), ts0 timestamp(0), tstz timestamptz(6))"""
ARROW_ROWS = [
    (1, True, -32768, -2147483648, 4294967295, 1.5, float("nan"), "-123456789.125",
     "-9" * 1 + "9" * 27 + ".9999999999", "😀 é\t'\n\\ \"", "ab", "x", "nm", b"\x00\xff",
     "0001-01-01", "0001-01-01 00:00:00", "9999-12-31 23:59:59", "2024-01-02 03:04:05.6+05:30"),
    (2,) + (None,) * 17,
    (3, False, 32767, 2147483647, 0, float("inf"), -0.0, "0", "0", "", "", "", "", b"",
     "9999-12-31", "9999-12-31 23:59:59.999999", "1970-01-01 00:00:00",
     "0001-01-01 00:00:00+00"),
    (4, None, 0, 0, 0, float("-inf"), 1e308, "0.001", "-0.0000000001", "a" * 10_000, "z", "abc",
     "", b"x" * 5000, "2024-02-29", "2024-02-29 12:00:00.000001", "2024-02-29 12:00:00",
     "2024-06-01 00:00:00-07"),
]


def test_arrow_reads_equal_the_row_path(pg: Dialect, capture: Any, postgres_admin: Any) -> None:
    """``read_range_arrow`` loads numerics, dates and timestamps as the server's text and
    casts them with Arrow: for every type it takes, at the edges (NULLs, extreme integers and
    decimals, years 1 and 9999, offsets, escapes, NaN and infinities in floats), it gives the
    Arrow table the row path's values make, split bounds included; a value Arrow refuses
    (infinity, a BC date, a NaN numeric) and a column it does not take are left to
    ``read_range``."""
    from sdk.algorithm import SyncOptions
    from sdk.algorithm.reader import read_split
    from sdk.dialect.tableformat import arrow_rows

    conn, make = capture
    schema = make(ARROW, ARROW_ROWS)

    def same(got: Any, rows: list[Any]) -> None:
        want = arrow_rows(schema, rows).sort_by("id")
        got = got.sort_by("id")
        for name in schema.column_names:
            assert got.column(name).type == want.column(name).type, name
            assert str(got.column(name).to_pylist()) == str(want.column(name).to_pylist()), name

    for split in (SnapshotSplit(schema.table, 0, None, None),
                  SnapshotSplit(schema.table, 1, (2,), (4,)),
                  SnapshotSplit(schema.table, 2, (4,), None),
                  SnapshotSplit(schema.table, 3, (9,), None)):
        rows = [r for b in pg.read_range(conn, schema, split, 2) for r in b]
        got = pg.read_range_arrow(conn, schema, split)
        assert got is not None and got.num_rows == len(rows)
        same(got, rows)
    whole = SnapshotSplit(schema.table, 0, None, None)
    for column, value in (("ts", "infinity"), ("d", "0044-03-15 BC"), ("n", "NaN"),
                          ("tstz", "-infinity")):
        run(postgres_admin, f'INSERT INTO "{schema.table.name}" (id, {column}) VALUES (9, %s)',
            (value,))
        assert pg.read_range_arrow(conn, schema, whole) is None, value
        run(postgres_admin, f'DELETE FROM "{schema.table.name}" WHERE id = 9')
    other = make("CREATE TABLE {name} (id int PRIMARY KEY, u uuid)", [(1, str(uuid.UUID(int=1)))])
    assert pg.read_range_arrow(conn, other, SnapshotSplit(other.table, 0, None, None)) is None
    # the engine's split read takes the Arrow path in a snapshot view, when asked for columns
    arrow = read_split(pg, conn, schema, whole, SyncOptions(), columnar=True)
    plain = read_split(pg, conn, schema, whole, SyncOptions())
    assert arrow.columns is not None and arrow.rows == [] and plain.columns is None
    assert arrow.count == plain.count == 4
    same(arrow.columns, plain.rows)
    assert conn.query("SELECT 1") == [(1,)]  # the connection is left ready


def _refusing_server(code: str, message: str) -> tuple[int, threading.Thread]:
    """A loopback port whose server answers a connection's startup as PostgreSQL does when it
    refuses it: no TLS, then a FATAL ErrorResponse with SQLSTATE ``code`` and ``message``."""
    import socket
    import struct

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    fields = b"".join(kind + text.encode() + b"\0" for kind, text in (
        (b"S", "FATAL"), (b"V", "FATAL"), (b"C", code), (b"M", message))) + b"\0"
    error = b"E" + struct.pack("!i", len(fields) + 4) + fields

    def serve() -> None:
        listener.settimeout(10)
        with listener:
            refused = False
            while not refused:  # libpq asks for TLS or GSS first; a "no" keeps the connection
                try:
                    client, _ = listener.accept()
                except OSError:
                    return
                with client:
                    while True:
                        size = client.recv(4)
                        if len(size) < 4:
                            break
                        body = client.recv(struct.unpack("!i", size)[0] - 4)
                        if body[:4] in (struct.pack("!i", 80877103), struct.pack("!i", 80877104)):
                            client.sendall(b"N")  # SSLRequest, GSSENCRequest: not here
                            continue
                        client.sendall(error)  # the StartupMessage, refused
                        refused = True
                        break

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener.getsockname()[1], thread


@pytest.mark.parametrize(("code", "message", "retriable"), [
    ("57P03", "the database system is not yet accepting connections", True),  # crash recovery
    ("57P03", "the database system is starting up", True),
    ("28P01", 'password authentication failed for user "sdk_cdc"', False),
])
def test_a_server_restarting_is_a_passing_fault_and_a_refused_login_is_not(
        pg: Dialect, code: str, message: str, retriable: bool) -> None:
    from sdk import ConfigurationError, RetriableError

    port, thread = _refusing_server(code, message)
    url = f"postgresql://sdk_cdc:secret@127.0.0.1:{port}/sdk_test?connect_timeout=5"
    with pytest.raises((RetriableError, ConfigurationError)) as refused:
        pg.connect(ConnectionConfig.from_url(url))
    thread.join(timeout=10)
    assert message in str(refused.value) and "secret" not in str(refused.value)
    assert isinstance(refused.value, RetriableError) == retriable


def _peek_limits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The message limits of the slot's peeks from now on, as they are made."""
    import sdk_postgres._stream as stream

    limits: list[int] = []
    peek = stream._peek

    def counted(conn: Any, end: int, limit: int, got: Any) -> Any:
        limits.append(limit)
        return peek(conn, end, limit, got)

    monkeypatch.setattr(stream, "_peek", counted)
    return limits


def test_a_read_in_many_small_peeks_yields_what_one_peek_yields(
        pg: Dialect, capture: Any, postgres_admin: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read is decoded in peeks of growing size, each read on from the last one's last
    transaction: with peeks of a few messages, every change, schema change and truncate of a
    range of single and multi-row transactions (one cut at a change inside it) comes once, in
    order, as one peek of the whole range gives them."""
    import sdk_postgres._stream as stream

    conn, make = capture
    schema = make("CREATE TABLE {name} (id int PRIMARY KEY, v text)")
    other = make("CREATE TABLE {name} (id int PRIMARY KEY)")
    name = schema.table.name
    low = pg.current_offset(conn)
    for i in range(6):
        run(postgres_admin, f'INSERT INTO "{name}" VALUES (%s, %s)', (i, f"v{i}"))
    run(postgres_admin, f'INSERT INTO "{other.table.name}" SELECT generate_series(1, 7)')
    run(postgres_admin, f'INSERT INTO "{name}" SELECT g, \'many\' FROM generate_series(10, 19) g')
    run(postgres_admin, f'ALTER TABLE "{name}" ADD COLUMN w int')
    run(postgres_admin, f'UPDATE "{name}" SET w = id WHERE id < 12')
    run(postgres_admin, f'TRUNCATE "{name}"')
    for i in range(3):
        run(postgres_admin, f'INSERT INTO "{name}" VALUES (%s, %s, %s)', (i, "after", i))
    high = pg.current_offset(conn)

    def read(start: Any, end: Any, shape: TableSchema = schema) -> list[Any]:
        return [i for i in pg.stream_log(conn, [shape], start, end)
                if isinstance(i, (ChangeEvent, SchemaChange, TableTruncated))]

    whole = read(low, high)
    assert len(whole) == 6 + 10 + 1 + 8 + 1 + 3  # the schema change before the updates
    limits = _peek_limits(monkeypatch)
    monkeypatch.setattr(stream, "FIRST_PEEK_ROWS", 2)
    monkeypatch.setattr(stream, "PEEK_GROWTH", 2)
    assert read(low, high) == whole
    assert len(limits) > 4 and limits[:3] == [2, 4, 8]
    changed = whole[16]
    assert isinstance(changed, SchemaChange)
    cut = whole[20].offset  # an update inside the multi-row transaction
    assert read(low, cut) + read(cut, high, changed.schema) == whole


def test_a_read_of_a_long_range_decodes_only_what_it_takes(
        pg: Dialect, capture: Any, postgres_admin: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch that stops early in a long range (its change budget spent) has had the server
    decode one small peek, not the whole range up to its end."""
    import sdk_postgres._stream as stream

    conn, make = capture
    schema = make("CREATE TABLE {name} (id int PRIMARY KEY)")
    low = pg.current_offset(conn)
    for start in range(0, 20_000, 100):
        run(postgres_admin, f'INSERT INTO "{schema.table.name}" '
            'SELECT generate_series(%s::int, %s::int)', (start, start + 99))
    high = pg.current_offset(conn)
    limits = _peek_limits(monkeypatch)
    items = pg.stream_log(conn, [schema], low, high)
    taken = [next(i for i in items if isinstance(i, ChangeEvent)) for _ in range(1_000)]
    items.close()  # type: ignore[attr-defined]
    assert [e.key for e in taken] == [(i,) for i in range(1_000)]
    assert limits == [stream.FIRST_PEEK_ROWS]
    assert len(log(pg, conn, [schema], low, high)) == 20_000  # all of it when read through
