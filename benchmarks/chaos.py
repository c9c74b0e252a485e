"""Chaos at scale: ``sdk sync`` SIGKILLed at random points of the snapshot, the transition and
the log phase, and the source and target servers restarted under it, while a writer runs
inserts, updates, key changes, deletes and multi-statement transactions. Each case ends with a
caught-up run, then checks the mirror equals the source and that the change log (``--changes``)
holds every change once.

    python benchmarks/chaos.py [--rows 200000] [--kills 20] [--case mysql-pg,pg-sqlite]
                               [--seed 1]

Cases: ``SOURCE-TARGET`` with a source ``mysql`` (MariaDB) or ``pg`` and a target ``pg``,
``sqlite``, ``delta`` or ``iceberg`` (``mysql-pg``, ``pg-pg``, ``mysql-sqlite``,
``pg-sqlite``, ``mysql-delta``, ``pg-iceberg``...). The source server restarts a third of the
way through the kills, and the target server two thirds of the way (a PostgreSQL target: for
``pg-pg`` the one server restarts twice; SQLite and the lakehouse targets are files). The
servers are those of scripts/services.sh, restarted the way it starts them (run as root, on a
machine of its own: every client of the servers sees the restarts). Prints the counts.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
from _servers import MYSQL, MYSQL_ADMIN, PG, PG_ADMIN, fill_mariadb

from sdk import ConnectionConfig, SnapshotSplit, TableId, get_dialect
from sdk.dialects import default_manager


def restart_mariadb() -> None:
    subprocess.run(["mariadb", "-uroot", "-h127.0.0.1", "-e", "SHUTDOWN"], check=False)
    for _ in range(120):
        if subprocess.run(["pgrep", "-x", "mariadbd"], capture_output=True).returncode:
            break
        time.sleep(0.25)
    subprocess.run(["start-stop-daemon", "--start", "--oknodo", "--background", "--exec",
                    "/usr/sbin/mariadbd"], check=True)
    _wait(["mariadb", "-uroot", "-h127.0.0.1", "-e", "SELECT 1"])


def restart_postgres() -> None:
    version = sorted(os.listdir("/etc/postgresql"), key=lambda v: [int(p) for p in
                                                                    v.split(".")])[-1]
    subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart",
                    "-m", "fast"], check=True)
    _wait(["psql", "-h127.0.0.1", "-Upostgres", "-c", "SELECT 1"])


def _wait(command: list[str]) -> None:
    for _ in range(240):
        if subprocess.run(command, capture_output=True).returncode == 0:
            return
        time.sleep(0.25)
    raise SystemExit(f"server did not come back: {' '.join(command)}")


class Case:
    """One source and target pair: the table, the writer's statements, the check."""

    def __init__(self, name: str, rows: int, work: Path) -> None:
        self.name, self.rows, self.work = name, rows, work
        self.table = f"chaos_{uuid.uuid4().hex[:8]}"
        source, _, self.target_kind = name.partition("-")
        if source not in ("mysql", "pg") or \
                self.target_kind not in ("pg", "sqlite", "delta", "iceberg"):
            raise SystemExit(f"unknown case {name!r}: SOURCE-TARGET, SOURCE mysql or pg, "
                             "TARGET pg, sqlite, delta or iceberg")
        self.source_kind = "mysql" if source == "mysql" else "postgres"
        self.source = get_dialect(self.source_kind)
        self.schema_name = f"sdk_chaos_{uuid.uuid4().hex[:6]}"
        self.slot = f"chaos_{uuid.uuid4().hex[:8]}"

    def admin(self) -> Any:
        url = MYSQL_ADMIN if self.source_kind == "mysql" else PG_ADMIN
        return self.source.connect(ConnectionConfig.from_url(url))

    def create(self) -> None:
        conn = self.admin()
        if self.target_kind == "pg":
            target = get_dialect("postgres").connect(ConnectionConfig.from_url(PG_ADMIN))
            target.query(f"CREATE SCHEMA {self.schema_name} AUTHORIZATION sdk_cdc")
            target.close()
        if self.source_kind == "mysql":
            fill_mariadb(conn, self.table, self.rows)
        else:
            conn.query(f"CREATE TABLE public.{self.table} (id BIGINT PRIMARY KEY, "
                       "v VARCHAR(40), amount NUMERIC(12,2), at TIMESTAMP(6))")
            conn.query(f"INSERT INTO public.{self.table} SELECT i, 'v' || i, i / 8.0, "
                       f"'2024-01-01'::timestamp + i * interval '1 second' "
                       f"FROM generate_series(1, {self.rows}) i")
            conn.query(f"GRANT SELECT ON public.{self.table} TO sdk_cdc")
            conn.query(f"CREATE PUBLICATION {self.slot} FOR TABLE public.{self.table}")
        conn.close()

    def write(self, stop: threading.Event, counts: Counter[str], seed: int) -> None:
        """Inserts, updates, key changes, deletes and 3-statement transactions, through
        server restarts (a lost connection is reopened)."""
        rng = random.Random(seed)
        mysql = self.source_kind == "mysql"
        t = f"`{self.table}`" if mysql else f"public.{self.table}"
        conn = None
        i = 0
        while not stop.is_set():
            try:
                if conn is None:
                    conn = self.admin()
                i += 1
                n = self.rows
                k = rng.randrange(1, n)
                statements = [
                    (f"UPDATE {t} SET v = %s, amount = amount + 1 WHERE id = %s", (f"w{i}", k)),
                    (f"DELETE FROM {t} WHERE id = %s", (rng.randrange(1, n),)),
                    (f"UPDATE {t} SET id = %s WHERE id = %s", (n + 10 * i, rng.randrange(1, n))),
                    ((f"REPLACE INTO {t} VALUES (%s, 'new', 1.5, NOW(6))" if mysql else
                      f"INSERT INTO {t} VALUES (%s, 'new', 1.5, now()) ON CONFLICT (id) DO "
                      "UPDATE SET v = 'again'"), (n + 10 * i + 1,)),
                ]
                if i % 5 == 0:  # one transaction of several statements
                    conn.query("BEGIN" if not mysql else "START TRANSACTION")
                    for sql, args in statements[:3]:
                        conn.query(sql, args)
                    conn.query("COMMIT")
                    counts["multi-statement transactions"] += 1
                else:
                    sql, args = statements[i % 4]
                    conn.query(sql, args)
                counts["statements"] += 1
                time.sleep(0.004)
            except Exception:  # a restart under the writer: reconnect and go on
                counts["writer reconnects"] += 1
                conn = None
                time.sleep(0.5)

    def target_url(self) -> str:
        if self.target_kind == "pg":
            return PG
        if self.target_kind == "sqlite":
            return f"sqlite:///{self.work / 'mirror.db'}"
        return f"{self.target_kind}://{self.work / 'lake'}"

    def sync_args(self) -> list[str]:
        if self.source_kind == "mysql":
            source, tables = MYSQL, f"sdk_test.{self.table}"
        else:
            source = f"{PG}?slot={self.slot}&publication={self.slot}"
            tables = f"public.{self.table}"
        target = self.target_url()
        extra = ["--target-schema", self.schema_name] if self.target_kind == "pg" else []
        return ["sync", "--source", source, "--target", target, "--tables", tables,
                "--checkpoint", str(self.work / "ck"), "--changes", str(self.work / "changes"),
                "--retry-seconds", "120",
                "--option", f"snapshot.split.size={max(1000, self.rows // 24)}",
                "--option", "snapshot.splits-per-batch=2", *extra]

    def check(self) -> tuple[bool, int, int, int]:
        conn = self.source.connect(ConnectionConfig.from_url(MYSQL if self.source_kind ==
                                                             "mysql" else PG_ADMIN))
        table = TableId("sdk_test" if self.source_kind == "mysql" else "public", self.table)
        schema = self.source.describe_table(conn, table)
        expected = {r[0]: r for b in self.source.read_range(
            conn, schema, SnapshotSplit(table, 0, None, None), 10000) for r in b}
        conn.close()
        if self.target_kind == "pg":
            pg = get_dialect("postgres")
            target = pg.connect(ConnectionConfig.from_url(PG))
            mirror = pg.describe_table(target, TableId(self.schema_name, self.table))
            got = {r[0]: r for b in pg.read_range(
                target, mirror, SnapshotSplit(mirror.table, 0, None, None), 10000) for r in b}
            target.close()
        elif self.target_kind in ("delta", "iceberg"):
            lake, config = default_manager().dialect_for_url(self.target_url())
            target = lake.connect(config)
            got = {r[0]: r for b in lake.read_range(
                target, schema, SnapshotSplit(table, 0, None, None), 10000) for r in b}
            target.close()
        else:
            from sdk_sqlite import read_target

            sqlite = get_dialect("sqlite")
            target = sqlite.connect(ConnectionConfig.from_url(
                f"sqlite:///{self.work / 'mirror.db'}"))
            (name,) = [t for t in sqlite.list_tables(target) if self.table in t.name]
            # decoded with the source's types, as the mirror stored them
            got = {k[0]: v for k, v in read_target(
                target, dataclasses.replace(schema, table=name)).items()}
            target.close()
        changes = ds.dataset(str(self.work / "changes"), format="parquet",
                             partitioning="hive").to_table(
            columns=["id", "_op", "_offset"]).to_pylist()
        snapshot = Counter(r["id"] for r in changes if r["_op"] == "r")
        log = Counter((r["_offset"], r["_op"], r["id"]) for r in changes if r["_op"] != "r")
        twice = sum(c > 1 for c in snapshot.values()) + sum(c > 1 for c in log.values())
        return got == expected, len(got), sum(log.values()), twice

    def drop(self) -> None:
        conn = self.admin()
        if self.target_kind == "pg":
            target = get_dialect("postgres").connect(ConnectionConfig.from_url(PG_ADMIN))
            target.query(f"DROP SCHEMA IF EXISTS {self.schema_name} CASCADE")
            target.close()
        if self.source_kind == "mysql":
            conn.query(f"DROP TABLE IF EXISTS `{self.table}`")
        else:
            conn.query(f"DROP TABLE IF EXISTS public.{self.table}")
            conn.query(f"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                       f"WHERE slot_name = '{self.slot}'")
            conn.query(f"DROP PUBLICATION IF EXISTS {self.slot}")
        conn.close()


def run(args: list[str], phase: str | None, delay: float, log: list[str]) -> str:
    """Run ``sdk``; SIGKILL it ``delay`` seconds after its first progress line in ``phase``
    (``snapshot`` or ``log``; None: let it end). Returns the phase of its last progress line."""
    process = subprocess.Popen([sys.executable, "-m", "sdk.cli", *args],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               start_new_session=True)
    assert process.stdout is not None
    last = "starting"
    deadline: list[float] = []

    def killer() -> None:
        while not deadline:
            time.sleep(0.05)
            if process.poll() is not None:
                return
        time.sleep(max(deadline[0] - time.monotonic(), 0))
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    if phase is not None:
        threading.Thread(target=killer, daemon=True).start()
    for line in process.stdout:
        log.append(line.rstrip())
        if "phase log" in line:
            last = "log"
        elif "phase snapshot" in line:
            last = "snapshot"
        if phase is not None and not deadline and f"phase {phase}" in line:
            deadline.append(time.monotonic() + delay)
    code = process.wait()
    if phase is None and code != 0:
        raise SystemExit(f"the final run failed with exit {code}:\n" + "\n".join(log[-20:]))
    return last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--case", default="mysql-pg,pg-sqlite")
    parser.add_argument("--seed", type=int, default=1)
    options = parser.parse_args()
    rng = random.Random(options.seed)
    failed = False
    for name in options.case.split(","):
        work = Path(tempfile.mkdtemp(prefix=f"sdk-chaos-{name}-"))
        case = Case(name, options.rows, work)
        case.create()
        stop, counts = threading.Event(), Counter[str]()
        writer = threading.Thread(target=case.write, args=(stop, counts, options.seed))
        writer.start()
        log: list[str] = []
        kills = Counter[str]()
        restarts = Counter[str]()
        started = time.monotonic()
        try:
            for k in range(options.kills):
                if k == options.kills // 3:  # the source restarts under a running sync
                    timer = threading.Timer(4.0, restart_mariadb if case.source_kind ==
                                            "mysql" else restart_postgres)
                    timer.start()
                    restarts["source"] += 1
                if k == 2 * options.kills // 3 and case.target_kind == "pg":  # and the target
                    timer = threading.Timer(4.0, restart_postgres)
                    timer.start()
                    restarts["target"] += 1
                # a third in the snapshot, a few right after it ends, the rest in the log
                if k < options.kills // 3:
                    aim, delay = "snapshot", rng.uniform(0.2, 6.0)
                elif k < options.kills // 2:
                    aim, delay = "log", rng.uniform(0.0, 0.5)  # the transition
                else:
                    aim, delay = "log", rng.uniform(0.5, 6.0)
                seen = run([*case.sync_args(), "--until", "never"], aim, delay, log)
                kills["transition" if aim == "log" and delay < 0.5 else seen] += 1
        finally:
            stop.set()
            writer.join()
        run([*case.sync_args(), "--until", "caught-up"], None, 0.0, log)
        equal, rows, changes, twice = case.check()
        where = ", ".join(f"{p} {n}" for p, n in kills.items())
        print(f"{name}: {sum(kills.values())} kills ({where}), "
              f"restarts {dict(restarts)}, writer {dict(counts)}, {rows:,} rows in the mirror, "
              f"{changes:,} changes in the change log, {twice} applied twice, mirror == source: "
              f"{equal} ({time.monotonic() - started:.0f} s)")
        failed |= not equal or twice > 0
        case.drop()
        if equal and twice == 0:  # a failed case keeps its checkpoint and change log to look at
            shutil.rmtree(work, ignore_errors=True)
    if failed:
        raise SystemExit("CHAOS FAILED")
    print("chaos: passed")


if __name__ == "__main__":
    main()
