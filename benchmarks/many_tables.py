"""Does ``sdk sync`` stay cheap and readable at thousands of tables (issue #41)? For each table
count N, on a server of the benchmark's own: N small tables (10 rows each), a first
``sdk sync --until caught-up`` (start-up + snapshot), then changes to exactly 10 of the tables
and the same command again (a resume: start-up + one log batch), then optionally a steady
state (``--until never`` while 10 tables change every second).

    python benchmarks/many_tables.py [--tables 100,1000,3000] [--dialect mariadb|postgres|both]
                                     [--target sqlite|postgres|both] [--steady-seconds 30]
                                     [--no-steady]

Prints per dialect and target a table: per N the first run's and the resume's wall clock and
CPU seconds (the whole process tree of the sync: its Python, the Spark JVM, Spark's Python
workers), the bytes the resume wrote under ``<checkpoint>/state`` (files new or changed), the
longest line the sync printed to a pipe, the steady state's CPU seconds per minute and state
bytes per log batch; then the ratios between consecutive N (nothing should grow faster than
N), and where the state bytes went, file by file. The issue's targets at 3,000 tables: a pipe
line under 1 KB, the resume's state write under 50 KB. The sync runs as ``python -m sdk.app.cli
sync`` with stdout a pipe (not a terminal); its stderr goes to a file named if it fails (a
failed step is reported, the next N still runs). The target is a SQLite file (default) or a
PostgreSQL of the benchmark's own. Timings on a busy machine are noisy: the CPU figures less
so than the wall clock.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _cpu import become_subreaper, children_cpu, reap, tree
from helpers.instances import (
    server_dir,
    start_mariadb,
    start_postgres15,
    stopping,
)

ROWS = 10
"""Rows in each table at the start."""
TOUCHED = 10
"""Tables changed before the resume and during the steady state."""
BATCH = 250
"""Tables created a statement batch (MariaDB) or a transaction (PostgreSQL)."""


def _name(i: int) -> str:
    return f"t{i:04d}"


def _touched(n: int) -> list[str]:
    """The ``TOUCHED`` tables, spread over the ``n``."""
    return [_name(i * n // TOUCHED) for i in range(TOUCHED)]


def _changes(table: str) -> list[str]:
    """35 row changes to ``table``: 10 inserts, 20 updates, 5 deletes."""
    return [f"INSERT INTO {table} (id, v) VALUES "
            + ", ".join(f"({k}, 'n{k}')" for k in range(ROWS + 1, 2 * ROWS + 1)),
            f"UPDATE {table} SET v = CONCAT(v, 'u')",
            f"DELETE FROM {table} WHERE id <= 5"]


class Source:
    """A database server of the benchmark's own holding ``n`` tables."""

    def __init__(self, dialect: str, root: Path) -> None:
        self.dialect = dialect
        if dialect == "mariadb":
            self.server: Any = start_mariadb(root / "m", extra=[
                "--innodb-flush-log-at-trx-commit=2", "--sync-binlog=0"])
            self.url = self.server.url()
        else:
            self.server = start_postgres15(root / "p")
            self.url = self.server.url(query="?slot=bench&publication=bench")

    def create(self, n: int) -> None:
        if self.dialect == "mariadb":
            from pymysql.constants import CLIENT

            conn = self.server.admin(database="sdk_test", client_flag=CLIENT.MULTI_STATEMENTS)
            try:
                with conn.cursor() as cur:
                    for first in range(0, n, BATCH):
                        cur.execute("".join(
                            f"CREATE TABLE {_name(i)} (id INT PRIMARY KEY, v TEXT); "
                            f"INSERT INTO {_name(i)} SELECT seq, CONCAT('v', seq) "
                            f"FROM seq_1_to_{ROWS}; "
                            for i in range(first, min(first + BATCH, n))))
                        while cur.nextset():
                            pass
            finally:
                conn.close()
        else:
            with self.server.admin() as conn:
                conn.execute("SET ROLE sdk_cdc")  # the tables are the sync user's own
                for first in range(0, n, BATCH):  # a transaction a batch: its locks bounded
                    conn.execute(f"""DO $$ BEGIN
                        FOR i IN {first}..{min(first + BATCH, n) - 1} LOOP
                          EXECUTE format('CREATE TABLE t%s (id int PRIMARY KEY, v text)',
                                         lpad(i::text, 4, '0'));
                          EXECUTE format('INSERT INTO t%s SELECT g, ''v'' || g '
                                         'FROM generate_series(1, {ROWS}) g',
                                         lpad(i::text, 4, '0'));
                        END LOOP; END $$""")

    def change(self, tables: list[str]) -> int:
        """The row changes of :func:`_changes` in each of ``tables``, a transaction a
        statement; the count of rows changed."""
        statements = [s for t in tables for s in _changes(t)]
        if self.dialect == "mariadb":
            self.server.execute("USE sdk_test", *statements)
        else:
            with self.server.admin() as conn:
                for statement in statements:
                    conn.execute(statement)
        return len(tables) * (ROWS + 2 * ROWS + 5)

    def ticker(self, tables: list[str], stop: threading.Event) -> Callable[[], int]:
        """Start a thread making one change to each of ``tables`` every second (one
        transaction) until ``stop``; returns a function giving the count of changes made."""
        made = [0]

        def run() -> None:
            tick = 0
            if self.dialect == "mariadb":
                conn = self.server.admin(database="sdk_test")
                execute = conn.cursor().execute
            else:
                conn = self.server.admin()
                execute = conn.execute
            try:
                while not stop.wait(1.0):
                    tick += 1
                    execute("BEGIN")
                    for table in tables:
                        execute(f"UPDATE {table} SET v = 'tick{tick}' WHERE id = 6")
                    execute("COMMIT")
                    made[0] += len(tables)
            finally:
                conn.close()

        threading.Thread(target=run, daemon=True).start()
        return lambda: made[0]

    def stop(self) -> None:
        self.server.stop()


@dataclass
class Run:
    wall: float = 0.0
    cpu: float = 0.0
    lines: list[bytes] = field(default_factory=list)
    steady_cpu_per_min: float | None = None
    steady_changes: int = 0
    steady_seconds: float = 0.0
    steady_written: dict[str, int] = field(default_factory=dict)
    """State bytes written in the steady state (polled each second: a file rewritten within
    a second counts once), by path."""
    steady_batches: int = 0
    """Log batches committed in the steady state (new files under states/)."""

    @property
    def longest(self) -> int:
        return max((len(line.rstrip(b"\n")) for line in self.lines), default=0)


class SyncFailedError(Exception):
    """A sync that ended with an error: its message, ``sdk: error: ...``."""


def _failure(log: Path, offset: int, code: int | None) -> SyncFailedError:
    with log.open("rb") as file:
        file.seek(offset)
        text = file.read().decode(errors="replace")
    errors = [line for line in text.splitlines() if line.startswith("sdk: error:")]
    return SyncFailedError((errors[-1] if errors else text[-1000:].strip() or "no error printed")
                      + f" (exit code {code}; stderr in {log})")


def sync(url: str, target: str, work: Path, until: str, log: Path,
         steady: tuple[float, Callable[[], Callable[[], int]]] | None = None) -> Run:
    """One ``sdk sync`` with stdout a pipe: its wall clock and its process tree's CPU time.
    With ``steady`` (seconds, start): once the sync reports caught up, ``start()`` the changes
    and measure the tree's CPU for that long, then SIGTERM. :class:`SyncFailedError` when it
    fails."""
    command = [sys.executable, "-m", "sdk.app.cli", "sync", "--source", url, "--target", target,
               "--checkpoint", str(work / "ck"), "--until", until]
    run = Run()
    caught_up = threading.Event()
    offset = log.stat().st_size if log.exists() else 0
    cpu0, t0 = children_cpu(), time.perf_counter()
    with log.open("ab") as err:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err,
                                start_new_session=True)

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            run.lines.append(line)
            if b", caught up" in line:
                caught_up.set()

    def track() -> None:
        while proc.poll() is None:
            seen.update(tree(proc.pid))
            time.sleep(0.2)

    seen: set[int] = set()
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    tracker = threading.Thread(target=track, daemon=True)
    tracker.start()
    try:
        if steady is not None:
            seconds, start = steady
            while not caught_up.wait(1.0):
                if proc.poll() is not None:
                    reader.join(timeout=30)
                    raise _failure(log, offset, proc.returncode)
            time.sleep(5)  # its first idle log batches after catching up
            made = start()
            state = work / "ck" / "state"
            c0, w0 = tree(proc.pid), time.monotonic()
            files = _files(state)
            while time.monotonic() - w0 < seconds:  # the state files it writes, polled
                time.sleep(1.0)
                now = _files(state)
                for path, size in _written(files, now).items():
                    run.steady_written[path] = run.steady_written.get(path, 0) + size
                files = now
            c1, w1 = tree(proc.pid), time.monotonic()
            run.steady_batches = sum(1 for path in run.steady_written
                                     if path.startswith("states/"))
            run.steady_seconds = w1 - w0
            # a process that ended in between counts in its parent's reaped children's time
            cpu = sum(c1.values()) - sum(c0.values())
            run.steady_cpu_per_min = cpu / (w1 - w0) * 60
            run.steady_changes = made()
            os.killpg(proc.pid, signal.SIGTERM)
        code = proc.wait(timeout=7200)
        tracker.join()
        seen.discard(proc.pid)
        reap(seen)
    except BaseException:
        for pid in [proc.pid, *seen]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait()
        raise
    reader.join(timeout=30)
    run.wall, run.cpu = time.perf_counter() - t0, children_cpu() - cpu0
    if code != 0 and not (steady and code in (-signal.SIGTERM, 128 + signal.SIGTERM)):
        raise _failure(log, offset, code)
    return run


def _files(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in root.rglob("*") if p.is_file()}


def _written(before: dict[str, tuple[int, int]],
             after: dict[str, tuple[int, int]]) -> dict[str, int]:
    """Bytes of the files new or changed (size or modification time), by path."""
    return {path: size for path, (size, mtime) in after.items()
            if before.get(path) != (size, mtime)}


@dataclass
class Figures:
    n: int
    changes: int = 0
    first: Run | None = None
    resume: Run | None = None
    state_written: dict[str, int] | None = None
    steady: Run | None = None
    failure: str | None = None
    """Why the runs stopped short (the step and the sync's error)."""
    unchanged: set[str] = field(default_factory=set)
    """Files the resume wrote again with the bytes they held before."""

    @property
    def state_bytes(self) -> int | None:
        return None if self.state_written is None else sum(self.state_written.values())

    @property
    def longest(self) -> int:
        """The longest line any of the runs printed (bytes)."""
        return max(r.longest if r else 0 for r in (self.first, self.resume, self.steady))


def measure(dialect: str, n: int, target_kind: str, steady_seconds: float | None) -> Figures:
    """The figures of ``n`` tables of ``dialect`` into a ``target_kind`` target; a failed sync
    ends them short (recorded, not raised)."""
    root = server_dir()
    work = Path(tempfile.mkdtemp(prefix="many_tables_"))
    log = work / "sync.err"
    figures = Figures(n)
    step = "first run"
    try:
        t0 = time.perf_counter()
        source = Source(dialect, root)
        with stopping(source):
            if target_kind == "sqlite":
                target = f"sqlite:///{work / 'm.db'}"
                servers: tuple[Any, ...] = ()
            else:  # a PostgreSQL of its own
                servers = (start_postgres15(root / "target"),)
                target = servers[0].url()
            with stopping(*servers):
                source.create(n)
                print(f"  {dialect}, {n:,} tables -> {target_kind}: servers and tables ready "
                      f"in {time.perf_counter() - t0:.1f} s", flush=True)
                figures.first = sync(source.url, target, work, "caught-up", log)
                print(f"  first run: {figures.first.wall:.1f} s, {figures.first.cpu:.1f} s CPU",
                      flush=True)
                figures.changes = source.change(_touched(n))
                state = work / "ck" / "state"
                before = _files(state)
                contents = {path: (state / path).read_bytes() for path in before}
                step = "resume"
                figures.resume = sync(source.url, target, work, "caught-up", log)
                figures.state_written = _written(before, _files(state))
                figures.unchanged = {path for path in figures.state_written
                                     if contents.get(path) == (state / path).read_bytes()}
                print(f"  resume: {figures.resume.wall:.1f} s, {figures.resume.cpu:.1f} s CPU, "
                      f"{figures.state_bytes:,} state bytes written", flush=True)
                if steady_seconds:
                    step = "steady state"
                    stop = threading.Event()
                    try:
                        figures.steady = steady = sync(
                            source.url, target, work, "never", log,
                            (steady_seconds, lambda: source.ticker(_touched(n), stop)))
                    finally:
                        stop.set()
                    print(f"  steady: {steady.steady_cpu_per_min:.1f} CPU s/min "
                          f"({steady.steady_changes} changes in {steady.steady_seconds:.0f} s, "
                          f"{steady.steady_batches} log batches, "
                          f"{sum(steady.steady_written.values()):,} state bytes written: "
                          f"{_by_dir(steady.steady_written)})", flush=True)
        shutil.rmtree(work, ignore_errors=True)
    except SyncFailedError as exc:
        figures.failure = f"{step}: {exc}"
        print(f"  FAILED, {figures.failure} (checkpoint left in {work})", flush=True)
    except BaseException:
        print(f"  (left for inspection: {work})", flush=True)
        raise
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return figures


def _by_dir(written: dict[str, int], unchanged: set[str] | frozenset[str] = frozenset()) -> str:
    """The state bytes written, by the first directory under state/ (files at its top as
    themselves), largest first; a file at the top in ``unchanged`` is marked so."""
    sums: dict[str, tuple[int, int]] = {}
    for path, size in written.items():
        key = path.split("/", 1)[0] + ("/" if "/" in path else "")
        total, count = sums.get(key, (0, 0))
        sums[key] = (total + size, count + 1)
    return ", ".join(f"{key} {total:,} B" + (f" in {count}" if key.endswith("/") else "")
                     + (" (rewritten, same bytes)" if key in unchanged else "")
                     for key, (total, count) in sorted(sums.items(), key=lambda kv: -kv[1][0]))


COLUMNS = (("tables", 7), ("first wall s", 12), ("CPU s", 6), ("resume wall s", 13),
           ("CPU s", 6), ("state B written", 15), ("longest line B", 14),
           ("steady CPU s/min", 16), ("steady state B/batch", 20))


def _row(cells: list[str]) -> str:
    return " | ".join(f"{cell:>{width}}" for cell, (_, width) in zip(cells, COLUMNS,
                                                                      strict=True))


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def report(title: str, figures: list[Figures]) -> None:
    """The figures of one dialect and target, a row per table count, then the ratios between
    consecutive counts."""
    print(f"\n{title}: {TOUCHED} tables changed before the resume "
          f"({max(f.changes for f in figures)} row changes), {TOUCHED} changed every second "
          "in the steady state; CPU s: the sync's whole process tree")
    head = _row([name for name, _ in COLUMNS])
    print(head)
    print("-" * len(head))

    def wall(run: Run | None) -> float | None:
        return run.wall if run else None

    def cpu(run: Run | None) -> float | None:
        return run.cpu if run else None

    def steady(f: Figures) -> float | None:
        return f.steady.steady_cpu_per_min if f.steady else None

    def per_batch(f: Figures) -> float | None:
        if f.steady is None or not f.steady.steady_batches:
            return None
        return sum(f.steady.steady_written.values()) / f.steady.steady_batches

    def longest(f: Figures) -> int | None:
        return f.longest if f.first else None

    for f in figures:
        print(_row([f"{f.n:,}", _fmt(wall(f.first), ".1f"), _fmt(cpu(f.first), ".1f"),
                    _fmt(wall(f.resume), ".1f"), _fmt(cpu(f.resume), ".1f"),
                    _fmt(f.state_bytes, ","), _fmt(longest(f), ","), _fmt(steady(f), ".1f"),
                    _fmt(per_batch(f), ",.0f")]))

    def ratio(x: float | None, y: float | None) -> str:
        return f"x{y / x:.2f}" if x and y is not None else "-"

    for a, b in itertools.pairwise(figures):
        print(_row([f"{b.n}/{a.n}", ratio(wall(a.first), wall(b.first)),
                    ratio(cpu(a.first), cpu(b.first)), ratio(wall(a.resume), wall(b.resume)),
                    ratio(cpu(a.resume), cpu(b.resume)), ratio(a.state_bytes, b.state_bytes),
                    ratio(longest(a), longest(b)), ratio(steady(a), steady(b)),
                    ratio(per_batch(a), per_batch(b))]) + f"   (tables x{b.n / a.n:g})")
    for f in figures:
        if f.failure:
            print(f"  {f.n:,} tables: FAILED at the {f.failure}")
        if f.state_written is not None:
            print(f"  {f.n:,} tables, the resume's state writes: "
                  f"{_by_dir(f.state_written, f.unchanged)}")
        if f.steady is not None:
            print(f"  {f.n:,} tables, the steady state's: {f.steady.steady_batches} log "
                  f"batches in {f.steady.steady_seconds:.0f} s, "
                  f"{_by_dir(f.steady.steady_written)}")
        runs = [r for r in (f.first, f.resume) if r]
        if runs:
            line = max([x for r in runs for x in r.lines], key=len, default=b"").rstrip(b"\n")
            print(f"  {f.n:,} tables, longest line ("
                  + ", ".join(f"{r.longest} B {name}" for r, name in
                              ((f.first, "first run"), (f.resume, "resume")) if r)
                  + f"): {line.decode(errors='replace')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", default="100,1000,3000",
                        help="comma-separated table counts (default: 100,1000,3000)")
    parser.add_argument("--dialect", choices=["mariadb", "postgres", "both"], default="both")
    parser.add_argument("--target", choices=["sqlite", "postgres", "both"], default="sqlite",
                        help="the sync's target: a SQLite file, or a PostgreSQL of the "
                             "benchmark's own (default: sqlite)")
    parser.add_argument("--steady-seconds", type=float, default=30.0)
    parser.add_argument("--no-steady", action="store_true", help="skip the steady state")
    args = parser.parse_args()
    counts = [int(n) for n in args.tables.split(",")]
    become_subreaper()
    print(f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f} at the start "
          "(timings are noisy on a shared machine)", flush=True)
    for dialect in (["mariadb", "postgres"] if args.dialect == "both" else [args.dialect]):
        for target in (["sqlite", "postgres"] if args.target == "both" else [args.target]):
            t0 = time.perf_counter()
            figures = [measure(dialect, n, target,
                               None if args.no_steady else args.steady_seconds)
                       for n in counts]
            report(f"{dialect} -> {target}", figures)
            print(f"{time.perf_counter() - t0:.0f} s in all; load average "
                  f"{os.getloadavg()[0]:.2f} at the end", flush=True)


if __name__ == "__main__":
    main()
