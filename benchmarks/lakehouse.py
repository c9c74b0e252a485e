"""The snapshot into Delta Lake and into Iceberg against the same sync writing plain Parquet, in
one run (issue #23's throughput figure: each lakehouse at >= 0.8x the Parquet change log).

    python benchmarks/lakehouse.py [--rows 1000000] [--repeat 1] [--sdk-option KEY=VALUE ...]

One MariaDB table (``id BIGINT PRIMARY KEY, v VARCHAR(40), amount DECIMAL(12,2), at
DATETIME(6)``, from the server's sequence engine) is copied by ``sdk sync --until snapshot``
run as a user runs it (a subprocess, fresh checkpoint, default options) three ways in turn:
``--target none --changes DIR`` (the envelope as Parquet, written by Spark's own writer),
``--target delta:///DIR`` (delta-rs, each task committing its splits) and ``--target
iceberg:///DIR`` (pyiceberg, SQL catalog on SQLite). Beside them, the raw driver read of the
same table (pymysql unbuffered cursor, 10,000 rows a fetch) sets the ceiling. Each command is
timed whole, and by the sync's own snapshot time (progress.json: first split handed out to
the snapshot done). Every target is checked: the Parquet log holds one ``r`` row per source
row, each lakehouse table reads back the source's row count and sum of ``id``. Everything it
makes is removed at the end. Prints rates and the ratios delta/parquet, iceberg/parquet and
each/raw (rate over rate: below 1.0 is slower).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _servers import MYSQL, MYSQL_ADMIN, fill_mariadb
from e2e_sync import read_progress, sdk_command

from sdk import ConnectionConfig, SnapshotSplit, TableId, get_dialect
from sdk.dialect.manager import default_manager


def run_sync(table: str, target: list[str], checkpoint: Path, options: list[str]
             ) -> tuple[float, float | None]:
    """``sdk sync --until snapshot``: the whole command's seconds and the snapshot's own."""
    command = [*sdk_command(), "sync", "--source", MYSQL, *target, "--tables",
               f"sdk_test.{table}", "--checkpoint", str(checkpoint), "--until", "snapshot"]
    for option in options:
        command += ["--option", option]
    report = checkpoint / "state" / "progress.json"
    done_at = None
    t0 = time.perf_counter()
    with open(checkpoint.with_suffix(".log"), "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
        while process.poll() is None:
            seen = read_progress(report)
            if seen and done_at is None and seen.get("phase") in ("log", "done"):
                done_at = seen["updated_at"]
            time.sleep(0.05)
    seconds = time.perf_counter() - t0
    if process.returncode != 0:
        tail = checkpoint.with_suffix(".log").read_text().splitlines()[-30:]
        raise SystemExit(f"sdk sync failed (exit {process.returncode}):\n" + "\n".join(tail))
    final = read_progress(report) or {}
    done_at = done_at or final.get("updated_at")
    started = final.get("started_at")
    return seconds, (done_at - started if done_at and started else None)


def raw_read(table: str) -> float:
    import pymysql
    import pymysql.cursors

    config = ConnectionConfig.from_url(MYSQL)
    conn = pymysql.connect(host=config.host, port=config.port or 3306, user=config.user,
                           password=config.password or "", database=config.database,
                           cursorclass=pymysql.cursors.SSCursor)
    t0 = time.perf_counter()
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM `{table}`")
        while cur.fetchmany(10_000):
            pass
    seconds = time.perf_counter() - t0
    conn.close()
    return seconds


def check_lake(url: str, table: str, rows: int) -> None:
    mysql = get_dialect("mysql")
    source = mysql.connect(ConnectionConfig.from_url(MYSQL))
    schema = mysql.describe_table(source, TableId("sdk_test", table))
    source.close()
    dialect, config = default_manager().dialect_for_url(url)
    conn = dialect.connect(config)
    count = total = 0
    for batch in dialect.read_range(conn, schema, SnapshotSplit(schema.table, 0, None, None),
                                    100_000):
        count += len(batch)
        total += sum(r[0] for r in batch)
    conn.close()
    expected = rows * (rows + 1) // 2
    if (count, total) != (rows, expected):
        raise SystemExit(f"{url}: {count} rows summing {total}, expected {rows} / {expected}")


def check_parquet(path: Path, rows: int) -> None:
    import pyarrow.dataset as ds

    dataset = ds.dataset(str(path), format="parquet")
    column = "op" if "op" in dataset.schema.names else "_op"  # the envelope, or typed rows
    data = dataset.to_table(columns=[column])
    reads = sum(1 for op in data.column(column).to_pylist() if op == "r")
    if reads != rows:
        raise SystemExit(f"{path}: {reads} snapshot rows, expected {rows}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--sdk-option", action="append", default=[])
    args = parser.parse_args()
    admin = get_dialect("mysql").connect(ConnectionConfig.from_url(MYSQL_ADMIN))
    table = f"bench_lake_{os.getpid()}"
    work = Path(tempfile.mkdtemp(prefix="sdk-lake-"))
    best: dict[str, tuple[float, float | None]] = {}
    try:
        fill_mariadb(admin, table, args.rows)
        admin.query(f"ANALYZE TABLE `{table}`")
        raw = min(raw_read(table) for _ in range(args.repeat))
        for attempt in range(args.repeat):
            for kind in ("parquet", "delta", "iceberg"):
                run = work / f"{kind}-{attempt}"
                run.mkdir()
                if kind == "parquet":
                    target = ["--target", "none", "--changes", str(run / "changes")]
                else:
                    target = ["--target", f"{kind}://{run}/lake"]
                seconds, own = run_sync(table, target, run / "ck", args.sdk_option)
                if kind == "parquet":
                    check_parquet(run / "changes", args.rows)
                else:
                    check_lake(f"{kind}://{run}/lake", table, args.rows)
                shutil.rmtree(run)
                if kind not in best or seconds < best[kind][0]:
                    best[kind] = (seconds, own)
                print(f"  run {attempt + 1} {kind}: {seconds:.1f} s whole, "
                      f"{own or float('nan'):.1f} s snapshot", flush=True)
    finally:
        admin.query(f"DROP TABLE IF EXISTS `{table}`")
        admin.close()
        shutil.rmtree(work, ignore_errors=True)
    rows = args.rows
    print(f"\n{rows:,} rows, best of {args.repeat}")
    print(f"raw pymysql read: {rows / raw:,.0f} rows/s ({raw:.1f} s)")
    for kind, (seconds, own) in best.items():
        own_rate = f", snapshot {rows / own:,.0f} rows/s ({own:.1f} s)" if own else ""
        print(f"sdk sync -> {kind}: whole {rows / seconds:,.0f} rows/s ({seconds:.1f} s)"
              f"{own_rate}; whole/raw {raw / seconds:.2f}x")
    base = best["parquet"]
    for kind in ("delta", "iceberg"):
        seconds, own = best[kind]
        ratio = f"{base[1] / own:.2f}x" if own and base[1] else "n/a"
        print(f"{kind}/parquet: whole {base[0] / seconds:.2f}x, snapshot {ratio}")


if __name__ == "__main__":
    main()
