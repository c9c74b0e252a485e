"""``sdk verify`` against the plainest checksum of the same table, in one run (issue #44's
acceptance figures).

    python benchmarks/verify.py [--rows 1000000] [--rate 400] [--lag-seconds 30] [--repeat 2]

A MariaDB table (``id BIGINT PRIMARY KEY, v VARCHAR(40), amount DECIMAL(12,2), at
DATETIME(6)``) is synced to PostgreSQL by ``sdk sync`` (left running), then timed:

- the baseline: one full-table hash computed in the source server alone, ``SELECT COUNT(*),
  SUM(CONV(LEFT(MD5(CONCAT_WS(CHAR(31), id, v, amount, at)), 16), 16, 10))`` (and the CRC32
  form beside it), best of ``--repeat``;
- ``sdk verify`` as a user runs it (the command, a subprocess, wall clock from launch to
  exit), on the running sync with no writer, and with ``--static``, best of ``--repeat``;
- the sync's lag under a writer of ``--rate`` one-row updates a second for ``--lag-seconds``:
  each second a probe row is changed on the source and the target polled until it shows it;
  without verify, then with ``sdk verify`` run again and again meanwhile.

Prints each figure with the ratios verify/baseline and lag with/without. Needs the servers of
scripts/services.sh; everything it makes is named after the process id and removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _servers import MYSQL, MYSQL_ADMIN, PG, PG_ADMIN, fill_mariadb

from sdk import ConnectionConfig


def _mysql(url: str) -> Any:
    import pymysql

    c = ConnectionConfig.from_url(url)
    return pymysql.connect(host=c.host, port=c.port or 3306, user=c.user,
                           password=c.password or "", database=c.database, autocommit=True)


def _sdk(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "sdk.app.cli", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _progress(state: Path) -> dict[str, Any]:
    try:
        return dict(json.loads((state / "progress.json").read_text()))
    except (OSError, ValueError):
        return {}


def _wait_caught_up(state: Path, sync: subprocess.Popen[str], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        report = _progress(state)
        if report.get("phase") == "log" and report.get("caught_up"):
            return
        if sync.poll() is not None:
            raise SystemExit(f"sdk sync ended: {sync.stdout.read() if sync.stdout else ''}")
        time.sleep(0.5)
    raise SystemExit("the sync did not catch up")


def baseline(table: str, hash_sql: str) -> float:
    conn = _mysql(MYSQL)
    try:
        started = time.perf_counter()
        with conn.cursor() as cur:
            cur.execute(f"SELECT COUNT(*), {hash_sql} FROM `{table}`")
            cur.fetchall()
        return time.perf_counter() - started
    finally:
        conn.close()


def run_verify(args: list[str]) -> tuple[float, str]:
    started = time.perf_counter()
    process = _sdk("verify", *args)
    out, _ = process.communicate()
    seconds = time.perf_counter() - started
    if process.returncode != 0:
        raise SystemExit(f"sdk verify exit {process.returncode}:\n{out}")
    last = [line for line in out.splitlines() if line.startswith("verified ")]
    return seconds, last[-1] if last else out


def lag_under_writer(table: str, schema: str, rate: float, seconds: float,
                     verify_args: list[str] | None) -> tuple[float, float, int]:
    """Mean and max lag (s) under a writer of ``rate`` updates a second: each second a probe
    row is changed on the source and the target polled until it shows the change. With
    ``verify_args``, ``sdk verify`` runs again and again meanwhile (how many times)."""
    import psycopg

    stop = threading.Event()
    conn, probe = _mysql(MYSQL_ADMIN), _mysql(MYSQL_ADMIN)
    target = psycopg.connect(PG_ADMIN, autocommit=True)

    def write() -> None:
        i, started = 0, time.monotonic()
        with conn.cursor() as cur:
            while not stop.is_set():
                i += 1
                cur.execute(f"UPDATE `{table}` SET v = %s WHERE id = %s", (f"w{i}", i * 7919))
                ahead = i / rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
    writer = threading.Thread(target=write)
    runs = 0

    def verify_loop() -> None:
        nonlocal runs
        while not stop.is_set() and verify_args is not None:
            run_verify(verify_args)
            runs += 1
    verifier = threading.Thread(target=verify_loop)
    writer.start()
    time.sleep(3)  # the writer's pace settles
    if verify_args is not None:
        verifier.start()
    samples = []
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline:
        n += 1
        with probe.cursor() as cur:
            cur.execute(f"UPDATE `{table}` SET v = %s WHERE id = 1", (f"probe{n}",))
        sent = time.monotonic()
        while target.execute(f"SELECT v FROM {schema}.{table} WHERE id = 1"
                             ).fetchone() != (f"probe{n}",):
            time.sleep(0.01)
        samples.append(time.monotonic() - sent)
        time.sleep(max(0.0, 1.0 - samples[-1]))
    stop.set()
    writer.join()
    if verify_args is not None:
        verifier.join()
    for c in (conn, probe, target):
        c.close()
    return statistics.fmean(samples), max(samples), runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rate", type=float, default=400)
    parser.add_argument("--lag-seconds", type=float, default=30)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    import psycopg

    tag = f"bv{os.getpid()}"
    work = Path(tempfile.mkdtemp(prefix="sdk-bench-verify-"))
    admin = _mysql(MYSQL_ADMIN)
    pg = psycopg.connect(PG_ADMIN, autocommit=True)
    sync = None
    try:
        fill_mariadb(admin, tag, args.rows)
        pg.execute(f"CREATE SCHEMA {tag} AUTHORIZATION sdk_cdc")
        checkpoint = work / "ck"
        common = ["--source", MYSQL, "--target", PG, "--target-schema", tag,
                  "--checkpoint", str(checkpoint)]
        started = time.perf_counter()
        sync = _sdk("sync", *common, "--tables", f"sdk_test.{tag}")
        threading.Thread(target=lambda: sync.stdout and [None for _ in sync.stdout],
                         daemon=True).start()
        _wait_caught_up(checkpoint / "state", sync, 1800)
        print(f"sync of {args.rows:,} rows caught up in {time.perf_counter() - started:.1f} s")
        md5 = "SUM(CONV(LEFT(MD5(CONCAT_WS(CHAR(31), id, v, amount, at)), 16), 16, 10))"
        crc = "SUM(CRC32(CONCAT_WS(CHAR(31), id, v, amount, at)))"
        base = min(baseline(tag, md5) for _ in range(args.repeat))
        base_crc = min(baseline(tag, crc) for _ in range(args.repeat))
        print(f"baseline: source-server MD5 aggregate {base:.2f} s, CRC32 {base_crc:.2f} s")
        report = str(work / "report.json")
        for label, extra in (("live (sync running, no writer)", []), ("--static", ["--static"])):
            runs = [run_verify([*common, "--report", report, *extra])
                    for _ in range(args.repeat)]
            best = min(runs)
            print(f"sdk verify {label}: {best[0]:.2f} s = {best[0] / base:.2f}x the MD5 "
                  f"baseline ({best[1]})")
        mean, worst, _ = lag_under_writer(tag, tag, args.rate, args.lag_seconds, None)
        print(f"lag under {args.rate:.0f} updates/s without verify: mean {mean:.2f} s, "
              f"max {worst:.2f} s")
        mean2, worst2, runs = lag_under_writer(tag, tag, args.rate, args.lag_seconds,
                                               [*common, "--report", report])
        print(f"lag under {args.rate:.0f} updates/s with verify running ({runs} runs): mean "
              f"{mean2:.2f} s, max {worst2:.2f} s; ratio mean {mean2 / max(mean, 1e-9):.2f}x, "
              f"max {worst2 / max(worst, 1e-9):.2f}x")
    finally:
        if sync is not None:
            os.killpg(sync.pid, signal.SIGKILL)
            sync.wait()
        with admin.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS `{tag}`")
        admin.close()
        pg.execute(f"DROP SCHEMA IF EXISTS {tag} CASCADE")
        pg.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
