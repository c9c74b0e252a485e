"""The rate limits as a user meets them: ``sdk sync`` with ``snapshot.rows-per-second`` and
``log.changes-per-second`` against the real MariaDB, each measured rate beside its limit
(issue #22: held within 10%).

    python benchmarks/throttle.py [--rows 200000] [--snapshot-limit 20000]
                                  [--changes 150000] [--log-limit 10000]

One MariaDB table (``id BIGINT PRIMARY KEY, v VARCHAR(40), amount DECIMAL(12,2), at
DATETIME(6)``) is copied into a SQLite mirror by ``sdk sync --until snapshot`` (a subprocess,
fresh checkpoint, default options but the limit); the snapshot's rate is its rows over its own
run (progress.json: first split handed out to the snapshot done, Spark's start-up left out).
Then ``--changes`` rows are updated (statements of 10,000 rows) and the same checkpoint is
resumed with ``--until caught-up`` and the log limit. The backlog is one log batch whose task
applies what it reads in chunks of 50,000 changes (``sdk.spark.executor.reads.BATCH_ROWS``), each
committed to the mirror while the next is read; the log's rate is the changes between the
first and the last chunk seen in the mirror over the time between them (start-up left out).
Both are also run unthrottled (on a second checkpoint), so the limit is known to bind. The
mirror is checked against the source (row count and sums) after each run. Prints each rate,
its limit and the ratio.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _servers import MYSQL, MYSQL_ADMIN, fill_mariadb
from e2e_sync import read_progress, sdk_command

from sdk import ConnectionConfig, get_dialect


def sync(table: str, work: Path, until: str, options: list[str]
         ) -> tuple[dict[str, Any], list[dict[str, Any]], list[tuple[float, int]]]:
    """Run ``sdk sync`` into ``work``'s mirror: the final report, every report seen in
    progress.json, and (time, rows changed) each time the mirror's count of rows whose ``v``
    is ``'changed'`` moved."""
    command = [*sdk_command(), "sync", "--source", MYSQL, "--target",
               f"sqlite:///{work / 'mirror.db'}", "--tables", f"sdk_test.{table}",
               "--checkpoint", str(work / "ck"), "--until", until]
    for option in options:
        command += ["--option", option]
    progress = work / "ck" / "state" / "progress.json"
    seen: list[dict[str, Any]] = []
    moved: list[tuple[float, int]] = []
    with open(work / f"{until}.log", "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
        while process.poll() is None:
            report = read_progress(progress)
            if report and (not seen or report.get("updated_at") != seen[-1].get("updated_at")):
                seen.append(report)
            if until == "caught-up":
                changed = count_changed(work, table)
                if changed is not None and (not moved or changed != moved[-1][1]):
                    moved.append((time.monotonic(), changed))
            time.sleep(0.02)
    if process.returncode != 0:
        tail = (work / f"{until}.log").read_text().splitlines()[-30:]
        raise SystemExit(f"sdk sync failed (exit {process.returncode}):\n" + "\n".join(tail))
    final = read_progress(progress) or {}
    seen.append(final)
    return final, seen, moved


def count_changed(work: Path, table: str) -> int | None:
    """Rows of the mirror whose ``v`` is ``'changed'`` (None while it cannot be read)."""
    try:
        with sqlite3.connect(f"file:{work / 'mirror.db'}?mode=ro", uri=True,
                             timeout=0.01) as conn:
            name = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND "
                                "name LIKE ?", (f"%{table}%",)).fetchone()[0]
            return int(conn.execute(f"SELECT COUNT(*) FROM \"{name}\" WHERE v = 'changed'"
                                    ).fetchone()[0])
    except sqlite3.Error:
        return None


def snapshot_seconds(final: dict[str, Any], seen: list[dict[str, Any]]) -> float:
    """First split handed out to the snapshot done."""
    done = next((r["updated_at"] for r in seen if r.get("phase") in ("log", "done")),
                final["updated_at"])
    return float(done - final["started_at"])


def check_mirror(work: Path, table: str) -> None:
    """The mirror holds the source's rows: count, sum of ids and of the text lengths."""
    admin = get_dialect("mysql").connect(ConnectionConfig.from_url(MYSQL_ADMIN))
    source = tuple(int(x) for x in admin.query(
        f"SELECT COUNT(*), SUM(id), SUM(LENGTH(v)) FROM `{table}`")[0])
    admin.close()
    with sqlite3.connect(work / "mirror.db") as conn:
        name = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name "
                            "LIKE ?", (f"%{table}%",)).fetchone()[0]
        mirror = conn.execute(f'SELECT COUNT(*), SUM(id), SUM(LENGTH(v)) FROM "{name}"'
                              ).fetchone()
    if tuple(mirror) != source:
        raise SystemExit(f"mirror {tuple(mirror)} != source {source}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--snapshot-limit", type=float, default=20_000)
    parser.add_argument("--changes", type=int, default=150_000)
    parser.add_argument("--log-limit", type=float, default=10_000)
    args = parser.parse_args()
    mysql = get_dialect("mysql")
    admin = mysql.connect(ConnectionConfig.from_url(MYSQL_ADMIN))
    table = f"bench_throttle_{os.getpid()}"
    work = Path(tempfile.mkdtemp(prefix="sdk-throttle-"))
    try:
        fill_mariadb(admin, table, args.rows)
        admin.query(f"ANALYZE TABLE `{table}`")
        free = work / "free"
        free.mkdir()
        final, seen, _ = sync(table, free, "snapshot", [])
        unthrottled = args.rows / snapshot_seconds(final, seen)
        check_mirror(free, table)
        limited = work / "limited"
        limited.mkdir()
        limit = f"snapshot.rows-per-second={args.snapshot_limit:g}"
        final, seen, _ = sync(table, limited, "snapshot", [limit])
        snapshot_rate = args.rows / snapshot_seconds(final, seen)
        check_mirror(limited, table)
        for first in range(1, args.changes + 1, 10_000):
            admin.query(f"UPDATE `{table}` SET v = 'changed' WHERE id BETWEEN {first} AND "
                        f"{min(first + 9_999, args.changes)}")
        rates = []
        for work_dir, options in ((free, []), (limited, [
                limit, f"log.changes-per-second={args.log_limit:g}"])):
            _, _, moved = sync(table, work_dir, "caught-up", options)
            check_mirror(work_dir, table)
            moved = [m for m in moved if m[1]]  # from the first chunk committed
            (t0, n0), (t1, n1) = moved[0], moved[-1]
            if n1 != args.changes or n1 - n0 < args.changes / 2:
                raise SystemExit(f"the mirror's changed rows moved as {moved}")
            rates.append((n1 - n0) / (t1 - t0))
            print(f"  log {'limited' if options else 'unthrottled'}: changed rows in the mirror "
                  + ", ".join(f"{n:,} at {t - t0:+.2f} s" for t, n in moved), flush=True)
        free_log, log_rate = rates
    finally:
        admin.query(f"DROP TABLE IF EXISTS `{table}`")
        admin.close()
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nsnapshot of {args.rows:,} rows: unthrottled {unthrottled:,.0f} rows/s; "
          f"limit {args.snapshot_limit:,.0f}: {snapshot_rate:,.0f} rows/s "
          f"= {snapshot_rate / args.snapshot_limit:.3f}x the limit")
    print(f"log of {args.changes:,} changes: unthrottled {free_log:,.0f} changes/s; limit "
          f"{args.log_limit:,.0f}: {log_rate:,.0f} changes/s "
          f"= {log_rate / args.log_limit:.3f}x the limit")


if __name__ == "__main__":
    main()
