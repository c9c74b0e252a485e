"""Fixtures the dialects' tests share."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from sdk import ConnectionConfig, get_dialect


@pytest.fixture
def pg_target(postgres_admin: Any, postgres_url: str) -> Iterator[tuple[Any, str]]:
    """A PostgreSQL dialect connection and a schema of its own to write tables into (dropped
    afterwards)."""
    schema = f"sdk_target_{uuid.uuid4().hex[:8]}"
    postgres_admin.execute(f"CREATE SCHEMA {schema} AUTHORIZATION sdk_cdc")
    conn = get_dialect("postgres").connect(ConnectionConfig.from_url(postgres_url))
    try:
        yield conn, schema
    finally:
        conn.close()
        postgres_admin.execute(f"DROP SCHEMA {schema} CASCADE")
