"""A reader of the target never sees half a source transaction: a writer moves money between
two rows of ``accounts`` (each ``version + 1``) and adds a row to ``transfers`` in every
transaction, so in every state the source has, ``SUM(balance)`` is constant and
``SUM(version) = 2 * COUNT(transfers)``. A reader checks both in one ``REPEATABLE READ``
transaction of the PostgreSQL target every few milliseconds while ``sdk sync --until never``
streams transactions of 1 and of 50 transfers and one larger than ``log.batch.changes``."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import random
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers.kill import sync_process
from helpers.servers import MYSQL_ADMIN_URL

from sdk import Offset, get_dialect
from sdk.app.cli import main

pytestmark = [pytest.mark.postgres, pytest.mark.spark, pytest.mark.slow]

ACCOUNTS = 200
BALANCE = 1_000
BIG = 1_500
"""Transfers in the large transaction: 4,500 changes, over the sync's log.batch.changes."""


@dataclass
class Bank:
    """The two source tables, as the sync's ``--tables`` and the mirror name them, and a way
    to run one source transaction of statements."""

    url: str
    tables: str
    accounts: str
    transfers: str
    mirrored: tuple[str, str]
    transaction: Callable[[list[str]], None]
    count: Callable[[], int]


def _statements(bank: Bank, rng: random.Random, first: int, n: int) -> list[str]:
    out = []
    for i in range(first, first + n):
        src, dst = rng.sample(range(ACCOUNTS), 2)
        amount = rng.randrange(1, 50)
        out += [f"UPDATE {bank.accounts} SET balance = balance - {amount}, version = version + 1 "
                f"WHERE id = {src}",
                f"UPDATE {bank.accounts} SET balance = balance + {amount}, version = version + 1 "
                f"WHERE id = {dst}",
                f"INSERT INTO {bank.transfers} VALUES ({i}, {src}, {dst}, {amount})"]
    return out


def _bulk(bank: Bank, first: int, rounds: int) -> list[str]:
    """One transaction of ``300 * rounds`` changes in ``2 * rounds`` statements: each round
    moves one unit from every odd account to an even one (``version + 1`` each: 200 updates)
    and records 100 transfers."""
    mysql = bank.url.startswith("mysql")
    out = []
    for r in range(rounds):
        at = first + 100 * r
        series = f"seq_{at}_to_{at + 99}" if mysql else \
            f"generate_series({at}, {at + 99}) AS g(seq)"
        out += [f"UPDATE {bank.accounts} SET balance = balance + CASE WHEN id % 2 = 0 THEN 1 "
                "ELSE -1 END, version = version + 1",
                f"INSERT INTO {bank.transfers} SELECT seq, 1, 0, 1 FROM {series}"]
    return out


@pytest.fixture
def bank(request: pytest.FixtureRequest, postgres_admin: Any) -> Iterator[Bank]:
    """The bank on the source ``request.param`` names (``mysql`` or ``postgres``)."""
    tag = uuid.uuid4().hex[:8]
    accounts_ddl = "(id INT PRIMARY KEY, balance BIGINT NOT NULL, version INT NOT NULL)"
    transfers_ddl = "(id BIGINT PRIMARY KEY, src INT NOT NULL, dst INT NOT NULL, amount INT)"
    if request.param == "mysql":
        import pymysql

        request.getfixturevalue("mysql_admin")  # skips without a server
        from sdk import ConnectionConfig

        config = ConnectionConfig.from_url(MYSQL_ADMIN_URL)
        conn = pymysql.connect(host=config.host, port=config.port or 3306, user=config.user,
                               password=config.password or "", database="sdk_test")
        lock = threading.Lock()

        def run(statements: list[str]) -> None:
            with lock, conn.cursor() as cur:
                conn.begin()
                for sql in statements:
                    cur.execute(sql)
                conn.commit()

        def count() -> int:
            with lock, conn.cursor() as cur:
                conn.commit()  # a fresh read view
                cur.execute(f"SELECT COUNT(*) FROM sdk_test.bk{tag}_transfers")
                return int(cur.fetchone()[0])

        run([f"CREATE TABLE sdk_test.bk{tag}_accounts {accounts_ddl}",
             f"CREATE TABLE sdk_test.bk{tag}_transfers {transfers_ddl}",
             f"INSERT INTO sdk_test.bk{tag}_accounts SELECT seq, {BALANCE}, 0 "
             f"FROM seq_0_to_{ACCOUNTS - 1}"])
        try:
            yield Bank(request.getfixturevalue("mysql_url"), f"sdk_test.bk{tag}_*",
                       f"sdk_test.bk{tag}_accounts", f"sdk_test.bk{tag}_transfers",
                       (f"bk{tag}_accounts", f"bk{tag}_transfers"), run, count)
        finally:
            run([f"DROP TABLE IF EXISTS sdk_test.bk{tag}_accounts, sdk_test.bk{tag}_transfers"])
            conn.close()
        return
    import psycopg

    cdc_url = request.getfixturevalue("postgres_url")
    schema = f"bk{tag}"
    postgres_admin.execute(f"CREATE SCHEMA {schema} AUTHORIZATION sdk_cdc")
    writer = psycopg.connect(cdc_url, autocommit=True)

    def run_pg(statements: list[str]) -> None:
        with writer.transaction():
            for sql in statements:
                writer.execute(sql)

    def count_pg() -> int:
        row = writer.execute(f"SELECT COUNT(*) FROM {schema}.transfers").fetchone()
        assert row is not None
        return int(row[0])

    run_pg([f"CREATE TABLE {schema}.accounts {accounts_ddl}",
            f"CREATE TABLE {schema}.transfers {transfers_ddl}",
            f"INSERT INTO {schema}.accounts SELECT g, {BALANCE}, 0 "
            f"FROM generate_series(0, {ACCOUNTS - 1}) g"])
    sep = "&" if "?" in cdc_url else "?"
    try:
        yield Bank(f"{cdc_url}{sep}slot={schema}&publication={schema}", f"{schema}.*",
                   f"{schema}.accounts", f"{schema}.transfers", ("accounts", "transfers"),
                   run_pg, count_pg)
    finally:
        writer.close()
        postgres_admin.execute("SELECT pg_drop_replication_slot(slot_name) FROM "
                               "pg_replication_slots WHERE slot_name = %s", (schema,))
        postgres_admin.execute(f"DROP PUBLICATION IF EXISTS {schema}")
        postgres_admin.execute(f"DROP SCHEMA {schema} CASCADE")


_ONE_AT_A_TIME = threading.Lock()


@dataclass
class Mirror:
    """Where the sync writes the bank (``--target``, ``--target-schema``), the schema prefix
    of its tables there, and one row of a statement run there (None before the tables)."""

    args: list[str]
    prefix: str
    row: Callable[[str], tuple[Any, ...] | None]

    def read(self) -> tuple[int, int, int]:
        """The invariant's one statement (one consistent read): SUM(balance), SUM(version),
        COUNT(transfers)."""
        with _ONE_AT_A_TIME:  # the reader's thread and the test's share the connection
            row = self.row(self.sql)
        return (0, 0, 0) if row is None else (int(row[0] or 0), int(row[1] or 0),
                                              int(row[2] or 0))

    sql: str = ""

    def position(self) -> tuple[str, dt.datetime] | None:
        """The source position the target says it reflects and the commit time of its last
        transaction (its ``_sdk_position`` row)."""
        with _ONE_AT_A_TIME:
            row = self.row(f"SELECT source_position, source_commit FROM "
                           f"{self.prefix}_sdk_position")
        if row is None:
            return None
        commit = row[1] if isinstance(row[1], dt.datetime) else \
            dt.datetime.fromisoformat(str(row[1]))
        return str(row[0]), commit if commit.tzinfo else commit.replace(tzinfo=dt.UTC)


@pytest.fixture
def mirror(request: pytest.FixtureRequest, bank: Bank, postgres_admin: Any, postgres_url: str,
           tmp_path: Path) -> Iterator[Mirror]:
    """The target ``request.param`` names (``postgres``, ``mysql``, ``sqlite``)."""
    accounts, transfers = bank.mirrored
    sql = ("SELECT (SELECT SUM(balance) FROM {s}{a}), (SELECT SUM(version) FROM {s}{a}), "
           "(SELECT COUNT(*) FROM {s}{t})")
    if request.param == "postgres":
        import psycopg

        name = f"bk_mirror_{uuid.uuid4().hex[:8]}"
        postgres_admin.execute(f"CREATE SCHEMA {name} AUTHORIZATION sdk_cdc")
        conn = psycopg.connect(postgres_url, autocommit=True)

        def row_pg(query: str) -> tuple[Any, ...] | None:
            with contextlib.suppress(psycopg.errors.UndefinedTable):
                return conn.execute(query).fetchone()
            return None
        try:
            yield Mirror(["--target", postgres_url, "--target-schema", name], f"{name}.", row_pg,
                         sql.format(s=f"{name}.", a=accounts, t=transfers))
        finally:
            conn.close()
            postgres_admin.execute(f"DROP SCHEMA {name} CASCADE")
        return
    if request.param == "sqlite":
        import sqlite3

        path = tmp_path / "mirror.db"
        lite = sqlite3.connect(path, timeout=30, check_same_thread=False)

        def row_lite(query: str) -> tuple[Any, ...] | None:
            with contextlib.suppress(sqlite3.OperationalError):  # no such table, yet
                return tuple(lite.execute(query).fetchone())
            return None
        yield Mirror(["--target", f"sqlite:///{path}"], "", row_lite,
                     sql.format(s="", a=accounts, t=transfers))
        lite.close()
        return
    import pymysql

    from sdk import ConnectionConfig

    config = ConnectionConfig.from_url(MYSQL_ADMIN_URL)
    db = f"bk_mirror_{uuid.uuid4().hex[:8]}"
    my = pymysql.connect(host=config.host, port=config.port or 3306, user=config.user,
                         password=config.password or "", autocommit=True)

    def row_my(query: str) -> tuple[Any, ...] | None:
        with my.cursor() as cur:
            try:
                cur.execute(query)
            except pymysql.err.ProgrammingError:  # no such table, yet
                return None
            return tuple(cur.fetchone())
    try:
        yield Mirror(["--target", MYSQL_ADMIN_URL, "--target-schema", db], f"{db}.", row_my,
                     sql.format(s=f"{db}.", a=accounts, t=transfers))
    finally:
        with my.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {db}")
        my.close()


class Reader:
    """Reads the mirror's invariant (one statement: one consistent read) every few ms on a
    thread, keeping each reading that breaks it."""

    def __init__(self, read: Callable[[], tuple[int, int, int]]) -> None:
        self.read = read
        self.reads = 0
        self.torn: list[tuple[int, int, int]] = []
        self.seen: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        while not self._stop.is_set():
            balance, versions, transfers = self.read()
            self.reads += 1
            self.seen.add(transfers)
            if balance != ACCOUNTS * BALANCE or versions != 2 * transfers:
                self.torn.append((balance, versions, transfers))
            time.sleep(random.uniform(0.005, 0.02))

    @contextlib.contextmanager
    def reading(self) -> Iterator[Reader]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()


def _lines(process: Any) -> list[str]:
    """The sync's progress lines, collected on a thread as they come."""
    lines: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.rstrip())
    threading.Thread(target=read, daemon=True).start()
    return lines


def _wait(what: str, done: Callable[[], bool], lines: list[str], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, f"no {what} after {seconds} s: " + \
            "\n".join(lines[-6:])
        time.sleep(0.2)


def _until_mirrored(process: Any, lines: list[str], mirror: Mirror, transfers: int,
                    seconds: float) -> None:
    """Wait until the mirror holds ``transfers`` transfers (the running sync's lines shown if
    it ends), and a little more for the reader."""
    def mirrored() -> bool:
        assert process.poll() is None, "\n".join(lines[-10:])
        return mirror.read()[2] == transfers
    _wait(f"mirror of {transfers} transfers", mirrored, lines, seconds)
    time.sleep(0.5)


@pytest.mark.timeout(420)
@pytest.mark.parametrize("bank, mirror", [
    pytest.param("mysql", "postgres", marks=pytest.mark.mysql),
    ("postgres", "postgres"), ("postgres", "sqlite"),
    pytest.param("mysql", "mysql", marks=pytest.mark.mysql)], indirect=True)
def test_a_reader_of_the_mirror_never_sees_half_a_source_transaction(
        bank: Bank, mirror: Mirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    process = sync_process(
        ["sync", "--source", bank.url, *mirror.args, "--tables", bank.tables, "--checkpoint",
         str(tmp_path / "ck"), "--until", "never", "--option", "log.batch.changes=2000"])
    lines = _lines(process)
    try:
        def snapshot_done() -> bool:
            assert process.poll() is None, "\n".join(lines[-10:])
            return mirror.read()[0] == ACCOUNTS * BALANCE and \
                any("caught up" in line for line in lines)
        _wait("snapshot", snapshot_done, lines, 180)

        rng = random.Random(7)
        with Reader(mirror.read).reading() as reader:
            number = 0
            for round_ in range(60):
                size = BIG if round_ == 30 else 50 if round_ % 5 == 0 else 1
                bank.transaction(_statements(bank, rng, number, size))
                number += size
                time.sleep(0.1)
            _until_mirrored(process, lines, mirror, bank.count(), 180)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(120)

    _status_agrees(bank, mirror, tmp_path / "ck", capsys)
    print(f"{reader.reads} reads of the mirror, {len(reader.seen)} states, torn: "
          f"{reader.torn[:5]}")
    assert reader.reads >= 200 and len(reader.seen) >= 5, (reader.reads, len(reader.seen))
    assert not reader.torn, f"{len(reader.torn)} of {reader.reads} reads saw half a " \
        f"transaction: (SUM(balance), SUM(version), COUNT(transfers)) = {reader.torn[:5]}"

def _status_agrees(bank: Bank, mirror: Mirror, checkpoint: Path,
                   capsys: pytest.CaptureFixture[str]) -> None:
    """``sdk status`` of a sync that stopped names the source commit the target's
    ``_sdk_position`` row records, says since when the target was consistent, and reports a
    log position no later than the row's (as of its last report)."""
    capsys.readouterr()
    assert main(["status", "--checkpoint", str(checkpoint), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert main(["status", "--checkpoint", str(checkpoint)]) == 0
    text = capsys.readouterr().out
    marked = mirror.position()
    assert marked is not None and status.get("position") is not None, status
    position, commit = marked
    assert status.get("source_commit") is not None, status
    assert abs(status["source_commit"] - commit.timestamp()) < 1e-3, (status, marked)
    assert status.get("consistent_since") is not None, status
    assert commit.strftime("target as of source commit %Y-%m-%d %H:%M:%S") in text, text
    at, reported = (Offset.from_json(json.loads(p)) for p in (position, status["position"]))
    assert get_dialect(bank.url.split(":", 1)[0].replace("postgresql", "postgres")
                       ).compare_offset(at, reported) >= 0, (position, status["position"])


BULK_ROUNDS = 667
"""Rounds of :func:`_bulk` in the large transaction: 200,100 changes."""


@pytest.mark.timeout(600)
@pytest.mark.exclusive  # 200k changes and their WAL: others' timing (a PostgreSQL head) shifts
@pytest.mark.parametrize("bank, mirror", [
    pytest.param("mysql", "postgres", marks=pytest.mark.mysql), ("postgres", "postgres")],
    indirect=True)
def test_a_sync_killed_while_it_applies_a_large_transaction_shows_the_old_state_or_the_new(
        bank: Bank, mirror: Mirror, tmp_path: Path, postgres_admin: Any,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A transaction of 200k changes; the sync SIGKILLed twice while its target transaction
    writes (seen in ``pg_stat_activity``), started again each time: a reader sees the bank
    before the transaction or after it, never between, and the mirror ends with it."""
    args = ["sync", "--source", bank.url, *mirror.args, "--tables", bank.tables,
            "--checkpoint", str(tmp_path / "ck"), "--until", "never"]
    process = sync_process(args)
    lines = _lines(process)

    def writing() -> bool:  # the sync's target transaction has written (it holds an xid)
        assert process.poll() is None, "\n".join(lines[-10:])
        return bool(postgres_admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = 'sdk_cdc' AND "
            "backend_type = 'client backend' AND backend_xid IS NOT NULL").fetchone()[0])
    try:
        _wait("snapshot", lambda: mirror.read()[0] == ACCOUNTS * BALANCE and
              any("caught up" in line for line in lines), lines, 180)
        # a transfer streamed first: a table the snapshot found empty and the target still
        # holds none of is read again whole at a restart (it may have been emptied there)
        bank.transaction(_statements(bank, random.Random(3), 0, 1))
        _until_mirrored(process, lines, mirror, 1, 60)
        before = bank.count()
        with Reader(mirror.read).reading() as reader:
            bank.transaction(_bulk(bank, before, BULK_ROUNDS))
            total = bank.count()
            killed_mid = 0
            for _ in range(2):
                _wait("target transaction", writing, lines, 120)
                time.sleep(random.uniform(0.0, 0.3))
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                killed_mid += mirror.read()[2] < total
                process = sync_process(args)
                lines = _lines(process)
            _until_mirrored(process, lines, mirror, total, 300)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(120)
    assert killed_mid >= 1, "no kill landed before the large transaction committed"
    assert reader.seen <= {before, total}, sorted(reader.seen)
    assert not reader.torn, f"{len(reader.torn)} of {reader.reads} reads saw half a " \
        f"transaction: {reader.torn[:5]}"
    _status_agrees(bank, mirror, tmp_path / "ck", capsys)
    print(f"{reader.reads} reads, states {sorted(reader.seen)}, killed mid-apply {killed_mid}")


PARENTS = 40


class Family:
    """Parents (a unique email, a self-referencing boss) and their kids (deleted with their
    parent), and the source transactions of a workload on them, tracked here so each round
    knows the values it swaps."""

    def __init__(self, prefix: str) -> None:
        self.s = prefix
        self.emails = {i: f"e{i}" for i in range(PARENTS)}
        self.kids = {i: i % PARENTS for i in range(PARENTS * 3)}

    def ddl(self, text: str) -> list[str]:
        """The tables with the constraints the source keeps and a user gives the target."""
        return [f"CREATE TABLE {self.s}parents (id int PRIMARY KEY, email {text} NOT NULL "
                f"UNIQUE, boss int, FOREIGN KEY (boss) REFERENCES {self.s}parents (id))",
                f"CREATE TABLE {self.s}kids (id int PRIMARY KEY, parent int NOT NULL, v {text}, "
                f"FOREIGN KEY (parent) REFERENCES {self.s}parents (id) ON DELETE CASCADE)"]

    def rows(self) -> list[str]:
        return [f"INSERT INTO {self.s}parents VALUES " + ", ".join(
                    f"({i}, 'e{i}', {i - 1 if i else 'NULL'})" for i in range(PARENTS)),
                f"INSERT INTO {self.s}kids VALUES " + ", ".join(
                    f"({k}, {p}, 'k')" for k, p in self.kids.items())]

    def round(self, r: int, rng: random.Random) -> list[str]:
        """Round ``r``'s transaction: a parent made with two kids, two parents' emails
        swapped (through a third value, as the source's own index needs), a kid's key moved,
        a parent deleted (its kids by the cascade, at the source) after its reports' boss is
        cleared."""
        s, p = self.s, 1000 + r
        a, b, gone = rng.sample(sorted(self.emails), 3)
        out = [f"INSERT INTO {s}parents VALUES ({p}, 'n{p}', {a})",
               f"INSERT INTO {s}kids VALUES ({p * 10}, {p}, 'k'), ({p * 10 + 1}, {p}, 'k')",
               f"UPDATE {s}parents SET email = 'swap' WHERE id = {a}",
               f"UPDATE {s}parents SET email = '{self.emails[a]}' WHERE id = {b}",
               f"UPDATE {s}parents SET email = '{self.emails[b]}' WHERE id = {a}"]
        self.emails[a], self.emails[b] = self.emails[b], self.emails[a]
        self.emails[p] = f"n{p}"
        self.kids.update({p * 10: p, p * 10 + 1: p})
        kid = rng.choice(sorted(self.kids))
        out.append(f"UPDATE {s}kids SET id = {kid + 10**6} WHERE id = {kid}")
        self.kids[kid + 10**6] = self.kids.pop(kid)
        out += [f"UPDATE {s}parents SET boss = NULL WHERE boss = {gone}",
                f"DELETE FROM {s}parents WHERE id = {gone}"]
        del self.emails[gone]
        self.kids = {k: v for k, v in self.kids.items() if v != gone}
        return out


BROKEN = """SELECT (SELECT count(*) FROM {s}kids k LEFT JOIN {s}parents p ON p.id = k.parent
  WHERE p.id IS NULL) + (SELECT count(*) FROM {s}parents c LEFT JOIN {s}parents b
  ON b.id = c.boss WHERE c.boss IS NOT NULL AND b.id IS NULL)"""
"""The rows that break a foreign key (a kid or a report whose parent or boss is missing)."""


@pytest.mark.timeout(420)
@pytest.mark.parametrize("target", ["postgres", pytest.param("mysql", marks=pytest.mark.mysql)])
def test_target_tables_made_with_foreign_keys_and_a_unique_index_hold_them(
        target: str, postgres_admin: Any, postgres_url: str, tmp_path: Path,
        request: pytest.FixtureRequest) -> None:
    """The user made the target tables beforehand with the source's constraints (foreign keys
    not deferrable, one self-referencing, one ON DELETE CASCADE, a unique email): the sync
    runs from the snapshot on through transactions that swap emails, move a kid's key and
    delete a parent with its kids; once the mirror is consistent no read of it finds a row
    breaking a key, and it ends equal to the source (no cascade the source did not make)."""
    import psycopg

    tag = uuid.uuid4().hex[:8]
    source = Family(f"fam{tag}.")
    postgres_admin.execute(f"CREATE SCHEMA fam{tag} AUTHORIZATION sdk_cdc")
    writer = psycopg.connect(postgres_url, autocommit=True)
    for sql in source.ddl("text") + source.rows():
        writer.execute(sql)
    if target == "postgres":
        postgres_admin.execute(f"CREATE SCHEMA famt{tag} AUTHORIZATION sdk_cdc")
        made = Family(f"famt{tag}.")
        for sql in made.ddl("text"):
            writer.execute(sql)
        target_url, schema = postgres_url, f"famt{tag}"

        def on_target(sql: str) -> list[tuple[Any, ...]]:
            with psycopg.connect(postgres_url, autocommit=True) as conn:
                return [tuple(r) for r in conn.execute(sql)]
    else:
        import pymysql

        request.getfixturevalue("mysql_admin")
        from sdk import ConnectionConfig

        config = ConnectionConfig.from_url(MYSQL_ADMIN_URL)

        def on_target(sql: str) -> list[tuple[Any, ...]]:
            conn = pymysql.connect(host=config.host, port=config.port or 3306,
                                   user=config.user, password=config.password or "")
            try:
                with conn.cursor() as cur:
                    cur.execute(sql)
                    return [tuple(r) for r in cur.fetchall()]
            finally:
                conn.close()
        made = Family(f"famt{tag}.")
        on_target(f"CREATE DATABASE famt{tag}")
        for sql in made.ddl("varchar(40)"):
            on_target(sql)
        target_url, schema = MYSQL_ADMIN_URL, f"famt{tag}"
    url = f"{postgres_url}{'&' if '?' in postgres_url else '?'}slot=fam{tag}&publication=fam{tag}"
    process = sync_process(
        ["sync", "--source", url, "--target", target_url, "--target-schema", schema,
         "--tables", f"fam{tag}.*", "--checkpoint", str(tmp_path / "ck"), "--until", "never",
         "--option", "snapshot.split.size=20"])
    lines = _lines(process)
    broken: list[int] = []
    try:
        def consistent() -> bool:
            assert process.poll() is None, "\n".join(lines[-10:])
            return any("caught up" in line for line in lines)
        _wait("a consistent mirror", consistent, lines, 180)
        rng = random.Random(11)
        for r in range(25):
            with writer.transaction():
                for sql in source.round(r, rng):
                    writer.execute(sql)
            broken.append(on_target(BROKEN.format(s=f"famt{tag}."))[0][0])
            time.sleep(0.1)
        query = "SELECT {c} FROM {s}{t} ORDER BY id"
        wanted = {t: [tuple(map(str, r)) for r in writer.execute(query.format(
            c=c, s=f"fam{tag}.", t=t))] for t, c in (("parents", "id, email, coalesce(boss, -1)"),
                                                     ("kids", "id, parent, v"))}

        def equal() -> bool:
            assert process.poll() is None, "\n".join(lines[-10:])
            broken.append(on_target(BROKEN.format(s=f"famt{tag}."))[0][0])
            return all([tuple(map(str, r)) for r in on_target(query.format(
                c=c, s=f"famt{tag}.", t=t))] == wanted[t]
                for t, c in (("parents", "id, email, coalesce(boss, -1)"),
                             ("kids", "id, parent, v")))
        _wait("a mirror equal to the source", equal, lines, 180)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(120)
        writer.close()
        postgres_admin.execute("SELECT pg_drop_replication_slot(slot_name) FROM "
                               "pg_replication_slots WHERE slot_name = %s", (f"fam{tag}",))
        postgres_admin.execute(f"DROP PUBLICATION IF EXISTS fam{tag}")
        postgres_admin.execute(f"DROP SCHEMA fam{tag} CASCADE")
        if target == "postgres":
            postgres_admin.execute(f"DROP SCHEMA IF EXISTS famt{tag} CASCADE")
        else:
            on_target(f"DROP DATABASE IF EXISTS famt{tag}")
    assert not any(broken), f"reads of the mirror found rows breaking a key: {broken}"


def test_a_mirror_of_per_table_commits_says_so_instead_of_not_consistent_yet(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``apply.consistency=table``: each table's changes commit by themselves, so the target
    is never consistent across tables; ``sdk status`` says that, not "not consistent yet" for
    ever, and its JSON carries ``per_table_commits``."""
    import sqlite3

    source = tmp_path / "src.db"
    with sqlite3.connect(source) as conn:
        conn.execute("CREATE TABLE a (id INTEGER PRIMARY KEY, v TEXT)")
        conn.executemany("INSERT INTO a VALUES (?, ?)", [(i, "x") for i in range(10)])
    args = ["sync", "--source", f"sqlite:///{source}", "--target",
            f"sqlite:///{tmp_path / 'mirror.db'}", "--checkpoint", str(tmp_path / "ck"),
            "--until", "caught-up", "--option", "apply.consistency=table"]
    assert main(args) == 0
    with sqlite3.connect(source) as conn:
        conn.execute("UPDATE a SET v = 'y' WHERE id = 3")
    assert main(args) == 0
    capsys.readouterr()
    assert main(["status", "--checkpoint", str(tmp_path / "ck")]) == 0
    text = capsys.readouterr().out
    assert "(each table commits by itself)" in text and "not consistent" not in text, text
    assert main(["status", "--checkpoint", str(tmp_path / "ck"), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status.get("per_table_commits") is True and "consistent_since" not in status, status
