"""The MySQL/MariaDB dialect against the real server (scripts/services.sh sets it up): the four
hooks' guarantees, the type contract read both ways, and the algorithm end to end."""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from functools import cmp_to_key
from itertools import pairwise
from typing import Any

import pytest
from helpers.proxy import FreezingProxy
from helpers.servers import MYSQL_ADMIN_URL, with_query

from sdk import (
    BadValue,
    ChangeEvent,
    ConnectionConfig,
    Dialect,
    Heartbeat,
    Offset,
    OffsetExpiredError,
    SnapshotSplit,
    TableId,
    TableSchema,
    get_dialect,
)
from sdk.algorithm import SyncOptions
from sdk.dialect.temporal import Interval

pytestmark = pytest.mark.mysql


@pytest.fixture
def mysql() -> Dialect:
    return get_dialect("mysql")


@pytest.fixture
def conn(mysql: Dialect, mysql_url: str) -> Iterator[Any]:
    connection = mysql.connect(ConnectionConfig.from_url(mysql_url))
    yield connection
    connection.close()


@pytest.fixture
def make_table(mysql_admin: Any) -> Iterator[Any]:
    """Create uniquely named tables as the administrator; drop them afterwards."""
    made: list[str] = []

    def make(ddl: str, rows: list[tuple[Any, ...]] = ()) -> TableId:  # type: ignore[assignment]
        name = f"t_{uuid.uuid4().hex[:10]}"
        with mysql_admin.cursor() as cur:
            cur.execute(ddl.format(name=f"`{name}`"))
            if rows:
                marks = ", ".join(["%s"] * len(rows[0]))
                cur.executemany(f"INSERT INTO `{name}` VALUES ({marks})", rows)
        made.append(name)
        return TableId("sdk_test", name)

    yield make
    with mysql_admin.cursor() as cur:
        for name in made:
            cur.execute(f"DROP TABLE IF EXISTS `{name}`")


def as_user(url: str, credentials: str) -> str:
    """The test server's ``url`` logging in as ``credentials`` (``user:password``)."""
    c = ConnectionConfig.from_url(url)
    return f"mysql://{credentials}@{c.host}:{c.port or 3306}/{c.database}"


def admin(mysql_admin: Any, sql: str, args: Any = None) -> None:
    with mysql_admin.cursor() as cur:
        cur.execute(sql, args)


@contextlib.contextmanager
def sql_mode(mysql_admin: Any, mode: str) -> Iterator[None]:
    """The administrator's session under ``sql_mode`` ``mode`` (one that stores zero or
    invalid dates), its own mode restored after."""
    with mysql_admin.cursor() as cur:
        cur.execute("SELECT @@SESSION.sql_mode")
        (before,) = cur.fetchone()
        cur.execute("SET SESSION sql_mode = %s", (mode,))
    try:
        yield
    finally:
        with mysql_admin.cursor() as cur:
            cur.execute("SET SESSION sql_mode = %s", (before,))


def log(mysql: Dialect, conn: Any, tables: list[TableSchema], start: Offset, end: Offset
        ) -> list[ChangeEvent]:
    return [e for e in mysql.stream_log(conn, tables, start, end) if isinstance(e, ChangeEvent)]


GOLDEN = """CREATE TABLE {name} (
  id BIGINT UNSIGNED PRIMARY KEY, ti TINYINT, tb TINYINT(1), tu TINYINT UNSIGNED,
  si SMALLINT, mi MEDIUMINT, i INT, iu INT UNSIGNED, bi BIGINT,
  d DECIMAL(65,30), d2 DECIMAL(10,2), f FLOAT, db DOUBLE, b BIT(10),
  ch CHAR(3), vc VARCHAR(20), tx TEXT, bin BINARY(4), vb VARBINARY(10), bl BLOB,
  e ENUM('a','b'), s SET('x','y','z'), j JSON,
  dt DATE, tm TIME(6), dtt DATETIME(6), ts TIMESTAMP(6) NULL, y YEAR, g POINT
) CHARSET utf8mb4"""

GOLDEN_ROWS = [
    (18446744073709551615, -128, 1, 255, -32768, -8388608, -2147483648, 4294967295,
     -9223372036854775808, "-12345678901234567890123456789012345.123456789012345678901234567890",
     "-0.01", 1.1, 0.1 + 0.2, 0b1000000001, "ab", "😀 é ' \"", "x" * 300, b"ab",
     b"\x00\xff", bytes(range(256)), "b", "x,z", '{"k": [1, 2.5], "s": "é"}',
     "2024-02-29", "-838:59:59.000001", "2024-01-02 03:04:05.123456",
     "2024-01-02 03:04:05.654321", 2024, None),
    (1,) + (None,) * 28,
    (2, 0, 0, 0, 0, 0, 0, 0, 0, "0", "0", 0.0, -0.0, 0, "", "", "", b"", b"", b"", "a", "",
     "null", "1000-01-01", "-00:00:00.000001", "9999-12-31 23:59:59.999999",
     "1970-01-01 00:00:01", 1901, None),
]


def test_golden_types_read_the_same_both_ways(mysql: Dialect, conn: Any, make_table: Any,
                                              mysql_admin: Any) -> None:
    table = make_table(GOLDEN)
    schema = mysql.describe_table(conn, table)
    assert [c.type.value for c in schema.columns][:14] == [
        "decimal", "int8", "int8", "int16", "int16", "int32", "int32", "int64", "int64",
        "decimal", "decimal", "float32", "float64", "int64"]
    start = mysql.current_offset(conn)
    with mysql_admin.cursor() as cur:
        cur.executemany(f"INSERT INTO `{table.name}` VALUES ({', '.join(['%s'] * 29)})",
                        GOLDEN_ROWS)
        cur.execute(f"UPDATE `{table.name}` SET g = ST_GeomFromText('POINT(1 2)') "
                    "WHERE id = 2")
    end = mysql.current_offset(conn)
    whole = SnapshotSplit(table, 0, None, None)
    snapshot = {r[0]: r for b in mysql.read_range(conn, schema, whole, 10) for r in b}
    events = log(mysql, conn, [schema], start, end)
    logged = {e.key[0]: e.after for e in events}
    assert set(logged) == set(snapshot) == {Decimal(18446744073709551615), Decimal(1),
                                            Decimal(2)}
    for key, row in snapshot.items():
        assert logged[key] == row, key
        assert [type(v) for v in logged[key]] == [type(v) for v in row]  # type: ignore[union-attr]
    first = snapshot[Decimal(18446744073709551615)]
    assert first[9] == Decimal(GOLDEN_ROWS[0][9])
    assert first[11] == pytest.approx(1.1) and first[13] == 513 and first[17] == b"ab\0\0"
    assert first[21] == "x,z" and first[15] == "😀 é ' \""
    assert first[24] == Interval(0, 0, -3_020_399_000_001)  # -838:59:59.000001: hours, no days
    assert first[26] == dt.datetime(2024, 1, 2, 3, 4, 5, 654321, tzinfo=dt.UTC)
    assert all(v is None for v in snapshot[Decimal(1)][1:])
    second = snapshot[Decimal(2)]
    assert second[21] == "" and second[24] == Interval(0, 0, -1)
    assert second[28] == bytes.fromhex("0101000000000000000000f03f0000000000000040")  # WKB


BAD_DATES = """CREATE TABLE {name} (id INT PRIMARY KEY, d DATE, d0 DATETIME, d1 DATETIME(1),
  d3 DATETIME(3), t0 TIMESTAMP NULL, t4 TIMESTAMP(4) NULL)"""
BAD_DATE_ROWS = [
    (1, "0000-00-00", "0000-00-00 00:00:00", "0000-00-00 00:00:00", "0000-00-00 00:00:00",
     "0000-00-00 00:00:00", "0000-00-00 00:00:00"),
    (2, "2024-02-30", "2024-00-10 01:02:03", "0000-01-01 00:00:00.5", "2024-05-00 12:00:00.125",
     "2038-01-19 03:14:07", "1970-01-01 00:00:01.5"),
    (3, "2024-02-29", "2024-02-29 01:02:03", "1000-01-01 00:00:00.5", "9999-12-31 23:59:59.999",
     None, "2000-01-01 00:00:00.0001"),
]
BAD_DATE_TEXTS = {  # as SELECT shows them: the column's fraction digits
    1: ("0000-00-00", "0000-00-00 00:00:00", "0000-00-00 00:00:00.0",
        "0000-00-00 00:00:00.000", "0000-00-00 00:00:00", "0000-00-00 00:00:00.0000"),
    2: ("2024-02-30", "2024-00-10 01:02:03", "0000-01-01 00:00:00.5",
        "2024-05-00 12:00:00.125")}


@pytest.mark.parametrize("policy", ["error", "null"])
def test_dates_python_cannot_hold_read_the_same_both_ways(
        mysql: Dialect, make_table: Any, mysql_admin: Any, mysql_url: str, policy: str) -> None:
    """A zero date, a zero year, month or day, a day past its month's end and a zero TIMESTAMP,
    at every fraction width and in both images of a change: a BadValue of the text SELECT
    shows by default, None with ``zero_dates=null``, the same through the snapshot and the
    binlog."""
    url = with_query(mysql_url, zero_dates="null") if policy == "null" else mysql_url
    conn = mysql.connect(ConnectionConfig.from_url(url))
    try:
        table = make_table(BAD_DATES)
        schema = mysql.describe_table(conn, table)
        start = mysql.current_offset(conn)
        with sql_mode(mysql_admin, "ALLOW_INVALID_DATES"), mysql_admin.cursor() as cur:
            cur.executemany(f"INSERT INTO `{table.name}` VALUES (%s, %s, %s, %s, %s, %s, %s)",
                            BAD_DATE_ROWS)
        middle = mysql.current_offset(conn)
        whole = SnapshotSplit(table, 0, None, None)
        snapshot = {r[0]: r for b in mysql.read_range(conn, schema, whole, 10) for r in b}
        admin(mysql_admin, f"UPDATE `{table.name}` SET id = 11 WHERE id = 1")
        admin(mysql_admin, f"DELETE FROM `{table.name}` WHERE id = 2")
        end = mysql.current_offset(conn)
        inserted = {e.key[0]: e.after for e in log(mysql, conn, [schema], start, middle)}
        update, delete = log(mysql, conn, [schema], middle, end)
    finally:
        conn.close()
    assert inserted == snapshot and set(snapshot) == {1, 2, 3}
    assert update.before == snapshot[1] and update.after == (11, *snapshot[1][1:])
    assert delete.before == snapshot[2]
    for key, texts in BAD_DATE_TEXTS.items():
        row = snapshot[key][1:len(texts) + 1]
        if policy == "null":
            assert row == (None,) * len(texts), key
        else:
            assert [v.text for v in row] == list(texts), key
            assert all(type(v) is BadValue and v.reason.startswith("is not a date")
                       and "add zero_dates=null" in v.reason for v in row), key
    assert snapshot[2][5:] == (dt.datetime(2038, 1, 19, 3, 14, 7, tzinfo=dt.UTC),
                               dt.datetime(1970, 1, 1, 0, 0, 1, 500000, tzinfo=dt.UTC))
    assert snapshot[3][1:] == (
        dt.date(2024, 2, 29), dt.datetime(2024, 2, 29, 1, 2, 3),
        dt.datetime(1000, 1, 1, 0, 0, 0, 500000), dt.datetime(9999, 12, 31, 23, 59, 59, 999000),
        None, dt.datetime(2000, 1, 1, 0, 0, 0, 100, tzinfo=dt.UTC))


def test_current_offset_is_monotonic_and_above_committed_changes(
        mysql: Dialect, conn: Any, make_table: Any, mysql_admin: Any) -> None:
    table = make_table("CREATE TABLE {name} (id INT PRIMARY KEY, v INT)")
    schema = mysql.describe_table(conn, table)
    marks = [mysql.current_offset(conn)]
    for i in range(4):
        admin(mysql_admin, f"INSERT INTO `{table.name}` VALUES (%s, 0)", (i,))
        marks.append(mysql.current_offset(conn))
    cmp = mysql.compare_offset
    assert all(cmp(a, b) < 0 for a, b in pairwise(marks))
    events = log(mysql, conn, [schema], marks[0], marks[-1])
    assert [e.key for e in events] == [(0,), (1,), (2,), (3,)]
    for event, after in zip(events, marks[1:], strict=True):
        assert cmp(event.offset, after) < 0


def test_read_range_covers_compound_text_keys_exactly_once(
        mysql: Dialect, conn: Any, make_table: Any) -> None:
    rows = [(a, b, "v") for a in ("", "A", "a", "B", "b", "é", "E", "😀") for b in (-1, 0, 7)]
    table = make_table("CREATE TABLE {name} (a VARCHAR(8) NOT NULL, b INT NOT NULL, "
                       "v TEXT, PRIMARY KEY (a, b)) CHARSET utf8mb4 COLLATE utf8mb4_bin",
                       rows)
    schema = mysql.describe_table(conn, table)
    for size in (1, 4, 100):
        bounds: list[Any] = [None]
        while (nxt := mysql.next_boundary(conn, schema, bounds[-1], size)) is not None:
            bounds.append(nxt)
        bounds.append(None)
        got = []
        for i, (lo, hi) in enumerate(pairwise(bounds)):
            split = SnapshotSplit(table, i, lo, hi)
            part = [r for b in mysql.read_range(conn, schema, split, 3) for r in b]
            assert all(split.contains(schema.key_of(r)) for r in part)
            got += part
        assert sorted(got) == sorted(rows), size


def test_case_insensitive_text_keys_split_in_python_order(
        mysql: Dialect, conn: Any, make_table: Any) -> None:
    rows = [(k, 1) for k in ("a", "B", "c", "D", "é", "F")]
    table = make_table("CREATE TABLE {name} (k VARCHAR(4) PRIMARY KEY, v INT) "
                       "CHARSET utf8mb4 COLLATE utf8mb4_general_ci", rows)
    schema = mysql.describe_table(conn, table)
    boundary = mysql.next_boundary(conn, schema, None, 2)
    assert boundary == ("F",)  # binary order: B, D, F, a, c, é
    first = SnapshotSplit(table, 0, None, boundary)
    got = [r[0] for b in mysql.read_range(conn, schema, first, 10) for r in b]
    assert sorted(got) == ["B", "D"]
    rest = SnapshotSplit(table, 1, boundary, None)
    assert sorted(r[0] for b in mysql.read_range(conn, schema, rest, 10) for r in b) == \
        ["F", "a", "c", "é"]


def test_bounded_stream_is_exact_ordered_repeatable_without_rollbacks(
        mysql: Dialect, conn: Any, make_table: Any, mysql_admin: Any) -> None:
    table = make_table("CREATE TABLE {name} (id INT PRIMARY KEY, v VARCHAR(20))")
    other = make_table("CREATE TABLE {name} (id INT PRIMARY KEY)")
    schema, other_schema = (mysql.describe_table(conn, t) for t in (table, other))
    admin(mysql_admin, f"INSERT INTO `{table.name}` VALUES (1, 'before')")
    low = mysql.current_offset(conn)
    admin(mysql_admin, f"INSERT INTO `{table.name}` VALUES (2, 'two'), (3, 'three')")
    admin(mysql_admin, f"INSERT INTO `{other.name}` VALUES (9)")
    admin(mysql_admin, "BEGIN")
    admin(mysql_admin, f"INSERT INTO `{table.name}` VALUES (4, 'rolled back')")
    admin(mysql_admin, "ROLLBACK")
    admin(mysql_admin, f"UPDATE `{table.name}` SET id = 20 WHERE id = 2")
    admin(mysql_admin, f"DELETE FROM `{table.name}` WHERE id = 1")
    high = mysql.current_offset(conn)
    admin(mysql_admin, f"INSERT INTO `{table.name}` VALUES (5, 'after')")
    events = log(mysql, conn, [schema], low, high)
    assert [(e.op, e.key, e.old_key) for e in events] == [
        ("c", (2,), None), ("c", (3,), None), ("u", (20,), (2,)), ("d", (1,), None)]
    assert events[2].before == (2, "two") and events[3].before == (1, "before")
    assert log(mysql, conn, [schema], low, high) == events
    both = log(mysql, conn, [schema, other_schema], low, high)
    assert [e.table.name for e in both].count(other.name) == 1
    assert [e.key for e in log(mysql, conn, [schema], high, mysql.current_offset(conn))] == \
        [(5,)]


def test_bounded_read_across_a_binlog_rotation(mysql: Dialect, conn: Any, make_table: Any,
                                                mysql_admin: Any) -> None:
    table = make_table("CREATE TABLE {name} (id INT PRIMARY KEY)")
    schema = mysql.describe_table(conn, table)
    low = mysql.current_offset(conn)
    admin(mysql_admin, f"INSERT INTO `{table.name}` VALUES (1)")
    admin(mysql_admin, "FLUSH BINARY LOGS")
    admin(mysql_admin, f"INSERT INTO `{table.name}` VALUES (2)")
    mid = mysql.current_offset(conn)
    admin(mysql_admin, "FLUSH BINARY LOGS")
    admin(mysql_admin, f"INSERT INTO `{table.name}` VALUES (3)")
    high = mysql.current_offset(conn)
    assert low["file"] != mid["file"] != high["file"]
    assert [e.key for e in log(mysql, conn, [schema], low, mid)] == [(1,), (2,)]
    assert [e.key for e in log(mysql, conn, [schema], low, high)] == [(1,), (2,), (3,)]
    assert [e.key for e in log(mysql, conn, [schema], mid, high)] == [(3,)]


def test_restart_inside_a_multi_row_event(mysql: Dialect, conn: Any, make_table: Any,
                                          mysql_admin: Any) -> None:
    table = make_table("CREATE TABLE {name} (id INT PRIMARY KEY)")
    schema = mysql.describe_table(conn, table)
    low = mysql.current_offset(conn)
    admin(mysql_admin, f"INSERT INTO `{table.name}` VALUES (1), (2), (3), (4), (5)")
    high = mysql.current_offset(conn)
    events = log(mysql, conn, [schema], low, high)
    assert len({(e.offset["file"], e.offset["pos"]) for e in events}) == 1
    third = events[2].offset
    assert [e.key for e in log(mysql, conn, [schema], third, high)] == [(3,), (4,), (5,)]
    assert [e.key for e in log(mysql, conn, [schema], low, third)] == [(1,), (2,)]


def test_a_transaction_spanning_the_low_watermark(mysql: Dialect, conn: Any, make_table: Any,
                                                  mysql_admin: Any, mysql_url: str) -> None:
    table = make_table("CREATE TABLE {name} (id INT PRIMARY KEY)")
    schema = mysql.describe_table(conn, table)
    admin(mysql_admin, "BEGIN")
    admin(mysql_admin, f"INSERT INTO `{table.name}` VALUES (1)")
    low = mysql.current_offset(conn)  # the transaction is open: not below the mark
    admin(mysql_admin, f"INSERT INTO `{table.name}` VALUES (2)")
    admin(mysql_admin, "COMMIT")
    high = mysql.current_offset(conn)
    assert [e.key for e in log(mysql, conn, [schema], low, high)] == [(1,), (2,)]


def test_snapshot_view_is_exact_under_a_concurrent_writer(
        mysql: Dialect, conn: Any, make_table: Any, mysql_url: str) -> None:
    table = make_table("CREATE TABLE {name} (id INT PRIMARY KEY, v INT)")
    schema = mysql.describe_table(conn, table)
    start = mysql.current_offset(conn)
    stop = threading.Event()
    writer_conn = mysql.connect(ConnectionConfig.from_url(MYSQL_ADMIN_URL))

    def write() -> None:
        i = 0
        while not stop.is_set():
            writer_conn.query(f"INSERT INTO `{table.name}` VALUES (%s, 0)", (i,))
            i += 1

    thread = threading.Thread(target=write)
    thread.start()
    time.sleep(0.3)
    view = mysql.begin_snapshot(conn)
    assert view is not None
    time.sleep(0.3)
    seen = {r[0] for b in mysql.read_range(conn, schema, SnapshotSplit(table, 0, None, None),
                                           100) for r in b}
    mysql.end_snapshot(conn)
    stop.set()
    thread.join()
    writer_conn.close()
    logged = {e.key[0] for e in log(mysql, conn, [schema], start, view.offset)}
    assert seen == logged and len(seen) > 0


def test_purged_position_is_fatal(mysql: Dialect, conn: Any, make_table: Any) -> None:
    schema = mysql.describe_table(conn, make_table("CREATE TABLE {name} (id INT PRIMARY KEY)"))
    gone = Offset("mysql", file="mysql-bin.000000", pos=4, n=0)
    with pytest.raises(OffsetExpiredError, match="purged"):
        list(mysql.stream_log(conn, [schema], gone, mysql.current_offset(conn)))


def test_preflight_names_each_missing_privilege(mysql: Dialect, mysql_admin: Any,
                                                make_table: Any, mysql_url: str) -> None:
    """An account for one host ('weak'@'127.0.0.1', as a least-privilege account is made):
    each fix names that account (pasted, it works), and reading the log position without
    REPLICATION CLIENT names the privilege, not log_bin."""
    from sdk import ConfigurationError

    table = make_table("CREATE TABLE {name} (id INT PRIMARY KEY)")
    user = f"sdk_weak_{uuid.uuid4().hex[:6]}"
    account = f"'{user}'@'127.0.0.1'"
    admin(mysql_admin, f"CREATE USER {account} IDENTIFIED BY 'weak'")
    admin(mysql_admin, f"GRANT SELECT ON sdk_test.* TO {account}")
    try:
        weak = mysql.connect(ConnectionConfig.from_url(as_user(mysql_url, f"{user}:weak")))
        try:
            missing = {c.name: c.fix for c in mysql.preflight(weak, [table]) if not c.ok}
            assert set(missing) == {"privilege REPLICATION SLAVE", "privilege REPLICATION CLIENT"}
            assert missing["privilege REPLICATION SLAVE"] == \
                f"GRANT REPLICATION SLAVE ON *.* TO {account}"
            with pytest.raises(ConfigurationError, match=r"may not read the binlog position .*"
                               rf"GRANT REPLICATION CLIENT ON \*\.\* TO {account}"):
                mysql.current_offset(weak)
        finally:
            weak.close()
        for fix in missing.values():  # pasted as they are
            admin(mysql_admin, fix)
        weak = mysql.connect(ConnectionConfig.from_url(as_user(mysql_url, f"{user}:weak")))
        try:
            assert all(c.ok for c in mysql.preflight(weak, [table]) if c.name.startswith(
                "privilege")), [c for c in mysql.preflight(weak, [table]) if not c.ok]
            assert mysql.current_offset(weak) is not None
        finally:
            weak.close()
    finally:
        admin(mysql_admin, f"DROP USER {account}")


def test_bad_password_is_a_clear_error_without_the_password(mysql: Dialect,
                                                            mysql_url: str) -> None:
    from sdk import ConfigurationError

    user = ConnectionConfig.from_url(mysql_url).user
    with pytest.raises(ConfigurationError) as info:
        mysql.connect(ConnectionConfig.from_url(as_user(mysql_url, f"{user}:wrong-pw")))
    assert "wrong-pw" not in str(info.value) and "Access denied" in str(info.value)


def test_identifiers_with_spaces_quotes_backticks_and_accents(
        mysql: Dialect, conn: Any, mysql_admin: Any) -> None:
    name = f"we'ird `tbl\" é {uuid.uuid4().hex[:6]}"
    quoted = "`" + name.replace("`", "``") + "`"
    admin(mysql_admin, f"CREATE TABLE {quoted} (`k ey` INT PRIMARY KEY, `va``l\"ue é` TEXT)")
    try:
        table = TableId("sdk_test", name)
        assert table in mysql.list_tables(conn)
        schema = mysql.describe_table(conn, table)
        assert schema.column_names == ("k ey", 'va`l"ue é') and schema.key == ("k ey",)
        low = mysql.current_offset(conn)
        admin(mysql_admin, f"INSERT INTO {quoted} VALUES (1, 'x'), (2, 'y'), (3, 'z')")
        events = log(mysql, conn, [schema], low, mysql.current_offset(conn))
        assert [e.after for e in events] == [(1, "x"), (2, "y"), (3, "z")]
        assert mysql.next_boundary(conn, schema, None, 1) == (2,)
        rows = [r for b in mysql.read_range(conn, schema, SnapshotSplit(table, 0, (2,), None),
                                            10) for r in b]
        assert sorted(rows) == [(2, "y"), (3, "z")]
    finally:
        admin(mysql_admin, f"DROP TABLE {quoted}")


# --- GTID positions in offsets, heartbeats -----------------------------------------------------


def read_until(stream: Iterator[Any], seconds: float, done: Any) -> list[Any]:
    """Items of an open-ended stream up to the first for which ``done`` holds, read in a
    thread: a stream that yields nothing blocks in a socket read, and the test must fail after
    ``seconds`` rather than hang. Empty when it timed out."""
    got: list[Any] = []
    finished = threading.Event()

    def read() -> None:
        try:
            for item in stream:
                got.append(item)
                if done(item):
                    finished.set()
                    break
        finally:
            stream.close()  # type: ignore[attr-defined]

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(seconds)
    return got if finished.is_set() else []


def binlog_gtid_pos(mysql_admin: Any, offset: Offset) -> str:
    """The server's own GTID position at the offset's transaction start, domains in order."""
    with mysql_admin.cursor() as cur:
        cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (offset["file"], offset["pos"]))
        (value,) = cur.fetchone()
    assert value is not None, offset
    return ",".join(sorted(value.split(","), key=lambda g: int(g.split("-")[0])))


def test_offsets_carry_the_mariadb_gtid_position(mysql: Dialect, conn: Any, make_table: Any,
                                                  mysql_admin: Any) -> None:
    table = make_table("CREATE TABLE {name} (id INT PRIMARY KEY, v INT)")
    schema = mysql.describe_table(conn, table)
    low = mysql.current_offset(conn)
    assert low["gtid"] == binlog_gtid_pos(mysql_admin, low)
    admin(mysql_admin, f"INSERT INTO `{table.name}` VALUES (1, 0), (2, 0)")
    admin(mysql_admin, f"UPDATE `{table.name}` SET v = 1 WHERE id = 1")
    admin(mysql_admin, "FLUSH BINARY LOGS")
    admin(mysql_admin, f"DELETE FROM `{table.name}` WHERE id = 2")
    high = mysql.current_offset(conn)
    assert high["gtid"] == binlog_gtid_pos(mysql_admin, high)
    events = log(mysql, conn, [schema], low, high)
    assert [e.op for e in events] == ["c", "c", "u", "d"]
    for event in events:  # the GTID position where the change's transaction starts
        assert event.offset["gtid"] == binlog_gtid_pos(mysql_admin, event.offset)
    assert events[0].offset["gtid"] == events[1].offset["gtid"] != events[2].offset["gtid"]
    # the GTID is informational: the same position without it orders and reads the same
    bare = Offset("mysql", file=events[2].offset["file"], pos=events[2].offset["pos"], n=0)
    assert mysql.compare_offset(bare, events[2].offset) == 0
    assert log(mysql, conn, [schema], bare, high) == events[2:]
    # a start offset without a GTID gets it from the server: the events are the same
    assert log(mysql, conn, [schema], Offset("mysql", file=low["file"], pos=low["pos"], n=0),
               high) == events


def test_current_offset_gtid_is_exact_under_a_concurrent_writer(
        mysql: Dialect, conn: Any, make_table: Any, mysql_admin: Any) -> None:
    """With the binlog end moving, the snapshot position's GTID comes from BINLOG_GTID_POS
    rather than the live @@gtid_binlog_pos."""
    table = make_table("CREATE TABLE {name} (id INT PRIMARY KEY AUTO_INCREMENT)")
    stop = threading.Event()
    writer = mysql.connect(ConnectionConfig.from_url(MYSQL_ADMIN_URL))

    def write() -> None:
        while not stop.is_set():
            writer.query(f"INSERT INTO `{table.name}` VALUES ()")

    thread = threading.Thread(target=write)
    thread.start()
    try:
        marks = [mysql.current_offset(conn) for _ in range(20)]
    finally:
        stop.set()
        thread.join()
        writer.close()
    for mark in marks:
        assert mark["gtid"] == binlog_gtid_pos(mysql_admin, mark), mark


def test_heartbeats_on_an_idle_table_advance_past_other_writes(
        mysql: Dialect, make_table: Any, mysql_admin: Any, mysql_url: str) -> None:
    """An open-ended read of a table nobody writes keeps yielding heartbeats from the server's
    replication heartbeat, and they move past writes to other tables and a binlog rotation."""
    quiet = make_table("CREATE TABLE {name} (id INT PRIMARY KEY)")
    busy = make_table("CREATE TABLE {name} (id INT PRIMARY KEY)")
    conn = mysql.connect(ConnectionConfig.from_url(mysql_url + "?heartbeat_seconds=0.2"))
    try:
        schema = mysql.describe_table(conn, quiet)
        start = mysql.current_offset(conn)
        cmp = mysql.compare_offset
        stream = mysql.stream_log(conn, [schema], start, None)
        got: list[Any] = []
        targets: list[Offset] = []
        t0 = time.monotonic()
        try:
            for item in stream:
                got.append(item)
                assert isinstance(item, Heartbeat), "a change of a table nobody wrote"
                elapsed = time.monotonic() - t0
                if not targets and elapsed > 1.5:  # idle so far: now write elsewhere
                    admin(mysql_admin, f"INSERT INTO `{busy.name}` VALUES (1)")
                    admin(mysql_admin, "FLUSH BINARY LOGS")
                    admin(mysql_admin, f"INSERT INTO `{busy.name}` VALUES (2)")
                    targets.append(mysql.current_offset(conn))
                if targets and cmp(item.offset, targets[0]) >= 0:
                    break
                assert elapsed < 30, "no heartbeat reached the writes to the other table"
        finally:
            stream.close()  # type: ignore[attr-defined]
        idle = [h for h in got if isinstance(h, Heartbeat)]
        assert len(idle) >= 5  # 0.2 s heartbeats over at least 1.5 s
        assert all(cmp(a.offset, b.offset) <= 0 for a, b in pairwise(idle))
        assert all(cmp(h.offset, start) >= 0 for h in idle)
        last = idle[-1].offset
        assert last["file"] != start["file"]  # past the rotation
        assert last["gtid"] == binlog_gtid_pos(mysql_admin, last)
    finally:
        conn.close()


def test_gtid_state_keeps_one_entry_per_domain_in_domain_order() -> None:
    from sdk_mysql._offsets import MariadbGtidState

    state = MariadbGtidState("10-2-5, 0-1-42,")
    assert state.text == "0-1-42,10-2-5"
    state.add(3, "3-1-1")
    state.add(0, "0-7-43")  # a new server in domain 0 replaces that domain's entry
    assert state.text == "0-7-43,3-1-1,10-2-5"
    assert MariadbGtidState("").text == ""


def test_heartbeat_period_must_be_positive(mysql: Dialect, mysql_url: str) -> None:
    from sdk import ConfigurationError

    with pytest.raises(ConfigurationError, match="heartbeat_seconds"):
        mysql.connect(ConnectionConfig.from_url(mysql_url + "?heartbeat_seconds=0"))
    with pytest.raises(ConfigurationError, match="heartbeat_seconds"):
        mysql.connect(ConnectionConfig.from_url(mysql_url + "?heartbeat_seconds=soon"))


def test_zero_dates_option_is_error_or_null(mysql: Dialect, mysql_url: str) -> None:
    from sdk import ConfigurationError

    with pytest.raises(ConfigurationError, match="zero_dates='zero': use one of error, null"):
        mysql.connect(ConnectionConfig.from_url(with_query(mysql_url, zero_dates="zero")))
    for given, policy in ((None, "error"), ("NULL", "null"), ("error", "error")):
        url = mysql_url if given is None else with_query(mysql_url, zero_dates=given)
        connection = mysql.connect(ConnectionConfig.from_url(url))
        assert connection.zero_dates == policy
        connection.close()
    assert "zero_dates" in dict(mysql.info.url_options)


def test_columns_added_later_and_a_dropped_one_come_as_schema_changes(
        mysql: Dialect, conn: Any, make_table: Any, mysql_admin: Any) -> None:
    """Binlog rows are matched to the captured schema by column names and types (row metadata
    FULL): a column added after the sync read the schema, and a captured one dropped, each
    come as a SchemaChange to the table's new columns before its first change in the new
    shape (more in tests/dialects/mysql/test_mysql_schema_changes.py)."""
    from sdk import SchemaChange

    table = make_table("CREATE TABLE {name} (id INT PRIMARY KEY, v VARCHAR(10), w INT)")
    schema = mysql.describe_table(conn, table)
    low = mysql.current_offset(conn)
    admin(mysql_admin, f"INSERT INTO `{table.name}` VALUES (1, 'a', 10)")
    admin(mysql_admin, f"ALTER TABLE `{table.name}` ADD COLUMN x INT AFTER id")
    added = mysql.describe_table(conn, table)
    admin(mysql_admin, f"INSERT INTO `{table.name}` VALUES (2, 99, 'b', 20)")
    mid = mysql.current_offset(conn)
    first, change, second = mysql.stream_log(conn, [schema], low, mid)
    assert isinstance(first, ChangeEvent) and first.after == (1, "a", 10)
    assert isinstance(second, ChangeEvent) and second.after == (2, 99, "b", 20)
    assert change == SchemaChange(added, second.offset)
    admin(mysql_admin, f"ALTER TABLE `{table.name}` DROP COLUMN w")
    dropped = mysql.describe_table(conn, table)
    admin(mysql_admin, f"INSERT INTO `{table.name}` VALUES (3, 98, 'c')")
    change, third = mysql.stream_log(conn, [added], mid, mysql.current_offset(conn))
    assert isinstance(third, ChangeEvent) and third.after == (3, 98, "c")
    assert change == SchemaChange(dropped, third.offset)
    assert dropped.column_names == ("id", "x", "v")


def test_statements_that_empty_a_table_come_as_table_truncated(
        mysql: Dialect, conn: Any, make_table: Any, mysql_admin: Any) -> None:
    """TRUNCATE, DROP TABLE (then CREATE again), a RENAME TABLE swap and CREATE OR REPLACE
    write no row events: each captured table they hit comes as a TableTruncated in log
    order, at its statement; another table's do not; a read ending at one leaves it to the
    next read."""
    from sdk import TableTruncated

    table = make_table("CREATE TABLE {name} (id INT PRIMARY KEY)", [(1,)])
    other = make_table("CREATE TABLE {name} (id INT PRIMARY KEY)", [(1,)])
    spare = make_table("CREATE TABLE {name} (id INT PRIMARY KEY)")
    schema = mysql.describe_table(conn, table)
    name, db = f"`{table.name}`", f"`{table.schema}`"
    low = mysql.current_offset(conn)
    admin(mysql_admin, f"TRUNCATE `{other.name}`")
    admin(mysql_admin, f"INSERT INTO {name} VALUES (2)")
    admin(mysql_admin, f"/* a comment */ truncate table {db}.{name}")
    admin(mysql_admin, f"INSERT INTO {name} VALUES (3)")
    admin(mysql_admin, f"DROP TABLE IF EXISTS `{other.name}`, {name}")
    admin(mysql_admin, f"CREATE TABLE {name} (id INT PRIMARY KEY)")
    admin(mysql_admin, f"INSERT INTO {name} VALUES (4)")
    admin(mysql_admin, f"RENAME TABLE {name} TO `{table.name}_old`, `{spare.name}` TO {name}")
    admin(mysql_admin, f"INSERT INTO {name} VALUES (5)")
    admin(mysql_admin, f"CREATE OR REPLACE TABLE {name} (id INT PRIMARY KEY)")
    admin(mysql_admin, f"INSERT INTO {name} VALUES (6)")
    admin(mysql_admin, f"DROP TABLE `{table.name}_old`")
    high = mysql.current_offset(conn)
    items = [i for i in mysql.stream_log(conn, [schema], low, high)
             if isinstance(i, (ChangeEvent, TableTruncated))]
    assert [getattr(i, "key", None) or i.statement for i in items] == [  # type: ignore
        (2,), "TRUNCATE", (3,), "DROP TABLE", (4,), "RENAME TABLE", (5,),
        "CREATE OR REPLACE TABLE", (6,)]
    assert all(i.table == table for i in items)
    offsets = [i.offset for i in items]
    assert offsets == sorted(offsets, key=cmp_to_key(mysql.compare_offset))
    cut = items[3].offset
    assert [i for i in mysql.stream_log(conn, [schema], low, cut)
            if isinstance(i, (ChangeEvent, TableTruncated))] == items[:3]
    assert [i for i in mysql.stream_log(conn, [schema], cut, high)
            if isinstance(i, (ChangeEvent, TableTruncated))] == items[3:]


def test_partition_operations_that_remove_or_swap_rows_come_as_table_truncated(
        mysql: Dialect, conn: Any, make_table: Any, mysql_admin: Any) -> None:
    """TRUNCATE, EXCHANGE and DROP PARTITION change a partitioned table's rows with no row
    event: each comes as a TableTruncated of the table (not dropped), at its statement; the
    table exchanged with is hit too. ADD PARTITION keeps the rows: nothing."""
    from sdk import TableTruncated

    table = make_table("CREATE TABLE {name} (id INT PRIMARY KEY) PARTITION BY RANGE (id) "
                       "(PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN "
                       "(20))", [(1,), (11,)])
    swap = make_table("CREATE TABLE {name} (id INT PRIMARY KEY)", [(2,)])
    schemas = [mysql.describe_table(conn, t) for t in (table, swap)]
    name = f"`{table.name}`"
    low = mysql.current_offset(conn)
    admin(mysql_admin, f"ALTER TABLE {name} TRUNCATE PARTITION p1")
    admin(mysql_admin, f"INSERT INTO {name} VALUES (12)")
    admin(mysql_admin, f"ALTER TABLE {name} EXCHANGE PARTITION p0 WITH TABLE `{swap.name}`")
    admin(mysql_admin, f"ALTER TABLE {name} ADD PARTITION (PARTITION p2 VALUES LESS THAN (30))")
    admin(mysql_admin, f"INSERT INTO {name} VALUES (21)")
    admin(mysql_admin, f"ALTER TABLE {name} DROP PARTITION p1")
    high = mysql.current_offset(conn)
    items = [(i.table.name, getattr(i, "key", None) or (i.statement, i.dropped))  # type: ignore
             for i in mysql.stream_log(conn, schemas, low, high)
             if isinstance(i, (ChangeEvent, TableTruncated))]
    assert items == [
        (table.name, ("ALTER TABLE ... TRUNCATE PARTITION", False)), (table.name, (12,)),
        (table.name, ("ALTER TABLE ... EXCHANGE PARTITION", False)),
        (swap.name, ("ALTER TABLE ... EXCHANGE PARTITION", False)),
        (table.name, (21,)), (table.name, ("ALTER TABLE ... DROP PARTITION", False))]


def test_read_timeout_must_cover_two_heartbeats(mysql: Dialect, mysql_url: str) -> None:
    from sdk import ConfigurationError

    with pytest.raises(ConfigurationError, match="read_timeout"):
        mysql.connect(ConnectionConfig.from_url(mysql_url + "?heartbeat_seconds=2&read_timeout=3"))
    with pytest.raises(ConfigurationError, match="read_timeout"):
        mysql.connect(ConnectionConfig.from_url(mysql_url + "?read_timeout=never"))


@pytest.fixture
def proxied(mysql: Dialect, make_table: Any, mysql_url: str
            ) -> Iterator[tuple[FreezingProxy, Any, TableSchema]]:
    """A connection through a FreezingProxy (heartbeats every 0.2 s, read_timeout 2 s) and a
    new table."""
    table = make_table("CREATE TABLE {name} (id INT PRIMARY KEY)")
    config = ConnectionConfig.from_url(mysql_url)
    proxy = FreezingProxy(config.host or "127.0.0.1", config.port or 3306)
    url = mysql_url.replace(f"{config.host}:{config.port}", f"127.0.0.1:{proxy.port}")
    conn = mysql.connect(ConnectionConfig.from_url(url + "?heartbeat_seconds=0.2&read_timeout=2"))
    try:
        yield proxy, conn, mysql.describe_table(conn, table)
    finally:
        proxy.close()
        conn.close()


def test_a_binlog_connection_that_hangs_is_reopened(mysql: Dialect, proxied: Any,
                                                     mysql_admin: Any) -> None:
    """The network path to the server stops carrying bytes mid-stream without an error: after
    read_timeout of silence (heartbeats stop too) the connection is reopened at the last event
    read, and the changes before and after come through exactly once, in order."""
    proxy, conn, schema = proxied
    name = schema.table.name
    start = mysql.current_offset(conn)
    for i in range(1, 21):
        admin(mysql_admin, f"INSERT INTO `{name}` VALUES ({i})")
    stream = mysql.stream_log(conn, [schema], start, None)
    seen: list[int] = []
    frozen_at = 0.0

    def done(item: Any) -> bool:
        nonlocal frozen_at
        if isinstance(item, ChangeEvent):
            seen.append(item.key[0])
            if len(seen) == 10:  # mid-stream: the rest is already on its way
                proxy.freeze()
                frozen_at = time.monotonic()
                for i in range(21, 41):
                    admin(mysql_admin, f"INSERT INTO `{name}` VALUES ({i})")
        return len(seen) >= 40

    got = read_until(stream, 60, done)
    assert got, f"the stream hung after the freeze (changes seen: {seen})"
    assert seen == list(range(1, 41))
    assert time.monotonic() - frozen_at >= 2  # it waited out read_timeout, then reopened


def test_a_server_out_of_reach_is_a_retriable_error(mysql: Dialect, proxied: Any,
                                                    mysql_admin: Any) -> None:
    from sdk import RetriableError

    proxy, conn, schema = proxied
    stream = mysql.stream_log(conn, [schema], mysql.current_offset(conn), None)
    assert isinstance(next(stream), Heartbeat)
    proxy.close()  # connections reset, and no new one is accepted
    with pytest.raises(RetriableError, match=f"127.0.0.1:{proxy.port} failed") as caught:
        for _ in stream:
            pass
    password = conn.settings["password"]
    assert not password or password not in str(caught.value)
    with pytest.raises(Exception) as lost, conn.raw.cursor() as cur:  # the driver's error
        cur.execute("SELECT 1")
    assert mysql.is_retriable(lost.value)
    with pytest.raises(Exception) as bad:
        admin(mysql_admin, "SELEC 1")
    assert not mysql.is_retriable(bad.value)


def test_change_indexes_count_rows_of_tables_not_read(mysql: Dialect, conn: Any,
                                                       make_table: Any,
                                                       mysql_admin: Any) -> None:
    """``n`` counts every row of the transaction, so an offset names the same change whatever
    tables a read follows, although rows of tables not read are left undecoded when no change
    of a table read follows them."""
    table = make_table("CREATE TABLE {name} (id INT PRIMARY KEY)")
    other = make_table("CREATE TABLE {name} (id INT PRIMARY KEY, v VARCHAR(10))")
    schema, other_schema = (mysql.describe_table(conn, t) for t in (table, other))
    low = mysql.current_offset(conn)
    admin(mysql_admin, "BEGIN")
    admin(mysql_admin, f"INSERT INTO `{other.name}` VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    admin(mysql_admin, f"INSERT INTO `{table.name}` VALUES (1), (2)")
    admin(mysql_admin, f"INSERT INTO `{other.name}` VALUES (4, 'd')")
    admin(mysql_admin, f"INSERT INTO `{table.name}` VALUES (3)")
    admin(mysql_admin, f"INSERT INTO `{other.name}` VALUES (5, 'e')")
    admin(mysql_admin, "COMMIT")
    admin(mysql_admin, f"INSERT INTO `{other.name}` VALUES (6, 'f')")  # a foreign transaction
    high = mysql.current_offset(conn)
    alone = log(mysql, conn, [schema], low, high)
    both = log(mysql, conn, [schema, other_schema], low, high)
    assert [e.offset["n"] for e in alone] == [3, 4, 6]
    assert [e.offset for e in both if e.table == table] == [e.offset for e in alone]
    assert [e.key for e in both if e.table == other] == [(i,) for i in range(1, 7)]
    assert [e.key for e in log(mysql, conn, [schema], alone[1].offset, high)] == [(2,), (3,)]
    assert [e.key for e in log(mysql, conn, [schema, other_schema], alone[2].offset, high)] \
        == [(3,), (5,), (6,)]


def test_heartbeats_continue_after_a_prepared_xa_transaction(
        mysql: Dialect, make_table: Any, mysql_admin: Any, mysql_url: str) -> None:
    """XA PREPARE ends its binlog event group without an Xid: the stream still knows it is at
    a transaction boundary when the server's heartbeat says it has nothing more to send."""
    import pymysql

    quiet = make_table("CREATE TABLE {name} (id INT PRIMARY KEY)")
    other = make_table("CREATE TABLE {name} (id INT PRIMARY KEY)")
    conn = mysql.connect(ConnectionConfig.from_url(mysql_url + "?heartbeat_seconds=0.2"))
    xa = pymysql.connect(host="127.0.0.1", user="root", database="sdk_test", autocommit=True)
    xid = f"sdk_{uuid.uuid4().hex[:12]}"
    committed = False
    try:
        schema = mysql.describe_table(conn, quiet)
        start = mysql.current_offset(conn)
        with xa.cursor() as cur:
            for sql in (f"XA START '{xid}'", f"INSERT INTO `{other.name}` VALUES (1)",
                        f"XA END '{xid}'", f"XA PREPARE '{xid}'"):
                cur.execute(sql)
        with mysql_admin.cursor() as cur:
            cur.execute("SHOW BINLOG STATUS")
            file, pos = cur.fetchone()[:2]
        prepared = Offset("mysql", file=file, pos=pos, n=0)
        got = read_until(mysql.stream_log(conn, [schema], start, None), 20,
                         lambda item: mysql.compare_offset(item.offset, prepared) >= 0)
        assert got, "no heartbeat past the XA PREPARE within 20 s"
        assert all(isinstance(item, Heartbeat) for item in got)
        with xa.cursor() as cur:
            cur.execute(f"XA COMMIT '{xid}'")
        committed = True
    finally:
        if not committed:
            with xa.cursor() as cur:
                cur.execute(f"XA ROLLBACK '{xid}'")
        xa.close()
        conn.close()


def test_connections_share_the_preferred_tls_context() -> None:
    """pymysql would load the CA store for every connection (~40 ms each, per split task);
    ours build that context once per process, and explicit TLS options still get their own."""
    pytest.importorskip("pymysql")
    from sdk_mysql._connect import open_connection

    first = open_connection(host="127.0.0.1", defer_connect=True)
    second = open_connection(host="127.0.0.1", defer_connect=True)
    assert first.ctx is second.ctx and not first._ssl_required
    own = open_connection(host="127.0.0.1", defer_connect=True, ssl={"check_hostname": False})
    assert own.ctx is not first.ctx and own._ssl_required


ARROW = """CREATE TABLE {name} (
  id BIGINT UNSIGNED PRIMARY KEY, ti TINYINT, tu TINYINT UNSIGNED, si SMALLINT, mi MEDIUMINT,
  i INT, iu INT UNSIGNED, bi BIGINT, d2 DECIMAL(10,2), d38 DECIMAL(38,10), db DOUBLE,
  ch CHAR(3), vc VARCHAR(300), tx MEDIUMTEXT, vb VARBINARY(10), bl MEDIUMBLOB,
  e ENUM('a','b'), s SET('x','y','z'), dt DATE, dtt DATETIME(6), dt0 DATETIME,
  ts TIMESTAMP(6) NULL
) CHARSET utf8mb4"""
ARROW_ROWS = [
    (18446744073709551615, -128, 255, -32768, -8388608, -2147483648, 4294967295,
     -9223372036854775808, "-12345678.91", "-1234567890123456789012345678.0123456789",
     1.7976931348623157e308, "ab", "😀 é ' \"\t\n\\" + "x" * 250, "y" * 70000,
     b"\x00\xff", bytes(range(256)) * 300, "b", "x,z", "2024-02-29",
     "9999-12-31 23:59:59.999999", "1000-01-01 00:00:00", "2038-01-19 03:14:07.999999"),
    (1,) + (None,) * 21,
    (2, 0, 0, 0, 0, 0, 0, 0, "0", "0.0000000001", -0.0, "", "", "", b"", b"", "a", "",
     "0000-00-00", "0000-00-00 00:00:00", "2024-00-10 00:00:00", "0000-00-00 00:00:00"),
    (3, 127, 0, 32767, 8388607, 2147483647, 0, 9223372036854775807, "99999999.99",
     "-0.0000000001", 5e-324, "abc", "é", "z", b"1", b"2", "a", "x,y,z", "0000-01-01",
     "2024-05-00 12:00:00", "2024-05-06 07:08:09", "1970-01-01 00:00:01"),
]


def test_arrow_reads_equal_the_row_path(mysql: Dialect, conn: Any, make_table: Any,
                                        mysql_admin: Any, mysql_url: str) -> None:
    """``read_range_arrow`` cuts the protocol's packets into columns: for every type it takes,
    at the edges (lengths of 1, 2 and 3 bytes, NULLs, zero dates and dates Python cannot hold
    as NULL under ``zero_dates=null``, -0, the extreme integers and decimals), it gives the
    Arrow table the row path's values make; bounds are the same; a table with a type it does
    not take, a value Arrow refuses, and (by default) a split holding a date Python cannot
    hold, which the row path reads as a BadValue, are left to ``read_range``."""
    from sdk.dialect.tableformat import arrow_rows

    table = make_table(ARROW)
    with sql_mode(mysql_admin, "ALLOW_INVALID_DATES"), mysql_admin.cursor() as cur:
        cur.executemany(f"INSERT INTO `{table.name}` VALUES ({', '.join(['%s'] * 22)})",
                        ARROW_ROWS)
    schema = mysql.describe_table(conn, table)
    nulls = mysql.connect(ConnectionConfig.from_url(with_query(mysql_url, zero_dates="null")))
    try:
        for split in (SnapshotSplit(table, 0, None, None), SnapshotSplit(table, 1, (2,), (3,)),
                      SnapshotSplit(table, 2, (3,), None), SnapshotSplit(table, 3, (9,), None)):
            rows = [r for b in mysql.read_range(nulls, schema, split, 2) for r in b]
            got = mysql.read_range_arrow(nulls, schema, split)
            assert got is not None and got.num_rows == len(rows)
            want = arrow_rows(schema, rows).sort_by("id")
            got = got.sort_by("id")
            for name in schema.column_names:
                assert got.column(name).to_pylist() == want.column(name).to_pylist(), name
                assert got.column(name).type == want.column(name).type, name
        whole = SnapshotSplit(table, 0, None, None)
        read = {r[0]: r for b in mysql.read_range(nulls, schema, whole, 10) for r in b}
        assert read[Decimal(2)][18:] == (None, None, None, None)
        assert mysql.read_range_arrow(nulls, schema, whole) is not None
        # by default the row path reads them as BadValues, of the text SELECT gives
        read = {r[0]: r for b in mysql.read_range(conn, schema, whole, 10) for r in b}
        reason = read[Decimal(2)][18].reason
        assert reason.startswith("is not a date") and "zero_dates=null" in reason
        assert read[Decimal(2)][18:] == (
            BadValue("0000-00-00", reason), BadValue("0000-00-00 00:00:00.000000", reason),
            BadValue("2024-00-10 00:00:00", reason),
            BadValue("0000-00-00 00:00:00.000000", reason))
        assert read[Decimal(3)][18:20] == (BadValue("0000-01-01", reason),
                                           BadValue("2024-05-00 12:00:00.000000", reason))
        # ... and the Arrow path, which would read them as NULL, leaves such a split to it
        for split in (whole, SnapshotSplit(table, 1, (2,), (3,)),
                      SnapshotSplit(table, 2, (3,), None)):
            assert mysql.read_range_arrow(conn, schema, split) is None, split
        good = SnapshotSplit(table, 4, None, (2,))  # the row of NULLs
        got = mysql.read_range_arrow(conn, schema, good)
        assert got is not None and got.column("id").to_pylist() == [1]
        # 2024-02-30 is stored under ALLOW_INVALID_DATES: Arrow refuses it, the row path reads
        # NULL (zero_dates=null) or a BadValue
        with sql_mode(mysql_admin, "ALLOW_INVALID_DATES"):
            admin(mysql_admin, f"INSERT INTO `{table.name}` (id, dt) VALUES (4, '2024-02-30')")
        assert mysql.read_range_arrow(nulls, schema, whole) is None
        late = SnapshotSplit(table, 0, (4,), None)
        assert next(r for b in mysql.read_range(nulls, schema, late, 9) for r in b)[18] is None
        assert next(r for b in mysql.read_range(conn, schema, late, 9) for r in b)[18] == \
            BadValue("2024-02-30", reason)
        other = make_table("CREATE TABLE {name} (id INT PRIMARY KEY, f FLOAT)", [(1, 1.5)])
        assert mysql.read_range_arrow(nulls, mysql.describe_table(nulls, other),
                                      SnapshotSplit(other, 0, None, None)) is None
        # the engine's split read takes the Arrow path in a snapshot view, when asked for
        # columns
        from sdk.algorithm.reader import read_split

        arrow = read_split(mysql, nulls, schema, late, SyncOptions(), columnar=True)
        assert arrow.columns is None and arrow.count == 2  # 2024-02-30: left to read_range
        split = SnapshotSplit(table, 1, (2,), (4,))
        arrow = read_split(mysql, nulls, schema, split, SyncOptions(), columnar=True)
        plain = read_split(mysql, nulls, schema, split, SyncOptions())
        assert arrow.columns is not None and arrow.rows == [] and plain.columns is None
        assert arrow.count == plain.count == 2 and arrow.watermark == plain.watermark
        assert arrow.columns.sort_by("id").equals(
            arrow_rows(schema, plain.rows).sort_by("id").cast(arrow.columns.schema))
        # by default: the row path's BadValues, for the engine to name
        arrow = read_split(mysql, conn, schema, split, SyncOptions(), columnar=True)
        assert arrow.columns is None and arrow.count == 2
        assert sorted(r[0] for r in arrow.rows) == [2, 3]
        assert all(type(v) is BadValue for r in arrow.rows for v in r[18:20])
        assert conn.query("SELECT 1") == [(1,)]  # the connections are left ready
        assert nulls.query("SELECT 1") == [(1,)]
    finally:
        nulls.close()


class _Events:
    """What ``SHOW BINLOG EVENTS`` answers, for :func:`sdk_mysql._gtid_after`."""

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self.rows = rows

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        return self.rows


def test_an_arrow_read_of_many_reads_off_the_socket_equals_the_row_path(
        mysql: Dialect, conn: Any, make_table: Any) -> None:
    """A split of several megabytes comes off the socket in many reads, packets cut across
    them (values of 0 to 70,000 bytes): the Arrow path reads every row as the row path does,
    and the connection serves the next query."""
    from sdk.dialect.tableformat import arrow_rows

    rows = [(i, "v" * (i * 97 % 2900), bytes([i % 256]) * (70_000 if i % 300 == 7 else i % 40))
            for i in range(1500)]
    table = make_table("CREATE TABLE {name} (id INT PRIMARY KEY, v VARCHAR(3000), "
                       "b MEDIUMBLOB)", rows)
    schema = mysql.describe_table(conn, table)
    split = SnapshotSplit(table, 0, None, None)
    got = mysql.read_range_arrow(conn, schema, split)
    assert got is not None and got.num_rows == len(rows)
    want = arrow_rows(schema, [r for b in mysql.read_range(conn, schema, split, 500) for r in b])
    got, want = got.sort_by("id"), want.sort_by("id")
    for name in schema.column_names:
        assert got.column(name).equals(want.column(name)), name
    assert got.column("b").to_pylist() == [r[2] for r in rows]
    assert mysql.read_range_arrow(conn, schema, SnapshotSplit(table, 1, (1499,), None)) \
        .column("id").to_pylist() == [1499]


def test_arrow_text_views_hold_up_to_12_bytes_zero_padded_and_point_at_longer_ones() -> None:
    """A text column's binary views, cut from row packets made here: a value of at most 12
    bytes lies in its view, the bytes after it zero (Arrow compares views 16 bytes at a
    time); a longer one keeps its first four bytes and its offset in the rows' bytes; a NULL
    is invalid; a value ending the rows' bytes is read too."""
    import numpy as np
    import pyarrow as pa

    from sdk import Column, LogicalType
    from sdk_mysql import _arrow

    def value(text: bytes | None) -> bytes:
        if text is None:
            return b"\xfb"
        return (bytes([len(text)]) if len(text) < 251 else
                b"\xfc" + len(text).to_bytes(2, "little")) + text

    texts = [b"", b"a", b"x" * 11, b"twelve bytes", b"thirteen byte", b"long" * 100, None,
             "é".encode() * 6, b"last"]
    packets = [value(b"%d" % i) + value(t) for i, t in enumerate(texts)]
    schema = TableSchema(TableId("db", "t"), (Column("id", LogicalType.INT64, "bigint"),
                                              Column("v", LogicalType.STRING, "varchar(500)")),
                         ("id",), key=("id",))
    got = _arrow._columns(schema, packets, null_dates=False)
    assert got.column("v").to_pylist() == [None if t is None else t.decode() for t in texts]
    assert got.column("id").to_pylist() == list(range(len(texts)))
    data = np.frombuffer(b"".join([*packets, bytes(12)]), dtype=np.uint8)
    heads = np.lib.stride_tricks.as_strided(data, shape=(len(data) - 11, 12), strides=(1, 1))
    start = np.array([sum(map(len, packets[:i])) + len(value(b"%d" % i)) + 1 +
                      (2 if t is not None and len(t) >= 251 else 0)
                      for i, t in enumerate(texts)], dtype=np.int64)
    length = np.array([len(t or b"") for t in texts], dtype=np.int64)
    cut = _arrow._texts(data, heads, start, length, np.array([t is None for t in texts]))
    views = np.frombuffer(cut.buffers()[1], dtype=np.uint8).reshape(-1, 16)
    for row, text in zip(views, texts, strict=True):
        size = len(text or b"")
        assert int.from_bytes(row[:4].tobytes(), "little") == size
        if size <= 12:
            assert row[4:16].tobytes() == (text or b"").ljust(12, b"\0")
        else:
            at = int.from_bytes(row[12:16].tobytes(), "little")
            assert row[4:8].tobytes() == text[:4] and row[8:12].tobytes() == bytes(4)
            assert data[at:at + size].tobytes() == text
    assert cut.cast(pa.string()).to_pylist() == got.column("v").to_pylist()


def test_the_gtid_position_after_a_group_committed_transaction() -> None:
    from sdk_mysql import _gtid_after

    events = _Events([("b.1", 100, "Gtid", 1, 140, "BEGIN GTID 0-1-6 cid=33041"),
                      ("b.1", 140, "Query", 1, 200, "insert ..."),
                      ("b.1", 200, "Xid", 1, 230, "COMMIT /* xid=9 */"),
                      ("b.1", 230, "Gtid", 1, 270, "GTID 1-1-7"),
                      ("b.1", 270, "Query", 1, 330, "create table ..."),
                      ("b.1", 330, "Gtid", 1, 370, "BEGIN GTID 0-1-8")])
    assert _gtid_after(events, ("b.1", 100, "0-1-5"), "b.1", 230) == "0-1-6"  # type: ignore
    assert _gtid_after(events, ("b.1", 100, "0-1-5"), "b.1", 330) in (  # type: ignore
        "0-1-6,1-1-7", "1-1-7,0-1-6")
    assert _gtid_after(events, ("b.1", 100, "0-1-5"), "b.1", 300) is None  # type: ignore
