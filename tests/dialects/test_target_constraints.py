"""A target's own constraints (#60): tables a user made beforehand with a unique index besides
the key and foreign keys. Rows that take a unique value from one another in one batch (a swap,
a rotation) apply, in the small and the set-based paths; a snapshot row may take a value an
earlier split's row still holds (the log brings that row's change); a log batch never deletes a
row it does not write; deleting a referenced row without applying as a replica is refused,
naming the foreign key and the grant."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.servers import MYSQL_ADMIN_URL

from sdk import (
    ChangeEvent,
    Column,
    ConfigurationError,
    ConnectionConfig,
    LogicalType,
    Offset,
    TableId,
    TableSchema,
    get_dialect,
)

L = LogicalType
AT = Offset("test")


def people(schema: str, name: str) -> TableSchema:
    return TableSchema(TableId(schema, name), (
        Column("id", L.INT64, "bigint", nullable=False), Column("email", L.STRING, "text"),
        Column("v", L.STRING, "text")), ("id",))


def rotated(table: TableSchema, rows: int, op: str = "u") -> list[ChangeEvent]:
    """Each row ``i`` takes the email row ``i + 1`` had: a rotation of every value."""
    return [ChangeEvent(table.table, op, (i,), (i, f"e{(i + 1) % rows}", f"v{i}"), AT,
                        (i, f"e{i}", "old") if op == "u" else None) for i in range(rows)]


@pytest.fixture
def pg(pg_target: tuple[Any, str], postgres_admin: Any) -> Iterator[tuple[Any, Any, str]]:
    """The PostgreSQL dialect, a target connection (a user granted ``SET ON PARAMETER
    session_replication_role``: scripts/services.sh) and a schema of its own."""
    conn, schema = pg_target
    yield get_dialect("postgres"), conn, schema


def _pg_table(dialect: Any, conn: Any, schema: str, rows: int, referenced: bool = False
              ) -> TableSchema:
    table = people(schema, f"p_{uuid.uuid4().hex[:6]}")
    dialect.create_table(conn, table)
    name = f'"{schema}"."{table.table.name}"'
    conn.raw.execute(f"ALTER TABLE {name} ADD UNIQUE (email)")
    if referenced:
        conn.raw.execute(f"CREATE TABLE {name[:-1]}_kids\" (id int PRIMARY KEY, parent bigint "
                         f"REFERENCES {name} (id) ON DELETE CASCADE)")
    with conn.raw.cursor() as cur:
        cur.executemany(f"INSERT INTO {name} VALUES (%s, %s, 'old')",
                        [(i, f"e{i}") for i in range(rows)])
        if referenced:
            cur.executemany(f"INSERT INTO {name[:-1]}_kids\" VALUES (%s, %s)",
                            [(i, i) for i in range(rows)])
    return table


def _pg_rows(conn: Any, table: TableSchema) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in conn.raw.execute(
        f'SELECT id, email, v FROM "{table.table.schema}"."{table.table.name}" ORDER BY id')]


@pytest.mark.postgres
@pytest.mark.parametrize("rows", [3, 250])  # row by row, and staged and merged
def test_postgres_rows_that_rotate_a_unique_value_apply(pg: Any, rows: int) -> None:
    dialect, conn, schema = pg
    table = _pg_table(dialect, conn, schema, rows, referenced=True)
    with dialect.apply_transaction(conn):
        assert dialect.apply_changes(conn, table, rotated(table, rows), "b1")
    assert _pg_rows(conn, table) == [(i, f"e{(i + 1) % rows}", f"v{i}") for i in range(rows)]
    kids = conn.raw.execute(f'SELECT count(*) FROM "{schema}"."{table.table.name}_kids"')
    assert kids.fetchone()[0] == rows, "a delete cascaded at the target"


@pytest.mark.postgres
def test_postgres_snapshot_rows_displace_a_row_the_log_writes_later(pg: Any) -> None:
    """Split 2 reads row 5 holding ``e0``, which row 0 (split 1, read earlier) gave up since:
    row 0 makes way; as a log batch, the same rows are refused, naming the index."""
    dialect, conn, schema = pg
    table = _pg_table(dialect, conn, schema, 5)
    snapshot = [ChangeEvent(table.table, "r", (5,), (5, "e0", "new"), AT)]
    refused = pytest.raises(ConfigurationError, match="unique index that refuses a row the source")
    with refused, dialect.apply_transaction(conn):
        dialect.apply_changes(conn, table, [ChangeEvent(
            table.table, "c", (5,), (5, "e0", "new"), AT)], "log")
    with dialect.apply_transaction(conn):
        assert dialect.apply_changes(conn, table, snapshot, "s1")
    assert _pg_rows(conn, table) == [(i, f"e{i}", "old") for i in range(1, 5)] + [
        (5, "e0", "new")]


@pytest.fixture
def plain(pg: Any, postgres_admin: Any, postgres_url: str) -> Iterator[tuple[Any, str]]:
    """A target connection as a role of its own without the replica right (it may write the
    schema's tables and make schemas), and the role's name."""
    dialect, _, schema = pg
    role = f"sdk_plain_{uuid.uuid4().hex[:6]}"
    postgres_admin.execute(f"CREATE ROLE {role} LOGIN")
    postgres_admin.execute(f"GRANT ALL ON SCHEMA {schema} TO {role}")
    postgres_admin.execute(f"GRANT CREATE ON DATABASE sdk_test TO {role}")
    conn = dialect.connect(ConnectionConfig.from_url(
        postgres_url.replace("sdk_cdc:sdk_cdc@", f"{role}@")))
    try:
        yield conn, role
    finally:
        conn.close()
        postgres_admin.execute(f"DROP OWNED BY {role}")
        postgres_admin.execute(f"DROP ROLE {role}")


@pytest.mark.postgres
def test_postgres_without_the_replica_role_a_swap_under_a_foreign_key_is_refused(
        pg: Any, plain: tuple[Any, str], postgres_admin: Any) -> None:
    dialect, conn, schema = pg
    table = _pg_table(dialect, conn, schema, 3, referenced=True)
    postgres_admin.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA {schema} TO {plain[1]}")
    refused = pytest.raises(ConfigurationError, match=f"{table.table.name}_kids_parent_fkey"
                            ".*SET ON PARAMETER session_replication_role")
    with refused, dialect.apply_transaction(plain[0]):
        dialect.apply_changes(plain[0], table, rotated(table, 3), "b1")
    assert _pg_rows(conn, table) == [(i, f"e{i}", "old") for i in range(3)]


@pytest.mark.postgres
def test_postgres_a_user_who_may_not_apply_as_a_replica_is_told_before_anything_is_applied(
        pg: Any, plain: tuple[Any, str], postgres_admin: Any,
        caplog: pytest.LogCaptureFixture) -> None:
    """An existing target table with foreign keys: a target user without the replica right
    gets one line naming them and the grant when the sync takes the table; one with it, none."""
    dialect, conn, schema = pg
    table = _pg_table(dialect, conn, schema, 3, referenced=True)
    postgres_admin.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA {schema} TO {plain[1]}")
    with caplog.at_level("WARNING", logger="sdk_postgres"):
        dialect.create_table(conn, table)  # granted (scripts/services.sh)
        assert not caplog.records
        dialect.create_table(plain[0], table)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and f"{table.table.name}_kids_parent_fkey" in lines[0] and \
        f"GRANT SET ON PARAMETER session_replication_role TO {plain[1]}" in lines[0], lines


@pytest.fixture
def my(mysql_admin: Any) -> Iterator[tuple[Any, Any, str]]:
    dialect = get_dialect("mysql")
    conn = dialect.connect(ConnectionConfig.from_url(MYSQL_ADMIN_URL))
    schema = "sdk_test"
    made: list[str] = []
    try:
        yield dialect, conn, made
    finally:
        conn.close()
        with mysql_admin.cursor() as cur:
            for name in reversed(made):
                cur.execute(f"DROP TABLE IF EXISTS `{schema}`.`{name}`")


def _my_table(dialect: Any, conn: Any, made: list[str], rows: int) -> TableSchema:
    table = people("sdk_test", f"p_{uuid.uuid4().hex[:6]}")
    dialect.create_table(conn, table)
    name = f"`sdk_test`.`{table.table.name}`"
    made += [table.table.name, f"{table.table.name}_kids"]
    conn.query(f"ALTER TABLE {name} MODIFY email varchar(20), ADD UNIQUE (email)")
    conn.query(f"CREATE TABLE {name[:-1]}_kids` (id int PRIMARY KEY, parent bigint, FOREIGN KEY "
               f"(parent) REFERENCES {name} (id) ON DELETE CASCADE)")
    with conn.raw.cursor() as cur:
        cur.executemany(f"INSERT INTO {name} VALUES (%s, %s, 'old')",
                        [(i, f"e{i}") for i in range(rows)])
        cur.executemany(f"INSERT INTO {name[:-1]}_kids` VALUES (%s, %s)",
                        [(i, i) for i in range(rows)])
    return table


@pytest.mark.mysql
@pytest.mark.parametrize("rows", [3, 250])
def test_mysql_rows_that_rotate_a_unique_value_apply(my: Any, rows: int) -> None:
    dialect, conn, made = my
    table = _my_table(dialect, conn, made, rows)
    with dialect.apply_transaction(conn):
        assert dialect.apply_changes(conn, table, rotated(table, rows), "b1")
    name = f"`sdk_test`.`{table.table.name}`"
    assert [tuple(r) for r in conn.query(f"SELECT id, email, v FROM {name} ORDER BY id")] == [
        (i, f"e{(i + 1) % rows}", f"v{i}") for i in range(rows)]
    assert conn.query(f"SELECT count(*) FROM {name[:-1]}_kids`")[0][0] == rows, \
        "a delete cascaded at the target"
    table2 = _my_table(dialect, conn, made, 3)  # outside the block: the checks are on
    with pytest.raises(ConfigurationError, match=r"_kids_ibfk_1.*apply_transaction block"):
        dialect.apply_changes(conn, table2, rotated(table2, 3), "b2")
