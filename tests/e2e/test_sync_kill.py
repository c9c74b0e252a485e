"""``sdk sync`` MariaDB -> PostgreSQL under a writer, SIGKILLed during the snapshot and during
the log phase and restarted each time: the mirror equals the source, and its change log shows
every snapshot row and change delivered once."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from helpers.changes import assert_once
from helpers.kill import in_log_phase, kill_when, mid_snapshot, paced, sync_process

from sdk import ConnectionConfig, SnapshotSplit, TableId, get_dialect

pytestmark = [pytest.mark.mysql, pytest.mark.postgres, pytest.mark.spark, pytest.mark.slow]


def test_sync_survives_sigkill_in_snapshot_and_log_phase(
        mysql_admin: Any, mysql_url: str, postgres_admin: Any, postgres_url: str,
        tmp_path: Path) -> None:
    name = f"t_{uuid.uuid4().hex[:10]}"
    with mysql_admin.cursor() as cur:
        cur.execute(f"CREATE TABLE `{name}` (id INT PRIMARY KEY, v VARCHAR(30), "
                    "amount DECIMAL(12,2), at DATETIME(6))")
        cur.execute(f"INSERT INTO `{name}` SELECT seq, CONCAT('v', seq), seq / 8, "
                    "'2024-01-01' + INTERVAL seq SECOND FROM seq_1_to_60000")
    schema_name = f"sdk_kill_{uuid.uuid4().hex[:8]}"
    postgres_admin.execute(f"CREATE SCHEMA {schema_name} AUTHORIZATION sdk_cdc")
    stop = threading.Event()

    def write() -> None:
        writer = get_dialect("mysql").connect(ConnectionConfig.from_url(
            "mysql://root@127.0.0.1:3306/sdk_test"))
        i = 0
        while not stop.is_set():
            i += 1
            writer.query(f"UPDATE `{name}` SET v = %s WHERE id = %s", (f"w{i}", i * 7 % 60000))
            writer.query(f"REPLACE INTO `{name}` VALUES (%s, 'new', 1.5, NOW(6))",
                         (60000 + i,))
            writer.query(f"DELETE FROM `{name}` WHERE id = %s", (i * 13 % 60000,))
            writer.query(f"UPDATE IGNORE `{name}` SET id = id + 1000000 WHERE id = %s",
                         (i * 17 % 60000,))
            time.sleep(0.002)
        writer.close()

    args = ["sync", "--source", mysql_url, "--target", postgres_url, "--tables",
            f"sdk_test.{name}", "--target-schema", schema_name, "--checkpoint",
            str(tmp_path / "ck"), "--changes", str(tmp_path / "changes"),
            "--option", "snapshot.split.size=4000",
            "--option", "snapshot.splits-per-batch=2"]
    thread = threading.Thread(target=write)
    thread.start()
    try:
        kill_when(sync_process([*args, *paced(60000), "--until", "never"]), mid_snapshot,
                  in_log_phase)
        kill_when(sync_process([*args, "--until", "never"]), in_log_phase)
    finally:
        stop.set()
        thread.join()
    done = sync_process([*args, "--until", "caught-up"])
    assert done.wait(timeout=600) == 0
    mysql, pg = get_dialect("mysql"), get_dialect("postgres")
    source = mysql.connect(ConnectionConfig.from_url(mysql_url))
    target = pg.connect(ConnectionConfig.from_url(postgres_url))
    try:
        schema = mysql.describe_table(source, TableId("sdk_test", name))
        expected = {r[0]: r for b in mysql.read_range(
            source, schema, SnapshotSplit(schema.table, 0, None, None), 10000) for r in b}
        mirror = pg.describe_table(target, TableId(schema_name, name))
        got = {r[0]: r for b in pg.read_range(
            target, mirror, SnapshotSplit(mirror.table, 0, None, None), 10000) for r in b}
        assert got == expected
        (batches,) = target.query(f"SELECT count(*) FROM {schema_name}._sdk_applied")[0]
        assert batches > 0
        # the mirror upserts, so it would look right with a change applied twice: count them
        snapshot_rows, changes = assert_once(tmp_path / "changes", "mysql", key="id")
        assert snapshot_rows >= 60000 and changes > 0
    finally:
        source.close()
        target.close()
        postgres_admin.execute(f"DROP SCHEMA {schema_name} CASCADE")
        with mysql_admin.cursor() as cur:
            cur.execute(f"DROP TABLE `{name}`")
