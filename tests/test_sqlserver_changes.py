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
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pytest

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


def lsn(vlf: int, block: int, slot: int = 1) -> bytes:
    """A binary(10) LSN: VLF sequence (4 bytes), log block (4), slot (2), big-endian."""
    return vlf.to_bytes(4, "big") + block.to_bytes(4, "big") + slot.to_bytes(2, "big")


def numeric(value: bytes) -> int:
    """The numeric(25,0) form the transaction DMVs use for the same LSN."""
    return (int.from_bytes(value[:4], "big") * 10**15 + int.from_bytes(value[4:8], "big") * 10**5
            + int.from_bytes(value[8:], "big"))


ZERO_LSN = bytes(10)


class FakeError(Exception):
    """What pymssql raises for a server error: args ``(number, message bytes)``."""

    def __init__(self, number: int, message: str) -> None:
        super().__init__(number, message.encode())
        self.number = number


@dataclass
class FakeColumn:
    name: str
    type: str
    max_length: int = 4
    precision: int = 0
    scale: int = 0
    nullable: bool = True


@dataclass
class FakeTable:
    table: TableId
    columns: list[FakeColumn]
    key: list[str]
    rows: list[dict[str, Any]] = field(default_factory=list)
    tracked: bool = True


@dataclass
class FakeInstance:
    name: str
    table: TableId
    columns: list[str]
    start_lsn: bytes | None
    role: str | None = None
    changes: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class FakeServer:
    """The state of one database with CDC."""

    tables: dict[TableId, FakeTable] = field(default_factory=dict)
    instances: list[FakeInstance] = field(default_factory=list)
    max_lsns: list[bytes] = field(default_factory=list)
    """Successive answers of fn_cdc_get_max_lsn (the last one repeats): the capture job's lag."""
    scan_end: str | None = None
    head: bytes = lsn(0x30, 1)
    open_writers: list[tuple[int, bytes, int]] = field(default_factory=list)
    """(session, begin LSN, polls until it ends)."""
    cdc_enabled: bool = True
    snapshot_isolation: int = 1
    agent: str | None = "Running"
    view_server_state: bool = True
    roles: set[str] = field(default_factory=set)
    select_denied: set[TableId] = field(default_factory=set)
    tz_offset: int = 0
    commit_times: dict[bytes, str] = field(default_factory=dict)
    statements: list[str] = field(default_factory=list)
    isolation: str = "READ COMMITTED"

    def table(self, table: FakeTable) -> FakeTable:
        self.tables[table.table] = table
        return table

    def instance(self, instance: FakeInstance) -> FakeInstance:
        self.instances.append(instance)
        return instance

    def max_lsn(self) -> bytes:
        value = self.max_lsns[0] if self.max_lsns else ZERO_LSN
        if len(self.max_lsns) > 1:
            self.max_lsns.pop(0)
        return value

    def connect(self) -> sdk_sqlserver.MssqlConnection:
        conn = sdk_sqlserver.MssqlConnection(FakeConnection(self), "shop", wait_seconds=0.3,
                                             capture_wait_seconds=0.3, poll_seconds=0.0)
        conn.query("SET NOCOUNT ON")
        return conn


class FakeConnection:
    def __init__(self, server: FakeServer) -> None:
        self.server = server
        self.in_transaction = False
        self.savepoint_lsn: bytes | None = None

    def cursor(self) -> FakeCursor:
        return FakeCursor(self)

    def close(self) -> None:
        pass


def split_top(text: str) -> list[str]:
    """Split a select list on the commas outside parentheses and quotes."""
    out, depth, quote, current = [], 0, False, []
    for ch in text:
        if ch == "'":
            quote = not quote
        elif not quote and ch == "(":
            depth += 1
        elif not quote and ch == ")":
            depth -= 1
        if ch == "," and depth == 0 and not quote:
            out.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    out.append("".join(current).strip())
    return out


def fraction(text: str, digits: int) -> str:
    """The style-121 text of a stored 7-digit time value at a column scale."""
    whole, _, frac = text.partition(".")
    return whole + ("." + (frac + "0000000")[:digits] if digits else "")


class FakeCursor:
    def __init__(self, conn: FakeConnection) -> None:
        self.conn = conn
        self.server = conn.server
        self.description: list[tuple[Any, ...]] | None = None
        self._rows: list[tuple[Any, ...]] = []

    def close(self) -> None:
        pass

    def fetchall(self) -> list[tuple[Any, ...]]:
        rows, self._rows = self._rows, []
        return rows

    def fetchmany(self, n: int) -> list[tuple[Any, ...]]:
        rows, self._rows = self._rows[:n], self._rows[n:]
        return rows

    def _result(self, names: list[str], rows: list[tuple[Any, ...]]) -> None:
        self.description = [(n, 1, None, None, None, None, None) for n in names]
        self._rows = rows

    def execute(self, sql: str, params: tuple[Any, ...] | None = None) -> None:
        s = self.server
        s.statements.append(sql)
        args = list(params or ())
        self.description = None
        if sql.startswith("SET TRANSACTION ISOLATION LEVEL"):
            s.isolation = sql.rsplit("LEVEL ", 1)[1]
        elif sql in ("SET NOCOUNT ON",):
            pass
        elif sql == "BEGIN TRANSACTION":
            self.conn.in_transaction = True
        elif sql == "BEGIN TRANSACTION; SAVE TRANSACTION sdk_mark":
            self.conn.in_transaction = True
            s.head = lsn(int.from_bytes(s.head[:4], "big"), int.from_bytes(s.head[4:8], "big")
                         + 1)  # the savepoint's log record
            self.conn.savepoint_lsn = s.head
        elif sql.startswith("IF @@TRANCOUNT > 0"):
            self.conn.in_transaction = False
            self.conn.savepoint_lsn = None
        elif "sys.dm_tran_current_transaction" in sql:
            self._need_view_server_state()
            saved = self.conn.savepoint_lsn
            self._result(["database_transaction_begin_lsn"],
                         [(numeric(saved),)] if saved else [])
        elif sql.startswith("SELECT TOP 1 database_transaction_begin_lsn"):
            self._need_view_server_state()
            self._result(["database_transaction_begin_lsn"], [(numeric(s.head),)])
        elif "sys.dm_tran_session_transactions" in sql:
            self._need_view_server_state()
            rows = [(session,) for session, begin, _ in s.open_writers if numeric(begin) < args[0]]
            s.open_writers = [(a, b, n - 1) for a, b, n in s.open_writers if n > 1]
            self._result(["session_id"], rows)
        elif sql == "SELECT sys.fn_cdc_get_max_lsn()":
            self._result([""], [(s.max_lsn(),)])
        elif "sys.dm_cdc_log_scan_sessions" in sql:
            self._need_view_server_state()
            self._result(["end_lsn"], [(s.scan_end,)] if s.scan_end else [])
        elif sql == "EXEC sys.sp_cdc_help_change_data_capture":
            self._help()
        elif sql == "SELECT sys.fn_cdc_get_min_lsn(%s)":
            found = [i for i in s.instances if i.name == args[0]]
            self._result([""], [(found[0].start_lsn or ZERO_LSN if found else ZERO_LSN,)])
        elif sql == "SELECT sys.fn_cdc_increment_lsn(%s)":
            self._result([""], [((int.from_bytes(args[0], "big") + 1).to_bytes(10, "big"),)])
        elif sql == "SELECT DATEPART(TZOFFSET, SYSDATETIMEOFFSET())":
            self._result([""], [(s.tz_offset,)])
        elif "fn_cdc_get_all_changes_" in sql:
            self._changes(sql, args)
        elif "FROM sys.databases" in sql:
            self._result(["db", "cdc", "snap", "user", "login", "v"],
                         [("shop", s.cdc_enabled, s.snapshot_isolation, "sdk_cdc", "sdk_cdc",
                           16)])
        elif "sys.dm_server_services" in sql:
            self._need_view_server_state()
            self._result(["status_desc"], [(s.agent,)] if s.agent else [])
        elif sql.startswith("SELECT is_tracked_by_cdc"):
            t = self._object(args[0])
            self._result(["is_tracked_by_cdc"], [(t.tracked,)] if t else [])
        elif sql.startswith("SELECT HAS_PERMS_BY_NAME"):
            t = self._object(args[0])
            self._result([""], [(int(t is not None and t.table not in s.select_denied),)])
        elif sql == "SELECT IS_ROLEMEMBER(%s)":
            self._result([""], [(int(args[0] in s.roles),)])
        elif "FROM sys.columns c JOIN sys.types" in sql:
            t = self._object(args[0])
            self._result(["name", "type", "max_length", "precision", "scale", "is_nullable"],
                         [(c.name, c.type, c.max_length, c.precision, c.scale, c.nullable)
                          for c in (t.columns if t else [])])
        elif "FROM sys.indexes" in sql:
            t = self._object(args[0])
            self._result(["is_primary_key", "index_id", "name"],
                         [(True, 1, k) for k in (t.key if t else [])])
        else:
            m = re.fullmatch(r"SELECT (.*) FROM \[(.+)\]\.\[(.+)\] WHERE 1 = 1", sql, re.S)
            if not m:
                raise AssertionError(f"the fake SQL Server does not know: {sql}")
            table = s.tables[TableId(m[2], m[3])]
            exprs = split_top(m[1])
            self._result([f"c{i}" for i in range(len(exprs))],
                         [tuple(self._eval(e, row, table, None) for e in exprs)
                          for row in table.rows])

    def _need_view_server_state(self) -> None:
        if not self.server.view_server_state:
            raise FakeError(300, "VIEW SERVER STATE permission was denied on object 'server'")

    def _object(self, name: str) -> FakeTable | None:
        m = re.fullmatch(r"\[(.+)\]\.\[(.+)\]", name)
        assert m, name
        return self.server.tables.get(TableId(m[1], m[2]))

    def _help(self) -> None:
        names = ["source_schema", "source_table", "capture_instance", "object_id",
                 "source_object_id", "start_lsn", "end_lsn", "supports_net_changes",
                 "has_drop_pending", "role_name", "index_name", "filegroup_name", "create_date",
                 "index_column_list", "captured_column_list"]
        rows = []
        for n, i in enumerate(self.server.instances):
            if i.role and i.role not in self.server.roles:
                continue  # the procedure lists only the instances the caller may read
            rows.append((i.table.schema, i.table.name, i.name, 1000 + n, 2000 + n, i.start_lsn,
                         None, 0, None, i.role, "PK", None, dt.datetime(2024, 1, 1),
                         "[id]", ", ".join("[" + c.replace("]", "]]") + "]"
                                           for c in i.columns)))
        self._result(names, rows)

    def _changes(self, sql: str, args: list[Any]) -> None:
        m = re.fullmatch(
            r"SELECT TOP \((\d+)\) \[__\$start_lsn\], \[__\$seqval\], \[__\$operation\], (.*) "
            r"FROM cdc\.\[fn_cdc_get_all_changes_(.+?)\]\(%s, %s, N'all update old'\) "
            r"WHERE \(\[__\$start_lsn\] > %s OR \(\[__\$start_lsn\] = %s AND \(\[__\$seqval\] > "
            r"%s OR \(\[__\$seqval\] = %s AND \[__\$operation\] > %s\)\)\)\)"
            r"( AND \[__\$start_lsn\] < %s)? ORDER BY \[__\$start_lsn\], \[__\$seqval\], "
            r"\[__\$operation\]", sql, re.S)
        assert m, f"unexpected change query: {sql}"
        top, exprs, name = int(m[1]), split_top(m[2]), m[3]
        instance = next(i for i in self.server.instances if i.name == name)
        low, high = args[0], args[1]
        top_lsn = self.server.max_lsns[0] if self.server.max_lsns else ZERO_LSN
        if (instance.start_lsn is None or low < instance.start_lsn or high > top_lsn
                or low > high):
            raise FakeError(313, "An insufficient number of arguments were supplied for the "
                                 "procedure or function cdc.fn_cdc_get_all_changes_ ... .")
        after = (args[2], args[4], args[6])
        stop = args[7] if m[4] else None
        rows = [c for c in instance.changes if low <= c["__$start_lsn"] <= high
                and (c["__$start_lsn"], c["__$seqval"], c["__$operation"]) > after
                and (stop is None or c["__$start_lsn"] < stop)]
        rows.sort(key=lambda c: (c["__$start_lsn"], c["__$seqval"], c["__$operation"]))
        table = self.server.tables[instance.table]
        self._result(["__$start_lsn", "__$seqval", "__$operation",
                      *[f"c{i}" for i in range(len(exprs))]],
                     [(c["__$start_lsn"], c["__$seqval"], c["__$operation"],
                       *(self._eval(e, c, table, instance) for e in exprs)) for c in rows[:top]])

    def _eval(self, expr: str, row: dict[str, Any], table: FakeTable,
              instance: FakeInstance | None) -> Any:
        """The value of one select-list expression (the forms SQL Server documents)."""
        expr = re.sub(r" AS \[[^\]]*\]$", "", expr)
        if expr == "NULL":
            return None
        if expr == "CONVERT(varchar(23), sys.fn_cdc_map_lsn_to_time([__$start_lsn]), 121)":
            return self.server.commit_times.get(row["__$start_lsn"])
        m = re.fullmatch(r"sys\.fn_cdc_is_bit_set\(sys\.fn_cdc_get_column_ordinal\(N'(.+)', "
                         r"N'(.+)'\), \[__\$update_mask\]\)", expr)
        if m:
            assert instance is not None and m[1] == instance.name
            ordinal = instance.columns.index(m[2]) + 1
            mask = int.from_bytes(row["__$update_mask"], "big")  # ordinal 1 = lowest bit
            return (mask >> (ordinal - 1)) & 1
        m = re.fullmatch(r"(?:CONVERT\(([\w()]+), )?(?:CONVERT\(datetime2\(7\), SWITCHOFFSET\()?"
                         r"\[(.+?)\](?:, '\+00:00'\)\))?(?:, (\d+))?\)?", expr)
        assert m, f"unexpected expression {expr}"
        target, name, style = m[1], m[2], m[3]
        column = next(c for c in table.columns if c.name == name)
        value = row.get(name)
        if value is None:
            return None
        kind = column.type
        if target is None:  # what pymssql gives without a conversion
            return value
        if "SWITCHOFFSET" in expr:
            local, _, offset = value.rpartition(" ")
            sign = -1 if offset[0] == "-" else 1
            hours, minutes = offset[1:].split(":")
            base = dt.datetime.fromisoformat(local[:26])
            utc = base - sign * dt.timedelta(hours=int(hours), minutes=int(minutes))
            return utc.strftime("%Y-%m-%d %H:%M:%S.%f") + local[26:27]
        if kind == "datetime2":
            return fraction(value, column.scale)
        if kind == "datetime":
            return fraction(value, 3)
        if kind == "smalldatetime":
            return fraction(value, 3)
        if kind == "time":
            return fraction(value, column.scale)
        if kind == "date":
            assert style == "23"
            return value
        if kind in ("decimal", "numeric"):
            return format(value, "f")
        if kind in ("money", "smallmoney"):
            assert style == "2", "money needs style 2 to keep four decimals"
            return format(value.quantize(Decimal("0.0001")), "f")
        if kind == "uniqueidentifier":
            return str(value).upper()
        if target.startswith("nvarchar"):
            return str(value)
        return value


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


def change(instance: FakeInstance, commit: bytes, seq: int, op: int, mask: int = 0,
           **values: Any) -> None:
    instance.changes.append({"__$start_lsn": commit,
                             "__$seqval": commit[:8] + seq.to_bytes(2, "big"),
                             "__$operation": op, "__$update_mask": mask.to_bytes(2, "big"),
                             **values})


def schemas(conn: sdk_sqlserver.MssqlConnection, *names: str) -> list[TableSchema]:
    return [sdk_sqlserver.describe_table(conn, TableId("dbo", n)) for n in names]


def events(stream: Iterator[ChangeEvent | Heartbeat]) -> list[ChangeEvent]:
    out = list(stream)
    assert all(isinstance(e, ChangeEvent) for e in out)
    return out  # type: ignore[return-value]


def mark(commit: bytes) -> Any:
    return _lsn.make_offset(commit)


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
