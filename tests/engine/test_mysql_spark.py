"""MariaDB through the Spark engine: a stream with a writer, into a SQLite mirror."""

from __future__ import annotations

import threading
import time
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from helpers.spark import sync_to_mirror_while

from sdk import ConnectionConfig, SnapshotSplit, TableId, get_dialect
from sdk.spark import Mirror
from sdk_sqlite import read_target

pytestmark = [pytest.mark.mysql, pytest.mark.spark]


@pytest.mark.slow
def test_stream_from_mariadb_to_a_mirror(spark: Any, mysql_admin: Any, mysql_url: str,
                                         tmp_path: Path) -> None:
    name = f"t_{uuid.uuid4().hex[:10]}"
    with mysql_admin.cursor() as cur:
        cur.execute(f"CREATE TABLE `{name}` (id INT PRIMARY KEY, v VARCHAR(20), "
                    "amount DECIMAL(10,2), at TIMESTAMP(6) NULL)")
        cur.execute(f"INSERT INTO `{name}` SELECT seq, CONCAT('v', seq), seq / 4, "
                    "'2024-05-06 07:08:09.123456' FROM seq_1_to_3000")
    mysql = get_dialect("mysql")
    conn = mysql.connect(ConnectionConfig.from_url(mysql_url))
    schema = mysql.describe_table(conn, TableId("sdk_test", name))
    mirror = Mirror(f"sqlite:///{tmp_path}/mirror.db", [schema])

    def write(stop: threading.Event) -> None:
        i = 0
        with mysql_admin.cursor() as cur:
            while not stop.is_set():
                i += 1
                cur.execute(f"UPDATE `{name}` SET v = 'w{i}', at = NOW(6) WHERE id = %s",
                            (i * 7 % 3000,))
                cur.execute(f"REPLACE INTO `{name}` VALUES (%s, 'new', 1.5, NULL)",
                            (3000 + i,))
                cur.execute(f"DELETE FROM `{name}` WHERE id = %s", (i * 13 % 3000,))
                time.sleep(0.005)

    sync_to_mirror_while(spark, mysql_url, f"sdk_test.{name}", tmp_path, mirror, write)
    whole = SnapshotSplit(schema.table, 0, None, None)
    source = {schema.key_of(r): r for b in mysql.read_range(conn, schema, whole, 1000)
              for r in b}
    sqlite = get_dialect("sqlite")
    target = sqlite.connect(ConnectionConfig.from_url(f"sqlite:///{tmp_path}/mirror.db"))
    mirrored = read_target(target, schema)
    assert mirrored == source
    assert any(isinstance(r[2], Decimal) for r in mirrored.values())
    with mysql_admin.cursor() as cur:
        cur.execute(f"DROP TABLE `{name}`")
    target.close()
    conn.close()


@pytest.mark.slow
def test_sync_restarts_when_the_source_drops_out(spark: Any, mysql_admin: Any, mysql_url: str,
                                                 tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    """``sdk sync`` through a proxy that resets every connection and refuses new ones for 4 s
    in the middle of the snapshot, while the source keeps changing: the failed run restarts
    from its checkpoint once the source is back, and the mirror ends equal to the source with
    each snapshot row and each change logged once."""
    from helpers.proxy import FreezingProxy
    from helpers.spark import source_and_mirror, sync_through_an_outage

    name = f"t_{uuid.uuid4().hex[:10]}"
    with mysql_admin.cursor() as cur:
        cur.execute(f"CREATE TABLE `{name}` (id INT PRIMARY KEY, v INT)")
        cur.execute(f"INSERT INTO `{name}` SELECT seq, 0 FROM seq_1_to_400")
    config = ConnectionConfig.from_url(mysql_url)
    proxy = FreezingProxy(config.host or "127.0.0.1", config.port or 3306)
    url = mysql_url.replace(f"{config.host}:{config.port}", f"127.0.0.1:{proxy.port}") + \
        "?heartbeat_seconds=0.2&read_timeout=2"

    def execute(sql: str, args: tuple[Any, ...]) -> None:
        with mysql_admin.cursor() as cur:
            cur.execute(sql, args)

    try:
        sync_through_an_outage(spark, proxy, url, f"sdk_test.{name}", tmp_path, execute,
                               f"`{name}`", caplog)
    finally:
        proxy.close()
    source, mirrored = source_and_mirror("mysql", config, TableId("sdk_test", name),
                                         tmp_path / "mirror.db")
    assert mirrored == source and len(source) == 390
    with mysql_admin.cursor() as cur:
        cur.execute(f"DROP TABLE `{name}`")

