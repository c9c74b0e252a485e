"""A streaming sync from a SQLite source to a SQLite mirror, run as its own process so the
crash tests can SIGKILL it (driver and JVM) and start it again from its checkpoint.

    python spark_child.py SOURCE_URL MIRROR_URL WORKDIR [chained]

Prints ``APPLY <batch>`` before and ``APPLIED <batch>`` after each micro-batch reaches the
mirror, so the test can time its kills; keeps what each batch delivered under
``WORKDIR/changes`` so the test can see a change delivered twice. Runs until the file
``WORKDIR/stop`` appears (the test creates it once its writer has stopped), then until the
mirror has caught up with the source's log head, and exits. With ``chained`` the source's
tasks apply what they read to the mirror themselves (option ``target``) and nothing is kept
under ``changes``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def main() -> None:
    source, mirror_url, work = sys.argv[1:4]
    chained = sys.argv[4:] == ["chained"]
    from sdk import ConnectionConfig, Offset, get_dialect
    from sdk.spark import Mirror
    from sdk.spark.session import spark_session

    spark = spark_session("local[2]")  # as ``sdk sync`` starts it (its JVM archive too)
    dialect = get_dialect("sqlite")
    conn = dialect.connect(ConnectionConfig.from_url(source))
    schemas = [dialect.describe_table(conn, t) for t in dialect.list_tables(conn)]
    conn.close()
    mirror = Mirror(mirror_url, schemas)  # creates the mirror's tables either way

    def apply(df: Any, batch_id: int) -> None:
        print(f"APPLY {batch_id}", flush=True)
        if chained:  # the tasks apply as they read: collecting the reports runs them
            df.collect()
            print(f"APPLIED {batch_id}", flush=True)
            return
        df = df.persist()
        # what the batch delivered, for the test to count (a replay rewrites its folder)
        df.select("table", "op", "key", "offset").write.mode("overwrite").parquet(
            f"{work}/changes/batch_id={batch_id}")
        mirror(df, batch_id)
        df.unpersist()
        print(f"APPLIED {batch_id}", flush=True)

    stream = (spark.readStream.format("cdc").option("url", source)
              .option("state.dir", f"{work}/state").option("snapshot.split.size", "150")
              .option("snapshot.splits-per-batch", "2")
              .options(**({"target": mirror_url} if chained else {})).load())
    writer = stream.writeStream.foreachBatch(apply).option("checkpointLocation", f"{work}/ck")
    query = writer.trigger(processingTime="200 milliseconds").start()
    deadline = time.monotonic() + 180
    head = None
    while query.isActive and time.monotonic() < deadline:
        time.sleep(0.2)
        if head is None and os.path.exists(f"{work}/stop"):
            conn = dialect.connect(ConnectionConfig.from_url(source))
            head = dialect.current_offset(conn)  # the writer has stopped: the final head
            conn.close()
        progress = query.lastProgress
        if head is not None and progress and progress["sources"][0]["endOffset"]:
            end = json.loads(progress["sources"][0]["endOffset"])
            position = end.get("position")
            if position and dialect.compare_offset(
                    Offset.from_json(json.loads(position)), head) >= 0:
                break
    query.stop()
    if query.exception() is not None:
        raise SystemExit(f"query failed: {query.exception()}")
    if head is None:
        raise SystemExit("timed out")
    print("FINISHED", flush=True)


if __name__ == "__main__":
    main()
