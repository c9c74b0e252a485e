"""The binlog decoder (plugins/sdk_mysql/_rows.py) on the real server: every storage format it
compiles code for, both images of a change, against the snapshot's reading of the same rows;
and tables altered while a stream follows them."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

from sdk import (
    ChangeEvent,
    ConfigurationError,
    Dialect,
    SchemaChange,
    SnapshotSplit,
    TableId,
    get_dialect,
)
from sdk.dialect.temporal import Interval

pytestmark = pytest.mark.mysql

# Every storage format, placed to catch off-by-one metadata: YEAR before an unsigned column
# (signedness lists numeric columns only), GEOMETRY and ENUM/SET before columns of other
# charsets (their positions in the charset lists), a CHAR(255) utf8mb4 (a length over 255
# bytes, two of its bits in the type byte), fractional TIME of every precision.
FORMATS = """CREATE TABLE {name} (
  id INT PRIMARY KEY, y YEAR, tu TINYINT UNSIGNED, su SMALLINT(5) UNSIGNED ZEROFILL,
  mu MEDIUMINT UNSIGNED, m MEDIUMINT, bu BIGINT UNSIGNED, fl FLOAT, b1 BIT(1), b64 BIT(64),
  b9 BIT(9), d1 DECIMAL(1,0), d2 DECIMAL(9,9), d3 DECIMAL(18,9), d4 DECIMAL(20,0),
  d5 DECIMAL(65,0), d6 DECIMAL(13,4), t0 TIME, t1 TIME(1), t2 TIME(2), t3 TIME(3),
  t4 TIME(4), t5 TIME(5), dt0 DATETIME, dt3 DATETIME(3), ts0 TIMESTAMP NULL,
  ts2 TIMESTAMP(2) NULL, g GEOMETRY, l1 VARCHAR(10) CHARSET latin1,
  e ENUM('', 'x', 'é') CHARSET latin1, u2 VARCHAR(10) CHARSET ucs2,
  s SET('a','b','c','d','e','f','g','h','i'), a VARCHAR(300) CHARSET ascii,
  c255 CHAR(255) CHARSET utf8mb4, bn BINARY(1), tt TINYTEXT, mt MEDIUMTEXT, lb LONGBLOB,
  ls LINESTRING, dte DATE
) CHARSET utf8mb4"""

ROWS = [
    (1, 2155, 255, 65535, 16777215, -8388608, 18446744073709551615, -3.4028234e38, 1,
     18446744073709551615, 511, 9, "0.999999999", "-123456789.123456789",
     "99999999999999999999", "-" + "9" * 65, "-0.0001", "-838:59:59", "-00:00:00.1",
     "-00:00:00.01", "-00:00:00.001", "-00:00:00.0001", "-12:34:56.78901",
     "1000-01-01 00:00:00", "9999-12-31 23:59:59.999", "2038-01-19 03:14:07",
     "1970-01-01 00:00:01.01", None, "€ß", "é", "ŁĄ", "a,c,i", "z" * 300, "😀" * 255,
     b"\0", "t" * 255, "m" * 70000, b"\xff" * 70000, None, "2024-02-29"),
    (2, 0, 0, 7, 0, 8388607, 0, 0.0, 0, 0, 0, -9, "-0.000000001", "0", "0",
     "9" * 65, "99999999.9999", "838:59:59", "00:00:00.9", "00:00:00.99", "23:59:59.999",
     "-838:59:58.9999", "00:00:00.00001", "2024-01-02 03:04:05", "2024-01-02 03:04:05.001",
     "1970-01-01 00:00:01", "2038-01-19 03:14:07.99", None, "", "", "", "", "", "", b"",
     "", "", b"", None, "1000-01-01"),
    (3,) + (None,) * 39,
]


mysql: Dialect = get_dialect("mysql")


@pytest.fixture
def conn(mysql_conn: Any) -> Any:
    """A connection of the dialect (conftest's), closed after the test."""
    return mysql_conn


@pytest.fixture
def table(mysql_admin: Any) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:10]}"
    yield name
    with mysql_admin.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS `{name}`")


def run(mysql_admin: Any, *statements: str, args: Any = None) -> None:
    with mysql_admin.cursor() as cur:
        for sql in statements:
            cur.execute(sql, args)


def test_every_storage_format_reads_as_the_snapshot_in_both_images(
        conn: Any, mysql_admin: Any, table: str) -> None:
    run(mysql_admin, FORMATS.format(name=f"`{table}`"))
    schema = mysql.describe_table(conn, TableId("sdk_test", table))
    start = mysql.current_offset(conn)
    marks = ", ".join(["%s"] * len(ROWS[0]))
    with mysql_admin.cursor() as cur:
        cur.executemany(f"INSERT INTO `{table}` VALUES ({marks})", ROWS)
        cur.execute(f"UPDATE `{table}` SET g = ST_GeomFromText('POINT(1 2)'), "
                    "ls = ST_GeomFromText('LINESTRING(0 0, 1 1)') WHERE id = 2")
    whole = SnapshotSplit(TableId("sdk_test", table), 0, None, None)
    snapshot = {r[0]: r for b in mysql.read_range(conn, schema, whole, 10) for r in b}
    run(mysql_admin, f"UPDATE `{table}` SET id = id + 100", f"DELETE FROM `{table}`")
    end = mysql.current_offset(conn)
    events = [e for e in mysql.stream_log(conn, [schema], start, end)
              if isinstance(e, ChangeEvent)]
    assert [e.op for e in events] == ["c"] * 3 + ["u"] * 4 + ["d"] * 3
    row_2 = snapshot[2]
    assert row_2[27] == bytes.fromhex("0101000000000000000000f03f0000000000000040")
    assert snapshot[1][6] == Decimal(18446744073709551615) and snapshot[1][1] == 2155
    assert snapshot[1][28:31] == ("€ß", "é", "ŁĄ")
    assert snapshot[1][17] == Interval(0, 0, -(838 * 3600 + 59 * 60 + 59) * 1_000_000)

    def same(row: Any, key: int, expected: Any = None) -> None:
        expected = expected or snapshot[key]
        if row[0] != key:
            row = (key, *row[1:])
        assert row == expected, key
        assert [type(v) for v in row] == [type(v) for v in expected], key

    no_geometry = (*row_2[:27], None, *row_2[28:38], None, row_2[39])
    for event in events[:3]:  # inserts: the after image
        same(event.after, event.key[0], no_geometry if event.key == (2,) else None)
    same(events[3].before, 2, no_geometry)  # the geometry update's both images
    same(events[3].after, 2)
    for event in events[4:7]:  # id + 100: both images, before and after
        same(event.before, event.before[0])
        same(event.after, event.after[0] - 100)
    for event in events[7:]:  # deletes: the before image
        same(event.before, event.key[0] - 100)


def test_a_table_altered_while_a_stream_follows_it_decodes_on_both_sides(
        conn: Any, mysql_admin: Any, table: str) -> None:
    """Columns added first, reordered, widened (a VARCHAR's length prefix from one byte to two,
    INT to BIGINT) and an added one dropped, each between two changes, while one stream
    follows the table: every change comes with the values of its own time, after a
    SchemaChange to the table's columns of that time (read once all the ALTERs ran, so most
    columns are described from the table maps, the live table having changed since)."""
    run(mysql_admin, f"CREATE TABLE `{table}` (id INT PRIMARY KEY, v VARCHAR(10), n INT)")
    schema = mysql.describe_table(conn, TableId("sdk_test", table))
    stream = mysql.stream_log(conn, [schema], mysql.current_offset(conn), None)
    steps = [
        f"INSERT INTO `{table}` VALUES (1, 'a', 1)",
        f"ALTER TABLE `{table}` ADD COLUMN x DATETIME(6) FIRST",
        f"INSERT INTO `{table}` VALUES ('2024-01-01', 2, 'b', 2)",
        f"ALTER TABLE `{table}` MODIFY n INT AFTER id",
        f"INSERT INTO `{table}` (id, v, n) VALUES (3, 'c', 3)",
        f"ALTER TABLE `{table}` MODIFY v VARCHAR(300), MODIFY n BIGINT",
        f"INSERT INTO `{table}` (id, v, n) VALUES (4, '{'d' * 300}', {2**40})",
        f"UPDATE `{table}` SET v = 'e', n = -1 WHERE id = 1",
        f"ALTER TABLE `{table}` DROP COLUMN x",
        f"DELETE FROM `{table}` WHERE id = 2",
    ]
    shapes = []  # the table as each ALTER left it
    for sql in steps:
        run(mysql_admin, sql)
        if sql.startswith("ALTER"):
            shapes.append(mysql.describe_table(conn, TableId("sdk_test", table)))
    seen: list[ChangeEvent | SchemaChange] = []
    deadline = time.monotonic() + 30
    for item in stream:
        if isinstance(item, ChangeEvent | SchemaChange):
            seen.append(item)
        if len(seen) == 10 or time.monotonic() > deadline:
            break
    stream.close()  # type: ignore[attr-defined]
    assert [item.schema for item in seen if isinstance(item, SchemaChange)] == shapes
    assert [("s", item.schema.column_names) if isinstance(item, SchemaChange)
            else (item.op, item.after or item.before) for item in seen] == [
        ("c", (1, "a", 1)),
        ("s", ("x", "id", "v", "n")), ("c", (dt.datetime(2024, 1, 1), 2, "b", 2)),
        ("s", ("x", "id", "n", "v")), ("c", (None, 3, 3, "c")),
        ("s", ("x", "id", "n", "v")), ("c", (None, 4, 2**40, "d" * 300)),
        ("u", (None, 1, -1, "e")),
        ("s", ("id", "n", "v")), ("d", (2, 2, "b"))]
    update = seen[7]
    assert isinstance(update, ChangeEvent) and update.before == (None, 1, 1, "a")


def test_a_table_of_300_columns(conn: Any, mysql_admin: Any, table: str) -> None:
    """More than 250 columns: the rows event's column count takes three bytes."""
    columns = ", ".join(f"c{i} INT" for i in range(299))
    run(mysql_admin, f"CREATE TABLE `{table}` (id INT PRIMARY KEY, {columns})")
    schema = mysql.describe_table(conn, TableId("sdk_test", table))
    start = mysql.current_offset(conn)
    run(mysql_admin, f"INSERT INTO `{table}` (id, c0, c298) VALUES (1, 7, 8)",
        f"UPDATE `{table}` SET c150 = -1 WHERE id = 1")
    events = [e for e in mysql.stream_log(conn, [schema], start, mysql.current_offset(conn))
              if isinstance(e, ChangeEvent)]
    inserted = (1, 7) + (None,) * 297 + (8,)
    assert [e.after for e in events] == [inserted, (*inserted[:151], -1, *inserted[152:])]
    assert events[1].before == inserted


@pytest.mark.exclusive  # a binlog reader running meanwhile would meet its compressed events
def test_compressed_events_stop_the_read_naming_the_setting(
        conn: Any, mysql_admin: Any, table: str) -> None:
    """MariaDB's compressed binlog events would hide row changes from the reader: it stops,
    naming the setting, rather than skip them."""
    with mysql_admin.cursor() as cur:
        if not cur.execute("SHOW GLOBAL VARIABLES LIKE 'log_bin_compress'"):
            pytest.skip("the server has no log_bin_compress (MariaDB only)")
        cur.execute("SELECT @@GLOBAL.log_bin_compress_min_len")
        ((min_len,),) = cur.fetchall()
    run(mysql_admin, f"CREATE TABLE `{table}` (id INT PRIMARY KEY, v TEXT)")
    schema = mysql.describe_table(conn, TableId("sdk_test", table))
    start = mysql.current_offset(conn)
    run(mysql_admin, "SET GLOBAL log_bin_compress = ON", "SET GLOBAL log_bin_compress_min_len = 10")
    try:
        run(mysql_admin, f"INSERT INTO `{table}` VALUES (1, REPEAT('x', 1000))")
    finally:
        run(mysql_admin, "SET GLOBAL log_bin_compress = OFF",
            f"SET GLOBAL log_bin_compress_min_len = {int(min_len)}")
    with pytest.raises(ConfigurationError, match="log_bin_compress = ON"):
        list(mysql.stream_log(conn, [schema], start, mysql.current_offset(conn)))
