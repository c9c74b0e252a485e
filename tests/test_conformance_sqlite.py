"""The conformance kit against the reference SQLite dialect (no server needed)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from sdk import Offset, TableId
from sdk.testing import Feature, GoldenColumn, Harness
from sdk.testing.suite import *  # noqa: F403


class SqliteHarness(Harness):
    """A SQLite file; SQLite serialises writers, which the kit's writer threads wait for."""

    dialect = "sqlite"
    features = frozenset({Feature.KEY_UPDATES})

    def admin_connect(self) -> sqlite3.Connection:
        assert self.url is not None
        conn = sqlite3.connect(self.url.removeprefix("sqlite:///"), timeout=60,
                               check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        return conn

    def column_type(self, kind: str) -> str:
        return {"int": "INTEGER", "text": "TEXT"}[kind]

    def table_id(self, name: str) -> TableId:
        return TableId("main", name)

    def offset_past(self, offset: Offset) -> Offset:
        seq = offset["seq"]
        assert isinstance(seq, int)
        return Offset("sqlite", seq=seq + 10**9)

    def golden_columns(self) -> list[GoldenColumn]:
        return [GoldenColumn("INTEGER", ["0", "-9223372036854775808", "9223372036854775807"]),
                GoldenColumn("REAL", ["0.1", "-1.5e300", "2.2250738585072014e-308"]),
                GoldenColumn("TEXT", ["''", "'it''s'", "'ünï 😀'", "'a\nb'"]),
                GoldenColumn("BLOB", ["x''", "x'00ff10'"])]


@pytest.fixture(scope="session")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Harness:
    path: Path = tmp_path_factory.mktemp("kit") / "kit.db"
    return SqliteHarness(f"sqlite:///{path}")
