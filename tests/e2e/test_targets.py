"""Dialects as sync targets: MariaDB into a PostgreSQL mirror, exactly, with replays as no-ops."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

import pytest
from helpers.servers import with_query

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


def test_postgres_into_mariadb(mysql_admin: Any, mysql_url: str, postgres_admin: Any,
                               postgres_url: str) -> None:
    import datetime as dt

    tag = uuid.uuid4().hex[:10]
    name, slot, publication = f"t_{tag}", f"sdk_s_{tag}", f"sdk_p_{tag}"
    postgres_admin.execute(
        f'CREATE TABLE "{name}" (code text PRIMARY KEY, n int8, amount numeric(12,3), '
        "ok bool, data bytea, at timestamptz, wall timestamp, day date, span interval, "
        "doc json)")
    postgres_admin.execute(
        f'INSERT INTO "{name}" SELECT %s || g, g, g / 8.0, g %% 2 = 0, '
        "decode(lpad(to_hex(g), 4, '0'), 'hex'), '2024-01-01 00:00:00+00'::timestamptz + "
        "g * interval '1 hour', '2024-01-01 12:00'::timestamp, '2024-01-01'::date + g, "
        "g * interval '1 minute', json_build_object('g', g) FROM generate_series(1, 300) g",
        ("k",))
    postgres_admin.execute(f'CREATE PUBLICATION "{publication}" FOR TABLE "{name}"')
    mysql, pg = get_dialect("mysql"), get_dialect("postgres")
    url = with_query(postgres_url, slot=slot, publication=publication)
    source = pg.connect(ConnectionConfig.from_url(url))
    target = mysql.connect(ConnectionConfig.from_url(
        "mysql://root@127.0.0.1:3306/sdk_test"))
    try:
        schema = pg.describe_table(source, TableId("public", name))
        pg.prepare_capture(source, [schema])
        runner = SyncRunner(pg, lambda: pg.connect(ConnectionConfig.from_url(url)),
                            SyncOptions(split_size=64))
        state = runner.start([schema])
        mirror = type(schema)(TableId("sdk_test", name), schema.columns, schema.primary_key,
                              schema.unique_keys, schema.key)
        mysql.create_table(target, mirror)
        step = 0
        while state.phase is Phase.SNAPSHOT or step < 3:
            events, state = runner.step(state)
            step += 1
            moved = [type(e)(mirror.table, e.op, e.key, e.after, e.offset, e.before,
                             e.old_key, e.commit_ts) for e in events]
            assert mysql.apply_changes(target, mirror, moved, f"b{step}")
            assert not mysql.apply_changes(target, mirror, moved, f"b{step}")
            postgres_admin.execute(f'UPDATE "{name}" SET code = code || %s, n = -n '
                                   "WHERE n = %s", ("x", step))
        head = pg.current_offset(source)
        while not caught_up(runner, head)(state):
            events, state = runner.step(state)
            step += 1
            moved = [type(e)(mirror.table, e.op, e.key, e.after, e.offset, e.before,
                             e.old_key, e.commit_ts) for e in events]
            assert mysql.apply_changes(target, mirror, moved, f"b{step}")
        runner.close()
        whole = SnapshotSplit(schema.table, 0, None, None)

        def plain(row: tuple[Any, ...]) -> tuple[Any, ...]:  # instants land as UTC DATETIME
            return tuple(v.astimezone(dt.UTC).replace(tzinfo=None)
                         if isinstance(v, dt.datetime) and v.tzinfo else v for v in row)

        expected = {r[0]: plain(r) for b in pg.read_range(source, schema, whole, 1000)
                    for r in b}
        described = mysql.describe_table(target, mirror.table)
        got = {r[0]: r for b in mysql.read_range(
            target, described, SnapshotSplit(mirror.table, 0, None, None), 1000) for r in b}
        assert len(got) == 300 and "k1x" in got
        assert got.keys() == expected.keys()
        for key, row in expected.items():
            assert got[key] == row, key
    finally:
        source.close()
        target.close()
        postgres_admin.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        postgres_admin.execute(f'DROP PUBLICATION "{publication}"')
        postgres_admin.execute(f'DROP TABLE "{name}"')
        with mysql_admin.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS `{name}`")
