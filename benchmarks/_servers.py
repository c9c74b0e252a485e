"""The servers the benchmarks run against: those ``scripts/services.sh`` prepares, or the URLs
the tests read from the environment."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

MYSQL = os.environ.get("SDK_TEST_MYSQL_URL", "mysql://sdk_cdc:sdk_cdc@127.0.0.1:3306/sdk_test")
MYSQL_ADMIN = os.environ.get("SDK_TEST_MYSQL_ADMIN_URL", "mysql://root@127.0.0.1:3306/sdk_test")
PG = os.environ.get("SDK_TEST_POSTGRES_URL",
                    "postgresql://sdk_cdc:sdk_cdc@127.0.0.1:5432/sdk_test")
PG_ADMIN = os.environ.get("SDK_TEST_POSTGRES_ADMIN_URL",
                          "postgresql://postgres@127.0.0.1:5432/sdk_test")


def fill_mariadb(conn: Any, table: str, rows: int) -> None:
    """Create ``table`` (id, v, amount, at) on MariaDB and fill it with ``rows`` rows from the
    server's sequence engine, 100,000 rows a statement."""
    conn.query(f"CREATE TABLE `{table}` (id BIGINT PRIMARY KEY, v VARCHAR(40), "
               "amount DECIMAL(12,2), at DATETIME(6))")
    for first in range(1, rows + 1, 100_000):
        last = min(first + 99_999, rows)
        conn.query(f"INSERT INTO `{table}` SELECT seq, CONCAT('v', seq), seq / 8, "
                   f"'2024-01-01' + INTERVAL seq SECOND FROM seq_{first}_to_{last}")


def sdk_command() -> list[str]:
    """How a user runs ``sdk``: the venv's script, else the one on PATH, else the module."""
    found = Path(sys.executable).with_name("sdk")
    if found.exists():
        return [str(found)]
    which = shutil.which("sdk")
    return [which] if which else [sys.executable, "-m", "sdk.app.cli"]
