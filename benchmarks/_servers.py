"""The servers the benchmarks run against: those ``scripts/services.sh`` prepares, or the URLs
the tests read from the environment."""

from __future__ import annotations

import os

MYSQL = os.environ.get("SDK_TEST_MYSQL_URL", "mysql://sdk_cdc:sdk_cdc@127.0.0.1:3306/sdk_test")
MYSQL_ADMIN = os.environ.get("SDK_TEST_MYSQL_ADMIN_URL", "mysql://root@127.0.0.1:3306/sdk_test")
PG = os.environ.get("SDK_TEST_POSTGRES_URL",
                    "postgresql://sdk_cdc:sdk_cdc@127.0.0.1:5432/sdk_test")
PG_ADMIN = os.environ.get("SDK_TEST_POSTGRES_ADMIN_URL",
                          "postgresql://postgres@127.0.0.1:5432/sdk_test")
