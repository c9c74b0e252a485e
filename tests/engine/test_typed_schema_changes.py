"""A stream of one table's typed columns meeting a schema change in the log (PostgreSQL): it
stops just before the change naming the restart; restarted, its columns are the new ones, the
rows before the change read as them, each row says the schema version it was read at, and the
table read again (it gained a column) brings every row's value of the new column."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.servers import with_query

pytestmark = [pytest.mark.postgres, pytest.mark.spark]


@pytest.fixture
def table(postgres_admin: Any, postgres_url: str) -> Iterator[tuple[str, str]]:
    """A published table of 20 rows (id, v) and the CDC URL of this test's own slot."""
    tag = uuid.uuid4().hex[:10]
    name, slot, publication = f"ty_{tag}", f"sdk_s_{tag}", f"sdk_p_{tag}"
    postgres_admin.execute(f'CREATE TABLE "{name}" (id int PRIMARY KEY, v varchar(10))')
    postgres_admin.execute(f"INSERT INTO \"{name}\" SELECT g, 'v' || g "
                           "FROM generate_series(1, 20) g")
    postgres_admin.execute(f'CREATE PUBLICATION "{publication}" FOR TABLE "{name}"')
    yield name, with_query(postgres_url, slot=slot, publication=publication)
    postgres_admin.execute("SELECT pg_drop_replication_slot(slot_name) FROM "
                           "pg_replication_slots WHERE slot_name = %s", (slot,))
    postgres_admin.execute(f'DROP PUBLICATION IF EXISTS "{publication}"')
    postgres_admin.execute(f'DROP TABLE IF EXISTS "{name}"')


def run(spark: Any, url: str, name: str, tmp_path: Path, seen: list[dict[str, Any]]
        ) -> tuple[list[str], BaseException | None]:
    """One Trigger.AvailableNow run of the typed stream: its columns and its failure; the
    rows of each batch are added to ``seen`` in order."""
    stream = (spark.readStream.format("cdc").option("url", url)
              .option("tables", f"public.{name}").option("state.dir", str(tmp_path / "state"))
              .load())

    def collect(batch: Any, batch_id: int) -> None:
        seen.extend(r.asDict() for r in batch.orderBy("_seq").collect())

    query = (stream.writeStream.foreachBatch(collect)
             .option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    with contextlib.suppress(Exception):  # the failure is returned
        query.awaitTermination(300)
    return stream.columns, query.exception()


@pytest.mark.slow
def test_a_typed_stream_restarts_into_the_new_columns(spark: Any, postgres_admin: Any,
                                                      table: tuple[str, str],
                                                      tmp_path: Path) -> None:
    name, url = table
    seen: list[dict[str, Any]] = []
    columns, failure = run(spark, url, name, tmp_path, seen)
    assert failure is None, failure
    assert columns == ["id", "v", "_op", "_offset", "_commit_ts", "_seq", "_schema_version"]
    assert len(seen) == 20 and {r["_schema_version"] for r in seen} == {1}

    postgres_admin.execute(f"INSERT INTO \"{name}\" VALUES (21, 'before')")
    postgres_admin.execute(f'ALTER TABLE "{name}" ADD COLUMN n int DEFAULT 7')
    postgres_admin.execute(f"INSERT INTO \"{name}\" VALUES (22, 'after', 22)")
    postgres_admin.execute(f"UPDATE \"{name}\" SET v = 'x' WHERE id = 1")
    mark = len(seen)
    columns, failure = run(spark, url, name, tmp_path, seen)
    assert failure is not None and "SchemaChangedError" in str(failure)
    assert "restart the query" in str(failure) and "added n" in str(failure)
    assert len(seen) == mark  # nothing of the batch holding the change was delivered

    columns, failure = run(spark, url, name, tmp_path, seen)
    assert failure is None, failure
    assert columns == ["id", "v", "n", "_op", "_offset", "_commit_ts", "_seq",
                       "_schema_version"]
    changes = [(r["id"], r["v"], r["n"], r["_op"], r["_schema_version"]) for r in seen[mark:]
               if r["_op"] != "r"]
    assert changes == [(21, "before", None, "c", 1), (22, "after", 22, "c", 2),
                       (1, "x", 7, "u", 2)]
    mirror: dict[int, tuple[Any, ...]] = {}
    for r in seen:
        if r["_op"] == "d":
            mirror.pop(r["id"], None)
        else:
            mirror[r["id"]] = (r["id"], r["v"], r.get("n"))
    with postgres_admin.cursor() as cur:
        cur.execute(f'SELECT id, v, n FROM "{name}"')
        source = {row[0]: tuple(row) for row in cur.fetchall()}
    assert mirror == source  # the table read again gave every row its n
    assert {r["_schema_version"] for r in seen[mark:] if r["_op"] == "r"} == {2}

    postgres_admin.execute(f"UPDATE \"{name}\" SET n = 8 WHERE id = 2")
    mark = len(seen)
    columns, failure = run(spark, url, name, tmp_path, seen)  # restarted: no change met
    assert failure is None, failure
    assert [(r["id"], r["n"], r["_schema_version"]) for r in seen[mark:]] == [(2, 8, 2)]
