"""The Spark engine on real Spark (local mode) over the reference SQLite dialect."""

from __future__ import annotations

import json
import multiprocessing
import random
import sqlite3
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from helpers.sources import make_source, random_change

from sdk import ConnectionConfig, get_dialect
from sdk.job.spec import resolve
from sdk.spark import Mirror, progress
from sdk.spark.driver.source import CdcStreamReader
from sdk.spark.state import engine_state
from sdk.spark.state.engine_state import EngineState
from sdk.spark.state.statestore import StateStore
from sdk_sqlite import read_target

pytestmark = pytest.mark.spark


def _writer(path: str, seed: int, ops: int, pause: float) -> None:
    rng = random.Random(seed)
    conn = sqlite3.connect(path, timeout=60)
    for _ in range(ops):
        random_change(conn, rng, 3000)
        time.sleep(pause)
    conn.close()


def start_writer(url: str, ops: int, pause: float = 0.001, seed: int = 1
                 ) -> multiprocessing.process.BaseProcess:
    path = ConnectionConfig.from_url(url).database
    process = multiprocessing.get_context("spawn").Process(target=_writer,
                                                           args=(path, seed, ops, pause))
    process.start()
    return process


def source_rows(url: str, table: str) -> dict[Any, tuple[Any, ...]]:
    dialect = get_dialect("sqlite")
    conn = dialect.connect(ConnectionConfig.from_url(url))
    schema = dialect.describe_table(conn, next(t for t in dialect.list_tables(conn)
                                               if t.name == table))
    rows = read_target(conn, schema)
    conn.close()
    return rows


def test_batch_read_is_auto_named_and_typed(spark: Any, tmp_path: Path) -> None:
    url = make_source(tmp_path)
    df = (spark.read.format("cdc").option("url", url).option("tables", "items")
          .option("snapshot.split.size", "300").load())
    assert [f.name for f in df.schema.fields] == \
        ["id", "name", "price", "data", "_op", "_offset", "_commit_ts", "_seq",
         "_schema_version"]
    got = {(r.id,): (r.id, r.name, r.price, r.data) for r in df.collect()}
    assert got == source_rows(url, "items")
    assert {r._op for r in df.select("_op").distinct().collect()} == {"r"}


def test_several_tables_come_in_one_envelope(spark: Any, tmp_path: Path) -> None:
    url = make_source(tmp_path, rows=50)
    df = spark.read.format("cdc").option("url", url).load()
    assert df.columns == ["table", "op", "key", "before", "after", "offset", "commit_ts", "seq",
                          "schema_version"]
    counts = {r["table"]: r["count"] for r in df.groupBy("table").count().collect()}
    assert counts == {"main.items": 50, "main.pairs": 90}
    pair = df.where("table = 'main.pairs'").orderBy("key").first()
    assert json.loads(pair.key) == ["a", 0] and json.loads(pair.after)["v"] == "x"


def test_replayed_batch_serves_identical_rows(tmp_path: Path) -> None:
    url = make_source(tmp_path, rows=500)
    spec = resolve({"url": url, "tables": "items", "state.dir": str(tmp_path / "state"),
                    "snapshot.split.size": "100", "snapshot.atomic": "false"})
    reader = CdcStreamReader(spec)
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    writer = start_writer(url, 300, 0.0005)
    first = [b for p in reader.partitions(start, end) for b in reader.read(p)]
    writer.join()
    again = [b for p in reader.partitions(start, end) for b in reader.read(p)]
    assert pa.Table.from_batches(first).equals(pa.Table.from_batches(again))
    assert sum(b.num_rows for b in first) > 0
    assert reader.latestOffset(end, None)["state"] != end["state"]  # folds the watermarks


def test_finished_splits_are_stored_in_chunks_across_a_restart(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Drives the stream reader as Spark's loop does, restarting the driver midway (fresh
    caches over the same state.dir): every split is folded in once, a state names chunks
    instead of holding the splits, and the chunks left on disk are those kept states name."""
    monkeypatch.setattr(engine_state, "CHUNK_SPLITS", 8)
    url = make_source(tmp_path, rows=1200)
    spec = resolve({"url": url, "tables": "items", "state.dir": str(tmp_path / "state"),
                    "snapshot.split.size": "10", "snapshot.splits-per-batch": "3"})
    reader = CdcStreamReader(spec)
    offset = reader.initialOffset()
    rows = batches = 0
    while offset["phase"] == "snapshot":
        end = reader.latestOffset(offset, None)
        rows += sum(b.num_rows for p in reader.partitions(offset, end) for b in reader.read(p))
        reader.commit(end)
        last, offset, batches = offset, end, batches + 1
        if batches == 20:
            reader.stop()
            reader = CdcStreamReader(spec)
    reader.stop()
    store = StateStore(str(tmp_path / "state"))
    engine = EngineState.load(store, last["state"])  # the last snapshot batch's
    finished = engine.sync.finished[spec.tables[0].table]
    assert rows == 1200 and batches > 40 and len(finished) > 100
    assert [f.split.index for f in finished] + [s.index for s in engine.inflight] == \
        list(range(len(finished) + len(engine.inflight)))
    contents = [store.read_bytes("content", name) for name in store.list_dir("content")]
    assert contents and all(b"watermark" not in c for c in contents if c)
    named = {c for name in store.list_dir("states")
             for c in EngineState.chunks_of(store, store.read_json("states", name)["content"])}
    on_disk = {name.removesuffix(".json") for name in store.list_dir("chunks")}
    assert named == on_disk and len(on_disk) >= len(finished) // 8


def test_a_state_stored_with_its_splits_inline_still_loads(tmp_path: Path) -> None:
    url = make_source(tmp_path, rows=100)
    spec = resolve({"url": url, "tables": "items", "state.dir": str(tmp_path / "state"),
                    "snapshot.split.size": "10"})
    reader = CdcStreamReader(spec)
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    for part in reader.partitions(start, end):
        list(reader.read(part))
    folded = EngineState.load(reader.store, reader.latestOffset(end, None)["state"])
    assert folded.sync.finished
    store = StateStore(str(tmp_path / "old"))  # the layout before chunks
    old = {"sync": folded.sync.to_json(), "inflight": [], "log_from": None}
    digest = store.put_content(old, "content")
    store.write_json({"content": digest}, "states", f"{folded.seq:012d}-{digest}.json")
    assert EngineState.load(store, f"{folded.seq:012d}-{digest}").sync == folded.sync


def run_stream(spark: Any, url: str, tmp_path: Path, sink: Any, tables: str) -> None:
    """Run the stream until it has caught up with the source (Trigger.AvailableNow)."""
    stream = (spark.readStream.format("cdc").option("url", url).option("tables", tables)
              .option("state.dir", str(tmp_path / "state"))
              .option("snapshot.split.size", "250").load())
    query = sink(stream.writeStream).option("checkpointLocation", str(tmp_path / "ck")) \
        .trigger(availableNow=True).start()
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()


@pytest.mark.slow
def test_stream_to_mirror_with_concurrent_writer(spark: Any, tmp_path: Path) -> None:
    url = make_source(tmp_path)
    dialect = get_dialect("sqlite")
    conn = dialect.connect(ConnectionConfig.from_url(url))
    schemas = [dialect.describe_table(conn, t) for t in dialect.list_tables(conn)]
    dialect.prepare_capture(conn, schemas)
    mirror = Mirror(f"sqlite:///{tmp_path}/mirror.db", schemas)
    writer = start_writer(url, 2500, 0.002)
    for _ in range(3):  # snapshot while the writer runs, then log batches as it goes on
        run_stream(spark, url, tmp_path, lambda w: w.foreachBatch(mirror), "*")
    writer.join()
    run_stream(spark, url, tmp_path, lambda w: w.foreachBatch(mirror), "*")
    target = dialect.connect(ConnectionConfig.from_url(f"sqlite:///{tmp_path}/mirror.db"))
    for schema in schemas:
        assert read_target(target, schema) == source_rows(url, schema.table.name)
    assert sum(mirror.applied.values()) > 0
    with sqlite3.connect(tmp_path / "mirror.db") as ledger:  # a batch in one task's transaction
        tasks = {b.rsplit("-", 1)[1] for (b,) in ledger.execute("SELECT batch_id FROM "
                                                                   "_sdk_applied")}
    assert tasks == {"0"}, tasks
    # a log batch applies changes committed a moment before: a lag of seconds, not hours
    with sqlite3.connect(tmp_path / "src.db") as writer_conn:
        writer_conn.execute("UPDATE items SET name = 'late' WHERE id < 5")
    run_stream(spark, url, tmp_path, lambda w: w.foreachBatch(mirror), "*")
    assert mirror.lag_seconds is not None and 0 <= mirror.lag_seconds < 120
    items = next(s for s in schemas if s.table.name == "items")
    assert read_target(target, items) == source_rows(url, "items")
    target.close()
    conn.close()


@pytest.mark.slow
def test_change_log_has_no_duplicates(spark: Any, tmp_path: Path) -> None:
    url = make_source(tmp_path)
    out = str(tmp_path / "changes")
    writer = start_writer(url, 1500, 0.002, seed=5)
    for _ in range(3):
        run_stream(spark, url, tmp_path,
                   lambda w: w.format("parquet").option("path", out), "items")
    writer.join()
    run_stream(spark, url, tmp_path, lambda w: w.format("parquet").option("path", out),
               "items")
    rows = spark.read.parquet(out).collect()
    snapshot = [r.id for r in rows if r._op == "r"]
    assert len(snapshot) == len(set(snapshot))
    changes = [(r._offset, r._op, r.id) for r in rows if r._op != "r"]
    assert len(changes) == len(set(changes)) > 0
    state: dict[int, tuple[Any, ...]] = {}
    ordered = sorted(rows, key=lambda r: (r._op != "r",
                                          json.loads(r._offset)["position"]["seq"], r._seq))
    for r in ordered:
        if r._op == "d":
            state.pop(r.id, None)
        else:
            state[r.id] = (r.id, r.name, r.price, r.data)
    assert {(k,): v for k, v in state.items()} == source_rows(url, "items")
    report = progress(str(tmp_path / "state"))
    assert report is not None and report["phase"] == "log" and report["caught_up"]
    items = report["tables"]["main.items"]
    assert items["snapshot_done"] and items["splits_done"] == items["splits_estimated"] >= 8
