"""The driver's head start (``sdk/spark/startup/headstart.py``, ``--head-start``): bounded
``sdk sync`` runs MariaDB -> PostgreSQL that the driver runs whole, Spark's stream taking up what
they did later; and a driver SIGKILLed in the middle of its head start, whose batch the next
run replays (its head start, or Spark's stream)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from helpers.kill import kill_when, mid_snapshot, paced, sync_process
from helpers.servers import with_query

from sdk import ConnectionConfig, SnapshotSplit, TableId, get_dialect
from sdk.spark.startup.headworkers import NAME

pytestmark = [pytest.mark.mysql, pytest.mark.postgres, pytest.mark.spark, pytest.mark.slow]


@dataclass
class Sync:
    name: str
    schema: str
    checkpoint: Path
    args: list[str]

    def record(self) -> dict[str, Any]:
        return json.loads((self.checkpoint / "state" / "headstart.json").read_text())

    def spark_batches(self) -> list[str]:
        offsets = self.checkpoint / "checkpoint" / "offsets"
        return sorted(f.name for f in offsets.glob("*") if f.name.isdigit()) \
            if offsets.is_dir() else []


@pytest.fixture
def sync(mysql_admin: Any, mysql_url: str, postgres_admin: Any, postgres_url: str,
         tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sync]:
    monkeypatch.setenv("SDK_HEAD_START", "on")  # the sync processes inherit it
    name = f"t_hs_{uuid.uuid4().hex[:8]}"
    with mysql_admin.cursor() as cur:
        cur.execute(f"CREATE TABLE `{name}` (id INT PRIMARY KEY, v VARCHAR(30), "
                    "amount DECIMAL(12,2), at DATETIME(6))")
        cur.execute(f"INSERT INTO `{name}` SELECT seq, CONCAT('v', seq), seq / 8, "
                    "'2024-01-01' + INTERVAL seq SECOND FROM seq_1_to_40000")
    schema = f"sdk_hs_{uuid.uuid4().hex[:8]}"
    postgres_admin.execute(f"CREATE SCHEMA {schema} AUTHORIZATION sdk_cdc")
    checkpoint = tmp_path / "ck"
    args = ["sync", "--source", mysql_url, "--target", postgres_url, "--tables",
            f"sdk_test.{name}", "--target-schema", schema, "--checkpoint", str(checkpoint),
            "--option", "snapshot.split.size=4000"]
    try:
        yield Sync(name, schema, checkpoint, args)
    finally:
        with mysql_admin.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS `{name}`")
        postgres_admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _change(mysql_admin: Any, name: str, round: int = 0) -> int:
    """Rows deleted, updated and inserted at the source; the number of changes."""
    with mysql_admin.cursor() as cur:
        deleted = cur.execute(f"DELETE FROM `{name}` WHERE id % {97 + round} = 0")
        updated = cur.execute(f"UPDATE `{name}` SET v = 'changed{round}' WHERE id % 89 = 0")
        inserted = cur.execute(f"INSERT INTO `{name}` SELECT seq, 'new', 2.5, NOW(6) "
                               f"FROM seq_{50001 + 1000 * round}_to_{50300 + 1000 * round}")
    return int(deleted + updated + inserted)


def _assert_mirror(sync: Sync, mysql_url: str, postgres_url: str) -> None:
    mysql, pg = get_dialect("mysql"), get_dialect("postgres")
    source = mysql.connect(ConnectionConfig.from_url(mysql_url))
    target = pg.connect(ConnectionConfig.from_url(postgres_url))
    try:
        schema = mysql.describe_table(source, TableId("sdk_test", sync.name))
        expected = {r[0]: r for b in mysql.read_range(
            source, schema, SnapshotSplit(schema.table, 0, None, None), 10000) for r in b}
        mirror = pg.describe_table(target, TableId(sync.schema, sync.name))
        got = {r[0]: r for b in pg.read_range(
            target, mirror, SnapshotSplit(mirror.table, 0, None, None), 10000) for r in b}
        assert sorted(set(got) - set(expected))[:5] == []  # no row the source lost stays
        assert got == expected
    finally:
        source.close()
        target.close()


def _applied(output: str) -> int:
    found = re.search(r"applied (\d+) rows in", output)
    assert found is not None, output
    return int(found.group(1))


def test_bounded_syncs_run_in_the_head_start_and_the_stream_takes_them_up(
        sync: Sync, mysql_admin: Any, mysql_url: str, postgres_url: str) -> None:
    first = sync_process([*sync.args, "--until", "snapshot"])
    output, _ = first.communicate(timeout=300)
    assert first.returncode == 0, output
    record = sync.record()
    assert record["initial"] is not None and record["done"] is not None  # the driver's
    assert sync.spark_batches() == []  # it ran the whole snapshot: Spark never started
    stages = list((sync.checkpoint / "state" / "batches").iterdir())
    assert [s.name for s in stages] == [record["done"]["state"]]  # older ones dropped
    assert _applied(output) == 40000  # what was applied, counted once
    _assert_mirror(sync, mysql_url, postgres_url)
    for round in range(3):  # two head starts going on from the record, then Spark's stream
        changes = _change(mysql_admin, sync.name, round)
        setting = ["--head-start", "off" if round == 2 else "auto"]
        resumed = sync_process([*sync.args, *setting, "--until", "caught-up"])
        output, _ = resumed.communicate(timeout=300)
        assert resumed.returncode == 0, output
        assert _applied(output) == changes
        _assert_mirror(sync, mysql_url, postgres_url)
        assert (sync.spark_batches() == []) == (round < 2)
    assert sync.record()["initial"] == record["initial"]  # Spark began where the driver did
    errors = sync.checkpoint.parent / "sync-errors.txt"
    assert "Error" not in (errors.read_text() if errors.exists() else "")  # its workers quiet


def _head_workers(root: int) -> int:
    """The head start's worker processes under process ``root`` now."""
    try:
        children = psutil.Process(root).children(recursive=True)
    except psutil.NoSuchProcess:
        return 0
    count = 0
    for child in children:
        with contextlib.suppress(psutil.Error):
            count += "sdk.spark.startup.headworkers" in child.cmdline() or \
                child.name() == NAME.decode()
    return count


def test_a_sync_reading_the_log_starts_one_worker_and_more_for_a_table_read_again(
        sync: Sync, mysql_admin: Any, mysql_url: str, postgres_url: str) -> None:
    """A sync whose snapshot is done starts one worker (its log batches have one partition);
    a batch reading a table again (ten splits) gets one per core, and the mirror is exact."""
    first = sync_process([*sync.args, "--until", "snapshot"])
    output, _ = first.communicate(timeout=300)
    assert first.returncode == 0, output
    changes = _change(mysql_admin, sync.name)
    requested = sync_process(["snapshot", "--checkpoint", str(sync.checkpoint), "--table",
                              f"sdk_test.{sync.name}"])
    output, _ = requested.communicate(timeout=60)
    assert requested.returncode == 0, output
    resumed = sync_process([*sync.args, "--until", "caught-up"])
    seen: list[int] = []
    while resumed.poll() is None:
        seen.append(_head_workers(resumed.pid))
        time.sleep(0.01)
    output, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, output
    counts = [n for n in seen if n]
    cores = len(os.sched_getaffinity(0))
    assert counts[0] == 1, seen  # the early worker, alone
    assert max(counts) == min(cores, 10), seen  # the read again: a worker per core
    assert _applied(output) >= changes
    assert sync.spark_batches() == []  # the head start ran it all
    _assert_mirror(sync, mysql_url, postgres_url)


@pytest.mark.parametrize("head_start", ["on", "off"], ids=["head-start", "stream"])
def test_a_driver_killed_in_its_head_start_leaves_a_batch_the_next_run_replays(
        sync: Sync, mysql_admin: Any, mysql_url: str, postgres_admin: Any, postgres_url: str,
        head_start: str) -> None:
    table = f"{sync.schema}.{sync.name}"

    def loaded(line: str) -> bool:  # a split of rows the source then deletes is in the mirror
        if not mid_snapshot(line):
            return False
        (count,), = postgres_admin.execute(f"SELECT count(*) FROM {table} WHERE id % 97 = 0")
        return bool(count)

    kill_when(sync_process([*sync.args, *paced(40000), "--until", "never"]), loaded)
    record = sync.record()
    assert record["planned"] is not None and record["done"] is None  # killed in its batch
    assert sync.spark_batches() == []  # before Spark's stream planned one
    _change(mysql_admin, sync.name)  # rows loaded before the kill deleted at the source
    # the rerun's driver, or Spark's stream (the flag over the environment's)
    done = sync_process([*sync.args, "--head-start", head_start, "--until", "caught-up"])
    output, _ = done.communicate(timeout=300)
    assert done.returncode == 0, output
    assert (sync.spark_batches() == []) == (head_start == "on")
    _assert_mirror(sync, mysql_url, postgres_url)


def test_a_batch_the_head_start_completes_is_committed_at_the_source(
        postgres_admin: Any, postgres_url: str, tmp_path: Path) -> None:
    """A PostgreSQL source's slot advances past the changes a head start applied (as Spark's
    commit advances it), so the server may drop their WAL; Spark's stream takes up the
    checkpoint after."""
    tag = uuid.uuid4().hex[:8]
    source, mirror, slot = f"hs_src_{tag}", f"hs_dst_{tag}", f"sdk_s_{tag}"
    for schema in (source, mirror):
        postgres_admin.execute(f"CREATE SCHEMA {schema} AUTHORIZATION sdk_cdc")
    postgres_admin.execute(f"CREATE TABLE {source}.t (id INT PRIMARY KEY, v TEXT)")
    postgres_admin.execute(f"ALTER TABLE {source}.t OWNER TO sdk_cdc")
    postgres_admin.execute(f"INSERT INTO {source}.t SELECT g, 'v' || g "
                           "FROM generate_series(1, 5000) g")
    url = with_query(postgres_url, slot=slot, publication=slot)
    args = ["sync", "--source", url, "--target", postgres_url, "--tables", f"{source}.t",
            "--target-schema", mirror, "--checkpoint", str(tmp_path / "ck"),
            "--until", "caught-up"]

    def run(setting: str) -> None:
        process = sync_process([*args, "--head-start", setting])
        output, _ = process.communicate(timeout=300)
        assert process.returncode == 0, output

    def confirmed() -> int:
        (lsn,), = postgres_admin.execute(
            "SELECT confirmed_flush_lsn - '0/0' FROM pg_replication_slots WHERE slot_name = %s",
            (slot,)).fetchall()
        return int(lsn)

    try:
        run("auto")
        for round, setting in enumerate(["auto", "off"]):
            postgres_admin.execute(f"UPDATE {source}.t SET v = 'r{round}' WHERE id % 7 = 0")
            (written,), = postgres_admin.execute(
                "SELECT pg_current_wal_lsn() - '0/0'").fetchall()
            run(setting)
            assert confirmed() >= written  # its changes acknowledged, by the driver or Spark
            assert (not (tmp_path / "ck" / "checkpoint" / "offsets").is_dir()) == \
                (setting == "auto")
            (differ,), = postgres_admin.execute(
                f"SELECT count(*) FROM (SELECT * FROM {source}.t EXCEPT "
                f"SELECT * FROM {mirror}.t) d").fetchall()
            assert differ == 0
    finally:
        postgres_admin.execute("SELECT pg_drop_replication_slot(slot_name) FROM "
                               "pg_replication_slots WHERE slot_name = %s", (slot,))
        postgres_admin.execute(f"DROP PUBLICATION IF EXISTS {slot}")
        for schema in (source, mirror):
            postgres_admin.execute(f"DROP SCHEMA {schema} CASCADE")
