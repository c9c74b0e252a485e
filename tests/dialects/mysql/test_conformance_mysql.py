"""The conformance kit against the MySQL/MariaDB dialect on the real server."""

from __future__ import annotations

import pytest
from helpers.harnesses import MysqlHarness
from helpers.servers import MYSQL_ADMIN_URL

from sdk.testing import Harness
from sdk.testing.suite import *  # noqa: F403

pytestmark = pytest.mark.mysql


@pytest.fixture(scope="session")
def harness(mysql_url: str) -> Harness:
    return MysqlHarness(mysql_url, MYSQL_ADMIN_URL)
