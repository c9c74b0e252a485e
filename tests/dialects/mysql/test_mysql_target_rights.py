"""A MySQL/MariaDB target user's rights as its session holds them: a role's privileges count
once the role is active (its default role), and a role granted but not active counts for
nothing, since the sync's session could not use it."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

import pytest
from helpers.sim import SCHEMA

from sdk import ConnectionConfig, TableId
from sdk.dialect.manager import default_manager

pytestmark = pytest.mark.mysql


def _missing(url: str, database: str) -> list[str]:
    """The names of the rights the target check says the user at ``url`` lacks to mirror a
    table ``items`` into ``database``."""
    dialect, config = default_manager().dialect_for_url(url)
    conn = dialect.connect(config)
    try:
        table = replace(SCHEMA, table=TableId(database, "items"))
        return [r.name for r in dialect.target_preflight(conn, [table]) if not r.ok]
    finally:
        conn.close()


def test_a_default_roles_privileges_count_and_an_inactive_roles_do_not(
        mysql_admin: Any, mysql_url: str) -> None:
    tag = uuid.uuid4().hex[:8]
    user, role, database = f"sdk_rl_{tag}", f"sdk_writer_{tag}", f"sdk_rl_{tag}"

    def run(sql: str) -> None:
        with mysql_admin.cursor() as cur:
            cur.execute(sql)

    with mysql_admin.cursor() as cur:
        cur.execute("SELECT VERSION()")
        mariadb = "mariadb" in str(cur.fetchone()[0]).lower()
    account = f"'{user}'@'127.0.0.1'"
    host = ConnectionConfig.from_url(mysql_url)
    url = f"mysql://{user}:pw@{host.host}:{host.port}/{database}"
    run(f"CREATE DATABASE {database}")
    run(f"CREATE ROLE {role}")
    run(f"GRANT CREATE, SELECT, INSERT, UPDATE, DELETE ON `{database}`.* TO {role}")
    run(f"CREATE USER {account} IDENTIFIED BY 'pw'")
    run(f"GRANT SELECT ON `{database}`.* TO {account}")  # its own: it may connect
    run(f"GRANT {role} TO {account}")
    try:
        assert _missing(url, database) == [
            f"CREATE on {database}.*",
            f"SELECT, INSERT, UPDATE, DELETE on the tables the sync makes in {database}"]
        run(f"SET DEFAULT ROLE {role} FOR {account}" if mariadb else
            f"SET DEFAULT ROLE {role} TO {account}")
        assert _missing(url, database) == []
    finally:
        run(f"DROP USER IF EXISTS {account}")
        run(f"DROP ROLE IF EXISTS {role}")
        run(f"DROP DATABASE IF EXISTS {database}")
