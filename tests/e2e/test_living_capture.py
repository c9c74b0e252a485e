"""``sdk sync`` following the tables as the source changes them, under a writer and SIGKILLs:
a table created while the log flows is snapshotted beside it (killed in the middle of that
snapshot) and then streamed, another one created later too, a table dropped on the source
leaves the capture with a record in the progress, and a whole table and the rows of another
meeting a condition are read again on request (killed in the middle of that too). The mirror
equals the source for every table still there, and (with the change log kept) nothing was
delivered twice."""

from __future__ import annotations

import collections
import contextlib
import os
import re
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from helpers.changes import assert_once
from helpers.kill import paced, sync_process
from helpers.servers import MYSQL_ADMIN_URL

from sdk import ConnectionConfig, SnapshotSplit, TableId, get_dialect
from sdk.spark import request_snapshot
from sdk.spark.state.engine_state import latest
from sdk.spark.state.statestore import StateStore

pytestmark = [pytest.mark.postgres, pytest.mark.spark, pytest.mark.slow]


COLUMNS = "id INT PRIMARY KEY, v VARCHAR(40), n INT"


@dataclass
class Source:
    """A source server the test writes to: its CDC URL, the schema its tables live in, and a
    way to run statements there as a role that may create tables the sync can capture."""

    dialect: str
    url: str
    schema: str
    run: Callable[[str], None]
    quote: Callable[[str], str]
    filled: Callable[[str, int], str]
    live: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def create(self, name: str, rows: int) -> None:
        """Create the table with its ``rows`` in one statement or transaction: the sync
        discovering it sees all of them or none, so it plans the same splits however the
        machine's timing falls."""
        self.run(self.filled(self.quote(name), rows))
        with self.lock:
            self.live.append(name)

    def drop(self, name: str) -> None:
        with self.lock:
            self.live.remove(name)
            self.run(f"DROP TABLE {self.quote(name)}")

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """A writer changing every live table, one round every 10 ms, until the block ends."""
        stop = threading.Event()

        def write() -> None:
            i = 0
            while not stop.is_set():
                i += 1
                self.write_once(i)
                time.sleep(0.01)

        thread = threading.Thread(target=write)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def write_once(self, i: int) -> None:
        with self.lock:
            for name in self.live:
                table = self.quote(name)
                self.run(f"UPDATE {table} SET v = 'w{i}', n = n + 1 WHERE id = {i * 7 % 5000}")
                self.run(f"DELETE FROM {table} WHERE id = {i * 13 % 5000}")
                self.run(f"INSERT INTO {table} (id, v, n) VALUES ({100000 + i}, 'new', {i})")
                self.run(f"UPDATE {table} SET id = {200000 + i} WHERE id = {i * 17 % 5000}")


@pytest.fixture(params=[pytest.param("mysql", marks=pytest.mark.mysql), "postgres"])
def source(request: pytest.FixtureRequest) -> Iterator[Source]:
    tag = uuid.uuid4().hex[:8]
    if request.param == "mysql":
        request.getfixturevalue("mysql_admin")  # skips without a server
        local = threading.local()  # a pymysql connection is one thread's

        def run_mysql(sql: str) -> None:
            if not hasattr(local, "conn"):
                local.conn = get_dialect("mysql").connect(
                    ConnectionConfig.from_url(MYSQL_ADMIN_URL))
            local.conn.query(sql)
        yield Source("mysql", request.getfixturevalue("mysql_url"), f"sdk_test.lc{tag}",
                     run_mysql, lambda n: f"`lc{tag}_{n}`",
                     lambda t, n: f"CREATE TABLE {t} ({COLUMNS}) SELECT seq AS id, "
                                  f"CONCAT('v', seq) AS v, seq % 97 AS n FROM seq_1_to_{n}")
        for name in "abcds":
            run_mysql(f"DROP TABLE IF EXISTS `lc{tag}_{name}`")
        return
    import psycopg

    admin = request.getfixturevalue("postgres_admin")
    cdc_url = request.getfixturevalue("postgres_url")
    schema = f"lc{tag}"
    admin.execute(f"CREATE SCHEMA {schema} AUTHORIZATION sdk_cdc")
    writer = psycopg.connect(cdc_url, autocommit=True)  # sdk_cdc owns what it creates
    sep = "&" if "?" in cdc_url else "?"
    url = f"{cdc_url}{sep}slot=sdk_s_{tag}&publication=sdk_p_{tag}"
    try:
        yield Source("postgres", url, schema, lambda sql: writer.execute(sql).close(),
                     lambda n: f"{schema}.{n}",
                     lambda t, n: f"BEGIN; CREATE TABLE {t} ({COLUMNS}); INSERT INTO {t} "
                                  f"SELECT g, 'v' || g, g % 97 FROM generate_series(1, {n}) g; "
                                  "COMMIT")
    finally:
        writer.close()
        admin.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                      "WHERE slot_name = %s", (f"sdk_s_{tag}",))
        admin.execute(f"DROP PUBLICATION IF EXISTS sdk_p_{tag}")
        admin.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture
def mirror_schema(postgres_admin: Any) -> Iterator[str]:
    """A PostgreSQL schema the sync mirrors into, dropped after the test however it ends."""
    name = f"lc_mirror_{uuid.uuid4().hex[:8]}"
    postgres_admin.execute(f"CREATE SCHEMA {name} AUTHORIZATION sdk_cdc")
    try:
        yield name
    finally:
        postgres_admin.execute(f"DROP SCHEMA {name} CASCADE")


def _table_line(name: str, state: str, at_least: int = 0) -> Callable[[str], bool]:
    pattern = re.compile(rf"\b{re.escape(name)}: (\d+)/\d+ splits, \d+ rows, {state}\b")

    def seen(line: str) -> bool:
        found = pattern.search(line)
        return found is not None and int(found.group(1)) >= at_least
    return seen


def _read_until(process: Any, *moments: Callable[[str], bool], timeout: float = 240) -> None:
    """Read the sync's progress lines until every one of ``moments`` was seen (in any order)."""
    assert process.stdout is not None
    waiting = list(moments)
    deadline = time.monotonic() + timeout
    last: collections.deque[str] = collections.deque(maxlen=6)
    for line in process.stdout:
        last.append(line.rstrip())
        waiting = [m for m in waiting if not m(line)]
        if not waiting:
            return
        if time.monotonic() > deadline:
            break
    os.killpg(process.pid, signal.SIGKILL)
    shown = "\n".join(last)
    raise AssertionError(f"the sync did not get there (exit {process.wait()}); its last lines:\n"
                         f"{shown}")


def _kill(process: Any) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _rows(dialect_name: str, url: str, table: TableId) -> dict[Any, tuple[Any, ...]]:
    dialect = get_dialect(dialect_name)
    conn = dialect.connect(ConnectionConfig.from_url(url))
    try:
        schema = dialect.describe_table(conn, table)
        return {r[0]: tuple(r) for b in dialect.read_range(
            conn, schema, SnapshotSplit(table, 0, None, None), 10000) for r in b}
    finally:
        conn.close()


@pytest.mark.timeout(600)  # five syncs, each starting Spark, and paced snapshots
def test_tables_created_and_dropped_while_streaming_are_followed_exactly_once(
            source: Source, mirror_schema: str, postgres_url: str, tmp_path: Path) -> None:
    prefix = source.schema.rsplit(".", 1)[-1]
    names = {n: f"{prefix}_{n}" if source.dialect == "mysql" else n for n in "abcd"}
    shown = {n: f"{source.schema}_{n}" if source.dialect == "mysql" else f"{source.schema}.{n}"
             for n in "abcd"}
    source.create("a", 3000)
    source.create("b", 500)
    target_schema = mirror_schema
    patterns = f"{source.schema}_*" if source.dialect == "mysql" else f"{source.schema}.*"
    chained = source.dialect == "postgres"  # the mirror written by the source's tasks
    args = ["sync", "--source", source.url, "--target", postgres_url, "--tables", patterns,
            "--target-schema", target_schema, "--checkpoint", str(tmp_path / "ck"),
            "--option", "snapshot.split.size=1000", "--option", "snapshot.splits-per-batch=1",
            "--option", "tables.discovery-interval.ms=300",
            *paced(16000)]  # c's 8 splits over ~4 s: progress lines show it in the middle
    if not chained:
        args += ["--changes", str(tmp_path / "changes")]
    state_dir = str(tmp_path / "ck" / "state")
    with source.writing():
        first = sync_process([*args, "--until", "never"])
        _read_until(first, lambda line: "phase log" in line)
        source.create("c", 8000)  # 8 splits, each its own batch between log batches
        _read_until(first, _table_line(shown["c"], "snapshotting", at_least=2))
        _kill(first)  # in the middle of the new table's snapshot
        second = sync_process([*args, "--until", "never"])
        _read_until(second, _table_line(shown["c"], "streaming"))
        source.drop("b")
        source.create("d", 200)
        _read_until(second, _table_line(shown["b"], "dropped"),
                    _table_line(shown["d"], "streaming"))
        request_snapshot(state_dir, shown["c"])  # the whole table, read again
        request_snapshot(state_dir, shown["a"], "n % 2 = 0")  # the rows meeting a condition
        _read_until(second, _table_line(shown["c"], "re-snapshotting", at_least=2),
                    _table_line(shown["a"], "re-snapshotting"))
        _kill(second)  # in the middle of reading them again
        third = sync_process([*args, "--until", "never"])
        _read_until(third, _table_line(shown["c"], "streaming"),
                    _table_line(shown["a"], "streaming"))
        _kill(third)  # in the log phase
    done = sync_process([*args, "--until", "caught-up"])
    assert done.wait(timeout=600) == 0
    state = latest(StateStore(state_dir))
    assert state is not None and len(state.sync.served) == 2 and not state.sync.rereads
    for n in "acd":
        source_table = TableId(*shown[n].split(".", 1)) if source.dialect == "postgres" \
            else TableId("sdk_test", names[n])
        expected = _rows(source.dialect, source.url, source_table)
        got = _rows("postgres", postgres_url, TableId(target_schema, source_table.name))
        assert got == expected, f"table {n}"
    if not chained:
        snapshot_rows, changes = assert_once(tmp_path / "changes", source.dialect)
        assert snapshot_rows >= 3000 + 500 + 8000 + 200 + 8000 + 1000 and changes > 0


DDL = {
    "mysql": ["ALTER TABLE {t} ADD COLUMN extra INT DEFAULT 7",
              "ALTER TABLE {t} MODIFY COLUMN n BIGINT",
              "ALTER TABLE {t} MODIFY COLUMN v VARCHAR(200)",
              "ALTER TABLE {t} ADD COLUMN amount DECIMAL(10,2) DEFAULT 1.25 AFTER id",
              "ALTER TABLE {t} MODIFY COLUMN amount DECIMAL(14,2) DEFAULT 1.25",
              "ALTER TABLE {t} RENAME COLUMN extra TO extra2",
              "ALTER TABLE {t} DROP COLUMN extra2"],
    "postgres": ["ALTER TABLE {t} ADD COLUMN extra INT DEFAULT 7",
                 "ALTER TABLE {t} ALTER COLUMN n TYPE BIGINT",
                 "ALTER TABLE {t} ALTER COLUMN v TYPE VARCHAR(200)",
                 "ALTER TABLE {t} ADD COLUMN amount NUMERIC(10,2) DEFAULT 1.25",
                 "ALTER TABLE {t} ALTER COLUMN amount TYPE NUMERIC(14,2)",
                 "ALTER TABLE {t} RENAME COLUMN extra TO extra2",
                 "ALTER TABLE {t} DROP COLUMN extra2"],
}
NARROWING = {"mysql": "ALTER TABLE {t} MODIFY COLUMN n SMALLINT",
             "postgres": "ALTER TABLE {t} ALTER COLUMN n TYPE SMALLINT"}


def _by_name(dialect_name: str, url: str, table: TableId) -> dict[Any, dict[str, Any]]:
    """Rows by key as column name -> value (the mirror may order its columns otherwise)."""
    dialect = get_dialect(dialect_name)
    conn = dialect.connect(ConnectionConfig.from_url(url))
    try:
        schema = dialect.describe_table(conn, table)
    finally:
        conn.close()
    return {key: dict(zip(schema.column_names, row, strict=True))
            for key, row in _rows(dialect_name, url, table).items()}


def _version_at_least(version: int) -> Callable[[str], bool]:
    def seen(line: str) -> bool:
        found = re.findall(r"schema version (\d+)", line)
        return bool(found) and max(map(int, found)) >= version
    return seen


def test_schema_changes_are_followed_while_writers_run(
        source: Source, mirror_schema: str, postgres_url: str, tmp_path: Path) -> None:
    """Columns added (with defaults, in the middle too), widened, renamed and dropped while
    a writer changes the table, SIGKILLs between them: the mirror ends with the source's
    columns and values; a narrowing stops the sync with an error naming it."""
    source.create("s", 3000)
    table = TableId("sdk_test", f"{source.schema.rsplit('.', 1)[-1]}_s") \
        if source.dialect == "mysql" else TableId(source.schema, "s")
    shown = str(table)
    target_schema = mirror_schema
    chained = source.dialect == "postgres"
    args = ["sync", "--source", source.url, "--target", postgres_url, "--tables", shown,
            "--target-schema", target_schema, "--checkpoint", str(tmp_path / "ck"),
            "--option", "snapshot.split.size=1000", "--option", "snapshot.splits-per-batch=1"]
    if not chained:
        args += ["--changes", str(tmp_path / "changes"), "--option", "envelope=true"]
    ddl = [d.format(t=source.quote("s")) for d in DDL[source.dialect]]
    with source.writing():
        first = sync_process([*args, "--until", "never"])
        _read_until(first, lambda line: "phase log" in line)
        for statement in ddl[:3]:
            source.run(statement)
            time.sleep(0.3)  # the writer's changes between them: a version each
        _read_until(first, _version_at_least(3))
        _kill(first)
        for statement in ddl[3:5]:
            source.run(statement)
            time.sleep(0.3)
        second = sync_process([*args, "--until", "never"])
        _read_until(second, _version_at_least(5))
        for statement in ddl[5:]:
            source.run(statement)
            time.sleep(0.3)
        _read_until(second, _version_at_least(7))
        _kill(second)
    done = sync_process([*args, "--until", "caught-up"])
    assert done.wait(timeout=600) == 0
    expected = _by_name(source.dialect, source.url, table)
    got = _by_name("postgres", postgres_url, TableId(target_schema, table.name))
    assert set(next(iter(got.values()))) == {"id", "v", "n", "amount"}
    assert got == expected
    if not chained:
        assert_once(tmp_path / "changes", source.dialect, reads_again=True)
    source.run(NARROWING[source.dialect].format(t=source.quote("s")))
    # a change in the new shape, which the log shows it by: a new row (the writer may have
    # deleted or moved every older one it could name)
    source.run(f"INSERT INTO {source.quote('s')} (id, v, n) VALUES (900000, 'narrowed', 1)")
    refused = sync_process([*args, "--until", "caught-up"])
    assert refused.wait(timeout=600) == 2
