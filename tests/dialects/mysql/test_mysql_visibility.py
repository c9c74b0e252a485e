"""Upstream MySQL's watermarks wait for transactions written to the binlog but not yet committed
(plugins/sdk_mysql/_visibility.py). No upstream MySQL server runs here (only MariaDB, which has
consistent-snapshot binlog positions instead), so the statements are checked against a server
double that models MySQL's flush-then-commit order: a transaction is in the binlog (the head
moved) and owns its GTID until its commit makes it visible and executed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

pytest.importorskip("pymysql", reason="the mysql extra (pymysql) is not installed")

from sdk import RetriableError
from sdk_mysql import MySqlConnection, current_offset, preflight
from sdk_mysql._offsets import parts
from sdk_mysql._visibility import owned_gtid_set, wait_until_visible

UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


def test_owned_gtids_become_a_gtid_set() -> None:
    assert owned_gtid_set(f"{UUID}:23#42, {UUID}:25#43") == f"{UUID}:23,{UUID}:25"
    assert owned_gtid_set(f"{UUID}:tag_1:5#7".encode()) == f"{UUID}:tag_1:5"
    assert owned_gtid_set("") == owned_gtid_set(None) == ""


@dataclass
class FlushedNotCommitted:
    """MySQL with one transaction in the binlog (up to ``head``) that is not committed yet: it
    commits (becomes visible, leaves gtid_owned) when WAIT_FOR_EXECUTED_GTID_SET waits on it,
    unless ``stuck``."""

    head: int = 900
    owned: str = f"{UUID}:7#12"
    stuck: bool = False
    statements: list[str] = field(default_factory=list)
    committed: bool = False

    def query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self.statements.append(sql)
        if "gtid_owned" in sql:
            return [("" if self.committed else self.owned,)]
        if sql.startswith("SELECT WAIT_FOR_EXECUTED_GTID_SET"):
            assert args[0] == f"{UUID}:7"
            self.committed = not self.stuck
            return [(1 if self.stuck else 0,)]
        if "BINARY LOG STATUS" in sql:
            return [("binlog.000003", self.head, "", "", f"{UUID}:1-6")]
        if "gtid_mode" in sql:
            return [("gtid_mode", "ON")]
        return []


def test_the_wait_returns_once_the_flushed_transactions_committed() -> None:
    server = FlushedNotCommitted()
    wait_until_visible(server)
    assert server.committed
    server.statements.clear()
    wait_until_visible(server)  # nothing owned: no wait
    assert server.statements == ["SELECT @@GLOBAL.gtid_owned"]


def test_a_commit_that_never_comes_is_a_passing_fault() -> None:
    with pytest.raises(RetriableError, match="did not commit within 60 s"):
        wait_until_visible(FlushedNotCommitted(stuck=True))


class Raw:
    def __init__(self, server: FlushedNotCommitted) -> None:
        self.server = server

    def cursor(self) -> Cursor:
        return Cursor(self.server)


class Cursor:
    def __init__(self, server: FlushedNotCommitted) -> None:
        self.server, self.rows = server, []

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def execute(self, sql: str, args: Any = None) -> None:
        self.rows = self.server.query(sql, args or ())

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self.rows


def mysql(server: FlushedNotCommitted, closes_window: bool) -> MySqlConnection:
    conn = MySqlConnection(Raw(server), {"user": "cdc"}, None, snapshot_status=False,
                           mariadb=False, status_sql="SHOW BINARY LOG STATUS")
    conn.closes_window = closes_window
    return conn


def test_the_head_is_read_first_and_returned_only_once_everything_below_it_is_visible() -> None:
    server = FlushedNotCommitted()
    offset = current_offset(mysql(server, closes_window=True))
    assert parts(offset)[:2] == ("binlog.000003", 900)
    assert server.committed  # what the head covers is visible before the offset is used
    assert server.statements[:2] == ["SHOW BINARY LOG STATUS", "SELECT @@GLOBAL.gtid_owned"]


def test_without_gtids_the_raw_head_is_used_and_preflight_says_how_to_close_the_window(
        ) -> None:
    server = FlushedNotCommitted()
    conn = mysql(server, closes_window=False)
    current_offset(conn)
    assert not server.committed and "SELECT @@GLOBAL.gtid_owned" not in server.statements
    advice = [r for r in preflight(conn, []) if r.name.startswith("gtid_mode=ON")]
    assert len(advice) == 1 and not advice[0].ok and not advice[0].required
    assert "enforce_gtid_consistency" in advice[0].fix
