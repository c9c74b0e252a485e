"""The main job's acceptance run: ``sdk sync`` MariaDB -> PostgreSQL of a large table under a
concurrent writer, SIGKILLed several times during the snapshot and during the log phase and
restarted each time; then a caught-up run. Checks the mirror equals the source and that the
change log (``--changes``) holds every change once: no duplicate application.

    python benchmarks/acceptance_sync_kill.py [--rows 1000000] [--snapshot-kills 2]
                                              [--log-kills 2]

Needs the servers of scripts/services.sh (SDK_TEST_MYSQL_URL / SDK_TEST_POSTGRES_URL and the
admin URLs, defaulting to the local ones). Prints what happened and the timings.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pyarrow.dataset as ds
from _servers import MYSQL, MYSQL_ADMIN, PG, PG_ADMIN, fill_mariadb

from sdk import ConnectionConfig, SnapshotSplit, TableId, get_dialect


def run_until(args: list[str], moment: Callable[[str], bool] | None, log: list[str]) -> float:
    """Run ``sdk`` with ``args``; SIGKILL its process group at the first progress line for
    which ``moment`` is true (None: let it finish). Returns the seconds it ran."""
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, "-m", "sdk.app.cli", *args],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               start_new_session=True)
    assert process.stdout is not None
    try:
        for line in process.stdout:
            log.append(line.rstrip())
            if moment is not None and moment(line):
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                return time.monotonic() - started
    except BaseException:
        os.killpg(process.pid, signal.SIGKILL)
        raise
    code = process.wait()
    if moment is not None:
        raise SystemExit(f"the sync ended (exit {code}) before the kill point:\n"
                         + "\n".join(log[-5:]))
    if code != 0:
        raise SystemExit(f"the caught-up run failed with exit {code}:\n" + "\n".join(log[-20:]))
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--snapshot-kills", type=int, default=2)
    parser.add_argument("--log-kills", type=int, default=2)
    args = parser.parse_args()
    mysql, pg = get_dialect("mysql"), get_dialect("postgres")
    admin = mysql.connect(ConnectionConfig.from_url(MYSQL_ADMIN))
    pg_admin = pg.connect(ConnectionConfig.from_url(PG_ADMIN))
    name = f"accept_{uuid.uuid4().hex[:8]}"
    schema_name = f"sdk_accept_{uuid.uuid4().hex[:8]}"
    work = Path(tempfile.mkdtemp(prefix="sdk-accept-"))
    t0 = time.monotonic()
    fill_mariadb(admin, name, args.rows)
    pg_admin.query(f"CREATE SCHEMA {schema_name} AUTHORIZATION sdk_cdc")
    print(f"source {name}: {args.rows:,} rows loaded in {time.monotonic() - t0:.1f} s")

    stop = threading.Event()
    writes = Counter[str]()

    def write() -> None:
        writer = mysql.connect(ConnectionConfig.from_url(MYSQL_ADMIN))
        i = 0
        while not stop.is_set():
            i += 1
            n = args.rows
            writer.query(f"UPDATE `{name}` SET v = %s WHERE id = %s", (f"w{i}", i * 7 % n))
            writer.query(f"REPLACE INTO `{name}` VALUES (%s, 'new', 1.5, NOW(6))", (n + i,))
            writer.query(f"DELETE FROM `{name}` WHERE id = %s", (i * 13 % n,))
            writer.query(f"UPDATE IGNORE `{name}` SET id = id + 10000000 WHERE id = %s",
                         (i * 17 % n,))
            writes["transactions"] += 4
            time.sleep(0.005)
        writer.close()

    sync = ["sync", "--source", MYSQL, "--target", PG, "--tables", f"sdk_test.{name}",
            "--target-schema", schema_name, "--checkpoint", str(work / "ck"),
            "--changes", str(work / "changes"),
            "--option", f"snapshot.split.size={max(1000, args.rows // 120)}",
            "--option", "snapshot.splits-per-batch=2"]
    log: list[str] = []
    thread = threading.Thread(target=write)
    thread.start()
    runs = []
    try:
        splits = re.compile(r"(\d+)/(\d+) splits, \d+ rows, snapshotting \|")
        for k in range(1, args.snapshot_kills + 1):
            fraction = k / (args.snapshot_kills + 1)

            def point(line: str, fraction: float = fraction) -> bool:
                if "phase log" in line:  # the snapshot outran the progress reports
                    raise SystemExit("the snapshot ended before its kill point: use more "
                                     "rows or a smaller snapshot.split.size")
                found = splits.search(line)
                return found is not None and int(found.group(1)) >= \
                    max(1, fraction * int(found.group(2)))
            runs.append(("snapshot kill", run_until([*sync, "--until", "never"], point, log)))
        for _ in range(args.log_kills):
            seen = [0]

            def later_in_log(line: str, seen: list[int] = seen) -> bool:
                if "phase log" in line:
                    seen[0] += 1
                return seen[0] >= 3  # a few progress reports into the log phase
            runs.append(("log kill",
                         run_until([*sync, "--until", "never"], later_in_log, log)))
    finally:
        stop.set()
        thread.join()
    runs.append(("caught-up run", run_until([*sync, "--until", "caught-up"], None, log)))
    for what, seconds in runs:
        print(f"{what}: {seconds:.1f} s")
    print(f"writer: {writes['transactions']:,} statements")

    source = mysql.connect(ConnectionConfig.from_url(MYSQL))
    target = pg.connect(ConnectionConfig.from_url(PG))
    schema = mysql.describe_table(source, TableId("sdk_test", name))
    expected = {r[0]: r for b in mysql.read_range(
        source, schema, SnapshotSplit(schema.table, 0, None, None), 10000) for r in b}
    mirror = pg.describe_table(target, TableId(schema_name, name))
    got = {r[0]: r for b in pg.read_range(
        target, mirror, SnapshotSplit(mirror.table, 0, None, None), 10000) for r in b}
    equal = got == expected
    print(f"mirror == source: {equal} ({len(got):,} rows in the mirror, {len(expected):,} in "
          "the source)")
    changes = ds.dataset(str(work / "changes"), format="parquet", partitioning="hive").to_table(
        columns=["id", "_op", "_offset"]).to_pylist()
    snapshot_keys = Counter(r["id"] for r in changes if r["_op"] == "r")
    log_changes = Counter((r["_offset"], r["_op"], r["id"]) for r in changes if r["_op"] != "r")
    twice = sum(1 for c in snapshot_keys.values() if c > 1) + \
        sum(1 for c in log_changes.values() if c > 1)
    print(f"change log: {sum(snapshot_keys.values()):,} snapshot rows, "
          f"{sum(log_changes.values()):,} changes, {twice} applied twice")
    source.close()
    target.close()
    pg_admin.query(f"DROP SCHEMA {schema_name} CASCADE")
    admin.query(f"DROP TABLE `{name}`")
    admin.close()
    pg_admin.close()
    if not equal or twice:
        raise SystemExit("ACCEPTANCE FAILED")
    print("acceptance: passed")


if __name__ == "__main__":
    main()
