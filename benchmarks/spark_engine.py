"""The Spark engine's figures, each against a raw read measured in the same run.

    python benchmarks/spark_engine.py snapshot [--rows 1000000]
    python benchmarks/spark_engine.py latency [--seconds 30 --rate 200]
    python benchmarks/spark_engine.py log [--changes 200000]
    python benchmarks/spark_engine.py memory [--rows 1000000 5000000]

Source: the reference SQLite dialect (the only one that needs no server).
- snapshot: 1M rows to Parquet through ``spark.read.format("cdc")`` at parallelism 1 and 2,
  against a raw single-connection sqlite3 loop that builds Arrow batches and writes Parquet;
  once with the engine's four metadata columns (``_op``, ``_offset``, ``_commit_ts``, ``_seq``)
  and once writing the same four data columns the raw loop writes.
- latency: a writer commits ``rate`` rows/s; a streaming query with a ``foreachBatch`` sink
  records how long after its commit each row arrived (p50/p95).
- log: events/s of one log micro-batch against the dialect's own ``stream_log`` of the range.
- memory: peak resident memory of the Python workers and the driver for each size.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


def make_table(path: Path, rows: int) -> str:
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, price REAL, "
                     "qty INTEGER)")
        conn.executemany("INSERT INTO t VALUES (?, ?, ?, ?)",
                         ((i, f"name {i}", i / 3, i % 100) for i in range(rows)))
    return f"sqlite:///{path}"


def session() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from sdk.spark import register

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def raw_snapshot(path: Path, out: Path) -> float:
    """A plain single-connection driver loop: fetchmany -> Arrow -> Parquet."""
    t0 = time.perf_counter()
    conn = sqlite3.connect(path)
    cursor = conn.execute("SELECT id, name, price, qty FROM t")
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("price", pa.float64()),
                        ("qty", pa.int64())])
    with pq.ParquetWriter(out, schema) as writer:
        while rows := cursor.fetchmany(50_000):
            cols = list(zip(*rows, strict=True))
            writer.write_batch(pa.RecordBatch.from_arrays(
                [pa.array(c, type=f.type) for c, f in zip(cols, schema, strict=True)],
                schema=schema))
    conn.close()
    return time.perf_counter() - t0


def bench_snapshot(rows: int) -> None:
    work = Path(tempfile.mkdtemp())
    url = make_table(work / "src.db", rows)
    spark = session()
    warm = make_table(work / "warm.db", 1000)
    spark.read.format("cdc").option("url", warm).load().write.parquet(str(work / "warm"))
    raw = min(raw_snapshot(work / "src.db", work / f"raw{i}.parquet") for i in range(2))
    print(f"raw sqlite3 -> arrow -> parquet: {rows} rows in {raw:.2f}s "
          f"({rows / raw:,.0f} rows/s)")
    for parallelism in (1, 2):
        for columns, label in ((None, "with the CDC metadata columns"),
                               (["id", "name", "price", "qty"], "data columns, as the raw loop")):
            best = float("inf")
            for attempt in range(2):
                t0 = time.perf_counter()
                df = (spark.read.format("cdc").option("url", url)
                      .option("parallelism", str(parallelism))
                      .option("snapshot.split.size", "50000").load())
                if columns:
                    df = df.select(*columns)
                df.write.parquet(str(work / f"engine{parallelism}-{len(columns or ())}-{attempt}"))
                best = min(best, time.perf_counter() - t0)
            print(f"engine parallelism={parallelism}, {label}: {best:.2f}s "
                  f"({rows / best:,.0f} rows/s), {raw / best:.2f}x the raw loop")


def bench_latency(seconds: int, rate: int) -> None:
    work = Path(tempfile.mkdtemp())
    url = make_table(work / "src.db", 1000)
    spark = session()
    arrivals: list[float] = []

    def sink(df: Any, batch_id: int) -> None:
        now = time.time()
        for row in df.where("_op != 'r'").select("price").collect():
            arrivals.append(now - row.price)  # the writer stores its commit time in price

    query = (spark.readStream.format("cdc").option("url", url)
             .option("state.dir", str(work / "state")).option("log.poll-interval.ms", "100")
             .load().writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(work / "ck")).start())
    while not (work / "state" / "progress.json").exists() or \
            '"phase":"log"' not in (work / "state" / "progress.json").read_text():
        time.sleep(0.2)
    conn = sqlite3.connect(work / "src.db", timeout=30)
    end = time.time() + seconds
    key = 10_000
    while time.time() < end:
        with conn:
            conn.execute("INSERT INTO t VALUES (?, 'x', ?, 0)", (key, time.time()))
        key += 1
        time.sleep(1 / rate)
    time.sleep(3)
    query.stop()
    arrivals.sort()
    p50 = statistics.median(arrivals)
    p95 = arrivals[int(len(arrivals) * 0.95)]
    print(f"commit-to-sink latency over {len(arrivals)} rows at {rate}/s: "
          f"p50={p50 * 1000:.0f} ms p95={p95 * 1000:.0f} ms")


def bench_log(changes: int) -> None:
    """Log-phase batches when Spark is warm: a running stream gets ``changes`` changes in five
    rounds; each round's batch is timed from the query progress (the first, cold, is dropped)."""
    from sdk import ChangeEvent, ConnectionConfig, get_dialect

    work = Path(tempfile.mkdtemp())
    url = make_table(work / "src.db", 1000)
    dialect = get_dialect("sqlite")
    conn = dialect.connect(ConnectionConfig.from_url(url))
    schema = dialect.describe_table(conn, dialect.list_tables(conn)[0])
    dialect.prepare_capture(conn, [schema])
    spark = session()
    query = (spark.readStream.format("cdc").option("url", url)
             .option("state.dir", str(work / "state")).option("startup.mode", "latest").load()
             .writeStream.format("noop").option("checkpointLocation", str(work / "ck"))
             .trigger(processingTime="2 seconds").start())
    time.sleep(8)
    rounds = 5
    per_round = changes // rounds
    raw_total = 0.0
    for _ in range(rounds):
        start = dialect.current_offset(conn)
        with sqlite3.connect(work / "src.db") as writer:
            writer.executemany("UPDATE t SET qty = qty + 1 WHERE id = ?",
                               ((i % 1000,) for i in range(per_round)))
        end = dialect.current_offset(conn)
        t0 = time.perf_counter()
        sum(isinstance(e, ChangeEvent) for e in dialect.stream_log(conn, [schema], start, end))
        raw_total += time.perf_counter() - t0
        time.sleep(6)
    query.stop()
    batches = [p for p in query.recentProgress if p["numInputRows"]][1:]
    rows = sum(p["numInputRows"] for p in batches)
    busy = sum(p["durationMs"]["addBatch"] for p in batches) / 1000
    raw_rate = per_round * rounds / raw_total
    print(f"raw stream_log: {raw_rate:,.0f} changes/s; warm engine log batches: {rows} changes "
          f"in {busy:.2f}s of addBatch ({rows / busy:,.0f}/s, {rows / busy / raw_rate:.2f}x raw)")


def _python_rss() -> int:
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"pyspark" not in cmd and int(pid) != os.getpid():
                continue
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def _sample(done: threading.Event, peaks: list[int]) -> None:
    while not done.is_set():
        peaks[0] = max(peaks[0], _python_rss())
        time.sleep(0.1)


def bench_memory(sizes: list[int]) -> None:
    spark = session()
    for rows in sizes:
        work = Path(tempfile.mkdtemp())
        url = make_table(work / "src.db", rows)
        done = threading.Event()
        peaks = [0]
        sampler = threading.Thread(target=_sample, args=(done, peaks))
        sampler.start()
        t0 = time.perf_counter()
        (spark.read.format("cdc").option("url", url).option("parallelism", "2").load()
         .write.parquet(str(work / "out")))
        done.set()
        sampler.join()
        print(f"{rows} rows in {time.perf_counter() - t0:.1f}s: peak Python RSS "
              f"(driver + workers) {peaks[0] / 2**20:.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["snapshot", "latency", "log", "memory"])
    parser.add_argument("--rows", type=int, nargs="*", default=None)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--changes", type=int, default=200_000)
    args = parser.parse_args()
    if args.what == "snapshot":
        bench_snapshot((args.rows or [1_000_000])[0])
    elif args.what == "latency":
        bench_latency(args.seconds, args.rate)
    elif args.what == "log":
        bench_log(args.changes)
    else:
        bench_memory(args.rows or [1_000_000, 5_000_000])


if __name__ == "__main__":
    main()
