"""The MySQL dialect follows schema changes in the binlog (capability ``schema_changes``).

Each test writes before and after the DDL inside one bounded window and streams it with the
schema the table had before: the stream yields a ``SchemaChange`` with the table's new columns
(as ``describe_table`` gives them right after the DDL) just before the first change in the new
shape, at that change's offset, and shapes the later rows by it, with the values ``read_range``
gives with the new schema. On the real server (MariaDB 10.11 here)."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest

from sdk import (
    Capability,
    ChangeEvent,
    Dialect,
    Offset,
    SchemaChange,
    SnapshotSplit,
    TableId,
    TableSchema,
    get_dialect,
)
from sdk.algorithm import PhaseHooks, SyncOptions, read_split

pytestmark = pytest.mark.mysql

mysql: Dialect = get_dialect("mysql")
Item = ChangeEvent | SchemaChange


@pytest.fixture
def conn(mysql_conn: Any) -> Any:
    """A connection of the dialect (conftest's), closed after the test."""
    return mysql_conn


@pytest.fixture
def make(mysql_admin: Any) -> Iterator[Callable[[str], TableId]]:
    """``make("CREATE TABLE {name} (...)")`` creates a table of a new name; every table made
    is dropped after the test."""
    made: list[str] = []

    def create(sql: str) -> TableId:
        name = f"sc_{uuid.uuid4().hex[:10]}"
        made.append(name)
        run(mysql_admin, sql.format(name=f"`{name}`"))
        return TableId("sdk_test", name)

    yield create
    for name in made:
        run(mysql_admin, f"DROP TABLE IF EXISTS `{name}`")


def run(mysql_admin: Any, *statements: str) -> None:
    with mysql_admin.cursor() as cur:
        for sql in statements:
            cur.execute(sql)


def read(conn: Any, tables: list[TableSchema], start: Offset, end: Offset) -> list[Item]:
    """A bounded read's change events and schema changes, in order (no heartbeats)."""
    return [i for i in mysql.stream_log(conn, tables, start, end)
            if isinstance(i, ChangeEvent | SchemaChange)]


def snapshot(conn: Any, schema: TableSchema) -> dict[Any, Any]:
    """The table's rows by key, as ``read_range`` reads them with ``schema``."""
    whole = SnapshotSplit(schema.table, 0, None, None)
    return {schema.key_of(r): r for b in mysql.read_range(conn, schema, whole, 100) for r in b}


def within(start: Offset, offset: Offset, end: Offset) -> bool:
    return mysql.compare_offset(start, offset) <= 0 < mysql.compare_offset(end, offset)


def check_change(items: list[Item], schemas: list[TableSchema], start: Offset,
                 end: Offset) -> None:
    """``items`` hold one SchemaChange per schema of ``schemas``, in order, each right before a
    change event carrying its offset, inside the window; and no other."""
    changes = [(n, i) for n, i in enumerate(items) if isinstance(i, SchemaChange)]
    assert [i.schema for _, i in changes] == schemas
    for n, change in changes:
        following = items[n + 1]
        assert isinstance(following, ChangeEvent)
        assert following.table == change.table and following.offset == change.offset
        assert within(start, change.offset, end)


def shaped(items: list[Item], table: TableSchema) -> list[tuple[str, Any, Any]]:
    """``(op, before, after)`` of each change event, and the schema of each SchemaChange."""
    out: list[tuple[str, Any, Any]] = []
    for item in items:
        if isinstance(item, SchemaChange):
            out.append(("schema", item.schema.column_names, None))
        elif item.table == table.table:
            out.append((item.op, item.before, item.after))
    return out


def latest(items: list[Item]) -> dict[Any, Any]:
    """Each key's row after the last change of the window (deleted keys left out)."""
    rows: dict[Any, Any] = {}
    for item in items:
        if isinstance(item, ChangeEvent):
            if item.old_key is not None:
                rows.pop(item.old_key, None)
            if item.op == "d":
                rows.pop(item.key, None)
            else:
                rows[item.key] = item.after
    return rows


def same_rows(got: dict[Any, Any], expected: dict[Any, Any]) -> None:
    """Equal values of equal types (Decimal('1.50') and 1.5 are not the same value here)."""
    assert got == expected
    for key, row in got.items():
        assert [type(v) for v in row] == [type(v) for v in expected[key]], key


BASE = "CREATE TABLE {name} (id INT PRIMARY KEY, v VARCHAR(10), n INT)"


def window(conn: Any, mysql_admin: Any, table: TableId, before: list[str], ddl: list[str],
           after: list[str]) -> tuple[TableSchema, list[TableSchema], Offset, Offset]:
    """Run ``before``, each DDL of ``ddl`` (each followed by ``after``'s statements with
    ``{i}`` its number), in one window: the schema before, the schema after each DDL, the
    window's ends."""
    old = mysql.describe_table(conn, table)
    start = mysql.current_offset(conn)
    q = f"`{table.name}`"
    run(mysql_admin, *(sql.replace("{t}", q) for sql in before))
    schemas = []
    for i, statement in enumerate(ddl):
        run(mysql_admin, statement.replace("{t}", q))
        schemas.append(mysql.describe_table(conn, table))
        run(mysql_admin, *(sql.replace("{t}", q).replace("{i}", str(i)) for sql in after))
    return old, schemas, start, mysql.current_offset(conn)


WRITES_BEFORE = ["INSERT INTO {t} (id, v, n) VALUES (1, 'a', 1), (2, 'b', 2)",
                 "UPDATE {t} SET n = 10 WHERE id = 1"]


@pytest.mark.parametrize(("ddl", "columns", "inserted"), [
    ("ALTER TABLE {t} ADD COLUMN x VARCHAR(20) DEFAULT 'dflt'", ("id", "v", "n", "x"),
     (3, "c", 3, "dflt")),
    ("ALTER TABLE {t} ADD COLUMN x DATETIME(3) FIRST", ("x", "id", "v", "n"),
     (None, 3, "c", 3)),
    ("ALTER TABLE {t} ADD COLUMN x DECIMAL(6,2) NOT NULL DEFAULT 1.5 AFTER id",
     ("id", "x", "v", "n"), (3, Decimal("1.50"), "c", 3)),
], ids=["last", "first", "after"])
def test_an_added_column(conn: Any, mysql_admin: Any, make: Any, ddl: str,
                         columns: tuple[str, ...], inserted: tuple[Any, ...]) -> None:
    table = make(BASE)
    old, (new,), start, end = window(
        conn, mysql_admin, table, WRITES_BEFORE, [ddl],
        ["INSERT INTO {t} (id, v, n) VALUES (3, 'c', 3)", "UPDATE {t} SET v = 'z'",
         "DELETE FROM {t} WHERE id = 2"])
    assert new.column_names == columns
    items = read(conn, [old], start, end)
    check_change(items, [new], start, end)
    steps = shaped(items, old)
    assert steps[:3] == [("c", None, (1, "a", 1)), ("c", None, (2, "b", 2)),
                         ("u", (1, "a", 1), (1, "a", 10))]
    assert steps[3] == ("schema", columns, None)
    assert steps[4] == ("c", None, inserted)
    assert [op for op, _, _ in steps[5:]] == ["u", "u", "u", "d"]
    same_rows(latest(items), snapshot(conn, new))


def test_a_dropped_column(conn: Any, mysql_admin: Any, make: Any) -> None:
    table = make(BASE)
    old, (new,), start, end = window(
        conn, mysql_admin, table, WRITES_BEFORE, ["ALTER TABLE {t} DROP COLUMN n"],
        ["INSERT INTO {t} (id, v) VALUES (3, 'c')", "UPDATE {t} SET v = 'z' WHERE id = 1",
         "DELETE FROM {t} WHERE id = 2"])
    assert new.column_names == ("id", "v")
    items = read(conn, [old], start, end)
    check_change(items, [new], start, end)
    assert shaped(items, old)[3:] == [
        ("schema", ("id", "v"), None), ("c", None, (3, "c")), ("u", (1, "a"), (1, "z")),
        ("d", (2, "b"), None)]
    same_rows(latest(items), snapshot(conn, new))


def test_a_renamed_column_is_a_new_shape(conn: Any, mysql_admin: Any, make: Any) -> None:
    table = make(BASE)
    old, (new,), start, end = window(
        conn, mysql_admin, table, WRITES_BEFORE, ["ALTER TABLE {t} RENAME COLUMN v TO w"],
        ["INSERT INTO {t} (id, w, n) VALUES (3, 'c', 3)", "UPDATE {t} SET w = 'z'"])
    assert new.column_names == ("id", "w", "n")
    assert new.columns[1] == replace(old.columns[1], name="w")
    items = read(conn, [old], start, end)
    check_change(items, [new], start, end)
    assert shaped(items, old)[3:5] == [("schema", ("id", "w", "n"), None),
                                       ("c", None, (3, "c", 3))]
    same_rows(latest(items), snapshot(conn, new))


@pytest.mark.parametrize(("create", "ddl", "value", "expected"), [
    (BASE, "ALTER TABLE {t} MODIFY n BIGINT", f"{2**40}", 2**40),
    ("CREATE TABLE {name} (id INT PRIMARY KEY, v VARCHAR(10), n VARCHAR(10))",
     "ALTER TABLE {t} MODIFY n VARCHAR(300)", f"'{'é' * 300}'", "é" * 300),
    ("CREATE TABLE {name} (id INT PRIMARY KEY, v VARCHAR(10), n DECIMAL(10,2))",
     "ALTER TABLE {t} MODIFY n DECIMAL(14,2)", "123456789012.34", Decimal("123456789012.34")),
], ids=["int-bigint", "varchar10-varchar300", "decimal10-decimal14"])
def test_a_retyped_column(conn: Any, mysql_admin: Any, make: Any, create: str, ddl: str,
                          value: str, expected: Any) -> None:
    table = make(create)
    old, (new,), start, end = window(
        conn, mysql_admin, table, ["INSERT INTO {t} VALUES (1, 'a', 1), (2, 'b', 2)"], [ddl],
        [f"INSERT INTO {{t}} VALUES (3, 'c', {value})", "UPDATE {t} SET v = 'z'"])
    assert new.column_names == old.column_names and new.columns[2] != old.columns[2]
    items = read(conn, [old], start, end)
    check_change(items, [new], start, end)
    steps = shaped(items, old)
    assert steps[2] == ("schema", ("id", "v", "n"), None)
    assert steps[3] == ("c", None, (3, "c", expected))
    same_rows(latest(items), snapshot(conn, new))


def test_two_ddls_in_one_window_give_two_changes_in_order(
        conn: Any, mysql_admin: Any, make: Any) -> None:
    table = make(BASE)
    old, schemas, start, end = window(
        conn, mysql_admin, table, WRITES_BEFORE,
        ["ALTER TABLE {t} ADD COLUMN x INT FIRST", "ALTER TABLE {t} MODIFY n BIGINT"],
        ["INSERT INTO {t} (id, v, n) VALUES (3{i}, 'c', 3)", "UPDATE {t} SET n = n + 1"])
    assert [s.column_names for s in schemas] == [("x", "id", "v", "n")] * 2
    assert schemas[0] != schemas[1]
    items = read(conn, [old], start, end)
    check_change(items, schemas, start, end)
    same_rows(latest(items), snapshot(conn, schemas[1]))


def test_a_stream_starting_after_the_ddl_with_the_old_schema(
        conn: Any, mysql_admin: Any, make: Any) -> None:
    """The schema given is older than the log read: the change comes at the first row event
    of the table, and a table map in the shape given changes nothing."""
    table = make(BASE)
    other = make(BASE)
    old = mysql.describe_table(conn, table)
    other_schema = mysql.describe_table(conn, other)
    run(mysql_admin, f"ALTER TABLE `{table.name}` ADD COLUMN x INT, MODIFY v VARCHAR(40)")
    new = mysql.describe_table(conn, table)
    start = mysql.current_offset(conn)
    run(mysql_admin, f"INSERT INTO `{other.name}` VALUES (1, 'o', 1)",
        f"INSERT INTO `{table.name}` VALUES (1, 'a', 1, 7), (2, 'b', 2, 8)",
        f"ALTER TABLE `{other.name}` ADD INDEX (n)",  # a new table map, the same columns
        f"INSERT INTO `{other.name}` VALUES (2, 'p', 2)",
        f"UPDATE `{table.name}` SET x = 9")
    end = mysql.current_offset(conn)
    items = read(conn, [old, other_schema], start, end)
    check_change(items, [new], start, end)
    first = next(i for i in items if isinstance(i, ChangeEvent) and i.table == table)
    change = items[items.index(first) - 1]
    assert isinstance(change, SchemaChange) and change.offset == first.offset
    assert [i.after for i in items if isinstance(i, ChangeEvent) and i.table == other] == [
        (1, "o", 1), (2, "p", 2)]
    same_rows(latest([i for i in items if not isinstance(i, ChangeEvent) or i.table == table]),
              snapshot(conn, new))


def test_a_repeated_bounded_read_gives_the_same_items(
        conn: Any, mysql_admin: Any, make: Any) -> None:
    table = make(BASE)
    old, schemas, start, end = window(
        conn, mysql_admin, table, WRITES_BEFORE,
        ["ALTER TABLE {t} ADD COLUMN x INT AFTER id", "ALTER TABLE {t} DROP COLUMN n"],
        ["INSERT INTO {t} (id, v) VALUES (3{i}, 'c')", "UPDATE {t} SET v = 'z'"])
    first = read(conn, [old], start, end)
    assert read(conn, [old], start, end) == first
    check_change(first, schemas, start, end)
    # from inside the window, given the schema of that point: the same tail
    change = next(i for i in first if isinstance(i, SchemaChange))
    tail = read(conn, [change.schema], change.offset, end)
    assert tail == first[first.index(change) + 1:]


def test_a_table_map_in_the_given_shape_yields_no_change(
        conn: Any, mysql_admin: Any, make: Any) -> None:
    """Every column type the decoder reads, unchanged: no SchemaChange (the given schema is
    recognised as the table map's shape)."""
    table = make(TYPES)
    schema = mysql.describe_table(conn, table)
    start = mysql.current_offset(conn)
    run(mysql_admin, f"INSERT INTO `{table.name}` (id) VALUES (1)",
        f"ALTER TABLE `{table.name}` COMMENT 'new table map, same columns'",
        f"UPDATE `{table.name}` SET tx = 'x'")
    items = read(conn, [schema], start, mysql.current_offset(conn))
    assert [type(i) for i in items] == [ChangeEvent, ChangeEvent]


TYPES = """CREATE TABLE {name} (
  id INT PRIMARY KEY, y YEAR, tu TINYINT UNSIGNED, su SMALLINT UNSIGNED, mu MEDIUMINT UNSIGNED,
  m MEDIUMINT, bu BIGINT UNSIGNED, b BIGINT NOT NULL DEFAULT 0, fl FLOAT, db DOUBLE, b1 BIT(1),
  b64 BIT(64), b9 BIT(9), d1 DECIMAL(1,0), d2 DECIMAL(9,9) UNSIGNED, t0 TIME, t3 TIME(3),
  dt0 DATETIME, dt6 DATETIME(6), ts0 TIMESTAMP NULL, ts2 TIMESTAMP(2) NULL, g GEOMETRY,
  p POINT, l1 VARCHAR(10) CHARSET latin1, e ENUM('', 'x', 'é', 'it''s', 'a\\\\b') CHARSET latin1,
  u2 VARCHAR(10) CHARSET ucs2, s SET('a','b','c') COLLATE utf8mb4_bin,
  a VARCHAR(300) CHARSET ascii, c255 CHAR(255) CHARSET utf8mb4, bn BINARY(3), vb VARBINARY(7),
  tt TINYTEXT, tx TEXT, mt MEDIUMTEXT, lt LONGTEXT, tb TINYBLOB, bl BLOB, mb MEDIUMBLOB,
  lb LONGBLOB, j JSON, dte DATE, u8 VARCHAR(5) CHARSET utf8mb3
) CHARSET utf8mb4"""


def test_columns_the_live_table_lost_are_described_from_the_table_map(
        conn: Any, mysql_admin: Any, make: Any) -> None:
    """The window is read after later DDLs changed the table again (here: dropped it), so
    the new schema comes from the table map's metadata alone: it is still what
    ``describe_table`` gave right after the window's DDL, for every column type."""
    table = make(TYPES)
    row = ("(1, 2024, 255, 65535, 16777215, -5, 18446744073709551615, 7, 1.5, -2.25, 1, "
           "18446744073709551615, 511, 9, 0.5, '-838:59:59', '12:34:56.789', "
           "'2024-01-02 03:04:05', '2024-01-02 03:04:05.123456', '2038-01-19 03:14:07', NULL, "
           "ST_GeomFromText('POINT(1 2)'), ST_GeomFromText('POINT(3 4)'), 'é', 'it''s', 'ŁĄ', "
           "'a,c', 'z', 'x', 'ab', 'cd', 't', 'tx', 'mt', 'lt', 'tb', 'bl', 'mb', 'lb', "
           "'{\"a\": 1}', '2024-02-29', 'u8')")
    second = row.replace("(1,", "(2,", 1).replace("'2024-02-29', 'u8'", "'2024-02-29', 6, 'u8'")
    old, (new,), start, end = window(
        conn, mysql_admin, table, [f"INSERT INTO {{t}} VALUES {row}"],
        ["ALTER TABLE {t} ADD COLUMN z INT NOT NULL DEFAULT 5 AFTER dte, "
         "MODIFY tu SMALLINT UNSIGNED, MODIFY l1 VARCHAR(20) CHARSET latin1"],
        [f"INSERT INTO {{t}} VALUES {second}", "UPDATE {t} SET tx = 'up'"])
    expected = snapshot(conn, new)
    run(mysql_admin, f"DROP TABLE `{table.name}`")
    items = read(conn, [old], start, end)
    check_change(items, [new], start, end)
    assert [c.name for c in new.columns if c not in old.columns] == ["tu", "l1", "z"]
    same_rows(latest(items), expected)


def test_a_column_retyped_again_later_is_described_from_the_table_map(
        conn: Any, mysql_admin: Any, make: Any) -> None:
    """INT -> BIGINT in the window, BIGINT -> VARCHAR after it: the stream read afterwards
    still describes the column as BIGINT (from the table map), the others as the live table
    does (a nullability changed later taken from the table map too)."""
    table = make(BASE)
    old, (new,), start, end = window(
        conn, mysql_admin, table, WRITES_BEFORE, ["ALTER TABLE {t} MODIFY n BIGINT"],
        [f"INSERT INTO {{t}} VALUES (3, 'c', {2**40})"])
    expected = snapshot(conn, new)
    run(mysql_admin, f"ALTER TABLE `{table.name}` MODIFY n VARCHAR(30), "
                     "MODIFY v VARCHAR(10) NOT NULL DEFAULT ''")
    items = read(conn, [old], start, end)
    check_change(items, [new], start, end)
    assert new.columns[2].source_type == "bigint(20)" and new.columns[1].nullable
    same_rows(latest(items), expected)


def test_the_key_follows_the_table_map(conn: Any, mysql_admin: Any, make: Any) -> None:
    """A renamed primary key column: the new schema's key is the table map's primary key."""
    table = make("CREATE TABLE {name} (id INT NOT NULL, v VARCHAR(10), PRIMARY KEY (id), "
                 "UNIQUE KEY (v))")
    old, (new,), start, end = window(
        conn, mysql_admin, table, ["INSERT INTO {t} VALUES (1, 'a')"],
        ["ALTER TABLE {t} RENAME COLUMN id TO ident"],
        ["INSERT INTO {t} VALUES (2, 'b')", "UPDATE {t} SET ident = ident + 10"])
    assert new.key == new.primary_key == ("ident",)
    items = read(conn, [old], start, end)
    check_change(items, [new], start, end)
    assert [i.key for i in items if isinstance(i, ChangeEvent)] == [(1,), (2,), (11,), (12,)]
    assert [i.old_key for i in items if isinstance(i, ChangeEvent)][2:] == [(1,), (2,)]
    same_rows(latest(items), snapshot(conn, new))


def test_the_dialect_declares_the_capability() -> None:
    assert mysql.has(Capability.SCHEMA_CHANGES)


def test_a_dropped_key_column_stops_the_read_naming_it(
        conn: Any, mysql_admin: Any, make: Any) -> None:
    """A table captured on a chosen unique column and no primary key: that column gone, no
    key is left to route its changes."""
    from sdk import OffsetExpiredError

    table = make("CREATE TABLE {name} (k INT NOT NULL, v VARCHAR(10), UNIQUE KEY (k))")
    described = mysql.describe_table(conn, table)
    old = TableSchema(described.table, described.columns, (), described.unique_keys, ("k",))
    start = mysql.current_offset(conn)
    run(mysql_admin, f"INSERT INTO `{table.name}` VALUES (1, 'a')",
        f"ALTER TABLE `{table.name}` DROP COLUMN k",
        f"INSERT INTO `{table.name}` VALUES ('b')")
    with pytest.raises(OffsetExpiredError, match=r"key column\(s\) k and"):
        read(conn, [old], start, mysql.current_offset(conn))


def test_values_after_a_change_equal_read_range_in_both_images(
        conn: Any, mysql_admin: Any, make: Any) -> None:
    """Updates after the change carry before images in the new shape too."""
    table = make(BASE)
    old, (new,), start, end = window(
        conn, mysql_admin, table, WRITES_BEFORE,
        ["ALTER TABLE {t} ADD COLUMN x TIMESTAMP(3) NULL FIRST"],
        ["UPDATE {t} SET x = '2024-05-06 07:08:09.123' WHERE id = 1"])
    middle = snapshot(conn, new)
    run(mysql_admin, f"UPDATE `{table.name}` SET v = 'q'")
    end = mysql.current_offset(conn)
    items = read(conn, [old], start, end)
    check_change(items, [new], start, end)
    updates = [i for i in items if isinstance(i, ChangeEvent) and i.op == "u"][1:]
    assert updates[0].after is not None
    assert updates[0].after[0] == dt.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=dt.UTC)
    assert {u.key: u.before for u in updates[1:]} == middle
    same_rows(latest(items), snapshot(conn, new))


def test_the_live_table_is_read_beside_a_busy_connection(
        conn: Any, mysql_admin: Any, make: Any) -> None:
    """Once the stream started, its connection is taken by an unbuffered read_range inside a
    snapshot view: the new schema is described on a connection of its own, and both reads go
    on."""
    table = make(BASE)
    old, (new,), start, end = window(
        conn, mysql_admin, table, WRITES_BEFORE, ["ALTER TABLE {t} ADD COLUMN x INT"],
        ["INSERT INTO {t} VALUES (3, 'c', 3, 4)"])
    stream = mysql.stream_log(conn, [old], start, end)
    items: list[Item] = [i for i in [next(stream)] if isinstance(i, ChangeEvent)]
    view = mysql.begin_snapshot(conn, None)
    batches = iter(mysql.read_range(conn, new, SnapshotSplit(table, 0, None, None), 1))
    try:
        first = next(batches)
        items += [i for i in stream if isinstance(i, ChangeEvent | SchemaChange)]
        assert len(first) + sum(len(b) for b in batches) == 3
        assert conn.in_view == (view is not None)
    finally:  # the view's metadata lock would hold the table's DROP
        batches.close()  # type: ignore[attr-defined]
        stream.close()  # type: ignore[attr-defined]
        mysql.end_snapshot(conn)
    check_change(items, [new], start, end)


def test_a_table_captured_on_a_unique_key_keeps_it(
        conn: Any, mysql_admin: Any, make: Any) -> None:
    """No primary key: the server writes the first NOT NULL unique key as the table map's,
    which ``describe_table`` does not call primary; the key chosen stays the key."""
    table = make("CREATE TABLE {name} (k INT NOT NULL, v VARCHAR(10), UNIQUE KEY (k))")
    described = mysql.describe_table(conn, table)
    assert described.primary_key == () and described.unique_keys == (("k",),)
    old = TableSchema(described.table, described.columns, (), described.unique_keys, ("k",))
    _, (new,), start, end = window(
        conn, mysql_admin, table, ["INSERT INTO {t} VALUES (1, 'a')"],
        ["ALTER TABLE {t} ADD COLUMN x INT FIRST"], ["INSERT INTO {t} VALUES (5, 2, 'b')"])
    items = read(conn, [old], start, end)
    keyed = TableSchema(new.table, new.columns, (), new.unique_keys, ("k",))
    check_change(items, [keyed], start, end)
    assert new.primary_key == () and new.unique_keys == (("k",),)
    assert [i.key for i in items if isinstance(i, ChangeEvent)] == [(1,), (2,)]


@pytest.mark.parametrize("atomic", [False, True])
def test_a_column_dropped_while_a_split_is_read(conn: Any, mysql_admin: Any, make: Any,
                                                atomic: bool) -> None:
    """A column dropped after a split's low watermark (the initial snapshot still running,
    the log phase not there yet): the split reads the columns the table still has, the
    dropped one None, instead of failing; a row changed before the drop has its new value."""
    table = make(BASE)
    run(mysql_admin, f"INSERT INTO `{table.name}` VALUES (1, 'a', 1), (2, 'b', 2)")
    schema = mysql.describe_table(conn, table)
    dropped: list[str] = []

    def drop(split: SnapshotSplit) -> None:
        if not dropped:
            dropped.append(split.split_id)
            run(mysql_admin, f"UPDATE `{table.name}` SET v = 'w' WHERE id = 1",
                f"ALTER TABLE `{table.name}` DROP COLUMN n")

    options = replace(SyncOptions(), atomic_snapshot=atomic)
    result = read_split(mysql, conn, schema, SnapshotSplit(table, 0, None, None), options,
                        PhaseHooks(after_low_watermark=drop))
    assert dropped
    assert sorted(result.rows) == [(1, "w", None), (2, "b", None)]
