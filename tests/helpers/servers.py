"""The test servers' URLs."""

from __future__ import annotations

import os
from typing import Any


def server_url(name: str, default: str) -> str:
    """A test server's URL: ``SDK_TEST_<NAME>_URL`` or the one scripts/services.sh sets up."""
    return os.environ.get(f"SDK_TEST_{name.upper()}_URL", default)


MYSQL_URL = server_url("mysql", "mysql://sdk_cdc:sdk_cdc@127.0.0.1:3306/sdk_test")
MYSQL_ADMIN_URL = server_url("mysql_admin", "mysql://root@127.0.0.1:3306/sdk_test")
POSTGRES_URL = server_url("postgres", "postgresql://sdk_cdc:sdk_cdc@127.0.0.1:5432/sdk_test")
POSTGRES_ADMIN_URL = server_url("postgres_admin", "postgresql://postgres@127.0.0.1:5432/sdk_test")


def with_query(url: str, **params: str) -> str:
    """``url`` with more query parameters (it may have some already)."""
    extra = "&".join(f"{k}={v}" for k, v in params.items())
    return f"{url}{'&' if '?' in url else '?'}{extra}"


def drop_capture(admin: Any, name: str) -> None:
    """Drop the replication slot and publication ``name`` a PostgreSQL test's sync made (if
    it made them), with the administrator's connection ``admin``."""
    with admin.cursor() as cur:
        cur.execute("SELECT pg_drop_replication_slot(%s) WHERE EXISTS (SELECT 1 FROM "
                    "pg_replication_slots WHERE slot_name = %s)", (name, name))
    admin.execute(f"DROP PUBLICATION IF EXISTS {name}")
