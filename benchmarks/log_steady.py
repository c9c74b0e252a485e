"""Does the log phase keep up? A running ``sdk sync`` (snapshot done, following the log), then
writer processes making one-row UPDATE transactions as fast as they can; prints the writers'
rate and how long after the first write and after the last one the mirror holds them all.

    python benchmarks/log_steady.py [--source mysql|postgres|both] [--changes 40000]
                                    [--writers 3]

Unlike ``e2e_sync.py``'s log case (a fresh command catching up, start-up included) this is the
steady state a production sync lives in. MariaDB on 127.0.0.1:3306 (root) and PostgreSQL on
127.0.0.1:5432 (postgres, trust) as ``scripts/services.sh`` prepares them.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pymysql
from _servers import MYSQL, PG, PG_ADMIN

ROWS = 100_000


def mysql_source() -> tuple[str, str, Callable[[int, int, int], None]]:
    conn = pymysql.connect(host="127.0.0.1", user="root", database="sdk_test", autocommit=True)
    with conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS log_steady")
        cur.execute("CREATE TABLE log_steady (id BIGINT PRIMARY KEY, v INT, note VARCHAR(50))")
        cur.execute(f"INSERT INTO log_steady SELECT seq, 0, CONCAT('n', seq) "
                    f"FROM seq_1_to_{ROWS}")
    conn.close()
    return MYSQL, "sdk_test.log_steady", _mysql_writer


def _mysql_writer(first: int, last: int, step: int) -> None:
    conn = pymysql.connect(host="127.0.0.1", user="root", database="sdk_test", autocommit=True)
    with conn.cursor() as cur:
        for key in range(first, last + 1, step):
            cur.execute("UPDATE log_steady SET v = 1 WHERE id = %s", (key,))
    conn.close()


def postgres_source() -> tuple[str, str, Callable[[int, int, int], None]]:
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS log_steady CASCADE")
        conn.execute("CREATE SCHEMA log_steady AUTHORIZATION sdk_cdc")
        conn.execute("CREATE TABLE log_steady.t (id bigint PRIMARY KEY, v int, note text)")
        conn.execute(f"INSERT INTO log_steady.t SELECT g, 0, 'n' || g "
                     f"FROM generate_series(1, {ROWS}) g")
        conn.execute("ALTER TABLE log_steady.t OWNER TO sdk_cdc")
    return (f"{PG}?slot=log_steady&publication=log_steady", "log_steady.t",
            _postgres_writer)


def _postgres_writer(first: int, last: int, step: int) -> None:
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")
        for key in range(first, last + 1, step):
            conn.execute("UPDATE log_steady.t SET v = 1 WHERE id = %s", (key,))


def mirrored(target_schema: str, table: str) -> int:
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        name = f'"{target_schema}"."{table}"'
        if conn.execute("SELECT to_regclass(%s)", (name,)).fetchone() == (None,):
            return 0
        row = conn.execute(f"SELECT count(*) FROM {name} WHERE v = 1").fetchone()
        return int(row[0]) if row else 0


def run(kind: str, changes: int, writers: int, work: Path) -> None:
    source, tables, writer = mysql_source() if kind == "mysql" else postgres_source()
    target_schema, table = f"log_steady_{kind}", tables.rsplit(".", 1)[1]
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {target_schema} CASCADE")
        conn.execute(f"CREATE SCHEMA {target_schema} AUTHORIZATION sdk_cdc")
    out = work / f"{kind}.out"
    with out.open("w") as log:
        sync = subprocess.Popen(
            ["sdk", "sync", "--source", source, "--target", PG, "--tables", tables,
             "--target-schema", target_schema, "--checkpoint", str(work / kind)],
            stdout=log, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while "phase log" not in out.read_text():
            if sync.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{kind}: the sync did not reach the log phase")
            time.sleep(0.5)
        time.sleep(3)  # a few idle log batches: the steady state
        started = time.monotonic()
        procs = [multiprocessing.Process(target=writer, args=(k + 1, changes, writers))
                 for k in range(writers)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join()
        written = time.monotonic()
        while mirrored(target_schema, table) < changes:
            if time.monotonic() - written > 300:
                raise SystemExit(f"{kind}: the mirror did not catch up in 300 s")
            time.sleep(0.2)
        done = time.monotonic()
    finally:
        os.killpg(sync.pid, signal.SIGTERM)
        sync.wait(timeout=120)
    print(f"{kind} -> postgres: {changes:,} one-row transactions by {writers} writers in "
          f"{written - started:.1f} s ({changes / (written - started):,.0f}/s); the mirror held "
          f"all {done - started:.1f} s after the first ({changes / (done - started):,.0f} "
          f"changes/s end to end), {done - written:.1f} s after the last")
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {target_schema} CASCADE")
        if kind == "postgres":
            conn.execute("DROP SCHEMA IF EXISTS log_steady CASCADE")
            conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                         "WHERE slot_name = 'log_steady'")
            conn.execute("DROP PUBLICATION IF EXISTS log_steady")  # the sync made it
    if kind == "mysql":
        conn2 = pymysql.connect(host="127.0.0.1", user="root", database="sdk_test")
        with conn2.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS log_steady")
        conn2.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", choices=["mysql", "postgres", "both"], default="both")
    parser.add_argument("--changes", type=int, default=40_000)
    parser.add_argument("--writers", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="log_steady_"))
    try:
        for kind in (["mysql", "postgres"] if args.source == "both" else [args.source]):
            run(kind, args.changes, args.writers, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
