"""Peak backfill buffer during a 1M-row snapshot under concurrent writes, against split size.

    python benchmarks/snapshot_buffer.py [--rows 1000000] [--split-size 8096]

A SQLite source (reference dialect, watermarks and backfill, no snapshot view) with a writer
process updating, inserting and deleting as fast as it can. Prints, per run: rows, seconds,
rows/s, splits, splits that needed a backfill, the largest buffer (rows held at once for one
split), and the raw driver read of the same table in the same run for scale.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import sqlite3
import tempfile
import time
from pathlib import Path

from sdk import ConnectionConfig, get_dialect
from sdk.algorithm import Phase, StartupMode, SyncOptions, SyncRunner


def writer(path: str, rows: int, stop: float) -> None:
    rng = random.Random(3)
    conn = sqlite3.connect(path, timeout=60)
    while time.time() < stop:
        with conn:
            for _ in range(20):
                key = rng.randrange(rows + rows // 10)
                action = rng.random()
                if action < 0.6:
                    conn.execute("UPDATE t SET v = v + 1 WHERE id = ?", (key,))
                elif action < 0.8:
                    conn.execute("INSERT OR IGNORE INTO t VALUES (?, 'new', 0)", (key,))
                else:
                    conn.execute("DELETE FROM t WHERE id = ?", (key,))
    conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--split-size", type=int, default=8096)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp())
    path = work / "bench.db"
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, v INTEGER)")
        conn.executemany("INSERT INTO t VALUES (?, ?, 0)",
                         ((i, f"row {i}") for i in range(args.rows)))
    dialect = get_dialect("sqlite")
    config = ConnectionConfig.from_url(f"sqlite:///{path}")
    setup = dialect.connect(config)
    schema = dialect.describe_table(setup, dialect.list_tables(setup)[0])
    dialect.prepare_capture(setup, [schema])

    t0 = time.perf_counter()
    raw = setup.execute("SELECT id, name, v FROM t").fetchall()
    raw_seconds = time.perf_counter() - t0
    print(f"raw sqlite3 fetchall: {len(raw)} rows in {raw_seconds:.2f}s "
          f"({len(raw) / raw_seconds:,.0f} rows/s)")
    del raw

    for with_writer in (False, True):
        options = SyncOptions(split_size=args.split_size, atomic_snapshot=False,
                              startup_mode=StartupMode.SNAPSHOT)
        runner = SyncRunner(dialect, lambda: dialect.connect(config), options)
        process = None
        if with_writer:
            process = multiprocessing.get_context("spawn").Process(
                target=writer, args=(str(path), args.rows, time.time() + 600))
            process.start()
            time.sleep(1.0)
        t0 = time.perf_counter()
        state = runner.start([schema])
        rows = splits = backfilled = peak = window = 0
        while state.phase is not Phase.DONE:
            events, state = runner.step(state)
            if runner.last_split is not None and events:
                result = runner.last_split
                rows += len(events)
                splits += 1
                backfilled += result.window_events > 0
                window = max(window, result.window_events)
                peak = max(peak, result.peak_buffer)
                runner.last_split = None
        seconds = time.perf_counter() - t0
        if process is not None:
            process.kill()
            process.join()
        runner.close()
        print(f"writer={'on ' if with_writer else 'off'} rows={rows} seconds={seconds:.2f} "
              f"rows/s={rows / seconds:,.0f} splits={splits} backfilled={backfilled} "
              f"largest window={window} changes, peak buffer={peak} rows "
              f"({peak / args.split_size:.2f}x split size); "
              f"vs raw read {raw_seconds / seconds:.2f}x")


if __name__ == "__main__":
    main()
