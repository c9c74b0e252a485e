"""Streaming a source into a mirror with the Spark engine, and comparing the two."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from helpers.proxy import FreezingProxy
from sdk import get_dialect
from sdk.dialect.config import ConnectionConfig


def sync_to_mirror_while(spark: Any, url: str, tables: str, work: Path, mirror: Any,
                         write: Callable[[threading.Event], None]) -> None:
    """Stream ``tables`` of ``url`` into ``mirror`` (Trigger.AvailableNow) twice while ``write``
    runs in a thread until told to stop, then once more after it stopped."""
    def run() -> None:
        query = (spark.readStream.format("cdc").option("url", url).option("tables", tables)
                 .option("state.dir", str(work / "st")).option("snapshot.split.size", "500")
                 .load().writeStream.foreachBatch(mirror)
                 .option("checkpointLocation", str(work / "ck"))
                 .trigger(availableNow=True).start())
        query.awaitTermination(300)
        assert query.exception() is None, query.exception()

    stop = threading.Event()
    thread = threading.Thread(target=write, args=(stop,))
    thread.start()
    try:
        run()
        run()
    finally:
        stop.set()
        thread.join()
    run()


def sync_through_an_outage(spark: Any, proxy: FreezingProxy, url: str, tables: str,
                           tmp_path: Path, execute: Callable[[str, tuple[Any, ...]], None],
                           table_sql: str, caplog: pytest.LogCaptureFixture) -> None:
    """``run_sync`` to caught-up from ``url`` (through ``proxy``) into a SQLite mirror and a
    change log under ``tmp_path``; once the first rows are in, the proxy resets and refuses
    every connection for 4 s while ``execute`` (an administrator's, not proxied) updates and
    deletes rows of ``table_sql`` (ids 1-400, column ``v``). Checks the sync restarted from its
    checkpoint and logged each snapshot row and each change once."""
    from sdk.spark.sync import run_sync

    outage = threading.Event()

    def report(progress: dict[str, Any]) -> None:
        if progress.get("rows", 0) and not outage.is_set():
            outage.set()
            proxy.down()
            for i in range(1, 401, 8):  # the source goes on meanwhile
                execute(f"UPDATE {table_sql} SET v = v + 1 WHERE id = %s", (i,))
            execute(f"DELETE FROM {table_sql} WHERE id > %s", (390,))
            threading.Timer(4, proxy.up).start()

    with caplog.at_level("WARNING", logger="sdk.spark.sync"):
        run_sync(url, f"sqlite:///{tmp_path}/mirror.db", tables, str(tmp_path / "ck"),
                 "caught-up", {"snapshot.split.size": "20", "snapshot.splits-per-batch": "1"},
                 report=report, report_seconds=0.1, changes=str(tmp_path / "changes"),
                 retry_seconds=120)
    assert outage.is_set()
    assert "restarting from the checkpoint" in caplog.text
    log = spark.read.parquet(str(tmp_path / "changes")).collect()
    snapshot = [r.id for r in log if r._op == "r"]
    assert sorted(snapshot) == sorted(set(snapshot))
    changes = [(r._offset, r._op, r.id) for r in log if r._op != "r"]
    assert len(changes) == len(set(changes))


def source_and_mirror(dialect_name: str, config: ConnectionConfig, table: Any,
                      mirror: Path) -> tuple[dict[Any, Any], dict[Any, Any]]:
    """The rows of ``table`` in the source (one whole-table ``read_range``) and in the SQLite
    mirror file ``mirror``, each by key."""
    from sdk import SnapshotSplit
    from sdk_sqlite import read_target

    dialect = get_dialect(dialect_name)
    conn = dialect.connect(config)
    target = get_dialect("sqlite").connect(ConnectionConfig.from_url(f"sqlite:///{mirror}"))
    try:
        schema = dialect.describe_table(conn, table)
        whole = SnapshotSplit(schema.table, 0, None, None)
        source = {schema.key_of(r): r for b in dialect.read_range(conn, schema, whole, 1000)
                  for r in b}
        return source, read_target(target, schema)
    finally:
        target.close()
        conn.close()


def probe(spark: Any, name: str, batches: list[Any], schema: Any) -> Any:
    class Reader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(0)]

        def read(self, partition: InputPartition) -> Any:
            yield from batches

    class Source(DataSource):
        @classmethod
        def name(cls) -> str:
            return name

        def schema(self) -> Any:
            return schema

        def reader(self, schema: Any) -> DataSourceReader:
            return Reader()

    spark.dataSource.register(Source)
    return spark.read.format(name).load()
