"""A target user with the rights a DBA gives a loader and no more (SELECT, INSERT, UPDATE,
DELETE on tables made beforehand, no CREATE): the sync writes those tables as they are; where
one is missing, one line names the grant (or says to make it beforehand), not a driver's
"permission denied" from a ``CREATE ... IF NOT EXISTS`` of a table that exists."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sdk import ConnectionConfig
from sdk.app.cli import main

pytestmark = [pytest.mark.postgres, pytest.mark.spark, pytest.mark.slow]


@pytest.fixture
def loader(postgres_admin: Any, postgres_url: str) -> Iterator[tuple[str, str, str]]:
    """(target URL of a role without CREATE, its schema, the role): the schema is the
    administrator's; the role may only use it."""
    tag = uuid.uuid4().hex[:8]
    role, schema = f"sdk_loader_{tag}", f"loaded_{tag}"
    postgres_admin.execute(f"CREATE ROLE {role} LOGIN")
    postgres_admin.execute(f"CREATE SCHEMA {schema}")
    postgres_admin.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
    postgres_admin.execute(f"ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT SELECT, INSERT, "
                           f"UPDATE, DELETE ON TABLES TO {role}")
    config = ConnectionConfig.from_url(postgres_url)
    try:
        yield (f"postgresql://{role}@{config.host}:{config.port}/{config.database}", schema,
               role)
    finally:
        postgres_admin.execute(f"DROP SCHEMA {schema} CASCADE")
        postgres_admin.execute(f"DROP OWNED BY {role}")
        postgres_admin.execute(f"DROP ROLE {role}")


def test_a_target_user_without_create_writes_the_tables_made_for_it(
        loader: tuple[str, str, str], postgres_admin: Any, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    url, schema, role = loader
    source = tmp_path / "src.db"
    with sqlite3.connect(source) as conn:
        conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)")
        conn.executemany("INSERT INTO items VALUES (?, ?)", [(i, f"n{i}") for i in range(50)])
    args = ["sync", "--source", f"sqlite:///{source}", "--target", url, "--target-schema",
            schema, "--checkpoint", str(tmp_path / "ck"), "--until", "caught-up"]
    check = ["check", "--source", f"sqlite:///{source}", "--target", url, "--target-schema",
             schema]
    assert main(check) == 1  # sdk check says it first
    out = capsys.readouterr().out
    assert f"[MISSING] CREATE on schema {schema}: the sync makes {schema}.items" in out, out
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"sdk: error: the target user {role} may not mirror the tables into " in err, err
    assert f"[MISSING] CREATE on schema {schema}: the sync makes {schema}.items, " \
        f"{schema}._sdk_position, {schema}._sdk_applied" in err, err
    assert f'fix: GRANT CREATE ON SCHEMA "{schema}" TO "{role}", or make them beforehand' \
        in err, err
    assert not postgres_admin.execute(  # refused before anything was made
        "SELECT relname FROM pg_class WHERE relnamespace = to_regnamespace(%s)",
        (schema,)).fetchall()
    # made beforehand, as a DBA would (the default privileges give the role DML on them)
    for ddl in (f"CREATE TABLE {schema}.items (id bigint PRIMARY KEY, name text)",
                f"CREATE TABLE {schema}._sdk_applied (tbl text, batch_id text, "
                "PRIMARY KEY (tbl, batch_id))",
                f"CREATE TABLE {schema}._sdk_position (sync text PRIMARY KEY, source_position "
                "text, source_commit timestamptz, applied_at timestamptz)"):
        postgres_admin.execute(ddl)
    main(check)  # (the SQLite source's capture triggers are made by the sync)
    out = capsys.readouterr().out
    assert f"[OK] SELECT, INSERT, UPDATE, DELETE on {schema}.items" in out, out
    assert f"[OK] SELECT, INSERT, DELETE on {schema}._sdk_applied" in out, out
    assert "CREATE on schema" not in out, out
    assert main(args) == 0, capsys.readouterr().err
    with sqlite3.connect(source) as conn:
        conn.execute("UPDATE items SET name = 'changed' WHERE id = 7")
        conn.execute("DELETE FROM items WHERE id = 9")
    assert main(args) == 0, capsys.readouterr().err
    rows = postgres_admin.execute(f"SELECT id, name FROM {schema}.items ORDER BY id").fetchall()
    with sqlite3.connect(source) as conn:
        assert rows == conn.execute("SELECT id, name FROM items ORDER BY id").fetchall()


def test_a_target_user_without_write_rights_is_refused_before_the_source_is_touched(
        loader: tuple[str, str, str], postgres_admin: Any, postgres_url: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A PostgreSQL source into a target whose tables exist but whose user may only read
    them: one refusal naming each missing grant, and no slot or publication made at the
    source (a refused sync leaves nothing that pins the WAL)."""
    url, schema, role = loader
    source_schema = f"{schema}_src"
    postgres_admin.execute(f"CREATE SCHEMA {source_schema} AUTHORIZATION sdk_cdc")
    try:
        postgres_admin.execute(f"CREATE TABLE {source_schema}.items (id int PRIMARY KEY, "
                               "name text)")
        postgres_admin.execute(f"ALTER TABLE {source_schema}.items OWNER TO sdk_cdc")
        postgres_admin.execute(f"CREATE TABLE {schema}.items (id int PRIMARY KEY, name text)")
        postgres_admin.execute(f"REVOKE INSERT, UPDATE, DELETE ON {schema}.items FROM {role}")
        source = f"{postgres_url}{'&' if '?' in postgres_url else '?'}slot={source_schema}" \
            f"&publication={source_schema}"
        args = ["sync", "--source", source, "--tables", f"{source_schema}.items", "--target",
                url, "--target-schema", schema, "--checkpoint", str(tmp_path / "ck"),
                "--until", "caught-up"]
        assert main(args) == 2
        err = capsys.readouterr().err
        assert f"[MISSING] SELECT, INSERT, UPDATE, DELETE on {schema}.items: lacks INSERT, " \
            f"UPDATE, DELETE fix: GRANT INSERT, UPDATE, DELETE ON TABLE " \
            f'"{schema}"."items" TO "{role}"' in err, err
        assert f"[MISSING] CREATE on schema {schema}: the sync makes {schema}._sdk_position, " \
            f"{schema}._sdk_applied" in err, err
        assert postgres_admin.execute(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s",
            (source_schema,)).fetchone() == (0,)
        assert postgres_admin.execute(
            "SELECT count(*) FROM pg_publication WHERE pubname = %s",
            (source_schema,)).fetchone() == (0,)
    finally:
        postgres_admin.execute(f"DROP SCHEMA {source_schema} CASCADE")


@pytest.mark.mysql
def test_a_mysql_target_user_is_told_each_missing_grant_for_its_account(
        mysql_admin: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A MySQL/MariaDB target user who may only read a database: the missing CREATE and
    write privileges, each for the account the server says it is; granted them, it syncs."""
    tag = uuid.uuid4().hex[:8]
    user, database = f"sdk_ld_{tag}", f"sdk_ld_{tag}"

    def run(sql: str) -> None:
        with mysql_admin.cursor() as cur:
            cur.execute(sql)

    source = tmp_path / "src.db"
    with sqlite3.connect(source) as conn:
        conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)")
        conn.executemany("INSERT INTO items VALUES (?, ?)", [(i, f"n{i}") for i in range(20)])
    run(f"CREATE DATABASE {database}")
    run(f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY 'pw'")
    run(f"GRANT SELECT ON `{database}`.* TO '{user}'@'127.0.0.1'")
    try:
        args = ["sync", "--source", f"sqlite:///{source}", "--target",
                f"mysql://{user}:pw@127.0.0.1:3306/{database}", "--target-schema", database,
                "--checkpoint", str(tmp_path / "ck"), "--until", "caught-up"]
        assert main(args) == 2
        err = capsys.readouterr().err
        assert "pw@" not in err
        assert f"[MISSING] CREATE on {database}.*: the sync makes {database}.items, " \
            f"{database}._sdk_position, {database}._sdk_applied fix: GRANT CREATE ON " \
            f"`{database}`.* TO '{user}'@'127.0.0.1'" in err, err
        # MySQL gives the maker of a table no rights on it: they come from the database
        assert f"[MISSING] SELECT, INSERT, UPDATE, DELETE on the tables the sync makes in " \
            f"{database}: lacks INSERT, UPDATE, DELETE fix: GRANT INSERT, UPDATE, DELETE ON " \
            f"`{database}`.* TO '{user}'@'127.0.0.1'" in err, err
        run(f"GRANT CREATE, INSERT, UPDATE, DELETE ON `{database}`.* TO '{user}'@'127.0.0.1'")
        assert main(args) == 0, capsys.readouterr().err
        run(f"REVOKE UPDATE, DELETE ON `{database}`.* FROM '{user}'@'127.0.0.1'")
        assert main(args) == 2
        err = capsys.readouterr().err
        assert f"[MISSING] SELECT, INSERT, UPDATE, DELETE on {database}.items: lacks UPDATE, " \
            f"DELETE fix: GRANT UPDATE, DELETE ON `{database}`.`items` TO " \
            f"'{user}'@'127.0.0.1'" in err, err
        run(f"GRANT UPDATE, DELETE ON `{database}`.* TO '{user}'@'127.0.0.1'")
        with sqlite3.connect(source) as conn:
            conn.execute("UPDATE items SET name = 'changed' WHERE id = 7")
        assert main(args) == 0, capsys.readouterr().err
        with mysql_admin.cursor() as cur:
            cur.execute(f"SELECT name FROM `{database}`.items WHERE id = 7")
            assert cur.fetchone() == ("changed",)
    finally:
        run(f"DROP USER IF EXISTS '{user}'@'127.0.0.1'")
        run(f"DROP DATABASE IF EXISTS {database}")
