"""Soak: does a long ``sdk sync --until never`` keep its memory flat (issue #61)?

    python benchmarks/soak.py [--source mysql|postgres] [--rate 100] [--minutes 30]
        [--interval 60] [--sample 10] [--tables 3] [--rows 2000] [--settle 10]
        [--threshold 5] [--sdk-env KEY=VALUE ...] [--sdk-option KEY=VALUE ...]
        [--cwd DIR] [--keep-log PATH]

Why: a sync lives for months; a few MiB an hour kept by a Python worker is tens of GiB by the
end of one. The other benchmarks time runs of seconds and see nothing of that: this one runs a
sync in its steady state long enough to measure the slope of each process's memory.

What it does: makes ``--tables`` tables of ``--rows`` rows (``id BIGINT PRIMARY KEY, v INT,
note VARCHAR(100), stamp DOUBLE``) on the chosen source (MariaDB: in the URL's database, named
``soak_<pid>_<k>``; PostgreSQL: in a schema ``soak_src_<pid>`` owned by the sync's role, with
``?slot=soak_<pid>&publication=soak_<pid>`` of its own in the source URL, so that the sync makes
them and this script drops them), starts ``sdk sync --until never`` (a subprocess, as a user
runs it, into a PostgreSQL target schema ``soak_tgt_<pid>``, a fresh ``--checkpoint``), waits
for the log phase, then drives a writer at ``--rate`` transactions a second for ``--minutes``:
each transaction updates one row (``v = v + 1``, ``stamp`` = the wall clock just before its
commit) of the next table in turn, and every tenth also inserts a row and deletes the oldest,
so the tables keep their size. A reader polls the target every 0.2 s for each table's newest
``stamp``: a transaction counts as applied at the first poll that sees a stamp at or past its
own, and its commit-to-target latency is that poll's time minus its stamp.

Every ``--sample`` seconds it reads, with psutil, the resident memory (RSS) and CPU time of
every process of the sync's tree (this process is their subreaper, so a JVM that leaves its
parent is still seen), each named by its command line: ``driver`` (the ``sdk sync`` process),
``jvm``, ``daemon`` (``pyspark.daemon``), ``worker`` (a process it forked: the Python workers
that run the tasks), ``runner`` (the streaming source runner), ``datasource`` (the data
source's planning worker), ``headworker``. Every ``--interval`` seconds it prints one line per
process: RSS now, RSS at its first sample, and its slope in MiB/hour (least squares over all its
samples so far), and one summary line: CPU seconds of the tree in the interval (and cores kept
busy), the size of the checkpoint's state directory (``<checkpoint>/state``) and of Spark's
(``<checkpoint>/checkpoint``), the target ledger's ``_sdk_applied`` rows, the transactions
written and applied, and the latency p50/p99 of the transactions applied in the interval.

At the end a summary and one acceptance line: ``ACCEPT`` when every Python worker's RSS slope,
fitted over the samples after the first ``--settle`` minutes (the snapshot, the imports and
the first batches' allocations), is below ``--threshold`` MiB/hour, else ``REJECT`` naming the
ones above (a run shorter than ``--settle`` plus three intervals fits its second half and says
so). The sync is stopped with SIGTERM (after the batch in flight, as a user stops it; killed
after 120 s), and every table, schema, slot, publication and checkpoint it made is removed
whatever happened.

``--sdk-env KEY=VALUE`` sets an environment variable of the sync only (``PYTHONPATH`` of a
scratch copy, ``PYTHONTRACEMALLOC``); ``--cwd`` runs it in another directory.
Needs the servers of scripts/services.sh (SDK_TEST_MYSQL_URL / SDK_TEST_POSTGRES_URL and their
``..._ADMIN_URL``) and psutil.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from collections import deque
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import psutil
import psycopg
import pymysql
from _cpu import NOT_THE_SYNC, become_subreaper
from _servers import MYSQL, MYSQL_ADMIN, PG, PG_ADMIN, sdk_command

TAG = str(os.getpid())
MIB = 2**20
POLL = 0.2
"""Seconds between the latency reader's looks at the target."""


def parts(url: str) -> dict[str, Any]:
    u = urlsplit(url)
    return {"host": u.hostname or "127.0.0.1", "port": u.port,
            "user": unquote(u.username or ""), "password": unquote(u.password or ""),
            "database": u.path.lstrip("/")}


def with_query(url: str, **params: str) -> str:
    return url + ("&" if "?" in url else "?") + "&".join(f"{k}={v}" for k, v in params.items())


def mysql_connect(url: str) -> Any:
    p = parts(url)
    return pymysql.connect(host=p["host"], port=p["port"] or 3306, user=p["user"],
                           password=p["password"], database=p["database"], autocommit=True)


def pg_exec(url: str, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return list(cur.fetchall()) if cur.description else []


class Source:
    """The source server: its tables (made, written, dropped) and how ``sdk sync`` names it."""

    kind = ""

    def __init__(self, tables: int, rows: int) -> None:
        self.count, self.rows = tables, rows

    def names(self) -> list[str]:
        """The tables' names as the target holds them (schema-less)."""
        return [f"soak_{TAG}_{k}" for k in range(self.count)]

    def create(self) -> None:
        raise NotImplementedError

    def drop(self) -> None:
        raise NotImplementedError

    def url(self) -> str:
        raise NotImplementedError

    def pattern(self) -> str:
        raise NotImplementedError

    def writer(self) -> Writer:
        raise NotImplementedError


class Writer:
    """One connection to the source that commits one transaction at a time."""

    def transaction(self, table: str, key: int, insert: int | None, delete: int | None
                    ) -> float:
        """Update row ``key`` of ``table`` (and insert ``insert``, delete ``delete``), the
        stamp taken just before the commit; returns the stamp."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class MySQLSource(Source):
    kind = "mysql"

    def create(self) -> None:
        conn = mysql_connect(MYSQL_ADMIN)
        try:
            with conn.cursor() as cur:
                for name in self.names():
                    cur.execute(f"DROP TABLE IF EXISTS {name}")
                    cur.execute(f"CREATE TABLE {name} (id BIGINT PRIMARY KEY, v INT, "
                                "note VARCHAR(100), stamp DOUBLE)")
                    cur.execute(f"INSERT INTO {name} SELECT seq, 0, CONCAT('row ', seq), 0 "
                                f"FROM seq_1_to_{self.rows}")
        finally:
            conn.close()

    def drop(self) -> None:
        conn = mysql_connect(MYSQL_ADMIN)
        try:
            with conn.cursor() as cur:
                for name in self.names():
                    cur.execute(f"DROP TABLE IF EXISTS {name}")
        finally:
            conn.close()

    def url(self) -> str:
        return MYSQL

    def pattern(self) -> str:
        return f"{parts(MYSQL)['database']}.soak_{TAG}_*"

    def writer(self) -> Writer:
        return MySQLWriter()


class MySQLWriter(Writer):
    def __init__(self) -> None:
        self.conn = mysql_connect(MYSQL_ADMIN)
        self.conn.autocommit(False)

    def transaction(self, table: str, key: int, insert: int | None, delete: int | None
                    ) -> float:
        with self.conn.cursor() as cur:
            if insert is not None:
                cur.execute(f"INSERT INTO {table} VALUES (%s, 0, %s, 0)", (insert,
                                                                          f"row {insert}"))
            if delete is not None:
                cur.execute(f"DELETE FROM {table} WHERE id = %s", (delete,))
            stamp = time.time()
            cur.execute(f"UPDATE {table} SET v = v + 1, stamp = %s WHERE id = %s",
                        (stamp, key))
        self.conn.commit()
        return stamp

    def close(self) -> None:
        self.conn.close()


class PostgresSource(Source):
    kind = "postgres"
    schema = f"soak_src_{TAG}"
    slot = publication = f"soak_{TAG}"

    def create(self) -> None:
        role = parts(PG)["user"]
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")
            conn.execute(f"CREATE SCHEMA {self.schema} AUTHORIZATION {role}")
            for name in self.names():
                table = f"{self.schema}.{name}"
                conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, v int, "
                             "note varchar(100), stamp double precision)")
                conn.execute(f"INSERT INTO {table} SELECT g, 0, 'row ' || g, 0 "
                             f"FROM generate_series(1, {self.rows}) g")
                # owned by the sync's role, so that the sync makes its publication itself
                conn.execute(f"ALTER TABLE {table} OWNER TO {role}")

    def drop(self) -> None:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            for sql, params in [
                    ("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                     "WHERE slot_name = %s", (self.slot,)),
                    (f"DROP PUBLICATION IF EXISTS {self.publication}", None),
                    (f"DROP SCHEMA IF EXISTS {self.schema} CASCADE", None)]:
                with suppress(psycopg.Error):
                    conn.execute(sql, params)

    def url(self) -> str:
        return with_query(PG, slot=self.slot, publication=self.publication)

    def pattern(self) -> str:
        return f"{self.schema}.*"

    def writer(self) -> Writer:
        return PostgresWriter(self.schema)


class PostgresWriter(Writer):
    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.conn = psycopg.connect(PG_ADMIN)

    def transaction(self, table: str, key: int, insert: int | None, delete: int | None
                    ) -> float:
        name = f"{self.schema}.{table}"
        with self.conn.transaction():
            if insert is not None:
                self.conn.execute(f"INSERT INTO {name} VALUES (%s, 0, %s, 0)",
                                  (insert, f"row {insert}"))
            if delete is not None:
                self.conn.execute(f"DELETE FROM {name} WHERE id = %s", (delete,))
            stamp = time.time()
            self.conn.execute(f"UPDATE {name} SET v = v + 1, stamp = %s WHERE id = %s",
                              (stamp, key))
        return stamp

    def close(self) -> None:
        self.conn.close()


@dataclass
class Latency:
    """Transactions written (their stamps, per table) and the latencies of those applied."""

    pending: dict[str, deque[float]]
    written: int = 0
    applied: int = 0
    interval: list[float] = field(default_factory=list)
    every: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def wrote(self, table: str, stamp: float) -> None:
        with self.lock:
            self.pending[table].append(stamp)
            self.written += 1

    def seen(self, table: str, newest: float, now: float) -> None:
        with self.lock:
            queue = self.pending[table]
            while queue and queue[0] <= newest:
                latency = now - queue.popleft()
                self.interval.append(latency)
                self.every.append(latency)
                self.applied += 1

    def take(self) -> list[float]:
        with self.lock:
            out, self.interval = self.interval, []
            return out


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def write(source: Source, rate: float, until: float, latency: Latency, stop: threading.Event,
          errors: list[BaseException]) -> None:
    """The writer thread: ``rate`` transactions a second, round-robin over the tables, on a
    schedule (a late transaction does not shift the next ones)."""
    try:
        writer = source.writer()
        names = source.names()
        next_id = {name: source.rows + 1 for name in names}
        oldest = {name: 1 for name in names}
        n = 0
        start = time.monotonic()
        try:
            while not stop.is_set() and time.monotonic() < until:
                name = names[n % len(names)]
                size = next_id[name] - oldest[name]
                key = oldest[name] + (n * 7919) % size
                insert = delete = None
                if n % 10 == 0:  # one in ten also inserts a row and deletes the oldest
                    insert, delete = next_id[name], oldest[name]
                    next_id[name] += 1
                    oldest[name] += 1
                    if key == delete:
                        key = insert
                latency.wrote(name, writer.transaction(name, key, insert, delete))
                n += 1
                wait = start + n / rate - time.monotonic()
                if wait > 0:
                    stop.wait(wait)
        finally:
            writer.close()
    except BaseException as error:  # reported by the main thread
        errors.append(error)
        stop.set()


def read(schema: str, names: list[str], latency: Latency, stop: threading.Event) -> None:
    """The latency reader thread: each table's newest stamp in the target, every POLL s."""
    query = " UNION ALL ".join(f"SELECT '{name}', max(stamp) FROM {schema}.{name}"
                               for name in names)
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        while not stop.is_set():
            with suppress(psycopg.Error):
                rows = conn.execute(query).fetchall()
                now = time.time()
                for name, newest in rows:
                    if newest is not None:
                        latency.seen(name, float(newest), now)
            stop.wait(POLL)


def role(process: psutil.Process, driver: int) -> str:
    """What a process of the sync's tree is, from its command line."""
    if process.pid == driver:
        return "driver"
    with suppress(psutil.Error):
        line = " ".join(process.cmdline())
        if process.name() == "java" or "SparkSubmit" in line:
            return "jvm"
        if "python_streaming_source_runner" in line:
            return "runner"
        if "create_data_source" in line or "plan_data_source" in line:
            return "datasource"
        if "sdk-headworker" in line or "headworkers" in line or \
                process.name() == "sdk-headworker":
            return "headworker"
        if "pyspark.daemon" in line:
            parent = process.parent()
            if parent is not None and "pyspark.daemon" in " ".join(parent.cmdline()):
                return "worker"
            return "daemon"
        return process.name() or "other"
    return "gone"


@dataclass
class Series:
    """One process's samples: (seconds since the writer started, RSS bytes)."""

    role: str
    samples: list[tuple[float, int]] = field(default_factory=list)
    cpu: float = 0.0

    def slope(self, after: float = float("-inf")) -> float:
        """MiB per hour, least squares over the samples at or after ``after`` seconds."""
        points = [(t / 3600, rss / MIB) for t, rss in self.samples if t >= after]
        if len(points) < 3 or points[-1][0] - points[0][0] <= 0:
            return float("nan")
        mean_t = statistics.fmean(t for t, _ in points)
        mean_r = statistics.fmean(r for _, r in points)
        num = sum((t - mean_t) * (r - mean_r) for t, r in points)
        den = sum((t - mean_t) ** 2 for t, _ in points)
        return num / den if den else float("nan")


class Watcher:
    """The sync's process tree, sampled: RSS and CPU per process, by role."""

    def __init__(self, driver: int) -> None:
        self.driver = driver
        self.series: dict[int, Series] = {}
        self.procs: dict[int, psutil.Process] = {}
        self.gone_cpu = 0.0

    def members(self) -> list[psutil.Process]:
        """This process's descendants (the sync's tree and, as this process is their
        subreaper, its orphans), the JVM class-archive builder left out."""
        out = []
        for process in psutil.Process().children(recursive=True):
            with suppress(psutil.Error):
                if NOT_THE_SYNC not in " ".join(process.cmdline()):
                    out.append(process)
        return out

    def sample(self, t: float) -> None:
        live = set()
        for process in self.members():
            pid = process.pid
            known = self.procs.get(pid)
            if known is None or known.create_time() != process.create_time():
                self.procs[pid] = known = process
                self.series[pid] = Series(role(process, self.driver))
            with suppress(psutil.Error):
                rss = known.memory_info().rss
                times = known.cpu_times()
                self.series[pid].samples.append((t, rss))
                self.series[pid].cpu = times.user + times.system
                live.add(pid)
        for pid in list(self.procs):
            if pid not in live:  # ended: its CPU stays counted, its series kept
                del self.procs[pid]

    def cpu(self) -> float:
        return sum(series.cpu for series in self.series.values())

    def live(self) -> dict[int, Series]:
        return {pid: self.series[pid] for pid in self.procs}


def dir_size(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def ledger_rows(schema: str) -> int | None:
    with suppress(psycopg.Error):
        return int(pg_exec(PG_ADMIN, f"SELECT count(*) FROM {schema}._sdk_applied")[0][0])
    return None


def wait_for_log(sync: subprocess.Popen[bytes], out: Path, seconds: float = 600) -> None:
    deadline = time.monotonic() + seconds
    while "phase log" not in out.read_text(errors="replace"):
        if sync.poll() is not None:
            raise SystemExit(f"the sync ended with exit {sync.returncode} before the log "
                             f"phase:\n{out.read_text(errors='replace')[-3000:]}")
        if time.monotonic() > deadline:
            raise SystemExit(f"the sync did not reach the log phase in {seconds:.0f} s")
        time.sleep(0.5)


def stop_sync(sync: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the ``sdk`` process (stops after the batch in flight), SIGKILL to its
    process group after 120 s; then the tree's leftovers (the JVM exits by itself once the
    driver is gone) are waited for and reaped."""
    if sync.poll() is None:
        with suppress(ProcessLookupError):
            os.kill(sync.pid, signal.SIGTERM)
        try:
            sync.wait(timeout=120)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(sync.pid, signal.SIGKILL)
            sync.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = psutil.Process().children(recursive=True)
        if not left:
            break
        for process in left:
            with suppress(ChildProcessError, OSError):
                os.waitpid(process.pid, os.WNOHANG)
        time.sleep(0.2)
    for process in psutil.Process().children(recursive=True):  # still there: killed
        with suppress(psutil.Error):
            process.kill()
            with suppress(ChildProcessError, OSError):
                os.waitpid(process.pid, 0)


def report(watcher: Watcher, t: float, settle: float) -> None:
    for pid, series in sorted(watcher.live().items(), key=lambda item: item[1].role):
        first, last = series.samples[0][1], series.samples[-1][1]
        late = series.slope(settle) if t > settle else float("nan")
        print(f"    {series.role:<10} {pid:>7}  RSS {last / MIB:7.1f} MiB (first {first / MIB:7.1f}"
              f")  slope {series.slope():+8.1f} MiB/h (after {settle / 60:.0f} min "
              f"{late:+8.1f})", flush=True)


def run(args: argparse.Namespace, work: Path) -> bool:
    source: Source = MySQLSource(args.tables, args.rows) if args.source == "mysql" \
        else PostgresSource(args.tables, args.rows)
    schema = f"soak_tgt_{TAG}"
    checkpoint = work / "checkpoint"
    out = work / "sync.log"
    sync: subprocess.Popen[bytes] | None = None
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        source.create()
        pg_exec(PG_ADMIN, f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        pg_exec(PG_ADMIN, f"CREATE SCHEMA {schema} AUTHORIZATION {parts(PG)['user']}")
        command = [*sdk_command(), "sync", "--source", source.url(), "--target", PG,
                   "--tables", source.pattern(), "--target-schema", schema,
                   "--checkpoint", str(checkpoint), "--until", "never"]
        for option in args.sdk_option:
            command += ["--option", option]
        print(f"soak: {source.kind} -> postgres, {args.tables} tables of {args.rows:,} rows, "
              f"{args.rate:g} transactions/s for {args.minutes:g} min; {os.cpu_count()} CPUs, "
              f"load {os.getloadavg()[0]:.2f}; sync environment: "
              f"{' '.join(f'{k}={v}' for k, v in args.sdk_env.items()) or '(as is)'}",
              flush=True)
        with out.open("wb") as log:
            sync = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True,
                                    cwd=args.cwd, env={**os.environ, **args.sdk_env})
        launched = time.monotonic()
        wait_for_log(sync, out)
        print(f"  log phase after {time.monotonic() - launched:.1f} s", flush=True)
        time.sleep(3)  # a few idle log batches

        watcher = Watcher(sync.pid)
        latency = Latency({name: deque() for name in source.names()})
        errors: list[BaseException] = []
        t0 = time.monotonic()
        until = t0 + args.minutes * 60
        threads = [threading.Thread(target=write, args=(source, args.rate, until, latency,
                                                        stop, errors), daemon=True),
                   threading.Thread(target=read, args=(schema, source.names(), latency, stop),
                                    daemon=True)]
        for thread in threads:
            thread.start()
        settle = args.settle * 60
        if args.minutes * 60 < settle + 3 * args.interval:
            settle = args.minutes * 30
            print(f"  (shorter than --settle {args.settle:g} min + 3 intervals: the acceptance "
                  f"fits the second half, after {settle / 60:.1f} min)", flush=True)
        watcher.sample(0.0)
        cpu_before, next_report = watcher.cpu(), args.interval
        while True:
            now = time.monotonic()
            t = now - t0
            if sync.poll() is not None:
                raise SystemExit(f"the sync ended with exit {sync.returncode}:\n"
                                 f"{out.read_text(errors='replace')[-3000:]}")
            if errors:
                raise SystemExit(f"the writer failed: {errors[0]!r}")
            watcher.sample(t)
            if t >= next_report - 1e-6 or now >= until:
                cpu = watcher.cpu()
                lat = latency.take()
                print(f"[{t / 60:5.1f} min] CPU {cpu - cpu_before:6.1f} s "
                      f"({(cpu - cpu_before) / args.interval:.2f} cores); state "
                      f"{dir_size(checkpoint / 'state') / 1024:.0f} KiB, spark checkpoint "
                      f"{dir_size(checkpoint / 'checkpoint') / 1024:.0f} KiB; ledger "
                      f"{ledger_rows(schema)} rows; written {latency.written:,} applied "
                      f"{latency.applied:,}; latency p50 {percentile(lat, 0.5):.2f} s p99 "
                      f"{percentile(lat, 0.99):.2f} s ({len(lat):,})", flush=True)
                report(watcher, t, settle)
                cpu_before, next_report = cpu, next_report + args.interval
            if now >= until:
                break
            time.sleep(max(0.0, min(args.sample, until - time.monotonic())))
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        total = time.monotonic() - t0
        every = latency.every
        print(f"summary: {latency.written:,} transactions written in {total:.0f} s, "
              f"{latency.applied:,} seen applied; latency p50 {percentile(every, 0.5):.2f} s "
              f"p99 {percentile(every, 0.99):.2f} s; CPU of the tree {watcher.cpu():.0f} s; "
              f"ledger {ledger_rows(schema)} rows; state "
              f"{dir_size(checkpoint / 'state') / 1024:.0f} KiB", flush=True)
        for pid, series in sorted(watcher.series.items(), key=lambda item: item[1].role):
            first, last = series.samples[0], series.samples[-1]
            print(f"  {series.role:<10} {pid:>7}  RSS {first[1] / MIB:7.1f} -> "
                  f"{last[1] / MIB:7.1f} MiB over {(last[0] - first[0]) / 60:5.1f} min; slope "
                  f"{series.slope():+7.1f} MiB/h, after {settle / 60:.1f} min "
                  f"{series.slope(settle):+7.1f} MiB/h; CPU {series.cpu:.0f} s")
        workers = {pid: s for pid, s in watcher.series.items()
                   if s.role in ("worker", "daemon", "runner", "datasource", "headworker")
                   and s.samples[-1][0] - max(settle, s.samples[0][0]) >= 2 * args.sample}
        slopes = {pid: s.slope(settle) for pid, s in workers.items()}
        above = {pid: v for pid, v in slopes.items() if not v < args.threshold}
        if not slopes:
            print(f"REJECT: no Python worker lived through the run past {settle / 60:.1f} min")
            return False
        worst = max(slopes.values())
        if above:
            names = ", ".join(f"{workers[pid].role} {pid} {v:+.1f}" for pid, v in above.items())
            print(f"REJECT: Python workers' RSS slope >= {args.threshold:g} MiB/hour after the "
                  f"first {settle / 60:.1f} minutes: {names}")
            return False
        print(f"ACCEPT: every Python worker's RSS slope < {args.threshold:g} MiB/hour after the "
              f"first {settle / 60:.1f} minutes ({len(slopes)} processes, the most "
              f"{worst:+.1f} MiB/hour)")
        return True
    finally:
        stop.set()
        if sync is not None:
            stop_sync(sync)
        for thread in threads:
            thread.join(timeout=10)
        if args.keep_log is not None and out.exists():
            shutil.copy(out, args.keep_log)
        with suppress(Exception):
            pg_exec(PG_ADMIN, f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        with suppress(Exception):
            source.drop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", choices=("mysql", "postgres"), default="mysql")
    parser.add_argument("--rate", type=float, default=100.0, help="transactions a second")
    parser.add_argument("--minutes", type=float, default=30.0, help="how long the writer runs")
    parser.add_argument("--interval", type=float, default=60.0, help="seconds between reports")
    parser.add_argument("--sample", type=float, default=10.0,
                        help="seconds between samples of the process tree")
    parser.add_argument("--tables", type=int, default=3)
    parser.add_argument("--rows", type=int, default=2000, help="rows of each table")
    parser.add_argument("--settle", type=float, default=10.0,
                        help="minutes left out of the acceptance's slope")
    parser.add_argument("--threshold", type=float, default=5.0,
                        help="the most RSS slope (MiB/hour) a Python worker may have")
    parser.add_argument("--sdk-env", action="append", default=[], metavar="KEY=VALUE",
                        help="an environment variable of the sync only (repeatable)")
    parser.add_argument("--sdk-option", action="append", default=[], metavar="KEY=VALUE",
                        help="passed to sdk sync as --option")
    parser.add_argument("--cwd", default=None, help="the sync's working directory")
    parser.add_argument("--keep-log", type=Path, default=None,
                        help="copy the sync's output there at the end")
    args = parser.parse_args()
    if bad := [pair for pair in args.sdk_env if "=" not in pair or pair.startswith("=")]:
        parser.error(f"--sdk-env takes KEY=VALUE, not {bad[0]!r}")
    args.sdk_env = dict(pair.split("=", 1) for pair in args.sdk_env)
    become_subreaper()  # the JVM, in a session of its own, stays in the tree seen here

    def terminate(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)  # cleaned up as after Ctrl-C
    work = Path(tempfile.mkdtemp(prefix="sdk-soak-"))
    try:
        ok = run(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
