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
    assert main(args) == 2
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if x.startswith("sdk: error:"))
    assert f"the target user {role} may not create table {schema}.items, the ledger " \
        f"{schema}._sdk_applied" in line, err
    assert f'GRANT CREATE ON SCHEMA "{schema}" TO "{role}"' in line, err
    # made beforehand, as a DBA would (the default privileges give the role DML on them)
    for ddl in (f"CREATE TABLE {schema}.items (id bigint PRIMARY KEY, name text)",
                f"CREATE TABLE {schema}._sdk_applied (tbl text, batch_id text, "
                "PRIMARY KEY (tbl, batch_id))",
                f"CREATE TABLE {schema}._sdk_position (sync text PRIMARY KEY, source_position "
                "text, source_commit timestamptz, applied_at timestamptz)"):
        postgres_admin.execute(ddl)
    assert main(args) == 0, capsys.readouterr().err
    with sqlite3.connect(source) as conn:
        conn.execute("UPDATE items SET name = 'changed' WHERE id = 7")
        conn.execute("DELETE FROM items WHERE id = 9")
    assert main(args) == 0, capsys.readouterr().err
    rows = postgres_admin.execute(f"SELECT id, name FROM {schema}.items ORDER BY id").fetchall()
    with sqlite3.connect(source) as conn:
        assert rows == conn.execute("SELECT id, name FROM items ORDER BY id").fetchall()
