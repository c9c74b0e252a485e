"""The SQL Server dialect's log reading, watermarks and preflight, offline.

No SQL Server can run here, so :class:`FakeServer` stands in for one: a pymssql-shaped
connection (``cursor().execute(sql, params)``, ``description``, ``fetchmany``) that serves each
statement the dialect sends with result sets shaped as Microsoft documents them
(``sys.sp_cdc_help_change_data_capture`` columns, ``__$start_lsn``/``__$seqval`` as binary(10),
``__$operation`` 1-4, ``__$update_mask``), raises error 313 for a change-function range outside
the instance's validity interval, and fails the test on any statement it does not know. The
dialect code runs unchanged against it.
"""

from __future__ import annotations

import datetime as dt
import itertools
import uuid
from decimal import Decimal
from typing import Any

import pytest
from helpers.sqlserver_fakes import (
    FakeColumn,
    FakeCursor,
    FakeError,
    FakeInstance,
    FakeServer,
    FakeTable,
    change,
    events,
    lsn,
    mark,
    numeric,
)

import sdk_sqlserver
from sdk import (
    ChangeEvent,
    DialectManager,
    FatalSyncError,
    Heartbeat,
    OffsetExpiredError,
    RetriableError,
    TableId,
    TableSchema,
)
from sdk_sqlserver import _changes, _lsn

# --- the fake server --------------------------------------------------------------------------


# --- helpers ----------------------------------------------------------------------------------


def orders_server() -> FakeServer:
    """Two captured tables, dbo.orders (id, status, note nvarchar(max)) and dbo.items."""
    s = FakeServer(scan_end="000000ff:00000000:0001")  # the capture job has scanned it all
    s.table(FakeTable(TableId("dbo", "orders"),
                      [FakeColumn("id", "int", nullable=False),
                       FakeColumn("status", "nvarchar", 40),
                       FakeColumn("note", "nvarchar", -1)], ["id"]))
    s.table(FakeTable(TableId("dbo", "items"),
                      [FakeColumn("sku", "varchar", 20, nullable=False),
                       FakeColumn("qty", "bigint", 8)], ["sku"]))
    s.instance(FakeInstance("dbo_orders", TableId("dbo", "orders"), ["id", "status", "note"],
                            lsn(0x20, 1)))
    s.instance(FakeInstance("dbo_items", TableId("dbo", "items"), ["sku", "qty"], lsn(0x20, 1)))
    return s


def schemas(conn: sdk_sqlserver.MssqlConnection, *names: str) -> list[TableSchema]:
    return [sdk_sqlserver.describe_table(conn, TableId("dbo", n)) for n in names]


# --- offsets ----------------------------------------------------------------------------------


def test_offsets_compare_as_the_binary_lsns_then_seqval_then_operation() -> None:
    values = [lsn(1, 2, 3), lsn(1, 2, 4), lsn(1, 3, 0), lsn(2, 0, 0), lsn(0xFFFFFFFF, 0, 0)]
    offsets = [_lsn.make_offset(v, seq, op) for v in values for seq in (lsn(0, 1), lsn(0, 2))
               for op in (1, 3, 4)]
    for a in offsets:
        for b in offsets:
            key_a = (_lsn.lsn_bytes(str(a["lsn"])), _lsn.lsn_bytes(str(a["seq"])), a["op"])
            key_b = (_lsn.lsn_bytes(str(b["lsn"])), _lsn.lsn_bytes(str(b["seq"])), b["op"])
            expected = (key_a > key_b) - (key_a < key_b)
            assert sdk_sqlserver.compare_offset(a, b) == expected
    assert _lsn.make_offset("0x0000002A000001F40003").fields == {
        "lsn": "0000002a000001f40003", "op": 0, "seq": "0" * 20}
    with pytest.raises(ValueError):
        _lsn.lsn_hex(b"\x00" * 9)


def test_numeric_and_colon_lsns_map_to_the_binary_form() -> None:
    assert _lsn.from_numeric(numeric(lsn(0x2A, 0x1F4, 3))) == lsn(0x2A, 0x1F4, 3).hex()
    assert _lsn.from_numeric("42000000050000003") == lsn(42, 500, 3).hex()
    assert _lsn.from_colon_text("0000002a:000001f4:0003") == lsn(0x2A, 0x1F4, 3).hex()
    assert _lsn.increment(lsn(1, 2, 0xFFFF).hex()) == lsn(1, 3, 0).hex()


def test_the_dialect_passes_plugin_validation() -> None:
    pytest.importorskip("pymssql", reason="DialectManager.get needs the sqlserver extra's driver")
    manager = DialectManager(load_entry_points=False)
    manager.register(sdk_sqlserver, "sqlserver")
    dialect = manager.get("sqlserver")
    assert dialect.info.url_schemes == ("sqlserver", "mssql")
    assert not dialect.implements("prepare_capture")


# --- reading and pairing ----------------------------------------------------------------------


def test_interleaved_transactions_of_two_tables_come_in_commit_order() -> None:
    s = orders_server()
    orders, items = s.instances
    change(orders, lsn(0x21, 5), 1, 2, id=1, status="new")
    change(items, lsn(0x21, 5), 2, 2, sku="A", qty=3)        # same transaction, later change
    change(items, lsn(0x21, 9), 1, 2, sku="B", qty=1)
    change(orders, lsn(0x21, 9), 2, 1, id=1, status="new")   # delete in the same transaction
    change(orders, lsn(0x22, 1), 1, 2, id=2, status="paid")
    s.max_lsns = [lsn(0x22, 1)]
    s.commit_times[lsn(0x21, 5)] = "2024-03-01 10:00:00.250"
    conn = s.connect()
    got = events(sdk_sqlserver.stream_log(conn, schemas(conn, "orders", "items"),
                                          mark(lsn(0x21, 1)), mark(lsn(0x23, 1))))
    assert [(str(e.table), e.op, e.key) for e in got] == [
        ("dbo.orders", "c", (1,)), ("dbo.items", "c", ("A",)), ("dbo.items", "c", ("B",)),
        ("dbo.orders", "d", (1,)), ("dbo.orders", "c", (2,))]
    assert got[0].commit_ts == int(dt.datetime(2024, 3, 1, 10, 0, 0, 250000,
                                               tzinfo=dt.UTC).timestamp() * 1_000_000)
    assert got[3].before == (1, "new", None) and got[3].after is None
    offsets = [e.offset for e in got]
    assert all(sdk_sqlserver.compare_offset(a, b) < 0 for a, b in itertools.pairwise(offsets))


def test_a_transaction_larger_than_a_page_is_read_in_order_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_changes, "PAGE_ROWS", 4)
    s = orders_server()
    orders, items = s.instances
    big = lsn(0x21, 7)
    for i in range(1, 12):
        change(orders, big, 2 * i, 2, id=i, status="s")
        change(items, big, 2 * i + 1, 2, sku=f"K{i:02}", qty=i)
    change(orders, big, 40, 3, id=5, status="s")     # an update whose images straddle a page
    change(orders, big, 40, 4, 0b10, id=5, status="t")
    s.max_lsns = [big]
    conn = s.connect()
    got = events(sdk_sqlserver.stream_log(conn, schemas(conn, "orders", "items"),
                                          mark(lsn(0x21, 1)), mark(lsn(0x22, 1))))
    assert len(got) == 23
    assert [e.key for e in got[:4]] == [(1,), ("K01",), (2,), ("K02",)]
    assert got[-1].op == "u" and got[-1].before == (5, "s", None)
    assert got[-1].after == (5, "t", None)
    pages = [q for q in s.statements if "fn_cdc_get_all_changes_" in q]
    assert len(pages) > 6  # paged, not one unbounded result


def test_update_images_pair_into_one_event_and_key_changes_carry_old_key() -> None:
    s = orders_server()
    orders = s.instances[0]
    c = lsn(0x21, 3)
    change(orders, c, 1, 3, id=7, status="a", note="long text")
    change(orders, c, 1, 4, 0b010, id=7, status="b", note="long text")
    change(orders, c, 2, 3, id=7, status="b", note=None)   # note unchanged: NULL before image
    change(orders, c, 2, 4, 0b011, id=8, status="b", note="long text")
    change(orders, c, 3, 3, id=8, status="b", note=None)   # note really changed to NULL...
    change(orders, c, 3, 4, 0b100, id=8, status="b", note=None)
    s.max_lsns = [c]
    conn = s.connect()
    got = events(sdk_sqlserver.stream_log(conn, schemas(conn, "orders"), mark(c),
                                          mark(lsn(0x21, 4))))
    assert [e.op for e in got] == ["u", "u", "u"]
    assert got[0].before == (7, "a", "long text") and got[0].after == (7, "b", "long text")
    assert got[0].old_key is None
    assert got[1].key == (8,) and got[1].old_key == (7,)
    assert got[1].before == (7, "b", "long text")  # filled from the after image: mask bit unset
    assert got[2].before == (8, "b", None)         # mask bit set: the NULL is real
    assert got[0].offset["op"] == 3


def test_an_unpaired_before_image_is_an_error() -> None:
    s = orders_server()
    change(s.instances[0], lsn(0x21, 3), 1, 3, id=7, status="a")
    change(s.instances[0], lsn(0x21, 3), 2, 2, id=8, status="a")
    s.max_lsns = [lsn(0x21, 3)]
    conn = s.connect()
    with pytest.raises(FatalSyncError, match="no after image"):
        list(sdk_sqlserver.stream_log(conn, schemas(conn, "orders"), mark(lsn(0x21, 1)),
                                      mark(lsn(0x22, 1))))


def test_bounded_reads_are_half_open_and_repeatable() -> None:
    s = orders_server()
    orders = s.instances[0]
    for block in (2, 3, 4):
        change(orders, lsn(0x21, block), 1, 2, id=block, status="x")
        change(orders, lsn(0x21, block), 2, 2, id=10 + block, status="x")
    s.max_lsns = [lsn(0x21, 4)]
    conn = s.connect()
    table = schemas(conn, "orders")
    whole = events(sdk_sqlserver.stream_log(conn, table, mark(lsn(0x21, 1)), mark(lsn(0x22, 1))))
    middle = whole[1].offset
    end = whole[4].offset
    part = events(sdk_sqlserver.stream_log(conn, table, middle, end))
    assert part == whole[1:4]
    assert events(sdk_sqlserver.stream_log(conn, table, middle, end)) == part
    assert events(sdk_sqlserver.stream_log(conn, table, end, end)) == []


# --- capture lag, retention, schema changes ---------------------------------------------------


def test_a_bounded_read_waits_for_the_capture_job_to_pass_its_end() -> None:
    s = orders_server()
    change(s.instances[0], lsn(0x21, 5), 1, 2, id=1, status="late")
    # the capture job is behind the mark for three polls, then catches up
    s.max_lsns = [lsn(0x21, 1), lsn(0x21, 1), lsn(0x21, 1), lsn(0x21, 5), lsn(0x22, 2)]
    s.scan_end = None
    conn = s.connect()
    conn.capture_wait_seconds = 5
    got = events(sdk_sqlserver.stream_log(conn, schemas(conn, "orders"), mark(lsn(0x21, 1)),
                                          mark(lsn(0x22, 1))))
    assert [e.key for e in got] == [(1,)]


def test_a_stalled_capture_job_gives_an_error_naming_the_agent() -> None:
    s = orders_server()
    s.max_lsns = [lsn(0x21, 1)]
    s.scan_end = "00000021:00000009:0001"
    conn = s.connect()
    with pytest.raises(RetriableError, match=r"SQL Server Agent.*cdc\.shop_capture"):
        list(sdk_sqlserver.stream_log(conn, schemas(conn, "orders"), mark(lsn(0x21, 1)),
                                      mark(lsn(0x22, 1))))


def test_an_idle_database_ends_the_wait_on_the_log_scan_sessions() -> None:
    s = orders_server()
    change(s.instances[0], lsn(0x21, 5), 1, 2, id=1, status="x")
    s.max_lsns = [lsn(0x21, 5)]          # no change since: the max LSN stays below the mark
    s.scan_end = "00000022:00000001:0001"
    conn = s.connect()
    got = events(sdk_sqlserver.stream_log(conn, schemas(conn, "orders"), mark(lsn(0x21, 1)),
                                          mark(lsn(0x22, 1))))
    assert [e.key for e in got] == [(1,)]  # and no range past the max LSN (error 313)


def test_a_start_below_the_retention_window_is_an_expired_offset() -> None:
    s = orders_server()
    s.instances[0].start_lsn = lsn(0x25, 1)  # the cleanup job moved the low end
    s.max_lsns = [lsn(0x26, 1)]
    conn = s.connect()
    with pytest.raises(OffsetExpiredError, match="new snapshot"):
        list(sdk_sqlserver.stream_log(conn, schemas(conn, "orders"), mark(lsn(0x21, 1)),
                                      mark(lsn(0x26, 1))))


def test_error_313_from_the_change_function_is_an_expired_offset() -> None:
    s = orders_server()
    s.max_lsns = [lsn(0x26, 1)]
    conn = s.connect()
    table = schemas(conn, "orders")
    # cleanup runs between the retention check and the read
    original = FakeCursor._changes

    def cleaned(self: FakeCursor, sql: str, args: list[Any]) -> None:
        self.server.instances[0].start_lsn = lsn(0x25, 1)
        original(self, sql, args)

    FakeCursor._changes = cleaned  # type: ignore[method-assign]
    try:
        with pytest.raises(OffsetExpiredError, match="cleanup job"):
            list(sdk_sqlserver.stream_log(conn, table, mark(lsn(0x21, 1)), mark(lsn(0x26, 1))))
    finally:
        FakeCursor._changes = original  # type: ignore[method-assign]


def test_a_schema_change_switches_to_the_new_capture_instance_at_its_start_lsn() -> None:
    s = orders_server()
    old = s.instances[0]
    old.columns = ["id", "status"]  # the note column was added later
    new = s.instance(FakeInstance("dbo_orders_v2", TableId("dbo", "orders"),
                                  ["id", "status", "note"], lsn(0x21, 6)))
    change(old, lsn(0x21, 3), 1, 2, id=1, status="before")
    for instance in (old, new):       # after the new instance starts, both capture each change
        change(instance, lsn(0x21, 8), 1, 2, id=2, status="after", note="n")
    s.max_lsns = [lsn(0x21, 8)]
    conn = s.connect()
    got = events(sdk_sqlserver.stream_log(conn, schemas(conn, "orders"), mark(lsn(0x21, 1)),
                                          mark(lsn(0x22, 1))))
    assert [e.after for e in got] == [(1, "before", None), (2, "after", "n")]
    # a read that starts after the switch touches only the new instance
    s.statements.clear()
    got = events(sdk_sqlserver.stream_log(conn, schemas(conn, "orders"), mark(lsn(0x21, 7)),
                                          mark(lsn(0x22, 1))))
    assert [e.key for e in got] == [(2,)]
    assert not any("fn_cdc_get_all_changes_dbo_orders](" in q for q in s.statements)


def test_an_open_ended_read_yields_changes_then_heartbeats_past_the_max_lsn() -> None:
    s = orders_server()
    change(s.instances[0], lsn(0x21, 5), 1, 2, id=1, status="x")
    s.max_lsns = [lsn(0x21, 5)]
    conn = s.connect()
    stream = sdk_sqlserver.stream_log(conn, schemas(conn, "orders"), mark(lsn(0x21, 1)), None)
    first = next(stream)
    beat = next(stream)
    assert isinstance(first, ChangeEvent) and first.key == (1,)
    assert isinstance(beat, Heartbeat)
    assert beat.offset == _lsn.make_offset(lsn(0x21, 5, 2))  # fn_cdc_increment_lsn(max)
    assert sdk_sqlserver.compare_offset(first.offset, beat.offset) < 0
    again = next(stream)
    assert again == beat  # idle: the same heartbeat, no change twice
    stream.close()


# --- watermarks -------------------------------------------------------------------------------


def test_current_offset_is_a_forced_log_head_after_the_open_writers_end() -> None:
    s = orders_server()
    s.max_lsns = [lsn(0x21, 1)]  # far behind: the watermark must not come from it
    s.open_writers = [(55, lsn(0x2F, 1), 3), (56, lsn(0x31, 1), 100)]
    conn = s.connect()
    first = sdk_sqlserver.current_offset(conn)
    assert first == _lsn.make_offset(lsn(0x30, 2))
    assert not s.open_writers[0:1] or s.open_writers[0][0] != 55  # waited until 55 ended
    assert not conn.raw.in_transaction  # the savepoint's transaction was rolled back
    second = sdk_sqlserver.current_offset(conn)
    assert sdk_sqlserver.compare_offset(first, second) < 0


def test_current_offset_names_the_sessions_it_waited_for() -> None:
    s = orders_server()
    s.open_writers = [(61, lsn(0x2F, 1), 10**9)]
    conn = s.connect()
    with pytest.raises(RetriableError, match=r"sessions \[61\]"):
        sdk_sqlserver.current_offset(conn)


def test_current_offset_without_view_server_state_says_what_to_grant() -> None:
    s = orders_server()
    s.view_server_state = False
    conn = s.connect()
    with pytest.raises(FakeError):
        sdk_sqlserver.current_offset(conn)
    assert not conn.raw.in_transaction


def test_read_range_runs_under_snapshot_isolation() -> None:
    s = orders_server()
    s.tables[TableId("dbo", "orders")].rows = [{"id": 1, "status": "a", "note": None}]
    conn = s.connect()
    (table,) = schemas(conn, "orders")
    from sdk import SnapshotSplit

    split = SnapshotSplit(table.table, 0, None, None)
    batches = sdk_sqlserver.read_range(conn, table, split, 10)
    assert next(batches) == [(1, "a", None)]
    assert s.isolation == "SNAPSHOT" and conn.raw.in_transaction
    assert list(batches) == []
    assert s.isolation == "READ COMMITTED" and not conn.raw.in_transaction


# --- preflight --------------------------------------------------------------------------------


def test_preflight_names_each_missing_setting_with_its_fix() -> None:
    s = orders_server()
    s.cdc_enabled = False
    s.snapshot_isolation = 0
    s.agent = "Stopped"
    s.tables[TableId("dbo", "items")].tracked = False
    s.select_denied.add(TableId("dbo", "items"))
    conn = s.connect()
    checks = {r.name: r for r in sdk_sqlserver.preflight(
        conn, [TableId("dbo", "orders"), TableId("dbo", "items")])}
    missing = {n: r.fix for n, r in checks.items() if not r.ok}
    assert missing == {
        "CDC enabled on the database": "USE [shop]; EXEC sys.sp_cdc_enable_db  -- as a member "
                                       "of sysadmin",
        "snapshot isolation allowed": "ALTER DATABASE [shop] SET ALLOW_SNAPSHOT_ISOLATION ON",
        "SQL Server Agent running": "start the SQL Server Agent service (in Docker: "
                                    "MSSQL_AGENT_ENABLED=true)",
        "CDC enabled on dbo.items": "EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', "
                                    "@source_name = N'items', @role_name = NULL, "
                                    "@supports_net_changes = 0  -- as db_owner",
        "SELECT on dbo.items": "GRANT SELECT ON [dbo].[items] TO [sdk_cdc]",
    }


def test_preflight_checks_gating_roles_permissions_and_started_instances() -> None:
    s = orders_server()
    s.instances[0].role = "cdc_readers"
    s.instances[1].start_lsn = None
    s.roles.add("cdc_readers")
    conn = s.connect()
    checks = {r.name: r for r in sdk_sqlserver.preflight(
        conn, [TableId("dbo", "orders"), TableId("dbo", "items")])}
    assert checks["member of gating role cdc_readers (dbo_orders)"].ok
    assert not checks["capture instance dbo_items started"].ok
    assert all(r.ok for n, r in checks.items() if n != "capture instance dbo_items started")
    s.roles.clear()
    s.view_server_state = False
    checks = {r.name: r for r in sdk_sqlserver.preflight(conn, [TableId("dbo", "orders")])}
    assert checks["capture instance of dbo.orders readable"].fix == \
        "ALTER ROLE <the instance's @role_name> ADD MEMBER [sdk_cdc]"
    grant = checks["VIEW SERVER PERFORMANCE STATE (log position for watermarks)"]
    assert not grant.ok and grant.fix == "USE master; GRANT VIEW SERVER PERFORMANCE STATE TO " \
                                         "[sdk_cdc]"
    agent = checks["SQL Server Agent running"]
    assert not agent.ok and not agent.required  # cannot tell: a warning, not a refusal


def test_earliest_offset_is_the_highest_instance_minimum() -> None:
    s = orders_server()
    s.instances[1].start_lsn = lsn(0x24, 1)
    conn = s.connect()
    assert sdk_sqlserver.earliest_offset(conn) == _lsn.make_offset(lsn(0x24, 1))


def test_a_uniqueidentifier_and_decimal_key_are_read_as_text_and_decimal() -> None:
    s = FakeServer(scan_end="000000ff:00000000:0001")
    s.table(FakeTable(TableId("dbo", "g"), [FakeColumn("id", "uniqueidentifier", 16,
                                                        nullable=False),
                                            FakeColumn("amount", "decimal", 17, 38, 10)],
                      ["id"]))
    ci = s.instance(FakeInstance("dbo_g", TableId("dbo", "g"), ["id", "amount"], lsn(0x20, 1)))
    guid = uuid.UUID("6f9619ff-8b86-d011-b42d-00c04fc964ff")
    amount = Decimal("1234567890123456789012345678.0123456789")
    change(ci, lsn(0x21, 1), 1, 2, id=guid, amount=amount)
    s.max_lsns = [lsn(0x21, 1)]
    conn = s.connect()
    (got,) = events(sdk_sqlserver.stream_log(conn, schemas(conn, "g"), mark(lsn(0x21, 1)),
                                             mark(lsn(0x22, 1))))
    assert got.key == ("6F9619FF-8B86-D011-B42D-00C04FC964FF",)
    assert got.after == (got.key[0], amount)
