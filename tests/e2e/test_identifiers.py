"""Awkward identifiers end to end: schemas (databases), tables and columns whose names hold
``%``, quotes, backticks, dots, spaces, unicode, reserved words or mixed case, through
discovery (list, choose by a quoted pattern, describe), the snapshot (index-seek splits on a
text key, arithmetic splits on a sparse integer key), the log phase (inserts, updates,
key-moving updates, deletes) and into every target (PostgreSQL, SQLite, MariaDB), after which
each mirror equals the source. Issue #17: ``user%data`` broke psycopg's placeholders."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import pytest
from helpers.servers import MYSQL_ADMIN_URL, with_query

from sdk import (
    ChangeEvent,
    ConfigurationError,
    ConnectionConfig,
    Dialect,
    SnapshotSplit,
    TableId,
    TableSchema,
    get_dialect,
)
from sdk.algorithm import Phase, SyncOptions, SyncRunner, caught_up
from sdk.job.tables import parse_patterns, select_tables, table_pattern


@dataclass(frozen=True)
class Names:
    """One set of awkward names: a schema, a table, and its text, integer and value columns."""

    schema: str
    table: str
    text: str
    number: str
    value: str


NAMES = {
    "percent": Names("s%x", "user%data", "k%s", "n%d", "v%"),
    "quotes": Names('s"q\'', 't"\'q', '"k"', "n'", 'v""'),
    "backticks": Names("s`b", "t`b`", "`k", "n`", "v``"),
    "dots-spaces": Names("s.p a", "my.t able", "k.ey x", "n. m", "v ."),
    "unicode": Names("sché✓", "tâblé ünï", "ключ", "数", "välue"),
    "reserved": Names("select", "order", "from", "where", "group"),
    "mixed-case": Names("MiXed", "TaBle", "KeyCol", "NuM", "VaLue"),
}
ROWS = 40
OPTIONS = SyncOptions(split_size=7, fetch_size=5, even_factor_lower=0.5, even_factor_upper=10)
"""Small splits; the sparse integer key (every third number) is cut arithmetically."""


def text_key(i: int) -> str:
    return f"k{i:03d}%s'\"`"


# --- each dialect's side: its quoting, the source's setup and the writer ---------------------


def pg_quote(name: str) -> str:
    return '"' + name.replace('"', '""').replace("%", "%%") + '"'  # always run with params


def my_quote(name: str) -> str:
    return "`" + name.replace("`", "``").replace("%", "%%") + "`"  # always run with params


def sqlite_quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass
class Side:
    """A database for the test: the dialect's URL, an administrator's ``run(sql, args)``
    (statements always take parameters), its quoting and placeholder."""

    dialect: Dialect
    url: str
    run: Callable[[str, Sequence[Any]], None]
    quote: Callable[[str], str]
    mark: str
    schema: str
    cleanup: list[Callable[[], None]] = field(default_factory=list)

    def table(self, name: str) -> str:
        if self.dialect.name == "sqlite":
            return self.quote(name)
        return f"{self.quote(self.schema)}.{self.quote(name)}"


def tables_of(names: Names) -> tuple[str, str]:
    """The table keyed by the text column and the one keyed by the sparse integer column."""
    return names.table, names.table + "#2"


def create_source(side: Side, names: Names) -> None:
    """Both tables, filled: ``ROWS`` rows each."""
    q, m = side.quote, side.mark
    text_type, int_type = ("VARCHAR(40)", "BIGINT") if side.dialect.name == "mysql" else \
        ("TEXT", "BIGINT")
    by_text, by_number = tables_of(names)
    for table, key in ((by_text, names.text), (by_number, names.number)):
        side.run(f"CREATE TABLE {side.table(table)} ({q(names.text)} {text_type} NOT NULL, "
                 f"{q(names.number)} {int_type} NOT NULL, {q(names.value)} {text_type}, "
                 f"PRIMARY KEY ({q(key)}))", ())
        for i in range(ROWS):
            side.run(f"INSERT INTO {side.table(table)} VALUES ({m}, {m}, {m})",
                     (text_key(i), i * 3, f"v{i}%'\"" if i % 5 else None))


def write(side: Side, names: Names, step: int) -> None:
    """One round of changes to both tables: an insert, an update, a key-moving update and a
    delete each."""
    q, m = side.quote, side.mark
    by_text, by_number = tables_of(names)
    t, n, v = q(names.text), q(names.number), q(names.value)
    for table in (by_text, by_number):
        name = side.table(table)
        side.run(f"INSERT INTO {name} VALUES ({m}, {m}, {m})",
                 (f"new{step:03d}%", 1000 + step * 3, "inserted"))
        side.run(f"UPDATE {name} SET {v} = {m} WHERE {t} = {m}", (f"upd{step}", text_key(step)))
    side.run(f"UPDATE {side.table(by_text)} SET {t} = {m} WHERE {t} = {m}",
             (text_key(step + 10) + "~moved", text_key(step + 10)))
    side.run(f"UPDATE {side.table(by_number)} SET {n} = {n} + 5000 WHERE {n} = {m}",
             ((step + 10) * 3,))
    side.run(f"DELETE FROM {side.table(by_text)} WHERE {t} = {m}", (text_key(step + 20),))
    side.run(f"DELETE FROM {side.table(by_number)} WHERE {n} = {m}", ((step + 20) * 3,))


def postgres_side(admin: Any, url: str, schema: str) -> Side:
    def run(sql: str, args: Sequence[Any]) -> None:
        admin.execute(sql, args)

    side = Side(get_dialect("postgres"), url, run, pg_quote, "%s", schema)
    run(f"DROP SCHEMA IF EXISTS {pg_quote(schema)} CASCADE", ())
    run(f"CREATE SCHEMA {pg_quote(schema)}", ())
    side.cleanup.append(lambda: run(f"DROP SCHEMA IF EXISTS {pg_quote(schema)} CASCADE", ()))
    return side


def mysql_side(admin: Any, schema: str) -> Side:
    def run(sql: str, args: Sequence[Any]) -> None:
        with admin.cursor() as cur:
            cur.execute(sql, args)

    parts = urlsplit(MYSQL_ADMIN_URL)
    url = urlunsplit((parts.scheme, parts.netloc, "/" + quote(schema, safe=""), "", ""))
    side = Side(get_dialect("mysql"), url, run, my_quote, "%s", schema)
    run(f"DROP DATABASE IF EXISTS {my_quote(schema)}", ())
    run(f"CREATE DATABASE {my_quote(schema)} CHARACTER SET utf8mb4", ())
    side.cleanup.append(lambda: run(f"DROP DATABASE IF EXISTS {my_quote(schema)}", ()))
    return side


def sqlite_side(path: Path) -> Side:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")

    def run(sql: str, args: Sequence[Any]) -> None:
        conn.execute(sql, args)

    side = Side(get_dialect("sqlite"), f"sqlite:///{path}", run, sqlite_quote, "?", "main")
    side.cleanup.append(conn.close)
    return side


# --- the sync -------------------------------------------------------------------------------


def whole(dialect: Dialect, conn: Any, schema: TableSchema) -> dict[Any, Any]:
    """Every row of a table by key, in one read."""
    split = SnapshotSplit(schema.table, 0, None, None)
    return {schema.key_of(r): tuple(r) for b in dialect.read_range(conn, schema, split, 1000)
            for r in b}


def discover(dialect: Dialect, conn: Any, names: Names, schema: str) -> list[TableSchema]:
    """List the source's tables, choose both by their quoted patterns, describe them."""
    listed = dialect.list_tables(conn)
    wanted = [TableId(schema, t) for t in tables_of(names)]
    patterns = ", ".join(table_pattern(t) for t in wanted)
    assert select_tables(listed, parse_patterns(patterns)) == wanted, patterns
    schemas = [dialect.describe_table(conn, t) for t in wanted]
    assert [s.key for s in schemas] == [(names.text,), (names.number,)]
    assert all(s.column_names == (names.text, names.number, names.value) for s in schemas)
    return schemas


def sync_into_targets(source: Side, schemas: list[TableSchema], names: Names,
                      targets: list[Side], caplog: pytest.LogCaptureFixture) -> None:
    """Run the sync with changes during the snapshot and the log phase, applying every step
    into each target (a replay of each batch too), then compare each mirror with the
    source."""
    dialect = source.dialect
    runner = SyncRunner(dialect, lambda: dialect.connect(ConnectionConfig.from_url(source.url)),
                        OPTIONS)
    mirrors: list[tuple[Side, Any, dict[TableId, TableSchema]]] = []
    for target in targets:
        conn = target.dialect.connect(ConnectionConfig.from_url(target.url))
        target.cleanup.insert(0, conn.close)
        mapped = {s.table: TableSchema(TableId(target.schema, s.table.name), s.columns,
                                       s.primary_key, s.unique_keys, s.key) for s in schemas}
        for mirror in mapped.values():
            target.dialect.create_table(conn, mirror)
        mirrors.append((target, conn, mapped))
    batches = 0

    def apply(events: list[ChangeEvent]) -> None:
        nonlocal batches
        batches += 1
        for target, conn, mapped in mirrors:
            for table, mirror in mapped.items():
                moved = [ChangeEvent(mirror.table, e.op, e.key, e.after, e.offset, e.before,
                                     e.old_key, e.commit_ts) for e in events if e.table == table]
                if moved:
                    assert target.dialect.apply_changes(conn, mirror, moved, f"b{batches}")
                    assert not target.dialect.apply_changes(conn, mirror, moved, f"b{batches}")

    caplog.set_level("INFO", logger="sdk.algorithm.assigner")
    state = runner.start(schemas)
    step = log_steps = 0
    while state.phase is Phase.SNAPSHOT or log_steps < 3:
        events, state = runner.step(state)
        apply(events)
        step += 1
        log_steps += state.phase is not Phase.SNAPSHOT
        write(source, names, step)
    assert step > 4, "the snapshot took several steps"
    assert "arithmetic splits" in caplog.text  # the sparse integer key
    check = dialect.connect(ConnectionConfig.from_url(source.url))
    try:
        head = dialect.current_offset(check)
        while not caught_up(runner, head)(state):
            events, state = runner.step(state)
            apply(events)
        runner.close()
        expected = {s.table: whole(dialect, check, s) for s in schemas}
    finally:
        check.close()
    by_text = expected[schemas[0].table]
    assert text_key(12) + "~moved" in {k[0] for k in by_text} and (text_key(22),) not in by_text
    for target, conn, mapped in mirrors:
        for table, mirror in mapped.items():
            got = whole(target.dialect, conn, target.dialect.describe_table(conn, mirror.table))
            assert got == expected[table], (target.dialect.name, str(mirror.table))


@pytest.fixture
def run_cleanups() -> Iterator[list[Side]]:
    """Sides whose cleanups run after the test, last made first."""
    sides: list[Side] = []
    yield sides
    for side in reversed(sides):
        for action in side.cleanup:
            action()


@dataclass
class Servers:
    """The administrators' connections to the PostgreSQL and MariaDB test servers."""

    postgres: Any
    postgres_url: str
    mysql: Any


@pytest.fixture
def servers(postgres_admin: Any, postgres_admin_url: str, mysql_admin: Any) -> Servers:
    return Servers(postgres_admin, postgres_admin_url, mysql_admin)


def make_source(kind: str, names: Names, servers: Servers, tmp_path: Path) -> Side:
    """The source of ``kind`` with both tables filled and analysed (the arithmetic cut uses
    the row estimate); a PostgreSQL source has its own slot and an awkward publication name."""
    if kind == "postgres":
        tag = uuid.uuid4().hex[:8]
        url = with_query(servers.postgres_url, slot=f"sdk_id_{tag}",
                         publication=f"Pub {tag}%\"")
        side = postgres_side(servers.postgres, url, names.schema)
    elif kind == "mysql":
        side = mysql_side(servers.mysql, names.schema)
    else:
        side = sqlite_side(tmp_path / "source.db")
    create_source(side, names)
    analyze = {"postgres": "ANALYZE", "mysql": "ANALYZE TABLE"}.get(kind)
    for table in tables_of(names) if analyze else ():
        side.run(f"{analyze} {side.table(table)}", ())
    return side


def all_targets(source_kind: str, names: Names, servers: Servers, tmp_path: Path
                ) -> list[Side]:
    """A PostgreSQL, a MariaDB and a SQLite target; one of the source's own kind mirrors into
    a schema of its own."""
    def mirror_schema(kind: str) -> str:
        return names.schema + " m" if kind == source_kind else names.schema

    return [postgres_side(servers.postgres, servers.postgres_url, mirror_schema("postgres")),
            mysql_side(servers.mysql, mirror_schema("mysql")),
            sqlite_side(tmp_path / "mirror.db")]


@pytest.mark.postgres
@pytest.mark.mysql
@pytest.mark.parametrize("names", list(NAMES.values()), ids=list(NAMES))
@pytest.mark.parametrize("kind", ["postgres", "mysql", "sqlite"])
def test_awkward_names_end_to_end(kind: str, names: Names, servers: Servers, tmp_path: Path,
                                  run_cleanups: list[Side],
                                  caplog: pytest.LogCaptureFixture) -> None:
    from sdk_postgres import drop_capture

    source = make_source(kind, names, servers, tmp_path)
    run_cleanups.append(source)
    targets = all_targets(kind, names, servers, tmp_path)
    run_cleanups.extend(targets)
    conn: Any = source.dialect.connect(ConnectionConfig.from_url(source.url))
    try:
        schemas = discover(source.dialect, conn, names, source.schema)
        source.dialect.prepare_capture(conn, schemas)
        try:
            sync_into_targets(source, schemas, names, targets, caplog)
        finally:
            if kind == "postgres":
                drop_capture(conn)  # the slot
    finally:
        conn.close()


def test_table_patterns_quote_awkward_names() -> None:
    """A quoted pattern part is literal: names with dots, commas, globs, quotes, a leading
    ``!``; each table's own pattern chooses exactly it."""
    tables = [TableId("shop", "orders"), TableId("shop", "odd.name"), TableId("x", "orders"),
              TableId("my.schema", "user*data"), TableId("s", "a, b"), TableId("s", 'q"x'),
              TableId("s", "!bang"), TableId("s", "[x]?")]
    for table in tables:
        assert select_tables(tables, [table_pattern(table)]) == [table]
    chosen = select_tables(tables, parse_patterns('shop.*, "s"."a, b", !shop."odd.name"'))
    assert chosen == [TableId("shop", "orders"), TableId("s", "a, b")]
    assert select_tables(tables, ['"user"*']) == [TableId("my.schema", "user*data")]
    assert select_tables(tables, ["orders"]) == [TableId("shop", "orders"), TableId("x", "orders")]
    assert select_tables(tables, ['s."q""x"']) == [TableId("s", 'q"x')]
    with pytest.raises(ConfigurationError, match="more than one"):
        select_tables(tables, ["my.schema.user*data"])
    with pytest.raises(ConfigurationError, match="unclosed"):
        select_tables(tables, ['"s.a'])


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.mysql
@pytest.mark.postgres
def test_spark_sync_mariadb_to_postgres(spark: Any, servers: Servers, tmp_path: Path) -> None:
    """``run_sync`` to caught-up from an awkward MariaDB database and table into an awkward
    PostgreSQL schema: the mirror equals the source."""
    from sdk.spark.sync import run_sync

    names = Names("s%x.é `q`", 'user%data "x"', "k%s.`é", "n %d", "v.'%'`")
    source = make_source("mysql", names, servers, tmp_path)
    target = postgres_side(servers.postgres, servers.postgres_url, names.schema + " m")
    try:
        for step in range(3):  # changes before the sync starts: logged, then snapshotted
            write(source, names, step)
        run_sync(source.url, servers.postgres_url,
                 table_pattern(TableId(names.schema, names.table)), str(tmp_path / "ck"),
                 "caught-up", {"snapshot.split.size": "7"}, target_schema=target.schema)
        dialect, pg = source.dialect, target.dialect
        conn = dialect.connect(ConnectionConfig.from_url(source.url))
        mirror = pg.connect(ConnectionConfig.from_url(target.url))
        try:
            schema = dialect.describe_table(conn, TableId(names.schema, names.table))
            described = pg.describe_table(mirror, TableId(target.schema, names.table))
            assert whole(pg, mirror, described) == whole(dialect, conn, schema)
        finally:
            conn.close()
            mirror.close()
    finally:
        for action in [*target.cleanup, *source.cleanup]:
            action()


def test_sqlserver_binds_around_percent_in_identifiers() -> None:
    """pymssql reads ``%s``/``%d`` anywhere in a statement with arguments and has no escape:
    the dialect binds such a statement itself, outside brackets and literals, with pymssql's
    own quoting of each value; a statement without a ``%`` in names goes to pymssql as is."""
    pytest.importorskip("pymssql")
    from pymssql import _mssql

    from sdk_sqlserver import statement

    plain = "SELECT [a] FROM [t] WHERE [k] >= %s AND [n] = %s"
    assert statement(plain, ["x", 1]) == (plain, ("x", 1))
    assert statement("SELECT 1", []) == ("SELECT 1", None)
    sql, args = statement("SELECT [k%s], '%d' FROM [s].[user%data]]] WHERE [k%s] >= %s "
                          "AND [n] = %s", ["it's", b"\xff\x01"])
    assert args is None and sql == b"SELECT [k%s], '%d' FROM [s].[user%data]]] WHERE [k%s] >= " \
        + _mssql.substitute_params("%s AND [n] = %s", ("it's", b"\xff\x01"))
