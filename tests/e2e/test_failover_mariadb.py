"""A sync follows a MariaDB failover without a new snapshot: resumed against the promoted
replica, it finds the checkpoint's positions in the replica's binlog by their GTID position
and goes on; a replica promoted before it had every transaction the sync read is refused,
naming them. Real servers of the test's own: a primary and a replica built as from a dump
(``gtid_slave_pos``, ``log_slave_updates``), so the replica's binlog positions are its own."""

from __future__ import annotations

import json
import random
import shutil
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.cli import SPLITS, run_cli, stop_mid_snapshot
from helpers.instances import MariaDb, server_dir, start_mariadb, stopping

from sdk.app.cli import main

pytestmark = [pytest.mark.mysql, pytest.mark.spark, pytest.mark.slow]

ROWS = 200


def _replicate(primary: MariaDb, replica: MariaDb) -> None:
    """Make ``replica`` a GTID replica of ``primary`` from a copy of its table (as from a
    dump at the primary's current GTID position)."""
    primary.execute("CREATE USER IF NOT EXISTS 'repl'@'%' IDENTIFIED BY 'repl'",
                    "GRANT REPLICATION SLAVE ON *.* TO 'repl'@'%'")
    rows = primary.query("SELECT id, v FROM sdk_test.items")
    ((position,),) = primary.query("SELECT @@GLOBAL.gtid_binlog_pos")
    values = ",".join(f"({i}, {v})" for i, v in rows)
    replica.execute("CREATE TABLE sdk_test.items (id INT PRIMARY KEY, v INT)",
                    f"INSERT INTO sdk_test.items VALUES {values}",
                    "STOP SLAVE", f"SET GLOBAL gtid_slave_pos = '{position}'",
                    f"CHANGE MASTER TO master_host = '127.0.0.1', master_port = {primary.port}, "
                    "master_user = 'repl', master_password = 'repl', "
                    "master_use_gtid = slave_pos",
                    "START SLAVE")


def _caught_up(primary: MariaDb, replica: MariaDb) -> None:
    ((position,),) = primary.query("SELECT @@GLOBAL.gtid_binlog_pos")
    ((waited,),) = replica.query(f"SELECT MASTER_GTID_WAIT('{position}', 30)")
    assert waited == 0, "the replica did not catch up"


@pytest.fixture
def topology() -> Iterator[tuple[MariaDb, MariaDb]]:
    """A primary (server_id 1) with ``items`` and a GTID replica of it (server_id 2)."""
    root = server_dir()
    try:
        primary = start_mariadb(root / "primary", 1, ["--log-slave-updates=ON"])
        with stopping(primary):
            replica = start_mariadb(root / "replica", 2, ["--log-slave-updates=ON"])
            with stopping(replica):
                primary.execute(
                    "CREATE TABLE sdk_test.items (id INT PRIMARY KEY, v INT)",
                    "INSERT INTO sdk_test.items SELECT seq, seq FROM sdk_test.seq_0_to_199")
                _replicate(primary, replica)
                yield primary, replica
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _writes(server: MariaDb, seed: int, count: int) -> None:
    """Inserts, updates, key changes and deletes, some in multi-statement transactions."""
    rng = random.Random(seed)
    conn = server.admin()
    try:
        with conn.cursor() as cur:
            for step in range(count):
                many = step % 5 == 0
                if many:
                    cur.execute("BEGIN")
                for _ in range(3 if many else 1):
                    kind = rng.randrange(4)
                    key = rng.randrange(ROWS * 3)
                    if kind == 0:
                        cur.execute("INSERT IGNORE INTO sdk_test.items VALUES (%s, %s)",
                                    (key, step))
                    elif kind == 1:
                        cur.execute("UPDATE sdk_test.items SET v = v + 1 WHERE id = %s", (key,))
                    elif kind == 2:  # a key change
                        cur.execute("UPDATE IGNORE sdk_test.items SET id = %s WHERE id = %s",
                                    (key + ROWS * 3, key))
                    else:
                        cur.execute("DELETE FROM sdk_test.items WHERE id = %s", (key,))
                if many:
                    cur.execute("COMMIT")
    finally:
        conn.close()


def _table(server: MariaDb) -> dict[int, int]:
    return dict(server.query("SELECT id, v FROM sdk_test.items"))


def _mirror(path: Path) -> dict[int, int]:
    with sqlite3.connect(path) as conn:
        return dict(conn.execute("SELECT id, v FROM items").fetchall())


def _sync(source: str, mirror: Path, checkpoint: Path) -> list[str]:
    return ["sync", "--source", source, "--target", f"sqlite:///{mirror}", "--tables",
            "sdk_test.items", "--checkpoint", str(checkpoint), "--until", "caught-up"]


def _switch_over(primary: MariaDb, replica: MariaDb) -> None:
    """Promote ``replica``: writes stop on the primary, the replica applies all it got and
    stops replicating, then takes the writes."""
    primary.execute("SET GLOBAL read_only = ON")
    _caught_up(primary, replica)
    replica.execute("STOP SLAVE", "RESET SLAVE ALL")


def test_the_sync_follows_a_switchover_in_its_log_phase(
        spark: Any, topology: tuple[MariaDb, MariaDb], tmp_path: Path,
        capfd: pytest.CaptureFixture[str]) -> None:
    """The checkpoint lies in the primary's second binlog file while the replica's binlog is
    still in its first: the position means nothing there (read as is, every later write
    would sort below it and be skipped). The sync finds it by GTID and misses nothing."""
    primary, replica = topology
    mirror, checkpoint = tmp_path / "mirror.db", tmp_path / "ck"
    primary.execute("FLUSH BINARY LOGS")
    assert main(_sync(primary.url(), mirror, checkpoint)) == 0
    _writes(primary, 1, 60)
    assert main(_sync(primary.url(), mirror, checkpoint)) == 0  # in the log phase
    assert _mirror(mirror) == _table(primary)
    _writes(primary, 2, 60)  # read by no sync before the switchover
    _switch_over(primary, replica)
    _writes(replica, 3, 60)  # the new primary's own
    files = [r[0] for r in replica.query("SHOW BINARY LOGS")]
    assert files == ["mysql-bin.000001"], files
    capfd.readouterr()

    assert main(["check", "--source", replica.url(), "--checkpoint", str(checkpoint),
                 "--tables", "sdk_test.items"]) == 0
    assert "another server of the checkpoint's source (a failover)" in capfd.readouterr().out
    assert main(_sync(replica.url(), mirror, checkpoint)) == 0
    assert _mirror(mirror) == _table(replica)
    source = json.loads((checkpoint / "state" / "source.json").read_text())
    assert source["identity"]["server_id"] == "2"
    (followed,) = source["followed"]
    assert followed["identity"]["server_id"] == "1"
    assert f":{primary.port}/" in followed["url"]

    _writes(replica, 4, 30)  # the sync goes on from the new primary's positions
    assert main(_sync(replica.url(), mirror, checkpoint)) == 0
    assert "caught up" in capfd.readouterr().out
    assert _mirror(mirror) == _table(replica)
    capfd.readouterr()
    assert main(["status", "--checkpoint", str(checkpoint), "--source", replica.url()]) == 0
    out = capfd.readouterr().out
    assert f"followed a failover from mysql://sdk_cdc:***@127.0.0.1:{primary.port}" in out


def test_a_replica_promoted_before_it_had_every_transaction_read_is_refused(
        spark: Any, topology: tuple[MariaDb, MariaDb], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The replica stops replicating; the primary goes on and the sync reads its last
    transactions; then the replica is promoted. Going on would leave those transactions'
    rows in the mirror though the new primary never had them: refused, naming them."""
    primary, replica = topology
    mirror, checkpoint = tmp_path / "mirror.db", tmp_path / "ck"
    assert main(_sync(primary.url(), mirror, checkpoint)) == 0
    _writes(primary, 5, 20)
    _caught_up(primary, replica)
    replica.execute("STOP SLAVE")
    ((held,),) = replica.query("SELECT @@GLOBAL.gtid_slave_pos")
    seq = int(str(held).rsplit("-", 1)[1])
    primary.execute("UPDATE sdk_test.items SET v = v + 100 WHERE id < 10",
                    "INSERT INTO sdk_test.items VALUES (5000, 1)")
    assert main(_sync(primary.url(), mirror, checkpoint)) == 0
    assert _mirror(mirror)[5000] == 1
    replica.execute("RESET SLAVE ALL")
    capsys.readouterr()
    time.sleep(0.1)
    assert main(_sync(replica.url(), mirror, checkpoint)) == 3
    out, err = capsys.readouterr()
    assert "caught up" not in out
    lines = [line for line in err.splitlines() if line.startswith("sdk: error:")]
    assert len(lines) == 1, err
    assert f"lacks 0-*-{seq + 1} to 0-*-{seq + 2}" in lines[0], lines[0]
    assert "mariadb-binlog" in lines[0]
    assert main(["check", "--source", replica.url(), "--checkpoint", str(checkpoint),
                 "--tables", "sdk_test.items"]) == 1
    assert f"lacks 0-*-{seq + 1}" in capsys.readouterr().out


def test_a_url_naming_both_servers_follows_the_primary(
        spark: Any, topology: tuple[MariaDb, MariaDb], tmp_path: Path) -> None:
    """``mysql://u@primary,replica/db``: the sync connects to the host that takes writes;
    after the switchover the same command lands on the new primary and moves there."""
    primary, replica = topology
    url = f"mysql://sdk_cdc:sdk_cdc@127.0.0.1:{primary.port},127.0.0.1:{replica.port}/sdk_test"
    mirror, checkpoint = tmp_path / "mirror.db", tmp_path / "ck"
    assert main(_sync(url, mirror, checkpoint)) == 0
    _writes(primary, 6, 40)
    assert main(_sync(url, mirror, checkpoint)) == 0
    assert _mirror(mirror) == _table(primary)
    _writes(primary, 7, 40)
    _switch_over(primary, replica)
    _writes(replica, 8, 40)
    assert main(_sync(url, mirror, checkpoint)) == 0
    assert _mirror(mirror) == _table(replica)
    source = json.loads((checkpoint / "state" / "source.json").read_text())
    assert source["identity"]["server_id"] == "2"


def test_a_switchover_while_the_snapshot_runs_goes_on_from_the_splits_read(
        spark: Any, topology: tuple[MariaDb, MariaDb], tmp_path: Path) -> None:
    """The sync is stopped in the middle of its snapshot (SIGKILL) while a writer runs on the
    primary; then the switchover; resumed against the new primary it reads only the splits
    left (their watermarks found there by GTID) and ends equal to it."""
    primary, replica = topology
    primary.execute("INSERT INTO sdk_test.items SELECT seq, seq FROM sdk_test.seq_1000_to_20999")
    _caught_up(primary, replica)
    mirror, checkpoint = tmp_path / "mirror.db", tmp_path / "ck"
    args = [*_sync(primary.url(), mirror, checkpoint)[:-2], "--until", "never",
            "--option", "snapshot.split.size=500", "--option",
            "snapshot.rows-per-second=2000"]  # about 10 s: stopped in the middle surely
    done = stop_mid_snapshot(args, lambda round: _writes(primary, 100 + round, 5))
    assert done, "the snapshot ended before it could be stopped in the middle"
    _switch_over(primary, replica)
    _writes(replica, 9, 40)
    resumed = run_cli(_sync(replica.url(), mirror, checkpoint))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _mirror(mirror) == _table(replica)
    first = SPLITS.search(resumed.stdout)
    assert first is not None and int(first.group(1)) >= done, resumed.stdout[:500]
    source = json.loads((checkpoint / "state" / "source.json").read_text())
    assert source["identity"]["server_id"] == "2"
