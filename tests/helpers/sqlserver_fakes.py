"""A SQL Server stand-in for the dialect's offline tests: a pymssql-shaped connection serving
each statement the dialect sends with result sets shaped as Microsoft documents them."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import sdk_sqlserver
from sdk import (
    ChangeEvent,
    Heartbeat,
    TableId,
)
from sdk_sqlserver import _lsn


def lsn(vlf: int, block: int, slot: int = 1) -> bytes:
    """A binary(10) LSN: VLF sequence (4 bytes), log block (4), slot (2), big-endian."""
    return vlf.to_bytes(4, "big") + block.to_bytes(4, "big") + slot.to_bytes(2, "big")


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


def change(instance: FakeInstance, commit: bytes, seq: int, op: int, mask: int = 0,
           **values: Any) -> None:
    instance.changes.append({"__$start_lsn": commit,
                             "__$seqval": commit[:8] + seq.to_bytes(2, "big"),
                             "__$operation": op, "__$update_mask": mask.to_bytes(2, "big"),
                             **values})


def events(stream: Iterator[ChangeEvent | Heartbeat]) -> list[ChangeEvent]:
    out = list(stream)
    assert all(isinstance(e, ChangeEvent) for e in out)
    return out  # type: ignore[return-value]


def mark(commit: bytes) -> Any:
    return _lsn.make_offset(commit)


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
