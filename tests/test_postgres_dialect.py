"""The PostgreSQL dialect against the real server (scripts/services.sh sets it up): the hooks'
guarantees, pgoutput decoding, the type contract both ways, slots, and end to end."""

from __future__ import annotations

import datetime as dt
import random
import threading
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from conftest import with_query

from sdk import (
    ChangeEvent,
    ConnectionConfig,
    Dialect,
    FatalSyncError,
    OffsetExpiredError,
    SnapshotSplit,
    TableId,
    TableSchema,
    get_dialect,
)
from sdk.algorithm import Phase, PhaseHooks, SyncOptions, SyncRunner, caught_up
from sdk_sqlite import read_target

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
        tables = ", ".join(f'"{n}"' for n in made)
        postgres_admin.execute(f"DROP PUBLICATION IF EXISTS {names['publication']}")
        postgres_admin.execute(f"CREATE PUBLICATION {names['publication']} FOR TABLE {tables}")
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
    assert first[21] == dt.timedelta(days=1) - dt.timedelta(hours=2, minutes=3, seconds=4.5)
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


def test_truncate_is_a_clear_fatal_error(pg: Dialect, capture: Any,
                                         postgres_admin: Any) -> None:
    conn, make = capture
    schema = make("CREATE TABLE {name} (id int PRIMARY KEY)", [(1,), (2,)])
    low = pg.current_offset(conn)
    run(postgres_admin, f'TRUNCATE "{schema.table.name}"')
    with pytest.raises(FatalSyncError, match="TRUNCATE"):
        log(pg, conn, [schema], low, pg.current_offset(conn))


def test_preflight_refuses_a_table_without_key_or_identity(pg: Dialect, capture: Any) -> None:
    conn, make = capture
    keyless = make("CREATE TABLE {name} (v text)")
    checks = {c.name: c for c in pg.preflight(conn, [keyless.table])}
    identity = checks[f"replica identity of {keyless.table}"]
    assert not identity.ok and "REPLICA IDENTITY FULL" in identity.fix
    assert checks["wal_level=logical"].ok and checks["role may replicate"].ok


@pytest.mark.parametrize("exactly_once", [True, False])
def test_sync_end_to_end_under_a_writer(pg: Dialect, capture: Any, postgres_url: str,
                                        postgres_admin_url: str, tmp_path: Path,
                                        exactly_once: bool) -> None:
    import psycopg

    conn, make = capture
    ints = make("CREATE TABLE {name} (id int PRIMARY KEY, v text, price numeric(12,2))",
                [(i, f"row {i}", Decimal(i) / 4) for i in range(3000)])
    texts = make("CREATE TABLE {name} (code text, n int, note text, PRIMARY KEY (code, n))",
                 [(f"k{i % 37}", i, "x") for i in range(500)])
    stop = threading.Event()

    failures: list[BaseException] = []

    def write() -> None:
        try:
            writes()
        except BaseException as exc:
            failures.append(exc)

    def writes() -> None:
        rng = random.Random(3)
        with psycopg.connect(postgres_admin_url,
                             autocommit=True) as w:
            while not stop.is_set():
                k = rng.randrange(4000)
                roll = rng.random()
                if roll < 0.3:
                    w.execute(f'INSERT INTO "{ints.table.name}" VALUES (%s, %s, 1.5) ON '
                              "CONFLICT (id) DO UPDATE SET v = excluded.v", (k, "w"))
                elif roll < 0.45:
                    new = rng.randrange(4000)
                    w.execute(f'UPDATE "{ints.table.name}" SET id = %s WHERE id = %s AND NOT '
                              f'EXISTS (SELECT 1 FROM "{ints.table.name}" WHERE id = %s)',
                              (new, k, new))
                elif roll < 0.6:
                    w.execute(f'DELETE FROM "{ints.table.name}" WHERE id = %s', (k,))
                else:
                    w.execute(f'INSERT INTO "{texts.table.name}" VALUES (%s, %s, %s) ON '
                              "CONFLICT (code, n) DO UPDATE SET note = excluded.note",
                              (f"k{k % 41}", k % 600, str(rng.random())))
                time.sleep(0.001)

    config = ConnectionConfig.from_url(conn_url := _url_of(conn, postgres_url))
    runner = SyncRunner(pg, lambda: pg.connect(config),
                        SyncOptions(split_size=257, exactly_once=exactly_once),
                        PhaseHooks(after_read=lambda split: time.sleep(0.01)))
    sqlite = get_dialect("sqlite")
    target = sqlite.connect(ConnectionConfig.from_url(f"sqlite:///{tmp_path}/mirror.db"))
    thread = threading.Thread(target=write)
    thread.start()
    time.sleep(0.2)
    step = 0
    try:
        state = runner.start([ints, texts])
        for schema in state.tables.values():
            sqlite.create_table(target, schema)

        def apply(events: list[ChangeEvent]) -> None:
            nonlocal step
            step += 1
            for schema in state.tables.values():
                sqlite.apply_changes(target, schema, [e for e in events
                                                      if e.table == schema.table], str(step))

        marks = set()
        while state.phase is Phase.SNAPSHOT or step < 5:
            events, state = runner.step(state)
            marks |= {e.offset for e in events if e.op == "r"}
            apply(events)
            if state.phase is Phase.LOG:
                runner.dialect.acknowledge_offset(runner.conn, state.position)  # type: ignore[arg-type]
    finally:
        stop.set()
        thread.join()
    assert not failures, failures
    assert len(marks) > 3
    head = pg.current_offset(conn)
    while not caught_up(runner, head)(state):
        events, state = runner.step(state)
        apply(events)
    runner.close()
    for schema in state.tables.values():
        whole = SnapshotSplit(schema.table, 0, None, None)
        source = {schema.key_of(r): r for b in pg.read_range(conn, schema, whole, 1000)
                  for r in b}
        assert read_target(target, schema) == source, schema.table
    target.close()
    assert conn_url


def _url_of(conn: Any, postgres_url: str) -> str:
    return with_query(postgres_url, slot=conn.slot, publication=conn.publication)


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
