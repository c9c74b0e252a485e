"""One form per type whatever the path (#59): rows synced by ``run_sync`` through the snapshot,
then the same values again through the log, land in a PostgreSQL and a SQLite target in one
form, the one the source prints. What is compared is what each database prints: the output
function's text in PostgreSQL (as psql shows it), ``CAST(col AS CHAR)`` in MariaDB, and
SQLite's stored value with its ``typeof``. Intervals and TIME are left out (their forms are
another change's)."""

from __future__ import annotations

import datetime as dt
import re
import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.servers import with_query

pytestmark = [pytest.mark.spark, pytest.mark.slow]

LOGGED = 1000
"""The log's copy of snapshot row ``i`` has id ``LOGGED + i``."""

PG_COLUMNS = """i2 int2, i4 int4, i8 int8, f4 float4, f8 float8, n numeric(38,30),
  m numeric(10,2), b bool, t text, v varchar(8), c char(5), y bytea, d date, ts timestamp(6),
  tz timestamptz(6), u uuid, j json, jb jsonb, ip inet, net cidr, mac macaddr, a int4[],
  ta text[], bits bit(5), vb varbit(8)"""
PG_ROWS = [
    "(1, 2, 3, 1.5, 2.5, 1.5, 1.5, true, 'x', 'y', 'ab', '\\x00ff', '2024-02-29', "
    "'2024-01-02 03:04:05.5', '2024-01-02 03:04:05.25+00', "
    "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{\"a\": 1,  \"b\": [1, 2]}', "
    "'{\"b\": 2, \"a\": 1}', '2001:db8::1', '2001:db8::/32', '08:00:2b:01:02:03', "
    "'{1,2,NULL}', '{\"a b\",c}', B'10101', B'101')",
    "(-32768, -2147483648, -9223372036854775808, 3.4028235e38, 1.7976931348623157e308, "
    "-0.000000000000000000000000000001, -99999999.99, false, '', 'é''\"', ' a ', '\\x', "
    "'0001-01-01', '0001-01-01 00:00:00', '9999-12-31 23:59:59.999999+00', "
    "'00000000-0000-0000-0000-000000000000', '[]', '{}', '192.168.0.1', '10.0.0.0/8', "
    "'ff:ff:ff:ff:ff:ff', '{}', '{}', B'00000', B'')",
    "(0, 0, 0, -0.0, -0.0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
    "NULL, '192.168.0.1/24', '::/0', NULL, NULL, NULL, NULL, NULL)",
    "(32767, 2147483647, 9223372036854775807, 1e-45, 5e-324, "
    "99999999.999999999999999999999999999999, 0.01, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
    "NULL, NULL, NULL, NULL, '::ffff:1.2.3.4', '2001:db8::1/128', NULL, NULL, NULL, NULL, "
    "NULL)",
    "(NULL, NULL, NULL, 'NaN', 'Infinity', 0.1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
    "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
    "(NULL, NULL, NULL, '-Infinity', 0.1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
    "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
]


def _pg_text(ref: str) -> str:
    """SQL of ``ref`` as psql shows it: its type's output function (a cast to text differs
    for ``inet``), NULL for a NULL."""
    return f"CASE WHEN {ref} IS NOT NULL THEN concat({ref}) END"


def _names(columns: str) -> list[str]:
    """The column names of a column list (whose types have no ``, `` in them)."""
    return [part.split()[0] for part in re.split(r",\s+", columns)]


def _sqlite_rows(path: Path, table: str, names: list[str]) -> dict[int, list[tuple[Any, str]]]:
    """Each row of the SQLite mirror by id: every value as sqlite3 reads it (a real's exact
    double) with its ``typeof``."""
    terms = ", ".join(f'"{n}", typeof("{n}")' for n in names)
    with sqlite3.connect(path) as conn:
        rows = conn.execute(f'SELECT id, {terms} FROM "{table}"').fetchall()
    return {r[0]: [(r[1 + 2 * k], r[2 + 2 * k]) for k in range(len(names))] for r in rows}


def _exact(value: Any) -> Any:
    """A stored value that tells -0.0 from 0.0 and equals itself when NaN."""
    return repr(value) if isinstance(value, float) else value


def _same_phases(rows: dict[int, Any], count: int, what: str) -> None:
    """Snapshot row ``i`` and its log copy ``LOGGED + i`` alike, column by column."""
    for i in range(1, count + 1):
        snapshot, logged = rows[i], rows[LOGGED + i]
        assert [_exact(v) for v in snapshot] == [_exact(v) for v in logged], \
            f"{what} row {i}: snapshot {snapshot} != log {logged}"


def _sync(url: str, target: str, tables: str, checkpoint: Path, **named: Any) -> None:
    from sdk.spark.sync import run_sync

    run_sync(url, target, tables, str(checkpoint), "caught-up",
             {"snapshot.split.size": "3"}, **named)


def _sqlite_form(text: str | None, stored: Any, kind: str, name: str) -> bool:
    """Whether SQLite's ``stored`` value (of storage class ``kind``) is the form
    docs/dialects/sqlite.md gives for a source value printed ``text``."""
    if text is None:
        return stored is None and kind == "null"
    if kind == "real":  # SQLite's REAL keeps no -0 (docs/dialects/sqlite.md)
        return bool(_exact(stored) == _exact(float(text) + 0.0))
    if kind == "integer":
        return str(stored) == {"t": "1", "f": "0"}.get(text, text) if name == "b" \
            else str(stored) == text
    if kind == "blob":
        return bool(stored.hex() == text.removeprefix("\\x"))
    if text in ("NaN",) or name in ("i2", "n", "m", "t", "v", "c", "u", "j", "jb", "ip", "net",
                                    "mac", "a", "ta", "bits", "vb", "d"):
        return bool(stored == text)
    parse: Callable[[str], Any] = dt.datetime.fromisoformat
    return bool(parse(stored) == parse(text))


ARROW_COLUMNS = "id, i2, i4, i8, f4, f8, n, m, b, t, v, c, y, d, ts, tz"
"""The columns of a second table, whose snapshot is read by the Arrow path (``_arrow``)."""


@pytest.mark.postgres
def test_postgres_values_one_form_through_snapshot_and_log(
        spark: Any, postgres_admin: Any, postgres_url: str, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:10]
    name, schema = f"forms_{tag}", f"sdk_forms_{tag}"
    arrow = f"{name}_arrow"
    postgres_admin.execute(f"CREATE TABLE {name} (id int8 PRIMARY KEY, {PG_COLUMNS})")
    postgres_admin.execute(f"CREATE TABLE {arrow} AS SELECT {ARROW_COLUMNS} FROM {name}")
    postgres_admin.execute(f"ALTER TABLE {arrow} ADD PRIMARY KEY (id)")
    postgres_admin.execute(f"GRANT SELECT ON {name}, {arrow} TO sdk_cdc")
    postgres_admin.execute(f"CREATE PUBLICATION sdk_p_{tag} FOR TABLE {name}, {arrow}")
    postgres_admin.execute(f"CREATE SCHEMA {schema} AUTHORIZATION sdk_cdc")
    slots = [f"sdk_s_{tag}", f"sdk_t_{tag}"]
    urls = [with_query(postgres_url, slot=s, publication=f"sdk_p_{tag}") for s in slots]
    mirror = tmp_path / "m.db"

    def insert(first: int) -> None:
        for j, row in enumerate(PG_ROWS):
            postgres_admin.execute(f"INSERT INTO {name} VALUES ({first + j}, {row[1:]}")
        postgres_admin.execute(f"INSERT INTO {arrow} SELECT {ARROW_COLUMNS} FROM {name} "
                               "WHERE id >= %s", (first,))

    def sync() -> None:
        _sync(urls[0], f"sqlite:///{mirror}", f"public.{name}*", tmp_path / "ck_sqlite")
        _sync(urls[1], postgres_url, f"public.{name}*", tmp_path / "ck_pg",
              target_schema=schema)

    try:
        insert(1)
        sync()  # the snapshot
        insert(LOGGED + 1)
        sync()  # the log
        _check_postgres(postgres_admin, name, _names(PG_COLUMNS), schema, mirror)
        _check_postgres(postgres_admin, arrow, ARROW_COLUMNS.split(", ")[1:], schema, mirror)
    finally:
        for slot in slots:
            postgres_admin.execute("SELECT pg_drop_replication_slot(slot_name) FROM "
                                   "pg_replication_slots WHERE slot_name = %s", (slot,))
        postgres_admin.execute(f"DROP PUBLICATION IF EXISTS sdk_p_{tag}")
        postgres_admin.execute(f"DROP SCHEMA {schema} CASCADE")
        postgres_admin.execute(f"DROP TABLE IF EXISTS {name}, {arrow}")


def _check_postgres(admin: Any, name: str, names: list[str], schema: str, mirror: Path
                    ) -> None:
    """Table ``name``'s source rows printed as its mirrors in ``schema`` and in SQLite file
    ``mirror`` print them, the log's copies as the snapshot's."""
    terms = ", ".join(_pg_text(n) for n in names)
    source = {r[0]: list(r[1:]) for r in admin.execute(
        f"SELECT id, {terms} FROM {name}").fetchall()}
    target = {r[0]: list(r[1:]) for r in admin.execute(
        f"SELECT id, {terms} FROM {schema}.{name}").fetchall()}
    assert target == source  # the PostgreSQL target prints what the source prints
    _same_phases(source, len(PG_ROWS), "source")
    stored = _sqlite_rows(mirror, name, names)
    assert sorted(stored) == sorted(source)
    _same_phases({k: [v for v, _ in row] for k, row in stored.items()}, len(PG_ROWS),
                 f"sqlite {name}")
    for key, row in stored.items():
        for column, text, (value, kind) in zip(names, source[key], row, strict=True):
            assert _sqlite_form(text, value, kind, column), \
                f"sqlite {name} id {key} {column}: {value!r} ({kind}) for {text!r}"
    at = {n: i for i, n in enumerate(names)}
    assert source[2][at.get("ip", 0)] == ("192.168.0.1" if "ip" in at else "-32768")  # no /32
    assert stored[3][at["f8"]][0] == 0.0  # -0: see docs/dialects/sqlite.md
    assert stored[2][at["n"]][0] == "-0.000000000000000000000000000001"
    assert stored[3][at["n"]][0] == "0.000000000000000000000000000000"
    assert stored[2][at["f4"]][0] == 3.4028235e38


MY_COLUMNS = """f FLOAT, g DOUBLE, w DECIMAL(65,30), n DECIMAL(10,2), bits BIT(5), y YEAR,
  j JSON, ti TINYINT, u BIGINT UNSIGNED"""
MY_ROWS = [
    "(1.5, 2.5, 1.5, 1.5, b'10101', 2024, '{\"a\": 1,  \"b\": [1, 2]}', 1, 2)",
    "(3.402823466e38, 1.7976931348623157e308, -0.000000000000000000000000000001, "
    "-99999999.99, b'00000', 1901, '[]', -128, 18446744073709551615)",
    "(-0.0, -0.0, 0, 0, b'11111', 2155, '{}', 127, 0)",
    "(1.175494351e-38, 5e-324, 99999999999999999999999999999999999.999999999999999999999999999999,"
    " 0.01, NULL, 0, 'null', NULL, NULL)",
    "(16777217, 0.1, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
]
MY_TEXT = {"w", "n", "j", "ti", "u"}
"""Columns whose text is the same in MariaDB, the PostgreSQL target and SQLite. A YEAR and a
BIT are their numbers (MariaDB prints the zero year ``0000`` and a BIT as its bytes), a DOUBLE
the double MariaDB's shortest text parses to, and a FLOAT the float32, as PostgreSQL prints a
``real``: MariaDB prints six digits (``3.40282e38``, ``16777200`` for 16777216)."""


@pytest.mark.mysql
@pytest.mark.postgres
def test_mariadb_values_one_form_through_snapshot_and_log(
        spark: Any, mysql_admin: Any, mysql_url: str, postgres_admin: Any, postgres_url: str,
        tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:10]
    name, schema = f"forms_{tag}", f"sdk_forms_{tag}"
    names = _names(MY_COLUMNS)
    with mysql_admin.cursor() as cur:
        cur.execute(f"CREATE TABLE `{name}` (id BIGINT PRIMARY KEY, {MY_COLUMNS})")
    postgres_admin.execute(f"CREATE SCHEMA {schema} AUTHORIZATION sdk_cdc")
    mirror = tmp_path / "m.db"

    def insert(first: int) -> None:
        with mysql_admin.cursor() as cur:
            for j, row in enumerate(MY_ROWS):
                cur.execute(f"INSERT INTO `{name}` VALUES ({first + j}, {row[1:]}")

    def sync() -> None:
        _sync(mysql_url, f"sqlite:///{mirror}", f"sdk_test.{name}", tmp_path / "ck_sqlite")
        _sync(mysql_url, postgres_url, f"sdk_test.{name}", tmp_path / "ck_pg",
              target_schema=schema)

    try:
        insert(1)
        sync()
        insert(LOGGED + 1)
        sync()
        with mysql_admin.cursor() as cur:
            cur.execute(f"SELECT id, {', '.join(f'CAST({n} AS CHAR)' for n in names)} "
                        f"FROM `{name}`")
            source = {r[0]: list(r[1:]) for r in cur.fetchall()}
        _same_phases(source, len(MY_ROWS), "source")
        target = {r[0]: list(r[1:]) for r in postgres_admin.execute(
            f"SELECT id, {', '.join(_pg_text(n) for n in names)} FROM {schema}.{name}"
        ).fetchall()}
        _same_phases(target, len(MY_ROWS), "postgres")
        stored = _sqlite_rows(mirror, name, names)
        _same_phases({k: [v for v, _ in row] for k, row in stored.items()}, len(MY_ROWS),
                     "sqlite")
        for key, row in source.items():
            for k, column in enumerate(names):
                text, printed, value = row[k], target[key][k], stored[key][k][0]
                if column in MY_TEXT:
                    assert printed == text, f"postgres id {key} {column}"
                    assert value == (None if text is None else str(text)) or \
                        str(value) == text, f"sqlite id {key} {column}: {value!r}"
                elif text is not None and column != "f":
                    number = int.from_bytes(text.encode("latin-1")) if column == "bits" \
                        else float(text) if column == "g" else int(text)
                    assert float(printed) == value == number, f"id {key} {column}"
        assert stored[5][0] == (16777216.0, "real") and target[2][0] == "3.4028235e+38"
    finally:
        postgres_admin.execute(f"DROP SCHEMA {schema} CASCADE")
        with mysql_admin.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS `{name}`")
