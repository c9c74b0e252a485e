"""The binlog replication connection the dialect opens itself (plugins/sdk_mysql/_binlog.py
``_Dump``: the replica's session variables, then COM_BINLOG_DUMP), on the real server: killed
by the server mid-stream it is reopened where the read was, and a MariaDB GTID position is
located by a dump from it."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from sdk import ChangeEvent, Dialect, TableId, TableSchema, get_dialect

pytestmark = pytest.mark.mysql

mysql: Dialect = get_dialect("mysql")


@pytest.fixture
def table(mysql_conn: Any, mysql_admin: Any) -> Iterator[TableSchema]:
    name = f"t_{uuid.uuid4().hex[:10]}"
    admin(mysql_admin, f"CREATE TABLE `{name}` (id INT PRIMARY KEY)")
    try:
        yield mysql.describe_table(mysql_conn, TableId(mysql_conn.database, name))
    finally:
        admin(mysql_admin, f"DROP TABLE IF EXISTS `{name}`")


def admin(mysql_admin: Any, sql: str) -> Any:
    with mysql_admin.cursor() as cur:
        cur.execute(sql)
        return cur.fetchall()


def test_a_replication_connection_the_server_kills_is_reopened_where_the_read_was(
        mysql_conn: Any, mysql_admin: Any, table: TableSchema,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """KILL of the dump thread (the server closes the connection) while the stream waits at
    the binlog's end: a new connection, on the same server, goes on from the last event read,
    so every change comes through once, in order."""
    from sdk_mysql import _binlog

    dumps: list[Any] = []

    class Recorded(_binlog._Dump):
        def _connect(self) -> None:
            super()._connect()
            dumps.append(self._connection.thread_id())

    monkeypatch.setattr(_binlog, "_Dump", Recorded)
    name = table.table.name
    start = mysql.current_offset(mysql_conn)
    for i in range(1, 6):
        admin(mysql_admin, f"INSERT INTO `{name}` VALUES ({i})")
    seen: list[int] = []
    deadline = time.monotonic() + 60
    stream = mysql.stream_log(mysql_conn, [table], start, None)
    try:
        for item in stream:
            if isinstance(item, ChangeEvent):
                seen.append(item.key[0])
                if len(seen) == 5:
                    admin(mysql_admin, f"KILL {dumps[-1]}")
                    for i in range(6, 11):
                        admin(mysql_admin, f"INSERT INTO `{name}` VALUES ({i})")
            if len(seen) >= 10 or time.monotonic() > deadline:
                break
    finally:
        stream.close()  # type: ignore[attr-defined]
    assert seen == list(range(1, 11))
    assert len(dumps) == 2 and dumps[0] != dumps[1]  # reopened once, as a new connection


def test_a_mariadb_gtid_position_is_located_by_a_dump_from_it(
        mysql_conn: Any, mysql_admin: Any, table: TableSchema) -> None:
    """``locate_mariadb_gtid``: the first transaction after a GTID position, found by a
    non-blocking dump started from that position, is the next GTID of its domain, at its
    GTID event."""
    from sdk_mysql._binlog import locate_mariadb_gtid

    if not mysql_conn.mariadb:
        pytest.skip("MariaDB GTIDs")
    ((before,),) = admin(mysql_admin, "SELECT @@gtid_binlog_pos")
    ((domain,),) = admin(mysql_admin, "SELECT @@gtid_domain_id")
    ours = [g for g in before.split(",") if g.startswith(f"{domain}-")]
    seq = int(ours[0].rsplit("-", 1)[1]) if ours else 0
    admin(mysql_admin, f"INSERT INTO `{table.table.name}` VALUES (1)")
    file, pos, gtid = locate_mariadb_gtid(dict(mysql_conn.settings), before)
    assert gtid is not None
    assert gtid.split("-")[0] == str(domain) and int(gtid.rsplit("-", 1)[1]) == seq + 1
    ((_, at, kind, _, _, info),) = admin(
        mysql_admin, f"SHOW BINLOG EVENTS IN '{file}' FROM {pos} LIMIT 1")
    assert (at, kind) == (pos, "Gtid") and gtid in info
