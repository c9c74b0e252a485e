"""The PostgreSQL dialect following schema changes in the WAL (capability ``schema_changes``):
each bounded window holds writes before and after a DDL, and the stream is given the schema
the table had before it. pgoutput's Relation messages carry the new shape; the stream yields a
SchemaChange (the schema as ``describe_table`` gives it) before the first change in that shape,
at that change's offset, and shapes the later rows as ``read_range`` with the new schema
reads them."""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest
from helpers.servers import with_query

from sdk import (
    Capability,
    ChangeEvent,
    Column,
    ConnectionConfig,
    Dialect,
    Heartbeat,
    LogicalType,
    Offset,
    SchemaChange,
    SnapshotSplit,
    TableId,
    TableSchema,
    get_dialect,
)
from sdk.algorithm import PhaseHooks, SyncOptions, read_split
from sdk_postgres import _pgoutput as pgo

pytestmark = pytest.mark.postgres

Item = ChangeEvent | SchemaChange


@pytest.fixture
def pg() -> Dialect:
    return get_dialect("postgres")


@pytest.fixture
def capture(pg: Dialect, postgres_url: str, postgres_admin: Any) -> Iterator[Any]:
    """``make(ddl, rows=(), publish="")`` creates a uniquely named table as its owner
    (``{name}`` in the DDL, statements split on ``;``: partitions may be ``{name}_x``),
    publishes it (``publish``: the publication's WITH options) and prepares this test's own
    slot; yields (connection, make), make returning the table's schema. Everything is
    dropped afterwards."""
    tag = uuid.uuid4().hex[:10]
    slot, publication = f"sdk_s_{tag}", f"sdk_p_{tag}"
    conn = pg.connect(ConnectionConfig.from_url(
        with_query(postgres_url, slot=slot, publication=publication)))
    made: list[str] = []

    def make(ddl: str, rows: list[tuple[Any, ...]] | tuple[()] = (), publish: str = ""
             ) -> TableSchema:
        name = f"t_{uuid.uuid4().hex[:10]}"
        made.append(name)
        for statement in ddl.split(";"):
            if statement.strip():
                postgres_admin.execute(statement.replace("{name}", name))  # a plain name
        if rows:
            marks = ", ".join(["%s"] * len(rows[0]))
            with postgres_admin.cursor() as cur:
                cur.executemany(f'INSERT INTO "{name}" VALUES ({marks})', rows)
        postgres_admin.execute(f"DROP PUBLICATION IF EXISTS {publication}")
        postgres_admin.execute(f'CREATE PUBLICATION {publication} FOR TABLE "{name}"'
                               + (f" WITH ({publish})" if publish else ""))
        schema = pg.describe_table(conn, TableId("public", name))
        pg.prepare_capture(conn, [schema])
        return schema

    yield conn, make
    postgres_admin.execute("SELECT pg_drop_replication_slot(slot_name) FROM "
                           "pg_replication_slots WHERE slot_name = %s", (slot,))
    postgres_admin.execute(f"DROP PUBLICATION IF EXISTS {publication}")
    for name in made:
        postgres_admin.execute(f'DROP TABLE IF EXISTS "{name}" CASCADE')
    conn.close()


def read(pg: Dialect, conn: Any, tables: list[TableSchema], start: Offset, end: Offset
         ) -> list[Item]:
    items = list(pg.stream_log(conn, tables, start, end))
    assert all(isinstance(i, ChangeEvent | SchemaChange) for i in items)
    return items  # type: ignore[return-value]


def snapshot(pg: Dialect, conn: Any, schema: TableSchema) -> dict[Any, Any]:
    whole = SnapshotSplit(schema.table, 0, None, None)
    return {schema.key_of(r): r for b in pg.read_range(conn, schema, whole, 100) for r in b}


def shaped_like(pg: Dialect, conn: Any, items: list[Item], schema: TableSchema) -> None:
    """The last row image of each key after the schema change equals what ``read_range``
    with the new schema reads (nothing writes after the window)."""
    after = items[[isinstance(i, SchemaChange) for i in items].index(True) + 1:]
    last = {e.key: e.after for e in after if isinstance(e, ChangeEvent)}
    rows = snapshot(pg, conn, schema)
    assert last and all(rows.get(k) == row for k, row in last.items()), (last, rows)
    assert all(len(e.after or e.before or e.key) == len(schema.columns) or e.op == "d"
               for e in after if isinstance(e, ChangeEvent))


def test_the_dialect_declares_schema_changes(pg: Dialect) -> None:
    assert pg.has(Capability.SCHEMA_CHANGES)


def test_relation_messages_keep_the_type_modifiers() -> None:
    relation = pgo.decode(b"R" + struct.pack(">I", 5) + b"public\0t\0d" + struct.pack(">h", 3)
                          + b"\x01id\0" + struct.pack(">Ii", 23, -1)
                          + b"\x00v\0" + struct.pack(">Ii", 1043, 14)
                          + b"\x00n\0" + struct.pack(">Ii", 1700, (10 << 16 | 2) + 4))
    assert isinstance(relation, pgo.Relation)
    assert relation.columns == [("id", 23, True), ("v", 1043, False), ("n", 1700, False)]
    assert relation.modifiers == {1: 14, 2: 655366}
    assert [relation.modifier(i) for i in range(3)] == [-1, 14, 655366]


TABLE = "CREATE TABLE {name} (id int PRIMARY KEY, v varchar(10), w int, n numeric(10,2))"

CASES = {
    "add column": ("ADD COLUMN x int",
                   ["INSERT INTO {name} VALUES (2, 'b', 2, 2.5, 7)",
                    "UPDATE {name} SET v = 'a2' WHERE id = 1"]),
    "add column with a default": ("ADD COLUMN x text NOT NULL DEFAULT 'dflt'",
                                  ["UPDATE {name} SET v = 'a2' WHERE id = 1",
                                   "INSERT INTO {name} VALUES (2, 'b', 2, 2.5, 'given')"]),
    "drop column": ("DROP COLUMN w",
                    ["INSERT INTO {name} VALUES (2, 'b', 2.5)",
                     "UPDATE {name} SET v = 'a2' WHERE id = 1",
                     "DELETE FROM {name} WHERE id = 0"]),
    "rename column": ("RENAME COLUMN v TO renamed",
                      ["INSERT INTO {name} VALUES (2, 'b', 2, 2.5)",
                       "UPDATE {name} SET renamed = 'a2' WHERE id = 1"]),
    "rename the key column": ("RENAME COLUMN id TO ident",
                              ["INSERT INTO {name} VALUES (2, 'b', 2, 2.5)",
                               "UPDATE {name} SET ident = 3 WHERE ident = 1"]),
    "int to bigint": ("ALTER COLUMN w TYPE bigint",
                      ["INSERT INTO {name} VALUES (2, 'b', 1099511627776, 2.5)",
                       "UPDATE {name} SET w = -w - 4294967296 WHERE id = 1"]),
    "varchar(10) to varchar(300)": ("ALTER COLUMN v TYPE varchar(300)",
                                    ["INSERT INTO {name} VALUES (2, repeat('y', 300), 2, 2.5)",
                                     "UPDATE {name} SET v = repeat('z', 200) WHERE id = 1"]),
    "numeric(10,2) to numeric(14,2)": ("ALTER COLUMN n TYPE numeric(14,2)",
                                       ["INSERT INTO {name} VALUES (2, 'b', 2, 123456789012.34)",
                                        "UPDATE {name} SET n = -99999999999.99 WHERE id = 1"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_ddl_inside_the_window_yields_one_schema_change_before_the_new_shape(
        pg: Dialect, capture: Any, postgres_admin: Any, case: str) -> None:
    conn, make = capture
    old = make(TABLE, [(0, "zero", 0, Decimal("0.5"))])
    name = f'"{old.table.name}"'
    ddl, after = CASES[case]
    start = pg.current_offset(conn)
    postgres_admin.execute(f"INSERT INTO {name} VALUES (1, 'a', 1, 1.25)")
    postgres_admin.execute(f"UPDATE {name} SET w = 10 WHERE id = 0")
    postgres_admin.execute(f"ALTER TABLE {name} {ddl}")
    for statement in after:
        postgres_admin.execute(statement.format(name=name))
    end = pg.current_offset(conn)
    new = pg.describe_table(conn, old.table)
    assert new != old

    items = read(pg, conn, [old], start, end)
    changes = [i for i in items if isinstance(i, SchemaChange)]
    assert len(changes) == 1 and items.index(changes[0]) == 2
    change = changes[0]
    assert change.schema == new and change.table == old.table
    follower = items[3]
    assert isinstance(follower, ChangeEvent) and change.offset == follower.offset
    before = [i for i in items[:2] if isinstance(i, ChangeEvent)]
    assert [(e.op, e.key, e.after) for e in before] == [
        ("c", (1,), (1, "a", 1, Decimal("1.25"))), ("u", (0,), (0, "zero", 10, Decimal("0.50")))]
    assert len(items) == 2 + 1 + len(after)
    shaped_like(pg, conn, items, new)
    # a bounded read repeated yields the same items, even once the live table changed again
    # (the new schema's columns then come from the log's type OIDs and modifiers)
    assert read(pg, conn, [old], start, end) == items
    retype = ", ".join(f'ALTER COLUMN "{c.name}" TYPE text' for c in new.columns
                       if c.name not in new.key)
    postgres_admin.execute(f"ALTER TABLE {name} ADD COLUMN later int, {retype}")
    assert read(pg, conn, [old], start, end) == items
    # given the new schema, the log's rows in the new shape change nothing
    assert not any(isinstance(i, SchemaChange) for i in read(pg, conn, [new], follower.offset,
                                                              end))


def test_what_each_change_carries(pg: Dialect, capture: Any, postgres_admin: Any) -> None:
    """The new schema's columns in detail: a column added with NOT NULL is not nullable, a
    retyped column takes the new type, a renamed key column becomes the key."""
    conn, make = capture
    old = make("CREATE TABLE {name} (id int PRIMARY KEY, w int, v varchar(10), "
               "n numeric(10,2))")
    name = f'"{old.table.name}"'
    start = pg.current_offset(conn)
    for ddl, write in (
            ("ADD COLUMN x text NOT NULL DEFAULT 'd'", "INSERT INTO {n} VALUES (1, 1, 'a', 1)"),
            ("ALTER COLUMN w TYPE bigint", "INSERT INTO {n} VALUES (2, 2, 'b', 2)"),
            ("ALTER COLUMN v TYPE varchar(300)", "INSERT INTO {n} VALUES (3, 3, 'c', 3)"),
            ("ALTER COLUMN n TYPE numeric(14,2)", "INSERT INTO {n} VALUES (4, 4, 'd', 4)"),
            ("RENAME COLUMN id TO ident", "INSERT INTO {n} VALUES (5, 5, 'e', 5)")):
        postgres_admin.execute(f"ALTER TABLE {name} {ddl}")
        postgres_admin.execute(write.format(n=name))
    items = read(pg, conn, [old], start, pg.current_offset(conn))
    schemas = [i.schema for i in items if isinstance(i, SchemaChange)]
    assert len(schemas) == 5
    assert [type(i).__name__ for i in items] == ["SchemaChange", "ChangeEvent"] * 5
    assert schemas[0].columns[-1] == Column("x", LogicalType.STRING, "text|text", False)
    assert schemas[1].columns[1] == Column("w", LogicalType.INT64, "int8|bigint", True)
    assert schemas[2].columns[2].source_type == "varchar|character varying(300)"
    assert (schemas[3].columns[3].precision, schemas[3].columns[3].scale) == (14, 2)
    assert schemas[4].key == schemas[4].primary_key == ("ident",)
    assert schemas[4] == pg.describe_table(conn, old.table)
    assert [i.after for i in items if isinstance(i, ChangeEvent)][-1] == (
        5, 5, "e", Decimal("5.00"), "d")


def test_two_ddls_in_one_window_yield_two_schema_changes_in_order(
        pg: Dialect, capture: Any, postgres_admin: Any) -> None:
    """The first new shape is described from the log's type OID and modifier, since the live
    table already has the second: it equals what ``describe_table`` gave between the two."""
    conn, make = capture
    old = make("CREATE TABLE {name} (id int PRIMARY KEY, v text)")
    name = f'"{old.table.name}"'
    start = pg.current_offset(conn)
    postgres_admin.execute(f"INSERT INTO {name} VALUES (1, 'a')")
    postgres_admin.execute(f"ALTER TABLE {name} ADD COLUMN x int")
    middle = pg.describe_table(conn, old.table)
    postgres_admin.execute(f"INSERT INTO {name} VALUES (2, 'b', 2147483647)")
    postgres_admin.execute(f"ALTER TABLE {name} ALTER COLUMN x TYPE bigint")
    postgres_admin.execute(f"INSERT INTO {name} VALUES (3, 'c', 2147483648)")
    postgres_admin.execute(f"UPDATE {name} SET x = -1 WHERE id = 2")
    end = pg.current_offset(conn)
    last = pg.describe_table(conn, old.table)

    items = read(pg, conn, [old], start, end)
    kinds = [(type(i).__name__, getattr(i, "key", None)) for i in items]
    assert kinds == [("ChangeEvent", (1,)), ("SchemaChange", None), ("ChangeEvent", (2,)),
                     ("SchemaChange", None), ("ChangeEvent", (3,)), ("ChangeEvent", (2,))]
    first, second = (i for i in items if isinstance(i, SchemaChange))
    assert first.schema == middle and second.schema == last
    assert first.schema.columns[2] == Column("x", LogicalType.INT32, "int4|integer", True)
    assert second.schema.columns[2] == Column("x", LogicalType.INT64, "int8|bigint", True)
    assert first.offset == items[2].offset and second.offset == items[4].offset
    assert [i.after for i in items if isinstance(i, ChangeEvent)] == [
        (1, "a"), (2, "b", 2147483647), (3, "c", 2147483648), (2, "b", -1)]
    shaped_like(pg, conn, items[3:], last)
    assert read(pg, conn, [old], start, end) == items
    # given the middle schema, only the second change is yielded
    assert [i.schema for i in read(pg, conn, [middle], items[2].offset, end)
            if isinstance(i, SchemaChange)] == [last]


def test_a_stream_started_after_the_ddl_given_the_old_schema(
        pg: Dialect, capture: Any, postgres_admin: Any) -> None:
    """The window holds no DDL, but the rows in it are in the new shape: the SchemaChange
    comes at the window's first change of the table. A DDL followed by no change of the table
    in the window yields nothing."""
    conn, make = capture
    old = make("CREATE TABLE {name} (id int PRIMARY KEY, v text, w int)")
    name = f'"{old.table.name}"'
    postgres_admin.execute(f"INSERT INTO {name} VALUES (1, 'a', 1)")
    postgres_admin.execute(f"ALTER TABLE {name} DROP COLUMN w")
    postgres_admin.execute(f"ALTER TABLE {name} ADD COLUMN j jsonb")
    start = pg.current_offset(conn)
    postgres_admin.execute(f"""INSERT INTO {name} VALUES (2, 'b', '{{"k": 1}}')""")
    postgres_admin.execute(f"UPDATE {name} SET v = 'a2' WHERE id = 1")
    end = pg.current_offset(conn)
    new = pg.describe_table(conn, old.table)

    items = read(pg, conn, [old], start, end)
    assert [type(i).__name__ for i in items] == ["SchemaChange", "ChangeEvent", "ChangeEvent"]
    assert isinstance(items[0], SchemaChange) and items[0].schema == new
    assert items[0].offset == items[1].offset
    assert [i.after for i in items[1:]] == [(2, "b", '{"k": 1}'), (1, "a2", None)]  # type: ignore[union-attr]
    shaped_like(pg, conn, items, new)
    assert read(pg, conn, [old], start, end) == items
    assert [type(i) for i in read(pg, conn, [new], start, end)] == [ChangeEvent] * 2

    postgres_admin.execute(f"ALTER TABLE {name} ADD COLUMN unseen int")
    quiet = pg.current_offset(conn)
    assert read(pg, conn, [new], end, quiet) == []


def test_rows_after_the_change_equal_read_range_of_the_new_schema(
        pg: Dialect, capture: Any, postgres_admin: Any) -> None:
    """Columns of types the dialect reads as text (uuid, jsonb, arrays, enums via a domain)
    and of loaded types, added and retyped, read alike both ways."""
    conn, make = capture
    old = make("CREATE TABLE {name} (id int PRIMARY KEY, v text, t timestamp)",
               [(i, f"v{i}", None) for i in range(5)])
    name = f'"{old.table.name}"'
    start = pg.current_offset(conn)
    postgres_admin.execute(f"UPDATE {name} SET v = 'old shape' WHERE id = 0")
    postgres_admin.execute(
        f"ALTER TABLE {name} ADD COLUMN u uuid DEFAULT '00000000-0000-0000-0000-000000000007', "
        "ADD COLUMN j jsonb, ADD COLUMN arr int4[], ADD COLUMN ts timestamptz(3), "
        "ADD COLUMN b bytea, ADD COLUMN d numeric, ALTER COLUMN t TYPE timestamptz, "
        "ADD COLUMN iv interval NOT NULL DEFAULT '1 day'")
    postgres_admin.execute(
        f"""INSERT INTO {name} VALUES (10, 'new', '2024-01-02 03:04:05', DEFAULT,
        '{{"b": 1, "a": [1, 2.5]}}', '{{1,NULL,3}}', '2024-05-06 07:08:09.123+02',
        '\\x00ff', 'NaN', '-1 day 02:03:04')""")
    postgres_admin.execute(f"UPDATE {name} SET v = 'moved', j = '[]' WHERE id IN (1, 2)")
    postgres_admin.execute(f"DELETE FROM {name} WHERE id = 3")
    end = pg.current_offset(conn)
    new = pg.describe_table(conn, old.table)
    items = read(pg, conn, [old], start, end)
    assert [type(i).__name__ for i in items] == [
        "ChangeEvent", "SchemaChange", "ChangeEvent", "ChangeEvent", "ChangeEvent",
        "ChangeEvent"]
    assert items[1].schema == new  # type: ignore[union-attr]
    rows = snapshot(pg, conn, new)

    def same(a: Any, b: Any) -> bool:  # Decimal('NaN') != itself
        return [str(v) if isinstance(v, Decimal) else v for v in a] == \
            [str(v) if isinstance(v, Decimal) else v for v in b]

    for event in items[2:]:
        assert isinstance(event, ChangeEvent)
        if event.op == "d":
            assert event.key == (3,) and (3,) not in rows
        else:
            assert same(event.after, rows[event.key]), event
            assert [type(v) for v in event.after or ()] == [type(v) for v in rows[event.key]]


def test_generated_columns_are_left_out_of_the_snapshot_and_the_log(
        pg: Dialect, capture: Any, postgres_admin: Any) -> None:
    """pgoutput never sends a stored generated column: the dialect leaves it out of the
    table's columns, so the log's rows match the snapshot's and no change looks like a
    dropped column (a mirror that dropped it would lose the column silently)."""
    conn, make = capture
    schema = make("CREATE TABLE {name} (id int PRIMARY KEY, v int, "
                  "doubled int GENERATED ALWAYS AS (v * 2) STORED, w text)")
    name = f'"{schema.table.name}"'
    assert [c.name for c in schema.columns] == ["id", "v", "w"]
    start = pg.current_offset(conn)
    postgres_admin.execute(f"INSERT INTO {name} (id, v, w) VALUES (1, 10, 'a'), (2, 20, 'b')")
    postgres_admin.execute(f"UPDATE {name} SET v = 11, w = 'moved' WHERE id = 1")
    postgres_admin.execute(f"DELETE FROM {name} WHERE id = 2")
    items = read(pg, conn, [schema], start, pg.current_offset(conn))
    assert all(isinstance(i, ChangeEvent) for i in items), items
    assert [(i.op, i.after) for i in items] == [  # type: ignore[union-attr]
        ("c", (1, 10, "a")), ("c", (2, 20, "b")), ("u", (1, 11, "moved")), ("d", None)]
    assert snapshot(pg, conn, schema) == {(1,): (1, 11, "moved")}


def test_partitioned_table_changes_through_its_root(pg: Dialect, capture: Any,
                                                    postgres_admin: Any) -> None:
    """Every partition's changes come under the root's Relation (each partition sends its
    own): a column added to the root yields one SchemaChange."""
    conn, make = capture
    old = make("CREATE TABLE {name} (region text NOT NULL, id int NOT NULL, v text, "
               "PRIMARY KEY (region, id)) PARTITION BY LIST (region);"
               "CREATE TABLE {name}_eu PARTITION OF {name} FOR VALUES IN ('eu');"
               "CREATE TABLE {name}_us PARTITION OF {name} FOR VALUES IN ('us')",
               publish="publish_via_partition_root = true")
    name = f'"{old.table.name}"'
    start = pg.current_offset(conn)
    postgres_admin.execute(f"INSERT INTO {name} VALUES ('eu', 1, 'a'), ('us', 1, 'b')")
    postgres_admin.execute(f"ALTER TABLE {name} ADD COLUMN x int")
    postgres_admin.execute(f"INSERT INTO {name} VALUES ('us', 2, 'c', 2), ('eu', 2, 'd', 3)")
    postgres_admin.execute(f"UPDATE {name} SET region = 'us', id = 5, x = 4 WHERE "
                           "region = 'eu' AND id = 1")
    end = pg.current_offset(conn)
    new = pg.describe_table(conn, old.table)
    items = read(pg, conn, [old], start, end)
    assert [type(i).__name__ for i in items] == [
        "ChangeEvent", "ChangeEvent", "SchemaChange", "ChangeEvent", "ChangeEvent",
        "ChangeEvent", "ChangeEvent"]
    assert items[2].schema == new and new.key == ("region", "id")  # type: ignore[union-attr]
    assert [(i.op, i.key, i.after) for i in items if isinstance(i, ChangeEvent)] == [
        ("c", ("eu", 1), ("eu", 1, "a")), ("c", ("us", 1), ("us", 1, "b")),
        ("c", ("us", 2), ("us", 2, "c", 2)), ("c", ("eu", 2), ("eu", 2, "d", 3)),
        ("d", ("eu", 1), None), ("c", ("us", 5), ("us", 5, "a", 4))]
    assert read(pg, conn, [old], start, end) == items


def test_an_open_ended_stream_yields_each_schema_change_once(
        pg: Dialect, capture: Any, postgres_admin: Any) -> None:
    """The stream's reads, each up to a new watermark, carry the new schema on: the rows of
    later reads are in the shape already announced."""
    conn, make = capture
    old = make("CREATE TABLE {name} (id int PRIMARY KEY, v text)")
    name = f'"{old.table.name}"'
    start = pg.current_offset(conn)
    postgres_admin.execute(f"INSERT INTO {name} VALUES (1, 'a')")
    postgres_admin.execute(f"ALTER TABLE {name} ADD COLUMN x int")
    postgres_admin.execute(f"INSERT INTO {name} VALUES (2, 'b', 2)")
    stream = pg.stream_log(conn, [old], start, None)
    seen: list[Any] = []
    deadline = time.monotonic() + 30
    try:
        for item in stream:
            seen.append(item)
            keys = [i.key for i in seen if isinstance(i, ChangeEvent)]
            if isinstance(item, Heartbeat) and keys == [(1,), (2,)]:
                postgres_admin.execute(f"INSERT INTO {name} VALUES (3, 'c', 3)")
            if keys == [(1,), (2,), (3,)] or time.monotonic() > deadline:
                break
    finally:
        stream.close()  # type: ignore[attr-defined]
    items = [i for i in seen if not isinstance(i, Heartbeat)]
    assert [type(i).__name__ for i in items] == ["ChangeEvent", "SchemaChange", "ChangeEvent",
                                                 "ChangeEvent"]
    assert items[1].schema == pg.describe_table(conn, old.table)
    assert [i.after for i in items if isinstance(i, ChangeEvent)] == [
        (1, "a"), (2, "b", 2), (3, "c", 3)]


def test_a_stream_given_a_newer_schema_than_its_first_rows(
        pg: Dialect, capture: Any, postgres_admin: Any) -> None:
    """Rows logged before a DDL, read with the schema described after it: they are announced
    in their own shape (the dropped column described from the log, as it was), then the
    current one."""
    conn, make = capture
    old = make(TABLE)
    name = f'"{old.table.name}"'
    start = pg.current_offset(conn)
    postgres_admin.execute(f"INSERT INTO {name} VALUES (1, 'a', 1, 1.25)")
    postgres_admin.execute(f"ALTER TABLE {name} DROP COLUMN w")
    postgres_admin.execute(f"INSERT INTO {name} VALUES (2, 'b', 2.5)")
    end = pg.current_offset(conn)
    new = pg.describe_table(conn, old.table)
    items = read(pg, conn, [new], start, end)
    assert [type(i).__name__ for i in items] == ["SchemaChange", "ChangeEvent", "SchemaChange",
                                                 "ChangeEvent"]
    assert items[0].schema == old and items[2].schema == new  # type: ignore[union-attr]
    assert [i.after for i in items if isinstance(i, ChangeEvent)] == [
        (1, "a", 1, Decimal("1.25")), (2, "b", Decimal("2.50"))]


@pytest.mark.parametrize("atomic, again", [(False, False), (True, False), (False, True)])
def test_a_column_dropped_while_a_split_is_read(pg: Dialect, capture: Any,
                                                postgres_admin: Any, atomic: bool,
                                                again: bool) -> None:
    """A column dropped after a split's low watermark (the initial snapshot still running, or
    a table read ``again`` while its changes flow, whose columns were looked up before): the
    split reads the columns the table still has, the dropped one None."""
    conn, make = capture
    schema = make(TABLE, [(1, "a", 1, 1.5), (2, "b", 2, 2.5)])
    name = f'"{schema.table.name}"'
    dropped: list[str] = []

    def drop(split: SnapshotSplit) -> None:
        if not dropped:
            dropped.append(split.split_id)
            postgres_admin.execute(f"UPDATE {name} SET v = 'w' WHERE id = 1")
            postgres_admin.execute(f"ALTER TABLE {name} DROP COLUMN w")

    options = replace(SyncOptions(), atomic_snapshot=atomic)
    since = pg.current_offset(conn) if again else None  # a table read again as changes flow
    result = read_split(pg, conn, schema, SnapshotSplit(schema.table, 0, None, None,
                                                        since=since), options,
                        PhaseHooks(after_low_watermark=drop))
    assert dropped
    # read again: the row of a change since ``since`` is the log's image, taken before the drop
    assert sorted(result.rows) == [(1, "w", 1 if again else None, Decimal("1.50")),
                                   (2, "b", None, Decimal("2.50"))]
