"""Character sets other than utf8mb4 on MariaDB (issue 59, "every value exact"): in a database
whose default character set is latin1, read by the dialect's connection with no charset in
its URL, columns of latin1 (the default), cp1251, utf8mb3, ucs2, greek, euckr, armscii8 (which
Python has no codec for) and utf8mb4, a latin1 CHAR, ENUM and SET come out of the snapshot as
the server converts them to utf8mb4, and out of the binlog equal to that: also the bytes
Python's codecs read otherwise or not at all (latin1's 0x81, 0x8D, 0x8F, 0x90 and 0x9D, the C1
controls MariaDB maps them to; cp1251's undefined 0x98, which the server gives as ``?``;
greek's 0xA1; euckr's UHC extension). A multi-byte character Python's codec does not read is
a BadValue, never an error that stops the log. Text keys of a character set whose bytes do not
sort as code points are split in Python's order, and a TRUNCATE is read in the character set
its client sent it in."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.servers import MYSQL_ADMIN_URL

from sdk import (
    BadValue,
    ChangeEvent,
    ConnectionConfig,
    SnapshotSplit,
    TableId,
    TableSchema,
    get_dialect,
)

pytestmark = pytest.mark.mysql

TABLE = """CREATE TABLE `{db}`.`enc` (id INT PRIMARY KEY, d VARCHAR(40), tx TEXT,
  c1251 VARCHAR(40) CHARACTER SET cp1251, u3 VARCHAR(40) CHARACTER SET utf8mb3,
  u2 VARCHAR(40) CHARACTER SET ucs2, u4 TEXT CHARACTER SET utf8mb4,
  gr VARCHAR(10) CHARACTER SET greek, ch CHAR(8), e ENUM('glücklich', '€uro', 'x'),
  s SET('ä', 'ö', '‰'), kr VARCHAR(10) CHARACTER SET euckr,
  am VARCHAR(10) CHARACTER SET armscii8)"""
ROWS = [  # (values as the server takes them in a utf8mb4 session's text, or as bytes)
    "'Grüße € Œ „x“', 'Ærø ½ ÿ ‰', 'Привет ђ Ё', 'Grüße ☃', 'Grüße ☃ 日本', "
    "'Grüße 😀', 'αβγ Ωώ', 'ü€Œ', '€uro', 'ä,‰', '한국어 갂', 'Հայերեն'",
    "_latin1 0x78818D8F909D, _latin1 0x80FF, _cp1251 0x7998, NULL, NULL, NULL, "
    "_greek 0xA1A2AF, _latin1 0x9D81, 'glücklich', '', NULL, _armscii8 0xFF",
    "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL",
]


@pytest.fixture
def latin1_db(mysql_admin: Any, mysql_url: str) -> Iterator[tuple[str, str]]:
    """A database whose default character set is latin1 and the dialect's URL for it (as the
    CDC user, no charset option); dropped afterwards."""
    name = f"sdk_enc_{uuid.uuid4().hex[:8]}"
    with mysql_admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET latin1")
    config = ConnectionConfig.from_url(mysql_url)
    url = f"mysql://{config.user}:{config.password}@{config.host}:{config.port or 3306}/{name}"
    try:
        yield name, url
    finally:
        with mysql_admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


def _insert(admin: Any, db: str, first: int) -> None:
    with admin.cursor() as cur:
        for i, row in enumerate(ROWS):
            cur.execute(f"INSERT INTO `{db}`.`enc` VALUES ({first + i}, {row})")


def test_every_character_set_reads_the_same_in_the_snapshot_and_the_binlog(
        mysql_admin: Any, latin1_db: tuple[str, str]) -> None:
    db, url = latin1_db
    my = get_dialect("mysql")
    with mysql_admin.cursor() as cur:
        cur.execute(TABLE.format(db=db))
        cur.execute("SELECT CHARACTER_SET_NAME FROM information_schema.COLUMNS WHERE "
                    "TABLE_SCHEMA = %s AND COLUMN_NAME = 'd'", (db,))
        assert cur.fetchone() == ("latin1",)
    _insert(mysql_admin, db, 1)
    conn = my.connect(ConnectionConfig.from_url(url))
    try:
        with conn.raw.cursor() as cur:  # SET NAMES after the login, over the defaults
            cur.execute("SELECT @@character_set_client, @@character_set_connection, "
                        "@@character_set_results, @@character_set_database")
            assert cur.fetchone() == ("utf8mb4", "utf8mb4", "utf8mb4", "latin1")
        schema = my.describe_table(conn, TableId(db, "enc"))
        whole = SnapshotSplit(schema.table, 0, None, None)
        snapshot = {r[0]: tuple(r) for b in my.read_range(conn, schema, whole, 100) for r in b}
        arrow = my.read_range_arrow(conn, schema, whole)
        low = my.current_offset(conn)
        _insert(mysql_admin, db, 1001)
        logged = {e.key[0] - 1000: (e.key[0] - 1000, *e.after[1:])
                  for e in my.stream_log(conn, [schema], low, my.current_offset(conn))
                  if isinstance(e, ChangeEvent) and e.after is not None}
    finally:
        conn.close()
    with mysql_admin.cursor() as cur:  # the server's own conversion to utf8mb4
        cur.execute(f"SELECT * FROM `{db}`.`enc` WHERE id < 1000")
        server = {r[0]: tuple(r) for r in cur.fetchall()}
    assert snapshot == server
    assert logged == snapshot
    assert arrow is not None  # the columns cut from the protocol's packets: the same text
    assert {r["id"]: tuple(r.values()) for r in arrow.to_pylist()} == snapshot
    assert snapshot[1][1:] == ("Grüße € Œ „x“", "Ærø ½ ÿ ‰", "Привет ђ Ё", "Grüße ☃",
                               "Grüße ☃ 日本", "Grüße 😀", "αβγ Ωώ", "ü€Œ", "€uro", "ä,‰",
                               "한국어 갂", "Հայերեն")
    assert snapshot[2][1:4] == ("x\x81\x8d\x8f\x90\x9d", "€ÿ", "y?")
    assert snapshot[2][7:9] == ("ʽʼ―", "\x9d\x81")  # noqa: RUF001 (greek's own)


def test_a_character_python_s_codec_does_not_read_is_a_bad_value_in_the_binlog(
        mysql_admin: Any, latin1_db: tuple[str, str]) -> None:
    """ujis's user-defined area (0xF5A1 is U+E000 to MariaDB) is not in Python's euc_jp: the
    change reads as a BadValue, which the engine names and errors.mode applies to."""
    db, url = latin1_db
    my = get_dialect("mysql")
    with mysql_admin.cursor() as cur:
        cur.execute(f"CREATE TABLE `{db}`.`jp` (id INT PRIMARY KEY, v VARCHAR(10) CHARACTER SET "
                    "ujis)")
    conn = my.connect(ConnectionConfig.from_url(url))
    try:
        schema = my.describe_table(conn, TableId(db, "jp"))
        low = my.current_offset(conn)
        with mysql_admin.cursor() as cur:
            cur.execute(f"INSERT INTO `{db}`.`jp` VALUES (1, _ujis 0xA4A2F5A1), (2, 'あ')")
        logged = [e.after for e in my.stream_log(conn, [schema], low, my.current_offset(conn))
                  if isinstance(e, ChangeEvent)]
        whole = SnapshotSplit(schema.table, 0, None, None)
        snapshot = [r for b in my.read_range(conn, schema, whole, 10) for r in b]
    finally:
        conn.close()
    assert snapshot == [(1, "あ\ue000"), (2, "あ")]
    assert logged == [(1, BadValue("あ\\xf5\\xa1", "is not ujis text Python's ujis codec "
                                                    "reads (byte 0xf5 at offset 2)")),
                      (2, "あ")]


@pytest.mark.parametrize("charset", ["latin1", "cp1251"])
def test_text_keys_split_in_python_order_whatever_the_character_set_s_byte_order(
        mysql_admin: Any, latin1_db: tuple[str, str], charset: str) -> None:
    """latin1's bytes 0x80-0x9F are cp1252's (€ is 0x80, below é's 0xE9, but U+20AC is
    above U+00E9); cp1251's letters Ё, ђ, ў and its € and № sort otherwise in bytes than in
    code points: boundaries, ranges and the first and last keys follow Python's order, under
    the column's binary collation and its default one."""
    db, url = latin1_db
    keys = {"latin1": ["a", "z", "é", "ÿ", "€", "Œ", "‚", "™", "B", "š"],  # noqa: RUF001
            "cp1251": ["a", "z", "Я", "а", "Ё", "ђ", "№", "€", "ў", "ї"]}[charset]  # noqa: RUF001
    my = get_dialect("mysql")
    with mysql_admin.cursor() as cur:
        cur.execute(f"CREATE TABLE `{db}`.`keyed` (k VARCHAR(8) CHARACTER SET {charset} "
                    f"COLLATE {charset}_bin PRIMARY KEY, c VARCHAR(8) CHARACTER SET {charset} "
                    "NOT NULL UNIQUE, n INT)")
        cur.executemany(f"INSERT INTO `{db}`.`keyed` VALUES (%s, %s, %s)",
                        [(k, k, i) for i, k in enumerate(keys)])
    conn = my.connect(ConnectionConfig.from_url(url))
    try:
        described = my.describe_table(conn, TableId(db, "keyed"))
        ordered = sorted(keys)
        for key in ("k", "c"):
            table = TableSchema(described.table, described.columns, described.primary_key,
                                described.unique_keys, (key,))
            stats = my.table_stats(conn, table)
            assert (stats.min_key, stats.max_key) == ((ordered[0],), (ordered[-1],))
            bounds: list[Any] = [None]
            while (step := my.next_boundary(conn, table, bounds[-1], 1)) is not None:
                bounds.append(step)
            assert [b[0] for b in bounds[1:]] == ordered[1:]
            for i, (start, end) in enumerate(zip(bounds, [*bounds[1:], None], strict=True)):
                split = SnapshotSplit(table.table, i, start, end)
                rows = [r for b in my.read_range(conn, table, split, 10) for r in b]
                assert [table.key_of(r) for r in rows] == [(ordered[i],)]
    finally:
        conn.close()


@pytest.mark.parametrize("client", ["latin1", "cp1251", "utf8mb4"])
def test_a_truncate_is_read_in_the_character_set_its_client_sent_it_in(
        mysql_admin: Any, latin1_db: tuple[str, str], client: str) -> None:
    """The binlog keeps a statement as its client sent it: a latin1 client's ``TRUNCATE
    `tàble``` is other bytes than a utf8mb4 one's, read in the session's character set (its
    Query event's status variables say which), so the table is read again all the same."""
    import pymysql

    db, url = latin1_db
    name = {"latin1": "tàble", "cp1251": "таблица", "utf8mb4": "tàble ☃"}[client]
    my = get_dialect("mysql")
    with mysql_admin.cursor() as cur:
        cur.execute(f"CREATE TABLE `{db}`.`{name}` (id INT PRIMARY KEY)")
        cur.execute(f"INSERT INTO `{db}`.`{name}` VALUES (1)")
    admin = ConnectionConfig.from_url(MYSQL_ADMIN_URL)
    other = pymysql.connect(host=admin.host, port=admin.port or 3306, user=admin.user,
                            password=admin.password or "", charset=client, autocommit=True)
    conn = my.connect(ConnectionConfig.from_url(url))
    try:
        schema = my.describe_table(conn, TableId(db, name))
        low = my.current_offset(conn)
        with other.cursor() as cur:
            cur.execute(f"TRUNCATE TABLE `{db}`.`{name}`")
        items = list(my.stream_log(conn, [schema], low, my.current_offset(conn)))
    finally:
        conn.close()
        other.close()
    assert [(type(i).__name__, i.table) for i in items] == [("TableTruncated", schema.table)]
