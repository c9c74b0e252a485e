"""The streaming source's bookkeeping per micro-batch as finished splits pile up.

    python benchmarks/stream_state.py [--rows 200000] [--split-size 20] [--splits-per-batch 8]

Drives ``CdcStreamReader`` in this process the way Spark's micro-batch loop does
(``latestOffset``, ``partitions``, each partition's ``read``, ``commit``) over a SQLite table
cut into many tiny splits, so the reads are cheap and what is timed is the state kept per batch:
saving and loading it, folding the watermarks, collecting the garbage. Prints the mean time per
batch over the first and the last tenth of the snapshot (flat when the cost per batch does not
grow with the splits already finished), the bytes the state store wrote in all, and the
the state.dir's size at the end.
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from pathlib import Path

from pyspark.sql.datasource import InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable

from sdk.spark.driver import source as src
from sdk.spark.state.statestore import StateStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--split-size", type=int, default=20)
    parser.add_argument("--splits-per-batch", type=int, default=8)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sdk-state-"))
    db = work / "source.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)")
    conn.executemany("INSERT INTO items VALUES (?, ?)",
                     ((i, f"item {i}") for i in range(1, args.rows + 1)))
    conn.commit()
    conn.close()
    spec = src.resolve({"url": f"sqlite:///{db}", "state.dir": str(work / "state"),
                        "snapshot.split.size": str(args.split_size),
                        "snapshot.splits-per-batch": str(args.splits_per_batch)})
    written = [0]
    original = StateStore.write_bytes

    def counting(self: StateStore, data: bytes, *parts: str) -> None:
        written[0] += len(data)
        original(self, data, *parts)

    StateStore.write_bytes = counting  # type: ignore[method-assign]
    reader = src.CdcStreamReader(spec)
    offset = reader.initialOffset()
    times: list[float] = []
    rows = 0
    started = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        end = reader.latestOffset(offset, ReadAllAvailable())
        parts: list[InputPartition] = list(reader.partitions(offset, end))
        for part in parts:
            rows += sum(b.num_rows for b in reader.read(part))
        reader.commit(end)
        times.append(time.perf_counter() - t0)
        if end["phase"] != "snapshot":
            break
        offset = end
    total = time.perf_counter() - started
    reader.stop()
    StateStore.write_bytes = original  # type: ignore[method-assign]
    tenth = max(1, len(times) // 10)
    first, last = times[:tenth], times[-tenth - 1:-1]
    size = sum(f.stat().st_size for f in (work / "state").rglob("*") if f.is_file())
    splits = -(-args.rows // args.split_size)
    print(f"{rows} rows in {splits} splits, {len(times)} batches in {total:.1f} s: "
          f"{sum(first) / len(first) * 1000:.1f} ms per batch over the first tenth, "
          f"{sum(last) / len(last) * 1000:.1f} ms over the last; state store wrote "
          f"{written[0] / 2**20:,.1f} MiB, state.dir {size / 2**20:,.1f} MiB at the end")


if __name__ == "__main__":
    main()
