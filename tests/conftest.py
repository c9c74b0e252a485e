"""Shared fixtures: a captured SQLite database, and the database servers' URLs."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdk import Dialect, TableSchema, get_dialect
from sdk.config import ConnectionConfig


@pytest.fixture
def sqlite_dialect() -> Dialect:
    return get_dialect("sqlite")


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A fresh SQLite file with two tables: ``items`` (integer key) and ``pairs`` (compound)."""
    path = tmp_path / "source.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL, "
                     "data BLOB)")
        conn.execute("CREATE TABLE pairs (a TEXT NOT NULL, b INTEGER NOT NULL, v TEXT, "
                     "PRIMARY KEY (a, b))")
    return f"sqlite:///{path}"


@pytest.fixture
def sqlite_source(sqlite_dialect: Dialect, sqlite_url: str
                  ) -> Iterator[tuple[sqlite3.Connection, dict[str, TableSchema]]]:
    """A connection to the captured source and the schemas of its tables."""
    conn = sqlite_dialect.connect(ConnectionConfig.from_url(sqlite_url))
    schemas = {t.name: sqlite_dialect.describe_table(conn, t)
               for t in sqlite_dialect.list_tables(conn)}
    sqlite_dialect.prepare_capture(conn, list(schemas.values()))
    yield conn, schemas  # type: ignore[misc]
    conn.close()


def server_url(name: str, default: str) -> str:
    """A test server's URL: ``SDK_TEST_<NAME>_URL`` or the one scripts/services.sh sets up."""
    return os.environ.get(f"SDK_TEST_{name.upper()}_URL", default)


MYSQL_URL = server_url("mysql", "mysql://sdk_cdc:sdk_cdc@127.0.0.1:3306/sdk_test")
POSTGRES_URL = server_url("postgres", "postgresql://sdk_cdc:sdk_cdc@127.0.0.1:5432/sdk_test")
