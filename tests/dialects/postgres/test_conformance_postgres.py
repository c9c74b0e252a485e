"""The conformance kit against the PostgreSQL dialect on the real server (or the embedded one)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.harnesses import PostgresHarness
from helpers.servers import with_query

from sdk.testing import Harness
from sdk.testing.suite import *  # noqa: F403

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="session")
def harness(postgres_url: str, postgres_admin_url: str, postgres_admin: Any
            ) -> Iterator[Harness]:
    tag = uuid.uuid4().hex[:10]
    slot, publication = f"sdk_kit_{tag}", f"sdk_kit_{tag}"
    postgres_admin.execute(f"CREATE PUBLICATION {publication}")
    yield PostgresHarness(with_query(postgres_url, slot=slot, publication=publication),
                          postgres_admin_url, publication)
    postgres_admin.execute("SELECT pg_drop_replication_slot(slot_name) FROM "
                           "pg_replication_slots WHERE slot_name = %s", (slot,))
    postgres_admin.execute(f"DROP PUBLICATION IF EXISTS {publication}")
