"""A checkpoint follows one server's log: resumed against another server, or against the same
server after its log was reset or restored from a backup, ``sdk sync`` refuses with one line
and never reports "caught up"; ``sdk check --checkpoint`` and ``sdk status --source`` say the
same. Real servers of the tests' own: two MariaDB instances, two PostgreSQL clusters and one
restored from a base backup."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from helpers.instances import (
    MariaDb,
    Postgres,
    pg15_available,
    server_dir,
    start_mariadb,
    start_postgres15,
    stopping,
)

from sdk import LogMismatchError, Offset
from sdk.algorithm import Phase, SyncState
from sdk.algorithm.lineage import check_same_source, resume_position
from sdk.app.cli import main
from sdk.dialect.manager import get_dialect
from sdk.dialect.types import FinishedSplit, SnapshotSplit, TableId

ROWS = 50
S = TypeVar("S", MariaDb, Postgres)


def _sync(source: str, target: str, checkpoint: Path, tables: str) -> list[str]:
    return ["sync", "--source", source, "--target", target, "--tables", tables,
            "--checkpoint", str(checkpoint), "--until", "caught-up"]


def _mirror(path: Path, table: str) -> dict[int, int]:
    with sqlite3.connect(path) as conn:
        return dict(conn.execute(f"SELECT id, v FROM {table}").fetchall())


def _refused(capsys: pytest.CaptureFixture[str], args: list[str], *words: str) -> str:
    """Run ``args``: it must fail with one ``sdk: error:`` line holding ``words``, and never
    say it applied anything or caught up."""
    assert main(args) == 3  # the source refused: not the log the checkpoint follows
    out, err = capsys.readouterr()
    assert "caught up" not in out and "applied" not in out
    lines = [line for line in err.splitlines() if line.startswith("sdk: error:")]
    assert len(lines) == 1, err
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


# --- pure logic ------------------------------------------------------------------------------


def test_an_identity_that_differs_is_refused_naming_both_values() -> None:
    recorded = {"dialect": "mysql", "identity": {"server_uuid": "a", "extra": "x"},
                "url": "mysql://u:***@one/db"}
    check_same_source(recorded, {**recorded, "identity": {"server_uuid": "a", "extra": "x",
                                                          "learnt": "y"}}, "ck")
    with pytest.raises(LogMismatchError, match="extra was x, is not given"):
        check_same_source(recorded, {**recorded, "identity": {"server_uuid": "a"}}, "ck")
    with pytest.raises(LogMismatchError, match="server_uuid was a, is b.*recorded from "
                       r"mysql://u:\*\*\*@one/db"):
        check_same_source(recorded, {**recorded, "identity": {"server_uuid": "b"},
                                     "url": "mysql://u:***@two/db"}, "ck")
    with pytest.raises(LogMismatchError, match="follows a mysql source"):
        check_same_source(recorded, {**recorded, "dialect": "postgres"}, "ck")


def test_a_snapshot_resumes_from_its_lowest_watermark() -> None:
    dialect = get_dialect("sqlite")
    table = TableId("main", "t")
    marks = [Offset("sqlite", seq=s) for s in (7, 3, 9)]
    finished = tuple(FinishedSplit(SnapshotSplit(table, i, None, None), m)
                     for i, m in enumerate(marks))
    state = SyncState(Phase.SNAPSHOT, {}, finished={table: finished})
    assert resume_position(state, dialect) == marks[1]
    assert resume_position(SyncState(Phase.SNAPSHOT, {}), dialect) is None
    assert resume_position(SyncState(Phase.LOG, {}, position=marks[2]), dialect) == marks[2]


# --- SQLite: another file ----------------------------------------------------------------------


@pytest.mark.spark
def test_sqlite_resumed_against_another_file_is_refused(spark: Any, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    for name in ("one.db", "two.db"):
        with sqlite3.connect(tmp_path / name) as conn:
            conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, v INTEGER)")
            conn.executemany("INSERT INTO items VALUES (?, ?)", [(i, i) for i in range(ROWS)])
    mirror, checkpoint = tmp_path / "mirror.db", tmp_path / "ck"
    assert main(_sync(f"sqlite:///{tmp_path / 'one.db'}", f"sqlite:///{mirror}", checkpoint,
                      "items")) == 0
    capsys.readouterr()
    _refused(capsys, _sync(f"sqlite:///{tmp_path / 'two.db'}", f"sqlite:///{mirror}",
                           checkpoint, "items"), "is not the server checkpoint", "log_id was")


# --- MariaDB: another server, a reset binlog ---------------------------------------------------


def _two(start: Callable[[Path], S]) -> Iterator[tuple[S, S]]:
    """Two servers made by ``start``, stopped when the module is done."""
    root = server_dir()
    try:
        first = start(root / "a")
        with stopping(first):
            # made in another second: MariaDB's identity is its data directory's creation
            # time, to the second (two servers alike in it and in server_id are told apart
            # only by their binlogs)
            time.sleep(1.1)
            second = start(root / "b")
            with stopping(second):
                yield first, second
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def mariadbs() -> Iterator[tuple[MariaDb, MariaDb]]:
    """Two MariaDB servers of this module's own."""
    yield from _two(start_mariadb)


def _fill_mariadb(server: MariaDb) -> None:
    server.execute("DROP TABLE IF EXISTS sdk_test.items",
                   "CREATE TABLE sdk_test.items (id INT PRIMARY KEY, v INT)",
                   "INSERT INTO sdk_test.items SELECT seq, seq FROM sdk_test.seq_0_to_49")


@pytest.mark.mysql
@pytest.mark.spark
@pytest.mark.slow
def test_mariadb_resumed_against_another_server_is_refused(
        spark: Any, mariadbs: tuple[MariaDb, MariaDb], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    first, second = mariadbs
    for server in mariadbs:
        _fill_mariadb(server)
    mirror, checkpoint = tmp_path / "mirror.db", tmp_path / "ck"
    assert main(_sync(first.url(), f"sqlite:///{mirror}", checkpoint, "sdk_test.items")) == 0
    capsys.readouterr()
    second.execute("INSERT INTO sdk_test.items VALUES (1000, 1)")
    # both have server_id 1 and the same GTIDs (0-1-1...): not a replica, whatever its GTIDs
    line = _refused(capsys, _sync(second.url(), f"sqlite:///{mirror}", checkpoint,
                                  "sdk_test.items"),
                    "is not a replica of the one the checkpoint followed", "server_id 1")
    assert "sdk_cdc:sdk_cdc" not in line
    assert 1000 not in _mirror(mirror, "items")
    assert main(["check", "--source", second.url(), "--checkpoint", str(checkpoint),
                 "--tables", "sdk_test.items"]) == 1
    assert "is not a replica" in capsys.readouterr().out
    assert main(["status", "--checkpoint", str(checkpoint), "--source", first.url()]) == 0
    assert "checked: the same server, and its log holds the position" in \
        capsys.readouterr().out


@pytest.mark.mysql
@pytest.mark.spark
@pytest.mark.parametrize("writes", [1, 400], ids=["log-behind", "log-grown-past"])
@pytest.mark.slow
def test_a_reset_binlog_is_never_caught_up(spark: Any, mariadbs: tuple[MariaDb, MariaDb],
                                           tmp_path: Path, writes: int,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """After RESET MASTER the binlog starts again at file 1: a few changes leave the
    checkpoint's position past the head; many make the new log longer than the position,
    which then lies inside some other transaction or before a GTID already taken."""
    server = mariadbs[0]
    _fill_mariadb(server)
    server.execute(*(f"UPDATE sdk_test.items SET v = v + 1 WHERE id = {i % ROWS}"
                     for i in range(100)))  # the position lies well into the binlog
    mirror, checkpoint = tmp_path / "mirror.db", tmp_path / "ck"
    url = server.url()
    assert main(_sync(url, f"sqlite:///{mirror}", checkpoint, "sdk_test.items")) == 0
    capsys.readouterr()
    before = _mirror(mirror, "items")
    server.execute("RESET MASTER", "INSERT INTO sdk_test.items VALUES (1000, 1)")
    server.execute(*(f"UPDATE sdk_test.items SET v = v + 1 WHERE id = {i % ROWS}"
                     for i in range(writes)))
    _refused(capsys, _sync(url, f"sqlite:///{mirror}", checkpoint, "sdk_test.items"),
             "new --checkpoint directory")
    assert _mirror(mirror, "items") == before
    assert main(["status", "--checkpoint", str(checkpoint), "--source", url]) == 3
    assert "new --checkpoint directory" in capsys.readouterr().err


# --- PostgreSQL: another cluster, a cluster restored from a base backup -----------------------


@pytest.fixture(scope="module")
def clusters() -> Iterator[tuple[Postgres, Postgres]]:
    """Two PostgreSQL 15 clusters of this module's own."""
    if not pg15_available():
        pytest.skip("no PostgreSQL 15 binaries in /usr/lib/postgresql/15/bin")
    yield from _two(start_postgres15)


def _fill_postgres(server: Postgres) -> None:
    server.execute("DROP TABLE IF EXISTS items",
                   "CREATE TABLE items (id int PRIMARY KEY, v int)",
                   "INSERT INTO items SELECT g, g FROM generate_series(0, 49) g",
                   "ALTER TABLE items OWNER TO sdk_cdc")


@pytest.mark.postgres
@pytest.mark.spark
@pytest.mark.slow
def test_postgres_resumed_against_another_cluster_is_refused(
        spark: Any, clusters: tuple[Postgres, Postgres], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    first, second = clusters
    for server in clusters:
        _fill_postgres(server)
    mirror, checkpoint = tmp_path / "mirror.db", tmp_path / "ck"
    query = "?slot=id_other&publication=id_other"
    assert main(_sync(first.url(query=query), f"sqlite:///{mirror}", checkpoint,
                      "public.items")) == 0
    capsys.readouterr()
    # not a promoted standby of the first: another history whatever its LSNs
    _refused(capsys, _sync(second.url(query=query), f"sqlite:///{mirror}", checkpoint,
                           "public.items"),
             "this is another PostgreSQL cluster", "the checkpoint's was")
    with second.admin() as conn:  # refused before anything was made there
        assert not conn.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = "
                                "'id_other'").fetchall()
    first.execute("SELECT pg_drop_replication_slot('id_other')")


@pytest.mark.postgres
@pytest.mark.spark
@pytest.mark.slow
def test_a_cluster_restored_from_a_base_backup_is_refused(
        spark: Any, clusters: tuple[Postgres, Postgres], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A base backup taken before the sync read on: the restored cluster is the same system
    on the same timeline, but its WAL ends before the checkpoint's position and it has no
    slot (base backups leave slots out)."""
    server = clusters[0]
    _fill_postgres(server)
    backup = server_dir() / "restored"
    server.base_backup(backup)
    mirror, checkpoint = tmp_path / "mirror.db", tmp_path / "ck"
    url = server.url(query="?slot=id_restore&publication=id_restore")
    assert main(_sync(url, f"sqlite:///{mirror}", checkpoint, "public.items")) == 0
    server.execute("UPDATE items SET v = -v")
    assert main(_sync(url, f"sqlite:///{mirror}", checkpoint, "public.items")) == 0
    capsys.readouterr()
    live = server.pgdata
    server.stop()
    restored = Postgres(backup, server.port, None)
    try:
        restored.start()
        restored.execute("INSERT INTO items VALUES (1000, 1)")
        _refused(capsys, _sync(url, f"sqlite:///{mirror}", checkpoint, "public.items"),
                 "new --checkpoint directory")
        assert 1000 not in _mirror(mirror, "items")
    finally:
        restored.stop()
        server.pgdata = live
        server.start()
        server.execute("SELECT pg_drop_replication_slot('id_restore')")
        shutil.rmtree(backup.parent, ignore_errors=True)


@pytest.mark.mysql
@pytest.mark.spark
@pytest.mark.slow
def test_a_binlog_reset_under_a_running_sync_stops_it(mariadbs: tuple[MariaDb, MariaDb],
                                                      tmp_path: Path) -> None:
    """A following sync polls the head: once the binlog is begun again, its position lies
    past the head and the sync stops with one line instead of waiting for ever."""
    server = mariadbs[0]
    _fill_mariadb(server)
    mirror = tmp_path / "mirror.db"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    process = subprocess.Popen(
        [sys.executable, "-m", "sdk.app.cli", *_sync(server.url(), f"sqlite:///{mirror}",
                                                 tmp_path / "ck", "sdk_test.items")[:-2],
         "--until", "never"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        server.execute("UPDATE sdk_test.items SET v = -1 WHERE id = 7")
        while not (mirror.exists() and _mirror_or_none(mirror).get(7) == -1):
            assert process.poll() is None and time.monotonic() < deadline, "never caught up"
            time.sleep(0.5)
        server.execute("RESET MASTER", "INSERT INTO sdk_test.items VALUES (1000, 1)")
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 3, err[-3000:]
    lines = err.strip().splitlines()
    assert len(lines) <= 5 and not any(line.startswith("\tat ") for line in lines), err
    error = next(line for line in lines if line.startswith("sdk: error:"))
    assert "lies past the head" in error, error


def _mirror_or_none(path: Path) -> dict[int, int]:
    try:
        return _mirror(path, "items")
    except sqlite3.OperationalError:  # the table is not made yet
        return {}


class _Topology:
    """A dialect's two hooks ``relocate`` calls, over offsets ``Offset("t", at=N, key=K)``:
    an offset with a key is found at ``at + 1000`` on the new server, unless its key is in
    ``lost`` (refused); one without a key cannot be found (None)."""

    def __init__(self, lost: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.lost = lost

    def locate_offset(self, conn: Any, offset: Offset, source: Any) -> Offset | None:
        key = offset.get("key")
        if key is None:
            return None
        if key in self.lost:
            raise LogMismatchError(f"lacks {key}")
        return Offset("t", {"at": int(offset["at"]) + 1000, "key": key})

    @staticmethod
    def compare_offset(a: Offset, b: Offset) -> int:
        return (int(a["at"]) > int(b["at"])) - (int(a["at"]) < int(b["at"]))


def _at(at: int, key: str | None = None) -> Offset:
    return Offset("t", {"at": at, **({"key": key} if key else {})})


def test_relocate_places_offsets_without_a_key_by_the_nearest_found_below() -> None:
    from sdk.algorithm.lineage import relocate

    found = relocate(_Topology(), None, [_at(1, "a"), _at(5), _at(9, "b")], {})  # type: ignore[arg-type]
    assert found == {_at(1, "a"): _at(1001, "a"), _at(5): _at(1001, "a"),
                     _at(9, "b"): _at(1009, "b")}
    # nothing found above it: the server may lack what came before it
    with pytest.raises(LogMismatchError, match="cannot be found"):
        relocate(_Topology(), None, [_at(1, "a"), _at(5)], {})  # type: ignore[arg-type]
    with pytest.raises(LogMismatchError, match="cannot be found"):
        relocate(_Topology(), None, [_at(5), _at(9, "b")], {})  # type: ignore[arg-type]


def test_relocate_refuses_a_lost_offset_unless_no_read_starts_below_it() -> None:
    from sdk.algorithm.lineage import relocate

    offsets = [_at(1, "old"), _at(5, "a"), _at(9, "b")]
    with pytest.raises(LogMismatchError, match="lacks old"):
        relocate(_Topology({"old"}), None, offsets, {})  # type: ignore[arg-type]
    found = relocate(_Topology({"old"}), None, offsets, {}, since=_at(5, "a"))  # type: ignore[arg-type]
    assert found[_at(1, "old")] == found[_at(5, "a")] == _at(1005, "a")
    with pytest.raises(LogMismatchError, match="lacks b"):  # at or past where reads start
        relocate(_Topology({"b"}), None, offsets, {}, since=_at(5, "a"))  # type: ignore[arg-type]
