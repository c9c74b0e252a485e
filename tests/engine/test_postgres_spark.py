"""PostgreSQL through the Spark engine: a stream with a writer into a SQLite mirror, and the
replication slot advanced only to what the query committed."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from helpers.servers import with_query
from helpers.spark import sync_to_mirror_while

from sdk import ConnectionConfig, SnapshotSplit, TableId, get_dialect
from sdk.spark import Mirror
from sdk_postgres import lsn_int
from sdk_sqlite import read_target

pytestmark = [pytest.mark.postgres, pytest.mark.spark]


@pytest.mark.slow
def test_stream_from_postgres_to_a_mirror(spark: Any, postgres_admin: Any, postgres_url: str,
                                          postgres_admin_url: str, tmp_path: Path) -> None:
    import psycopg

    tag = uuid.uuid4().hex[:10]
    name, slot, publication = f"t_{tag}", f"sdk_s_{tag}", f"sdk_p_{tag}"
    postgres_admin.execute(f'CREATE TABLE "{name}" (id int PRIMARY KEY, v text, '
                           "amount numeric(10,2), at timestamptz)")
    postgres_admin.execute(f'INSERT INTO "{name}" SELECT g, %s || g, g / 4.0, '
                           "'2024-05-06 07:08:09.123456+00' FROM generate_series(1, 3000) g",
                           ("v",))
    postgres_admin.execute(f'CREATE PUBLICATION "{publication}" FOR TABLE "{name}"')
    url = with_query(postgres_url, slot=slot, publication=publication)
    pg = get_dialect("postgres")
    conn = pg.connect(ConnectionConfig.from_url(url))
    schema = pg.describe_table(conn, TableId("public", name))
    mirror = Mirror(f"sqlite:///{tmp_path}/mirror.db", [schema])

    def write(stop: threading.Event) -> None:
        with psycopg.connect(postgres_admin_url, autocommit=True) as w:
            i = 0
            while not stop.is_set():
                i += 1
                w.execute(f'UPDATE "{name}" SET v = %s, at = now() WHERE id = %s',
                          (f"w{i}", i * 7 % 3000))
                w.execute(f'INSERT INTO "{name}" VALUES (%s, %s, 1.5, NULL) ON CONFLICT (id) '
                          "DO NOTHING", (3000 + i, "new"))
                w.execute(f'DELETE FROM "{name}" WHERE id = %s', (i * 13 % 3000,))
                time.sleep(0.005)

    sync_to_mirror_while(spark, url, f"public.{name}", tmp_path, mirror, write)
    try:
        whole = SnapshotSplit(schema.table, 0, None, None)
        source = {schema.key_of(r): r for b in pg.read_range(conn, schema, whole, 1000)
                  for r in b}
        sqlite = get_dialect("sqlite")
        target = sqlite.connect(ConnectionConfig.from_url(f"sqlite:///{tmp_path}/mirror.db"))
        assert read_target(target, schema) == source
        target.close()
        (confirmed,) = conn.query("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                                  "WHERE slot_name = %s", (slot,))[0]
        head = conn.query("SELECT pg_current_wal_lsn()::text")[0][0]
        assert 0 < lsn_int(confirmed) <= lsn_int(head)  # advanced, never past the head
    finally:
        postgres_admin.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        postgres_admin.execute(f'DROP PUBLICATION "{publication}"')
        postgres_admin.execute(f'DROP TABLE "{name}"')
        conn.close()


@pytest.mark.slow
def test_sync_restarts_when_the_source_drops_out(spark: Any, postgres_admin: Any,
                                                 postgres_url: str, tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    """PostgreSQL behind a proxy that resets every connection (the snapshot's exported view
    among them) and refuses new ones for 4 s mid-snapshot while the source changes: the sync
    restarts from its checkpoint, the splits left are read with watermarks instead of the lost
    view, and the mirror ends equal to the source with each snapshot row and change once."""
    from helpers.proxy import FreezingProxy
    from helpers.spark import source_and_mirror, sync_through_an_outage

    config = ConnectionConfig.from_url(postgres_url)
    if not config.host or config.host.startswith("/") or "host" in config.options:
        pytest.skip("the proxy needs a TCP server (this PostgreSQL listens on a Unix socket)")
    tag = uuid.uuid4().hex[:10]
    name, slot, publication = f"t_{tag}", f"sdk_s_{tag}", f"sdk_p_{tag}"
    postgres_admin.execute(f'CREATE TABLE "{name}" (id int PRIMARY KEY, v int)')
    postgres_admin.execute(f'INSERT INTO "{name}" SELECT g, 0 FROM generate_series(1, 400) g')
    postgres_admin.execute(f'CREATE PUBLICATION "{publication}" FOR TABLE "{name}"')
    proxy = FreezingProxy(config.host, config.port or 5432)
    url = with_query(postgres_url.replace(f"{config.host}:{config.port or 5432}",
                                          f"127.0.0.1:{proxy.port}"),
                     slot=slot, publication=publication)

    try:
        sync_through_an_outage(spark, proxy, url, f"public.{name}", tmp_path,
                               postgres_admin.execute, f'"{name}"', caplog)
        source, mirrored = source_and_mirror("postgres", config, TableId("public", name),
                                             tmp_path / "mirror.db")
        assert mirrored == source and len(source) == 390
    finally:
        proxy.close()
        postgres_admin.execute("SELECT pg_drop_replication_slot(slot_name) FROM "
                               "pg_replication_slots WHERE slot_name = %s", (slot,))
        postgres_admin.execute(f'DROP PUBLICATION IF EXISTS "{publication}"')
        postgres_admin.execute(f'DROP TABLE IF EXISTS "{name}"')


@pytest.mark.slow
def test_a_batch_read_leaves_no_slot_and_no_publication(spark: Any, postgres_admin: Any,
                                                         postgres_url: str,
                                                         tmp_path: Path) -> None:
    """``spark.read`` reads each split in a consistent view of its own and no log: the slot
    a stream needs would pin the WAL for good, so none is made (nor a publication). Nor
    for a stream that snapshots and stops (``startup.mode=snapshot``)."""
    tag = uuid.uuid4().hex[:10]
    name, slot, publication = f"t_{tag}", f"sdk_s_{tag}", f"sdk_p_{tag}"
    import psycopg

    postgres_admin.execute(f'CREATE TABLE "{name}" (id int PRIMARY KEY, v text)')
    postgres_admin.execute(f"INSERT INTO \"{name}\" SELECT g, 'v' || g "
                           "FROM generate_series(1, 500) g")
    stop = threading.Event()

    def write() -> None:  # each split's view is consistent without a slot to backfill from
        with psycopg.connect(postgres_admin.info.dsn, autocommit=True) as w:
            i = 0
            while not stop.is_set():
                i += 1
                w.execute(f'UPDATE "{name}" SET v = %s WHERE id = %s', (f"w{i}", i % 500 + 1))

    writer = threading.Thread(target=write)
    writer.start()
    try:
        url = with_query(postgres_url, slot=slot, publication=publication)
        frame = spark.read.format("cdc").option("url", url) \
            .option("tables", f"public.{name}").option("snapshot.split.size", "50").load()
        assert frame.count() == 500
        stop.set()
        writer.join()
        stream = spark.readStream.format("cdc").option("url", url) \
            .option("tables", f"public.{name}").option("startup.mode", "snapshot") \
            .option("state.dir", str(tmp_path / "state")).load()
        query = stream.writeStream.format("memory").queryName(f"q_{tag}") \
            .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True) \
            .start()
        query.awaitTermination(120)
        assert spark.sql(f"SELECT count(*) FROM q_{tag}").first()[0] == 500
        assert not postgres_admin.execute("SELECT 1 FROM pg_replication_slots WHERE "
                                          "slot_name = %s", (slot,)).fetchall()
        assert not postgres_admin.execute("SELECT 1 FROM pg_publication WHERE pubname = %s",
                                          (publication,)).fetchall()
    finally:
        stop.set()
        writer.join()
        for statement in (f"SELECT pg_drop_replication_slot('{slot}') FROM "
                          f"pg_replication_slots WHERE slot_name = '{slot}'",
                          f'DROP PUBLICATION IF EXISTS "{publication}"',
                          f'DROP TABLE "{name}"'):
            postgres_admin.execute(statement)
