"""The SQL Server dialect's ``encryption`` option, ``connection_security``, ``server_identity``
and ``check_offset``, offline.

No SQL Server runs here: the URL options are checked against the keyword arguments
``pymssql.connect`` receives, and the hooks run on :class:`Recorded`, a pymssql-shaped
connection answering each statement with result sets shaped as Microsoft documents them
(``sys.dm_exec_connections.encrypt_option`` as ``TRUE``/``FALSE``, ``uniqueidentifier`` as its
36-character text, LSNs as ``binary(10)`` and, in the transaction DMVs, ``numeric(25,0)``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

import sdk_sqlserver
from sdk import (
    ConfigurationError,
    ConnectionConfig,
    LogMismatchError,
    OffsetExpiredError,
    RetriableError,
)
from sdk.dialect.manager import check_url_options
from sdk_sqlserver import _security
from sdk_sqlserver._lsn import make_offset

Answer = list[tuple[Any, ...]] | Exception | Callable[[tuple[Any, ...]], list[tuple[Any, ...]]]


class FakeError(Exception):
    """What pymssql raises for a server error: args ``(number, message bytes)``."""

    def __init__(self, number: int, message: str) -> None:
        super().__init__(number, message.encode())


NO_VIEW_SERVER_STATE = FakeError(300, "VIEW SERVER STATE permission was denied on object "
                                      "'server', database 'master'.")


@dataclass
class Recorded:
    """A pymssql connection answering each known statement with recorded rows (or raising a
    recorded error; a function of the parameters for a parameterised statement), and failing
    the test on any other. Statements without a result set are taken as they come."""

    answers: dict[str, Answer]
    statements: list[str] = field(default_factory=list)

    def cursor(self) -> RecordedCursor:
        return RecordedCursor(self)

    def close(self) -> None:
        pass


SILENT = ("SET NOCOUNT ON", "BEGIN TRANSACTION; SAVE TRANSACTION sdk_mark",
          "IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION")


@dataclass
class RecordedCursor:
    conn: Recorded
    description: list[tuple[Any, ...]] | None = None
    _rows: list[tuple[Any, ...]] = field(default_factory=list)

    def execute(self, sql: str, params: tuple[Any, ...] | None = None) -> None:
        self.conn.statements.append(sql)
        self.description, self._rows = None, []
        if sql in SILENT:
            return
        if sql not in self.conn.answers:
            raise AssertionError(f"no recorded answer for: {sql}")
        answer = self.conn.answers[sql]
        if isinstance(answer, Exception):
            raise answer
        rows = answer(params or ()) if callable(answer) else answer
        names = HELP_COLUMNS if sql == HELP else [f"c{i}" for i in range(len(rows[0]))] \
            if rows else ["c0"]
        self.description = [(n, 1, None, None, None, None, None) for n in names]
        self._rows = list(rows)

    def fetchall(self) -> list[tuple[Any, ...]]:
        rows, self._rows = self._rows, []
        return rows

    def close(self) -> None:
        pass


def connection(answers: dict[str, Answer], encryption: str | None = None
               ) -> sdk_sqlserver.MssqlConnection:
    return sdk_sqlserver.MssqlConnection(Recorded(answers), "shop", encryption=encryption)


# --- the URL options --------------------------------------------------------------------------


def test_no_option_keeps_freetds_default_encryption() -> None:
    assert _security.driver_options({}) == ("7.4", None)
    assert _security.driver_options({"encryption": "REQUIRE", "tds_version": "7.3"}) == (
        "7.3", "require")


@pytest.mark.parametrize(("options", "message"), [
    ({"encryption": "strict"}, r"^encryption='strict' must be one of off, request, require$"),
    ({"encryption": "yes"}, r"^encryption='yes' must be one of off, request, require$"),
    ({"tds_version": "8.0"}, r"^tds_version='8.0' must be one of 7.0, 7.1, 7.2, 7.3, 7.4 "
                             r"\(pymssql reads 8.0 as 7.1; TDS 8.0 strict encryption"),
])
def test_bad_values_are_one_line_errors(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as caught:
        _security.driver_options(options)
    assert "\n" not in str(caught.value)


def test_the_option_is_known_to_the_url_check() -> None:
    info = sdk_sqlserver.dialect_info()
    check_url_options(info, ConnectionConfig.from_url(
        "sqlserver://u:p@db/shop?encryption=require&tds_version=7.4"))
    with pytest.raises(ConfigurationError, match="encryption"):
        check_url_options(info, ConnectionConfig.from_url("sqlserver://u:p@db/shop?encrypt=on"))


def test_connect_passes_encryption_to_pymssql(monkeypatch: pytest.MonkeyPatch) -> None:
    import pymssql

    calls: list[dict[str, Any]] = []

    def fake_connect(**kwargs: Any) -> Recorded:
        calls.append(kwargs)
        return Recorded({})

    monkeypatch.setattr(pymssql, "connect", fake_connect)
    conn = sdk_sqlserver.connect(ConnectionConfig.from_url(
        "sqlserver://u:p@db:1433/shop?encryption=require"))
    assert calls[-1]["encryption"] == "require" and calls[-1]["tds_version"] == "7.4"
    assert conn.encryption == "require"
    conn = sdk_sqlserver.connect(ConnectionConfig.from_url("sqlserver://u:p@db/shop"))
    assert calls[-1]["encryption"] is None and conn.encryption is None


def test_a_refused_connection_never_shows_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    import pymssql

    def refuse(**kwargs: Any) -> Recorded:
        raise pymssql.OperationalError(20009, b"DB-Lib error message 20009, severity 9:\n"
                                              b"Unable to connect: Adaptive Server is "
                                              b"unavailable or does not exist (db)\n")

    monkeypatch.setattr(pymssql, "connect", refuse)
    with pytest.raises(RetriableError) as caught:
        sdk_sqlserver.connect(ConnectionConfig.from_url(
            "sqlserver://u:s3cret@db/shop?encryption=require"))
    assert "s3cret" not in str(caught.value)


# --- connection_security on recorded rows ---------------------------------------------------


def test_an_encrypted_connection_is_reported_not_verified() -> None:
    conn = connection({_security.CONNECTION_INFO: [("TRUE", "TCP", "TSQL")]}, "require")
    (report,) = sdk_sqlserver.connection_security(conn)
    assert report.encrypted and not report.verified and not report.host_checked
    assert "no option to verify the server certificate" in report.fix
    line = str(report.requirement())
    assert line.startswith("[WARN] TLS on the queries and change tables connection: encrypted")
    assert "NOT verified" in line


def test_an_unencrypted_connection_names_the_option() -> None:
    conn = connection({_security.CONNECTION_INFO: [("FALSE", "TCP", "TSQL")]}, "request")
    (report,) = sdk_sqlserver.connection_security(conn)
    assert not report.encrypted and report.fix.startswith("add ?encryption=require")


def test_the_server_says_encrypted_even_when_the_url_did_not_ask() -> None:
    """A server with Force Encryption encrypts whatever the client asked."""
    conn = connection({_security.CONNECTION_INFO: [("TRUE", "TCP", "TSQL")]})
    assert sdk_sqlserver.connection_security(conn)[0].encrypted


def test_without_view_server_state_the_url_is_reported() -> None:
    conn = connection({_security.CONNECTION_INFO: NO_VIEW_SERVER_STATE}, "require")
    (report,) = sdk_sqlserver.connection_security(conn)
    assert report.encrypted and "not readable" in report.fix
    conn = connection({_security.CONNECTION_INFO: NO_VIEW_SERVER_STATE})
    assert not sdk_sqlserver.connection_security(conn)[0].encrypted


# --- server_identity on recorded rows ---------------------------------------------------------

DATABASE_GUID = "5F3A8B61-6C2E-4D2B-9E0A-1C7D2B3E4F50"
FORK_GUID = "A1B2C3D4-E5F6-4A7B-8C9D-0E1F2A3B4C5D"
BROKER_GUID = "0D9C8B7A-6F5E-4D3C-2B1A-098765432100"


def test_identity_is_the_database_and_recovery_fork_guids() -> None:
    conn = connection({_security.RECOVERY: [(DATABASE_GUID, FORK_GUID)]})
    assert sdk_sqlserver.server_identity(conn) == {
        "database_guid": DATABASE_GUID.lower(), "recovery_fork_guid": FORK_GUID.lower()}


def test_without_the_recovery_view_the_broker_guid_identifies() -> None:
    """sys.database_recovery_status shows a database's row only to its owner or with VIEW ANY
    DATABASE; sys.databases always shows the connected database."""
    hidden_answers: list[Answer] = [[], FakeError(229, "The SELECT permission was denied")]
    for hidden in hidden_answers:
        conn = connection({_security.RECOVERY: hidden,
                           _security.BROKER: [(BROKER_GUID,)]})
        assert sdk_sqlserver.server_identity(conn) == {
            "service_broker_guid": BROKER_GUID.lower()}


# --- check_offset on recorded rows ------------------------------------------------------------


def lsn(vlf: int, block: int, slot: int = 1) -> bytes:
    """A binary(10) LSN: VLF sequence, log block, slot, big-endian."""
    return vlf.to_bytes(4, "big") + block.to_bytes(4, "big") + slot.to_bytes(2, "big")


def numeric(value: bytes) -> int:
    """The numeric(25,0) form the transaction DMVs give the same LSN."""
    return (int.from_bytes(value[:4], "big") * 10**15 + int.from_bytes(value[4:8], "big") * 10**5
            + int.from_bytes(value[8:], "big"))


HELP = "EXEC sys.sp_cdc_help_change_data_capture"
HELP_COLUMNS = ["source_schema", "source_table", "capture_instance", "object_id",
                "source_object_id", "start_lsn", "end_lsn", "supports_net_changes",
                "has_drop_pending", "role_name", "index_name", "filegroup_name", "create_date",
                "index_column_list", "captured_column_list"]
HEAD = ("SELECT t.database_transaction_begin_lsn FROM sys.dm_tran_database_transactions t "
        "JOIN sys.dm_tran_current_transaction c ON c.transaction_id = t.transaction_id "
        "WHERE t.database_id = DB_ID()")
MIN_LSN = "SELECT sys.fn_cdc_get_min_lsn(%s)"


def instance(table: str, name: str, start: bytes | None) -> tuple[Any, ...]:
    return ("dbo", table, name, 1, 2, start, None, 0, None, None, "PK_" + table, "PRIMARY",
            None, "[id]", "[id], [name]")


def server(head: bytes, instances: list[tuple[Any, ...]], minimums: dict[str, bytes]
           ) -> sdk_sqlserver.MssqlConnection:
    return connection({
        HEAD: [(numeric(head),)], HELP: instances,
        MIN_LSN: lambda params: [(minimums.get(params[0], bytes(10)),)]})


def test_an_offset_inside_the_log_passes() -> None:
    conn = server(lsn(0x40, 1), [instance("orders", "dbo_orders", lsn(0x20, 5))],
                  {"dbo_orders": lsn(0x20, 5)})
    sdk_sqlserver.check_offset(conn, make_offset(lsn(0x30, 7), lsn(0x30, 7, 2), 2))
    sdk_sqlserver.check_offset(conn, make_offset(lsn(0x40, 1)))  # a watermark at the head


def test_an_offset_past_the_end_of_the_log_is_another_database() -> None:
    conn = server(lsn(0x40, 1), [instance("orders", "dbo_orders", lsn(0x20, 5))],
                  {"dbo_orders": lsn(0x20, 5)})
    with pytest.raises(LogMismatchError) as caught:
        sdk_sqlserver.check_offset(conn, make_offset(lsn(0x50, 9)))
    message = str(caught.value)
    assert "0x00000050000000090001" in message and "0x00000040000000010001" in message
    assert "restored from an older backup" in message and "another database" in message
    assert "new checkpoint directory" in message


def test_an_offset_every_instance_has_cleaned_up_is_expired() -> None:
    conn = server(lsn(0x40, 1), [instance("orders", "dbo_orders", lsn(0x30, 1)),
                                 instance("items", "dbo_items", lsn(0x31, 1))],
                  {"dbo_orders": lsn(0x30, 1), "dbo_items": lsn(0x31, 1)})
    with pytest.raises(OffsetExpiredError) as caught:
        sdk_sqlserver.check_offset(conn, make_offset(lsn(0x20, 1)))
    message = str(caught.value)
    assert "dbo_orders, at 0x00000030000000010001" in message
    assert "cleanup job" in message and "new checkpoint directory" in message


def test_an_instance_enabled_after_the_offset_does_not_expire_it() -> None:
    """A table whose capture began after the offset starts later; the others still hold it."""
    conn = server(lsn(0x40, 1), [instance("orders", "dbo_orders", lsn(0x10, 1)),
                                 instance("late", "dbo_late", lsn(0x38, 1)),
                                 instance("pending", "dbo_pending", None)],
                  {"dbo_orders": lsn(0x10, 1), "dbo_late": lsn(0x38, 1)})
    sdk_sqlserver.check_offset(conn, make_offset(lsn(0x20, 1)))
    assert conn.raw.statements.count(MIN_LSN) == 2  # not asked of an instance not started


def test_no_capture_instance_leaves_only_the_log_end_check() -> None:
    sdk_sqlserver.check_offset(server(lsn(0x40, 1), [], {}), make_offset(lsn(0x01, 1)))
