"""``sdk verify`` on a running ``sdk sync`` under a writer (inserts, updates, key changes,
deletes), MariaDB -> PostgreSQL and PostgreSQL -> SQLite: five runs on a correct mirror find
nothing; then rows changed, deleted and inserted in the target behind the sync's back, a
column value altered, a whole range deleted in the target, and (MariaDB) a source row changed
with the binlog off are each found by key and kind; ``--repair`` mends them and the next
verify is clean. Also: no sync running is exit 2 (``--static`` compares anyway)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers.kill import sync_process
from helpers.servers import with_query

from sdk.app.cli import main

pytestmark = [pytest.mark.postgres, pytest.mark.spark, pytest.mark.slow]

ROWS = 6000
WRITER_KEYS = 2000
"""The writer changes keys below this (and inserts far above): the rows damaged on purpose
lie between, where only the damage changes them."""


@dataclass
class Pair:
    """A source table, its mirror, and how to write to each behind the sync's back."""

    source_url: str
    target_url: str
    table: str
    """The captured table as ``--tables`` names it."""
    source: Callable[[str], None]
    target: Callable[[str], None]
    source_table: str
    target_table: str
    target_schema: str | None
    unlogged: Callable[[str], None] | None
    """Runs a statement on the source with its log off (MariaDB's sql_log_bin=0)."""


def _fill(run: Callable[[str], None], table: str, decimal: str, stamp: str) -> None:
    run(f"CREATE TABLE {table} (id INT PRIMARY KEY, name VARCHAR(40), amount {decimal}, "
        f"at {stamp}, n INT)")
    for start in range(1, ROWS + 1, 2000):
        values = ", ".join(f"({i}, 'r{i}', {i / 7:.2f}, '2026-01-01 10:00:00.{i % 1000:06d}', "
                           f"{i % 97})" for i in range(start, min(start + 2000, ROWS + 1)))
        run(f"INSERT INTO {table} VALUES {values}")


@pytest.fixture
def mariadb_to_postgres(mysql_admin: Any, mysql_url: str, postgres_admin: Any,
                        postgres_url: str) -> Iterator[Pair]:
    import psycopg

    tag = uuid.uuid4().hex[:8]
    name, schema = f"vf{tag}", f"vf_mirror_{tag}"
    local = threading.local()

    def run_mysql(sql: str) -> None:
        import pymysql

        if not hasattr(local, "conn"):
            local.conn = pymysql.connect(host=mysql_admin.host, port=mysql_admin.port,
                                         user=mysql_admin.user, password=mysql_admin.password,
                                         database="sdk_test", autocommit=True)
        with local.conn.cursor() as cur:
            cur.execute(sql)

    def unlogged(sql: str) -> None:
        run_mysql("SET SESSION sql_log_bin = 0")
        try:
            run_mysql(sql)
        finally:
            run_mysql("SET SESSION sql_log_bin = 1")

    _fill(run_mysql, f"`{name}`", "DECIMAL(12,2)", "DATETIME(6)")
    postgres_admin.execute(f"CREATE SCHEMA {schema} AUTHORIZATION sdk_cdc")
    target = psycopg.connect(postgres_url, autocommit=True)
    try:
        yield Pair(mysql_url, postgres_url, f"sdk_test.{name}", run_mysql,
                   lambda sql: target.execute(sql).close(), name, f"{schema}.{name}", schema,
                   unlogged)
    finally:
        target.close()
        postgres_admin.execute(f"DROP SCHEMA {schema} CASCADE")
        run_mysql(f"DROP TABLE IF EXISTS `{name}`")


@pytest.fixture
def postgres_to_sqlite(postgres_admin: Any, postgres_url: str, tmp_path: Path
                       ) -> Iterator[Pair]:
    import psycopg

    tag = uuid.uuid4().hex[:8]
    schema = f"vf{tag}"
    postgres_admin.execute(f"CREATE SCHEMA {schema} AUTHORIZATION sdk_cdc")
    writer = psycopg.connect(postgres_url, autocommit=True)
    lock = threading.Lock()

    def run_pg(sql: str) -> None:
        with lock:
            writer.execute(sql).close()

    _fill(run_pg, f"{schema}.t", "NUMERIC(12,2)", "TIMESTAMP(6)")
    mirror = tmp_path / "mirror.db"

    def run_sqlite(sql: str) -> None:
        with contextlib.closing(sqlite3.connect(mirror, timeout=30)) as conn, conn:
            conn.execute(sql)

    try:
        yield Pair(with_query(postgres_url, slot=f"sdk_s_{tag}", publication=f"sdk_p_{tag}"),
                   f"sqlite:///{mirror}", f"{schema}.t", run_pg, run_sqlite, f"{schema}.t",
                   "t", None, None)
    finally:
        writer.close()
        postgres_admin.execute("SELECT pg_drop_replication_slot(slot_name) FROM "
                               "pg_replication_slots WHERE slot_name = %s", (f"sdk_s_{tag}",))
        postgres_admin.execute(f"DROP PUBLICATION IF EXISTS sdk_p_{tag}")
        postgres_admin.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture(params=["mariadb_to_postgres", "postgres_to_sqlite"])
def pair(request: pytest.FixtureRequest) -> Pair:
    if request.param == "mariadb_to_postgres":
        request.applymarker(pytest.mark.mysql)
    value: Pair = request.getfixturevalue(request.param)
    return value


@contextlib.contextmanager
def writing(pair: Pair) -> Iterator[None]:
    """A writer inserting, updating, changing keys and deleting below :data:`WRITER_KEYS`."""
    stop = threading.Event()
    table = pair.source_table

    def write() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            pair.source(f"UPDATE {table} SET name = 'w{i}', n = n + 1, amount = amount + 1 "
                        f"WHERE id = {i * 7 % WRITER_KEYS}")
            pair.source(f"DELETE FROM {table} WHERE id = {i * 13 % WRITER_KEYS}")
            pair.source(f"INSERT INTO {table} VALUES ({100000 + i}, 'new', 1.5, "
                        f"'2026-02-02 00:00:00', {i})")
            pair.source(f"UPDATE {table} SET id = {200000 + i} WHERE id = {i * 17 % WRITER_KEYS}")
            time.sleep(0.01)

    thread = threading.Thread(target=write)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def verify(pair: Pair, checkpoint: Path, report: Path, *more: str) -> tuple[int, dict[str, Any]]:
    """Run ``sdk verify``; its exit code and JSON report."""
    args = ["verify", "--source", pair.source_url, "--target", pair.target_url,
            "--checkpoint", str(checkpoint), "--report", str(report), "--chunk-rows", "2500",
            *more]
    if pair.target_schema:
        args += ["--target-schema", pair.target_schema]
    code = main(args)
    data = json.loads(report.read_text()) if report.exists() else {}
    return code, data


def found(data: dict[str, Any]) -> set[tuple[int, str]]:
    return {(d["key"][0], d["kind"]) for d in data["rows_differing"]}


def _wait_for_log_phase(process: Any) -> None:
    assert process.stdout is not None
    deadline = time.monotonic() + 240
    for line in process.stdout:
        if "phase log" in line and "caught up" in line:
            break
        assert time.monotonic() < deadline, "the sync did not catch up in 240 s"
    else:
        raise AssertionError(f"the sync ended (exit {process.wait()})")
    threading.Thread(target=lambda: [None for _ in process.stdout], daemon=True).start()


def test_verify_finds_every_damage_under_a_writer_and_repairs_it(
        pair: Pair, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = tmp_path / "ck"
    args = ["sync", "--source", pair.source_url, "--target", pair.target_url, "--tables",
            pair.table, "--checkpoint", str(checkpoint), "--option", "snapshot.split.size=2000"]
    if pair.target_schema:
        args += ["--target-schema", pair.target_schema]
    process = sync_process(args)
    try:
        _wait_for_log_phase(process)
        with writing(pair):
            for run in range(5):
                code, data = verify(pair, checkpoint, tmp_path / f"clean-{run}.json")
                assert (code, data["rows_differing"], data["rows_unsettled"]) == (0, [], []), \
                    data
                assert data["rows"] >= ROWS - WRITER_KEYS
            damage = {(3001, "changed"), (3002, "changed"), (3003, "missing"),
                      (900001, "extra"), *((k, "missing") for k in range(4000, 4100))}
            target = pair.target_table
            pair.target(f"UPDATE {target} SET name = 'damaged' WHERE id = 3001")
            pair.target(f"UPDATE {target} SET amount = amount + 0.01 WHERE id = 3002")
            pair.target(f"DELETE FROM {target} WHERE id = 3003")
            pair.target(f"INSERT INTO {target} VALUES (900001, 'stray', 1, "
                        "'2026-03-03 00:00:00', 1)")
            pair.target(f"DELETE FROM {target} WHERE id >= 4000 AND id < 4100")
            if pair.unlogged is not None:
                pair.unlogged(f"UPDATE {pair.source_table} SET n = -1 WHERE id = 3500")
                damage.add((3500, "changed"))
            code, data = verify(pair, checkpoint, tmp_path / "damaged.json")
            assert code == 1 and found(data) == damage, data["rows_differing"][:10]
            by_key = {d["key"][0]: d for d in data["rows_differing"]}
            assert by_key[3001]["target"]["name"] == "damaged"
            assert by_key[3001]["source"]["name"] == "r3001"
            capsys.readouterr()
            assert main(["status", "--checkpoint", str(checkpoint), "--json"]) == 0
            status = json.loads(capsys.readouterr().out)
            assert status["verify"]["differing"] == len(damage)
            assert status["verify"]["state"] == "different"
            code, data = verify(pair, checkpoint, tmp_path / "repair.json", "--repair")
            assert code == 0 and data["repaired"] and data["rows_differing"] == [], data
            code, data = verify(pair, checkpoint, tmp_path / "after.json")
            assert (code, data["rows_differing"]) == (0, []), data
        # the writer stopped: once a verify has waited for the sync, the target holds it all;
        # this one takes its settings from the sync's YAML file
        config = tmp_path / "sync.yaml"
        config.write_text(json.dumps({"source": pair.source_url, "target": pair.target_url,
                                      "checkpoint": str(checkpoint), "tables": pair.table,
                                      "target.schema": pair.target_schema}))
        quiet = tmp_path / "quiet.json"
        assert main(["verify", "--config", str(config), "--report", str(quiet)]) == 0
        data = json.loads(quiet.read_text())
        assert data["rows_differing"] == [] and data["rows"] >= ROWS - WRITER_KEYS, data
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    code, _ = verify(pair, checkpoint, tmp_path / "stopped.json")
    assert code == 2  # no sync running
    code, data = verify(pair, checkpoint, tmp_path / "static.json", "--static")
    assert (code, data["rows_differing"]) == (0, []), data
