"""Issue #61: psycopg keeps every dumper and loader class ever registered, on any connection,
in a class-level map (``AdaptersMap._optimised``) for good. The dialect registers its own on
each connection it makes (a Spark worker makes one a log batch for a PostgreSQL target), so
those classes must be made once per process, not per connection, or a long sync's workers
grow without bound."""

from __future__ import annotations

import psycopg
from psycopg.adapt import AdaptersMap
from psycopg.pq import Format

from sdk_postgres._types import register_intervals, register_wide_temporals


def connection_adapters() -> AdaptersMap:
    """What a new connection's ``adapters`` is: a copy of psycopg's global map."""
    return AdaptersMap(psycopg.adapters)


def test_a_connection_registers_the_same_classes_and_psycopg_keeps_no_more() -> None:
    first = connection_adapters()
    register_wide_temporals(first)
    register_intervals(first)
    kept = len(AdaptersMap._optimised)
    for _ in range(50):  # fifty more connections
        adapters = connection_adapters()
        register_wide_temporals(adapters)
        register_intervals(adapters)
        for name in ("date", "time", "timestamp", "timestamptz", "interval"):
            oid = adapters.types[name].oid
            assert adapters.get_loader(oid, Format.TEXT) is first.get_loader(oid, Format.TEXT)
    assert len(AdaptersMap._optimised) == kept
