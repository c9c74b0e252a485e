"""The MySQL dialect against the raw drivers, in the same run, on the local MariaDB.

    python benchmarks/mysql_dialect.py [--rows 1000000] [--changes 100000] [--runs 3]
        [--skip-read-range] [--admin-url mysql://root@127.0.0.1:3306/sdk_test]
        [--url mysql://sdk_cdc:sdk_cdc@127.0.0.1:3306/sdk_test]

- read_range: rows/s of the dialect reading the whole table as one split, against a raw pymysql
  unbuffered (SSCursor) loop over the same SELECT.
- stream_log: row changes/s of the dialect over a binlog range, against raw
  python-mysql-replication decoding of the same range (row events, no offsets, no
  normalisation), for one-row transactions and for one multi-row statement; and the server's
  own C reader (``mariadb-binlog``/``mysqlbinlog --verbose``) on the same range as the limit.
  Two raw references: decoding every row event of the range (the issue's figure), and
  decoding the benchmark table's only (``only_tables``). They differ when other clients write to the
  server meanwhile: the dialect then decodes the table maps of every table (it must count
  every row of a transaction it reads, see plugins/sdk_mysql/_binlog.py) but not the rows of
  other tables unless a change of its own follows them in the same transaction, while
  ``only_tables`` skips both. On a quiet server the three read the same events. The ratios
  are of times over the same range (raw time / dialect time, wall clock and CPU of this
  process): above 1.0 the dialect is faster.

The table is named after the process id, so runs on a shared server do not collide. To compare
two versions of the dialect, put the other one first on the path:
``PYTHONPATH=/tmp/old python benchmarks/mysql_dialect.py``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from typing import Any

from _timing import best_of

from sdk import ChangeEvent, ConnectionConfig, SnapshotSplit, TableId, get_dialect


def interleaved_best(runs: int, functions: list[Callable[[], int]]
                     ) -> list[tuple[float, float, int]]:
    """For each function, the best wall-clock and the best CPU seconds of ``runs`` calls and the
    count it returned; the functions run in turn, so that a shared machine's load drifting
    during the benchmark weighs on all alike. CPU time (this process only: the decoding, not
    the server's work) is the steadier figure on a busy machine."""
    best = [(float("inf"), float("inf"), 0) for _ in functions]
    for _ in range(runs):
        for i, fn in enumerate(functions):
            wall, cpu = time.perf_counter(), time.process_time()
            count = fn()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            best[i] = (min(best[i][0], wall), min(best[i][1], cpu), count)
    return best


TOOL = shutil.which("mariadb-binlog") or shutil.which("mysqlbinlog") or "mysqlbinlog"


def binlog_tool(settings: dict[str, Any], start: Any, end: Any) -> int:
    """Rows the server's own binlog reader (C) decodes between two offsets of one file, as
    pseudo-SQL (``--verbose``): the speed limit of decoding, process start included."""
    if start["file"] != end["file"]:
        raise SystemExit("the range spans a binlog rotation: run again")
    command = [TOOL, "--read-from-remote-server", f"--host={settings['host']}",
               f"--port={settings['port']}", f"--user={settings['user']}",
               f"--start-position={start['pos']}", f"--stop-position={end['pos']}",
               "--base64-output=decode-rows", "--verbose", start["file"]]
    env = dict(os.environ, MYSQL_PWD=settings.get("password") or "")
    out = subprocess.run(command, check=True, capture_output=True, env=env).stdout
    return sum(out.count(word) for word in (b"\n### INSERT", b"\n### UPDATE", b"\n### DELETE"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3, help="best of this many runs")
    parser.add_argument("--skip-read-range", action="store_true")
    parser.add_argument("--admin-url", default="mysql://root@127.0.0.1:3306/sdk_test")
    parser.add_argument("--url", default="mysql://sdk_cdc:sdk_cdc@127.0.0.1:3306/sdk_test")
    args = parser.parse_args()
    import pymysql
    import pymysql.cursors
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.event import XidEvent
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    mysql = get_dialect("mysql")
    admin = mysql.connect(ConnectionConfig.from_url(args.admin_url))
    name = f"bench_rows_{os.getpid()}"
    admin.query(f"DROP TABLE IF EXISTS {name}")
    admin.query(f"CREATE TABLE {name} (id INT PRIMARY KEY, name VARCHAR(40), "
                "price DECIMAL(12,2), qty INT, created DATETIME(6))")
    admin.query(f"INSERT INTO {name} SELECT seq, CONCAT('name ', seq), seq / 7, seq % 100, "
                f"'2024-01-01' + INTERVAL seq SECOND FROM seq_1_to_{args.rows}")
    conn = mysql.connect(ConnectionConfig.from_url(args.url))
    table = TableId("sdk_test", name)
    schema = mysql.describe_table(conn, table)
    whole = SnapshotSplit(table, 0, None, None)

    def dialect_read() -> int:
        return sum(len(b) for b in mysql.read_range(conn, schema, whole, 10_000))

    def raw_read() -> int:
        raw = conn.raw
        with raw.cursor(pymysql.cursors.SSCursor) as cur:
            cur.execute(f"SELECT id, name, price, qty, created FROM sdk_test.{name}")
            n = 0
            while batch := cur.fetchmany(10_000):
                n += len(batch)
            return n

    if not args.skip_read_range:
        raw_s, n = best_of(args.runs, raw_read)
        ours_s, _ = best_of(args.runs, dialect_read)
        print(f"read_range {n} rows: dialect {n / ours_s:,.0f} rows/s, raw pymysql SSCursor "
              f"{n / raw_s:,.0f} rows/s: {raw_s / ours_s:.2f}x")

    settings = dict(conn.settings)
    for label, statements in (
            ("one-row transactions", [f"UPDATE {name} SET qty = qty + 1 WHERE id = {i}"
                                      for i in range(1, args.changes + 1)]),
            ("one multi-row statement",
             [f"UPDATE {name} SET qty = qty + 1 WHERE id <= {args.changes}"])):
        start = mysql.current_offset(conn)
        for sql in statements:
            admin.query(sql)
        end = mysql.current_offset(conn)

        def dialect_log(start: Any = start, end: Any = end) -> int:
            return sum(isinstance(e, ChangeEvent)
                       for e in mysql.stream_log(conn, [schema], start, end))

        def raw_log(start: Any = start, end: Any = end, only: bool = False) -> int:
            reader = BinLogStreamReader(
                connection_settings=settings, server_id=4242, log_file=start["file"],
                log_pos=start["pos"], resume_stream=True, blocking=False,
                only_schemas=[table.schema] if only else None,
                only_tables=[table.name] if only else None,
                only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, XidEvent])
            n = 0
            for event in reader:
                if not isinstance(event, XidEvent):  # Xid: to see the end on a busy server
                    n += len(event.rows)
                if (reader.log_file, reader.log_pos) >= (end["file"], end["pos"]):
                    break
            reader.close()
            return n

        def tool_log(start: Any = start, end: Any = end) -> int:
            return binlog_tool(settings, start, end)

        (raw_s, raw_cpu, n), (only_s, only_cpu, k), (ours_s, ours_cpu, m), (tool_s, _, t) = \
            interleaved_best(args.runs, [raw_log, lambda: raw_log(only=True), dialect_log,
                                         tool_log])
        print(f"stream_log, {label}: dialect {m} changes {m / ours_s:,.0f}/s, "
              f"{raw_s / ours_s:.2f}x raw python-mysql-replication decoding all row events "
              f"({n} rows, {n / raw_s:,.0f}/s; {raw_cpu / ours_cpu:.2f}x its CPU), "
              f"{only_s / ours_s:.2f}x it with only_tables ({k} rows; "
              f"{only_cpu / ours_cpu:.2f}x CPU); the limit, {TOOL} -v (C, decoding rows to "
              f"text): {t} rows {t / tool_s:,.0f}/s, the dialect at {tool_s / ours_s:.2f}x it")
    admin.query(f"DROP TABLE {name}")


if __name__ == "__main__":
    main()
