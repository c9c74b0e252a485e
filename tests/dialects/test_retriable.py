"""Passing faults: each dialect's ``is_retriable`` on its driver's errors (Oracle and SQL Server
on errors built as their drivers raise them; MySQL and PostgreSQL on real failures are in their
dialect tests), and the engine turning them into ``RetriableError``."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from sdk import ConfigurationError, RetriableError, get_dialect
from sdk.spark.sync import Retries


def test_oracle_codes() -> None:
    oracledb = pytest.importorskip("oracledb", reason="needs the oracle extra (oracledb)")

    oracle = get_dialect("oracle")
    assert oracle.is_retriable(oracledb.OperationalError(
        "DPY-4011: the database or network closed the connection"))
    assert oracle.is_retriable(oracledb.DatabaseError("ORA-03113: end-of-file on channel"))
    assert not oracle.is_retriable(oracledb.DatabaseError(
        "ORA-00942: table or view does not exist"))
    assert not oracle.is_retriable(ValueError("ORA-03113"))


def test_sqlserver_codes() -> None:
    pymssql = pytest.importorskip("pymssql", reason="needs the sqlserver extra (pymssql)")

    sqlserver = get_dialect("sqlserver")
    assert sqlserver.is_retriable(pymssql.OperationalError(
        20009, b"DB-Lib error message 20009, severity 9: Unable to connect"))
    assert sqlserver.is_retriable(pymssql.OperationalError(1205, b"deadlock victim"))
    assert sqlserver.is_retriable(pymssql.InterfaceError("Connection is closed."))
    assert not sqlserver.is_retriable(pymssql.OperationalError(208, b"Invalid object name"))


def test_sqlite_lock_and_the_engine_translation(tmp_path: Path) -> None:
    sqlite = get_dialect("sqlite")
    path = tmp_path / "db.sqlite"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    holder.execute("BEGIN EXCLUSIVE")
    other = sqlite3.connect(path, timeout=0.05)
    with pytest.raises(sqlite3.OperationalError) as locked:
        other.execute("INSERT INTO t VALUES (1)")
    assert sqlite.is_retriable(locked.value)
    with pytest.raises(RetriableError, match="sqlite: OperationalError: database is locked"), \
            sqlite.passing_faults():
        other.execute("INSERT INTO t VALUES (1)")
    holder.rollback()
    with pytest.raises(sqlite3.OperationalError) as missing:
        other.execute("SELECT * FROM no_such_table")
    assert not sqlite.is_retriable(missing.value)
    with pytest.raises(sqlite3.OperationalError), sqlite.passing_faults():
        other.execute("SELECT * FROM no_such_table")
    with pytest.raises(ConfigurationError), sqlite.passing_faults():
        raise ConfigurationError("an sdk error passes as it is")


def test_retries_back_off_and_give_up() -> None:
    import threading

    stop = threading.Event()
    retries = Retries(3.5)
    fault = RuntimeError("Job aborted: sdk.dialect.errors.RetriableError: mysql: lost connection")
    retries.wait_or_raise(fault, stop)  # waits 1 s
    retries.wait_or_raise(fault, stop)  # waits 2 s
    with pytest.raises(RetriableError, match=r"^mysql: lost connection \(gave up after 3 s "
                       r"of failure: --retry-seconds\)$"):  # the next wait (4 s) passes 3.5 s
        retries.wait_or_raise(fault, stop)
    retries.reset()
    with pytest.raises(ValueError):  # not a passing fault: at once
        retries.wait_or_raise(ValueError("bad SQL"), stop)
    stop.set()
    retries.reset()
    with pytest.raises(RetriableError):  # stopping: no retry
        retries.wait_or_raise(fault, stop)
    later = threading.Event()
    threading.Timer(0.2, later.set).start()
    retries.reset()
    started = time.monotonic()
    with pytest.raises(RetriableError):  # told to stop during the wait: no restart
        retries.wait_or_raise(fault, later)
    assert time.monotonic() - started < 0.9
