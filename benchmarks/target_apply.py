"""The PostgreSQL and MySQL targets' ``apply_changes`` against a hand-written bulk load, in the
same run, on the local servers.

    python benchmarks/target_apply.py [--rows 1000000] [--task-rows 65536] [--runs 3]
        [--targets postgres,mysql] [--sizes 10,50,100,200,500,1000,2000]

The table has the shape of a 1M-row orders table: ``id BIGINT PK, customer_id INT,
amount NUMERIC(12,2), status VARCHAR(16), note VARCHAR(200), created_at TIMESTAMP(6)``.

- load: ``--rows`` insert events (``r``) into the empty table through ``apply_changes``, in
  tasks of ``--task-rows`` (each its own batch id, as the mirror's tasks), against a
  hand-written loop into an empty table of the same shape: psycopg ``COPY ... FROM STDIN`` with
  ``write_row`` for PostgreSQL, multi-row ``INSERT`` statements of 1000 rows for MySQL; and
  through ``load_snapshot`` (each task's rows as the Arrow table the engine hands a target that
  loads snapshot splits, made before the clock starts). Best of ``--runs``, taken in turn;
  rows/s and the ratios.
- changes: one task of ``--task-rows`` changes on the loaded table (80 % updates, 10 % deletes,
  10 % updates that move their key), through ``apply_changes``: rows/s.
- sizes (PostgreSQL, with the set-based target only): batches of each ``--sizes`` upserts by
  ``executemany`` and through the staging table, to choose ``BULK_ROWS``.

Run it on a commit before the set-based apply (``git worktree add``, then
``PYTHONPATH=<worktree>:<worktree>/plugins``) for the figures before.
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from _timing import best_of_interleaved

from sdk import (
    ChangeEvent,
    Column,
    ConnectionConfig,
    LogicalType,
    Offset,
    TableId,
    TableSchema,
    get_dialect,
)
from sdk.dialect.tableformat import arrow_rows

L = LogicalType
COLUMNS = (
    Column("id", L.INT64, "bigint", nullable=False), Column("customer_id", L.INT32, "integer"),
    Column("amount", L.DECIMAL, "numeric(12,2)", precision=12, scale=2),
    Column("status", L.STRING, "varchar(16)"), Column("note", L.STRING, "varchar(200)"),
    Column("created_at", L.TIMESTAMP, "timestamp(6)"),
)
PG_DDL = ("id BIGINT PRIMARY KEY, customer_id INT, amount NUMERIC(12,2), status VARCHAR(16), "
          "note VARCHAR(200), created_at TIMESTAMP(6)")
MY_DDL = PG_DDL.replace("TIMESTAMP(6)", "DATETIME(6)")
STATUSES = ("new", "paid", "shipped", "delivered", "returned")
START = dt.datetime(2024, 1, 1)
OFFSET = Offset("bench")


def row(i: int, version: int = 0) -> tuple[Any, ...]:
    """The synthetic row of id ``i`` (``version`` changes the non-key values)."""
    return (i, (i * 7919 + version) % 100_000, Decimal(i % 1_000_000 + version) / 100,
            STATUSES[(i + version) % 5], f"order {i} note {version} " + "x" * (i % 40),
            START + dt.timedelta(seconds=i, microseconds=version))


def tasks(events: list[ChangeEvent], size: int) -> list[list[ChangeEvent]]:
    return [events[i:i + size] for i in range(0, len(events), size)]


def changes(table: TableSchema, rows: int, count: int) -> list[ChangeEvent]:
    """``count`` changes on a table holding ids ``0..rows-1``: updates, deletes and key moves
    (to ids past ``rows``), each key once as the mirror's compacted tasks hold them."""
    out = []
    step = max(rows // count, 1)
    for n, i in enumerate(range(0, rows, step)[:count]):
        kind = n % 10
        if kind == 0:
            out.append(ChangeEvent(table.table, "d", (i,), None, OFFSET))
        elif kind == 1:
            moved = rows + i
            out.append(ChangeEvent(table.table, "u", (moved,), row(moved, 1), OFFSET,
                                   old_key=(i,)))
        else:
            out.append(ChangeEvent(table.table, "u", (i,), row(i, 1), OFFSET))
    return out


class Target:
    """One target database: its dialect connection, an admin connection and the raw loop."""

    def __init__(self, name: str, url: str, admin: Callable[[str], Any], ddl: str,
                 raw_load: Callable[[list[tuple[Any, ...]]], None], schema: str) -> None:
        self.dialect = get_dialect(name)
        self.conn = self.dialect.connect(ConnectionConfig.from_url(url))
        self.sql, self.raw_load = admin, raw_load
        self.table = TableSchema(TableId(schema, "bench_apply"), COLUMNS, ("id",))
        self.sql("DROP TABLE IF EXISTS bench_apply")
        self.sql("DROP TABLE IF EXISTS bench_raw")
        self.sql(f"CREATE TABLE bench_raw ({ddl})")
        self.dialect.create_table(self.conn, self.table)
        self.batch = 0
        self.reset()

    def reset(self) -> None:
        self.sql("TRUNCATE bench_apply")
        self.sql("TRUNCATE bench_raw")
        self.sql("DELETE FROM _sdk_applied WHERE tbl = 'bench_apply'")

    def apply(self, batches: list[list[ChangeEvent]]) -> int:
        for events in batches:
            self.batch += 1
            assert self.dialect.apply_changes(self.conn, self.table, events, f"{self.batch}-0")
        return sum(map(len, batches))


def postgres(url: str, admin_url: str) -> Target:
    import psycopg

    admin = psycopg.connect(admin_url, autocommit=True)
    admin.execute("GRANT CREATE ON SCHEMA public TO sdk_cdc")
    raw = psycopg.connect(url, autocommit=True)

    def load(rows: list[tuple[Any, ...]]) -> None:
        with raw.transaction(), raw.cursor() as cur, cur.copy(
                "COPY bench_raw FROM STDIN") as copy:
            for r in rows:
                copy.write_row(r)

    def sql(statement: str) -> None:
        admin.execute(statement)

    target = Target("postgres", url, sql, PG_DDL, load, "public")
    sql("ALTER TABLE bench_apply OWNER TO sdk_cdc")
    sql("ALTER TABLE bench_raw OWNER TO sdk_cdc")
    return target


def mysql(url: str) -> Target:
    import pymysql

    config = ConnectionConfig.from_url(url)
    raw = pymysql.connect(host=config.host, port=config.port or 3306, user=config.user,
                          password=config.password or "", database=config.database,
                          autocommit=True)

    def load(rows: list[tuple[Any, ...]]) -> None:
        raw.begin()
        with raw.cursor() as cur:
            for i in range(0, len(rows), 1000):
                chunk = rows[i:i + 1000]
                values = ",".join(["(%s,%s,%s,%s,%s,%s)"] * len(chunk))
                cur.execute(f"INSERT INTO bench_raw VALUES {values}",
                            [v for r in chunk for v in r])
        raw.commit()

    def sql(statement: str) -> None:
        with raw.cursor() as cur:
            cur.execute(statement)

    return Target("mysql", url, sql, MY_DDL, load, config.database or "")


def load_and_change(target: Target, name: str, rows: int, task_rows: int, runs: int) -> None:
    data = [row(i) for i in range(rows)]
    events = [ChangeEvent(target.table.table, "r", (r[0],), r, OFFSET) for r in data]
    batches = tasks(events, task_rows)

    def through_target() -> int:
        target.reset()
        return target.apply(batches)

    def by_hand() -> int:
        target.reset()
        for i in range(0, len(data), task_rows):
            target.raw_load(data[i:i + task_rows])
        return len(data)

    splits = [arrow_rows(target.table, data[i:i + task_rows])
              for i in range(0, len(data), task_rows)]

    def loaded() -> int:
        target.reset()
        for split in splits:
            target.batch += 1
            assert target.dialect.load_snapshot(target.conn, target.table, split,
                                                f"{target.batch}-0")
        return len(data)

    fns = [through_target, by_hand]
    if target.dialect.implements("load_snapshot"):
        fns.append(loaded)
    figures = best_of_interleaved(runs, *fns)
    (wall_t, cpu_t, n), (wall_r, cpu_r, _) = figures[:2]
    raw_name = "COPY" if name == "postgres" else "multi-row INSERT"
    print(f"{name} load {n} rows in tasks of {task_rows}: apply_changes {n / wall_t:,.0f} rows/s "
          f"(client CPU {cpu_t:.2f} s), hand-written {raw_name} {n / wall_r:,.0f} rows/s "
          f"(client CPU {cpu_r:.2f} s): {wall_t / wall_r:.2f}x the hand-written time")
    if len(figures) > 2:
        wall_l, cpu_l, _ = figures[2]
        print(f"{name} load_snapshot (Arrow splits) {n / wall_l:,.0f} rows/s (client CPU "
              f"{cpu_l:.2f} s): {wall_r / wall_l:.2f}x the hand-written rate")
    target.reset()
    target.apply(batches)
    mixed = changes(target.table, rows, min(task_rows, rows))
    t0 = time.perf_counter()
    count = target.apply([mixed])
    took = time.perf_counter() - t0
    print(f"{name} changes: {count} (updates, deletes, key moves) in one task: "
          f"{count / took:,.0f} rows/s")


def sizes(target: Target, counts: list[int], runs: int) -> None:
    from sdk_postgres import _target

    if not hasattr(_target, "BULK_ROWS"):
        return
    saved = _target.BULK_ROWS
    try:
        for count in counts:
            batch = [ChangeEvent(target.table.table, "u", (i,), row(i, 2), OFFSET)
                     for i in range(count)]
            figures = []
            for threshold in (10**12, 0):  # executemany, then staging
                _target.BULK_ROWS = threshold
                best = float("inf")
                for _ in range(runs * 3):
                    t0 = time.perf_counter()
                    target.apply([batch])
                    best = min(best, time.perf_counter() - t0)
                figures.append(count / best)
            print(f"postgres batch of {count} upserts: executemany {figures[0]:,.0f} rows/s, "
                  f"staging {figures[1]:,.0f} rows/s")
    finally:
        _target.BULK_ROWS = saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--task-rows", type=int, default=65_536)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--targets", default="postgres,mysql")
    parser.add_argument("--sizes", default="10,50,100,200,500,1000,2000")
    parser.add_argument("--pg-url", default="postgresql://sdk_cdc:sdk_cdc@127.0.0.1:5432/sdk_test")
    parser.add_argument("--pg-admin-url", default="postgresql://postgres@127.0.0.1:5432/sdk_test")
    parser.add_argument("--mysql-url", default="mysql://root@127.0.0.1:3306/sdk_test")
    args = parser.parse_args()
    chosen = args.targets.split(",")
    if "postgres" in chosen:
        pg = postgres(args.pg_url, args.pg_admin_url)
        load_and_change(pg, "postgres", args.rows, args.task_rows, args.runs)
        if args.sizes:
            sizes(pg, [int(n) for n in args.sizes.split(",")], args.runs)
        pg.sql("DROP TABLE bench_apply")
        pg.sql("DROP TABLE bench_raw")
    if "mysql" in chosen:
        my = mysql(args.mysql_url)
        load_and_change(my, "mysql", args.rows, args.task_rows, args.runs)
        my.sql("DROP TABLE bench_apply")
        my.sql("DROP TABLE bench_raw")


if __name__ == "__main__":
    main()
