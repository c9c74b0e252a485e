"""Dialects as sync targets: MariaDB into a PostgreSQL mirror, exactly, with replays as no-ops."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

import pytest

from sdk import ConnectionConfig, SnapshotSplit, TableId, get_dialect
from sdk.algorithm import Phase, SyncOptions, SyncRunner, caught_up

pytestmark = [pytest.mark.mysql, pytest.mark.postgres]


def test_mariadb_into_postgres(mysql_admin: Any, mysql_url: str, postgres_admin: Any,
                               postgres_url: str) -> None:
    tag = uuid.uuid4().hex[:10]
    name = f"t_{tag}"
    with mysql_admin.cursor() as cur:
        cur.execute(f"""CREATE TABLE `{name}` (id BIGINT UNSIGNED PRIMARY KEY, code VARCHAR(10),
            amount DECIMAL(30,10), at DATETIME(6), ts TIMESTAMP(6) NULL, span TIME(6),
            data BLOB, doc JSON, flags SET('a','b'), bits BIT(5), y YEAR, t TINYINT)""")
        cur.executemany(f"INSERT INTO `{name}` VALUES ({', '.join(['%s'] * 12)})", [
            (i, f"c{i}", Decimal(i) / 3, f"2024-01-0{i % 9 + 1} 10:00:00.5",
             "2024-02-03 04:05:06.25", f"-{i}:00:00.5", bytes([i % 256]) * 3,
             f'{{"i": {i}}}', "a,b", i % 32, 2000 + i % 100, -i % 128)
            for i in range(1, 500)])
        cur.execute(f"INSERT INTO `{name}` (id) VALUES (18446744073709551615)")
    mysql, pg = get_dialect("mysql"), get_dialect("postgres")
    source = mysql.connect(ConnectionConfig.from_url(mysql_url))
    schema = mysql.describe_table(source, TableId("sdk_test", name))
    target_schema_name = f"sdk_mirror_{tag}"
    postgres_admin.execute(f"CREATE SCHEMA {target_schema_name} AUTHORIZATION sdk_cdc")
    target = pg.connect(ConnectionConfig.from_url(postgres_url))
    try:
        runner = SyncRunner(mysql, lambda: mysql.connect(ConnectionConfig.from_url(mysql_url)),
                            SyncOptions(split_size=97))
        state = runner.start([schema])
        mirror = type(schema)(TableId(target_schema_name, name), schema.columns,
                              schema.primary_key, schema.unique_keys, schema.key)
        pg.create_table(target, mirror)
        step = 0

        def apply(events: list[Any]) -> None:
            nonlocal step
            step += 1
            moved = [type(e)(mirror.table, e.op, e.key, e.after, e.offset, e.before,
                             e.old_key, e.commit_ts) for e in events]
            assert pg.apply_changes(target, mirror, moved, f"b{step}")
            assert not pg.apply_changes(target, mirror, moved, f"b{step}")  # a replay

        with mysql_admin.cursor() as cur:
            while state.phase is Phase.SNAPSHOT or step < 3:
                events, state = runner.step(state)
                apply(events)
                cur.execute(f"UPDATE `{name}` SET code = 'upd', id = id + 1000 "
                            "WHERE id = %s", (step,))
                cur.execute(f"DELETE FROM `{name}` WHERE id = %s", (step + 100,))
        head = mysql.current_offset(source)
        while not caught_up(runner, head)(state):
            events, state = runner.step(state)
            apply(events)
        runner.close()
        whole = SnapshotSplit(schema.table, 0, None, None)
        expected = {r[0]: r for b in mysql.read_range(source, schema, whole, 1000) for r in b}
        described = pg.describe_table(target, mirror.table)
        got = {r[0]: r for b in pg.read_range(target, described,
                                              SnapshotSplit(mirror.table, 0, None, None), 1000)
               for r in b}
        assert got == expected
        assert got[Decimal(1001)][1] == "upd" and Decimal(101) not in got
    finally:
        target.close()
        source.close()
        postgres_admin.execute(f"DROP SCHEMA {target_schema_name} CASCADE")
        with mysql_admin.cursor() as cur:
            cur.execute(f"DROP TABLE `{name}`")
