"""The SQL Server dialect: snapshots with pymssql under SNAPSHOT isolation, changes from the
CDC change tables (``cdc.fn_cdc_get_all_changes_<capture instance>``), read by :mod:`._changes`.

Offsets are ``(commit LSN, __$seqval, __$operation)`` (:mod:`._lsn`).

Watermarks (docs/design.md, 'The visibility hazard'). ``sys.fn_cdc_get_max_lsn()`` is where the
asynchronous capture job has got to, not the log head, so it cannot be a watermark: a change
committed before it is taken may lie above it. ``current_offset`` instead forces an LSN at the log
head (a savepoint in a throw-away transaction writes a log record;
``sys.dm_tran_database_transactions`` gives its LSN), which is above every change already committed,
and then waits until no user transaction that wrote to the log below that LSN is still open, so
every change below it is visible to a SELECT started afterwards. A bounded ``stream_log`` waits
until the capture job has passed its end (``fn_cdc_get_max_lsn() >= end``, or a finished log scan
session past it), so the change tables hold every change of the range before it is read. The cost:
VIEW SERVER STATE, one tiny transaction per watermark, a wait while writers that started before it
are open, and up to one capture-job cycle (``pollinginterval``, 5 s by default) per bounded read.

URL options: ``?exact_time=1`` (100 ns temporal columns as text, see :mod:`._types`),
``wait_seconds=60`` (open writers a watermark waits for), ``capture_wait_seconds=120`` (how long
a read waits for the capture job), ``poll_seconds=1`` (open-ended reads), ``encryption=``
(FreeTDS's TLS level, :mod:`._security`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sdk import (
    Capability,
    ChangeEvent,
    ConfigurationError,
    ConnectionConfig,
    ConnectionSecurity,
    DialectInfo,
    DriverMissingError,
    Heartbeat,
    Key,
    Offset,
    Requirement,
    RetriableError,
    Row,
    SnapshotSplit,
    TableId,
    TableSchema,
    TableStats,
    hookimpl,
)

from . import _security
from ._changes import load_instances, read_changes
from ._lsn import NAME, ZERO, from_colon_text, from_numeric, lsn_bytes, lsn_hex, make_offset, parts
from ._types import key_range, key_sql, logical_column, q, row_converter, select_expression

_TRUE = ("1", "true", "yes", "on")


@dataclass
class MssqlConnection:
    """A pymssql connection (autocommit) and the dialect's options."""

    raw: Any
    database: str
    exact_time: bool = False
    wait_seconds: float = 60.0
    capture_wait_seconds: float = 120.0
    poll_seconds: float = 1.0
    encryption: str | None = None
    """The URL's ``encryption`` (None: FreeTDS's default), for ``connection_security``."""

    def query(self, sql: str, args: Sequence[Any] = ()) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Run one statement; its column names and all its rows (none for a statement without
        a result set)."""
        cur = self.raw.cursor()
        try:
            cur.execute(*statement(sql, args))
            if not cur.description:
                return [], []
            return [d[0] for d in cur.description], [tuple(r) for r in cur.fetchall()]
        finally:
            cur.close()

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self.query(sql, args)[1]

    def close(self) -> None:
        self.raw.close()


_TOKENS = re.compile(r"\[(?:[^\]]|\]\])*\]|'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|[^\['\"]+|.",
                     re.DOTALL)
"""A statement's bracketed identifiers, string literals, quoted identifiers and the text
between them."""


def bind(sql: str, args: Sequence[Any]) -> bytes:
    """``sql`` as the bytes pymssql sends, each ``%s`` outside identifiers and literals replaced
    by pymssql's own literal of the next argument (raw bytes for binary values, hence bytes).
    pymssql would read ``%s`` and ``%d`` anywhere, inside ``[user%data]`` too, and has no
    escape for them."""
    from pymssql import _mssql

    values = list(args)
    out: list[bytes] = []
    for token in _TOKENS.findall(sql):
        pieces = [token] if token[0] in "['\"" else token.split("%s")
        out.append(pieces[0].encode())
        for piece in pieces[1:]:
            if not values:
                raise ValueError(f"fewer arguments than placeholders in {sql[:200]!r}")
            out.append(_mssql.substitute_params("%s", (values.pop(0),)))
            out.append(piece.encode())
    if values:
        raise ValueError(f"more arguments than placeholders in {sql[:200]!r}")
    return b"".join(out)


def statement(sql: str, args: Sequence[Any]) -> tuple[str | bytes, tuple[Any, ...] | None]:
    """What to hand ``cursor.execute``: no arguments when there are none (a ``%`` in the text
    then stays as it is), the text bound here (:func:`bind`) when an identifier or literal
    holds a ``%``, else the text and the arguments for pymssql to bind."""
    if not args:
        return sql, None
    if any(t[0] in "['\"" and "%" in t for t in _TOKENS.findall(sql)):
        return bind(sql, args), None
    return sql, tuple(args)


def _table(table: TableId) -> str:
    return f"{q(table.schema)}.{q(table.name)}"


@hookimpl
def dialect_info() -> DialectInfo:
    return DialectInfo(
        name=NAME, title="SQL Server (CDC change tables)", drivers=("pymssql",),
        extra="sqlserver", url_schemes=("sqlserver", "mssql"),
        capabilities=frozenset({Capability.BEFORE_IMAGES}),
        url_options=(
            ("connect_timeout", "seconds to wait for a connection (default 10)"),
            ("tds_version", "the TDS protocol version (default 7.4)"),
            ("exact_time", "100 ns temporal columns as text (default off)"),
            ("wait_seconds", "how long a watermark waits for open transactions (default 60)"),
            ("capture_wait_seconds", "how long a bounded read waits for the capture job "
                                     "(default 120)"),
            ("poll_seconds", "how often an open stream polls (default 1)"),
            *_security.URL_OPTIONS,
        ))


@hookimpl
def connect(config: ConnectionConfig) -> MssqlConnection:
    try:
        import pymssql
    except ImportError:
        raise DriverMissingError("the sqlserver dialect needs pymssql: "
                                 "pip install 'sdk[sqlserver]'") from None
    options = config.options
    tds_version, encryption = _security.driver_options(options)
    try:
        raw = pymssql.connect(server=config.host or "127.0.0.1", port=str(config.port or 1433),
                              user=config.user, password=config.password,
                              database=config.database or "master", autocommit=True,
                              login_timeout=int(options.get("connect_timeout", "10")),
                              charset="UTF-8", appname="sdk",
                              tds_version=tds_version, encryption=encryption)
    except (pymssql.OperationalError, pymssql.InterfaceError) as exc:
        kind = RetriableError if is_retriable(exc) else ConfigurationError
        raise kind(f"cannot connect to {config.masked_url}: {_server_message(exc)}") from None
    conn = MssqlConnection(raw, config.database or "master",
                           options.get("exact_time", "").lower() in _TRUE,
                           float(options.get("wait_seconds", "60")),
                           float(options.get("capture_wait_seconds", "120")),
                           float(options.get("poll_seconds", "1")),
                           encryption)
    conn.query("SET NOCOUNT ON")
    return conn


def _server_message(exc: BaseException) -> str:
    """The first line of a pymssql error (its args end with the server's message bytes)."""
    last = exc.args[-1] if exc.args else exc
    text = last.decode(errors="replace") if isinstance(last, bytes) else str(last)
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


RETRIABLE = {
    20003, 20004, 20006, 20009, 20017, 20047,  # DB-Lib: timeouts, read/write failed, no server
    233, 10053, 10054, 10060,  # transport: no process on the pipe, connection reset or aborted
    1205,  # chosen as deadlock victim
    40197, 40501, 40613, 49918, 49919, 49920,  # Azure SQL: busy, failing over, unavailable
}


@hookimpl
def is_retriable(error: BaseException) -> bool:
    """DB-Lib and server codes for lost or refused connections, a deadlock victim and Azure
    SQL's transient states; ``InterfaceError`` is a connection already closed."""
    import pymssql

    if isinstance(error, pymssql.InterfaceError):
        return True
    return isinstance(error, pymssql.OperationalError) and bool(error.args) and \
        error.args[0] in RETRIABLE


# --- preflight --------------------------------------------------------------------------------


def _try_rows(conn: MssqlConnection, sql: str, args: Sequence[Any] = ()
              ) -> list[tuple[Any, ...]] | None:
    """The rows, or None when the login may not run the query."""
    try:
        return conn.rows(sql, args)
    except Exception:
        return None


@hookimpl
def preflight(conn: MssqlConnection, tables: Sequence[TableId]) -> list[Requirement]:
    (db, cdc_on, snapshot_state, user, login, version) = conn.rows(
        "SELECT DB_NAME(), is_cdc_enabled, snapshot_isolation_state, USER_NAME(), "
        "SUSER_SNAME(), CONVERT(int, SERVERPROPERTY('ProductMajorVersion')) "
        "FROM sys.databases WHERE database_id = DB_ID()")[0]
    checks = [
        Requirement("CDC enabled on the database", bool(cdc_on),
                    f"sys.databases.is_cdc_enabled is {int(bool(cdc_on))} for {db}",
                    f"USE {q(db)}; EXEC sys.sp_cdc_enable_db  -- as a member of sysadmin"),
        Requirement("snapshot isolation allowed", snapshot_state == 1,
                    f"snapshot_isolation_state is {snapshot_state} (splits are read under "
                    "SNAPSHOT isolation, without locks)",
                    f"ALTER DATABASE {q(db)} SET ALLOW_SNAPSHOT_ISOLATION ON"),
    ]
    agent = _try_rows(conn, "SELECT status_desc FROM sys.dm_server_services "
                            "WHERE servicename LIKE N'SQL Server Agent%'")
    if agent:
        running = str(agent[0][0]).lower() == "running"
        checks.append(Requirement(
            "SQL Server Agent running", running,
            f"the Agent is {agent[0][0]}: the CDC capture job cannot run without it",
            "start the SQL Server Agent service (in Docker: MSSQL_AGENT_ENABLED=true)"))
    else:
        checks.append(Requirement(
            "SQL Server Agent running", False,
            "cannot tell: sys.dm_server_services is not visible to this login; the CDC "
            "capture job runs in the Agent", "make sure SQL Server Agent is running",
            required=False))
    permission = "VIEW SERVER PERFORMANCE STATE" if (version or 0) >= 16 else \
        "VIEW SERVER STATE"
    head = _try_rows(conn, _HEAD_PROBE)
    checks.append(Requirement(
        f"{permission} (log position for watermarks)", bool(head),
        "sys.dm_tran_database_transactions is not readable" if not head else "",
        f"USE master; GRANT {permission} TO {q(login)}"))
    instances = load_instances(conn.query) if cdc_on else {}
    for table in tables:
        tracked = conn.rows("SELECT is_tracked_by_cdc FROM sys.tables WHERE object_id = "
                            "OBJECT_ID(%s)", [_table(table)])
        ok = bool(tracked and tracked[0][0])
        checks.append(Requirement(
            f"CDC enabled on {table}", ok,
            "sys.tables.is_tracked_by_cdc is 0" if not ok else "",
            f"EXEC sys.sp_cdc_enable_table @source_schema = N'{table.schema}', "
            f"@source_name = N'{table.name}', @role_name = NULL, @supports_net_changes = 0  "
            "-- as db_owner"))
        (can_select,) = conn.rows("SELECT HAS_PERMS_BY_NAME(%s, 'OBJECT', 'SELECT')",
                                  [_table(table)])[0]
        checks.append(Requirement(f"SELECT on {table}", bool(can_select), "",
                                  f"GRANT SELECT ON {_table(table)} TO {q(user)}"))
        chain = instances.get(table, [])
        if ok and cdc_on and not chain:
            checks.append(Requirement(
                f"capture instance of {table} readable", False,
                "sys.sp_cdc_help_change_data_capture does not list it for this login (the "
                "gating role, or SELECT on the captured columns, is missing)",
                f"ALTER ROLE <the instance's @role_name> ADD MEMBER {q(user)}"))
        for instance in chain:
            if instance.role:
                (member,) = conn.rows("SELECT IS_ROLEMEMBER(%s)", [instance.role])[0]
                checks.append(Requirement(
                    f"member of gating role {instance.role} ({instance.name})",
                    member == 1, "",
                    f"ALTER ROLE {q(instance.role)} ADD MEMBER {q(user)}"))
            checks.append(Requirement(
                f"capture instance {instance.name} started", instance.start_lsn is not None,
                "the capture job has not processed it yet (start_lsn is NULL)",
                "wait for the capture job, or start it: EXEC sys.sp_cdc_start_job "
                "@job_type = N'capture'"))
    return checks


# prepare_capture is deliberately not implemented: enabling CDC needs sysadmin/db_owner and
# creates Agent jobs, an administrator's decision; preflight prints the exact statements.


# --- tables and splits ------------------------------------------------------------------------


@hookimpl
def list_tables(conn: MssqlConnection) -> list[TableId]:
    return [TableId(s, t) for s, t in conn.rows(
        "SELECT s.name, t.name FROM sys.tables t JOIN sys.schemas s ON s.schema_id = "
        "t.schema_id WHERE t.is_ms_shipped = 0 AND s.name <> N'cdc' "
        "AND t.name <> N'systranschemas' ORDER BY s.name, t.name")]


@hookimpl
def describe_table(conn: MssqlConnection, table: TableId) -> TableSchema:
    rows = conn.rows(
        "SELECT c.name, CASE WHEN ty.is_user_defined = 1 AND ty.is_assembly_type = 0 "
        "THEN TYPE_NAME(c.system_type_id) ELSE ty.name END, c.max_length, c.precision, "
        "c.scale, c.is_nullable FROM sys.columns c JOIN sys.types ty "
        "ON ty.user_type_id = c.user_type_id WHERE c.object_id = OBJECT_ID(%s) "
        "ORDER BY c.column_id", [_table(table)])
    if not rows:
        raise ConfigurationError(f"table {table} does not exist or is not readable")
    columns = tuple(logical_column(n, t, int(m), int(p), int(s), bool(nullable),
                                   conn.exact_time) for n, t, m, p, s, nullable in rows)
    indexes: dict[int, tuple[bool, list[str]]] = {}
    for is_pk, index_id, name in conn.rows(
            "SELECT i.is_primary_key, i.index_id, c.name FROM sys.indexes i "
            "JOIN sys.index_columns ic ON ic.object_id = i.object_id AND ic.index_id = "
            "i.index_id JOIN sys.columns c ON c.object_id = ic.object_id AND c.column_id = "
            "ic.column_id WHERE i.object_id = OBJECT_ID(%s) AND i.is_unique = 1 AND "
            "i.has_filter = 0 AND ic.is_included_column = 0 ORDER BY i.index_id, "
            "ic.key_ordinal", [_table(table)]):
        indexes.setdefault(int(index_id), (bool(is_pk), []))[1].append(name)
    not_null = {c.name for c in columns if not c.nullable}
    primary = next((tuple(cols) for is_pk, cols in indexes.values() if is_pk), ())
    unique = tuple(tuple(cols) for is_pk, cols in indexes.values()
                   if not is_pk and set(cols) <= not_null)
    return TableSchema(table, columns, primary, unique)


def _key_columns(table: TableSchema) -> list[Any]:
    by_name = {c.name: c for c in table.columns}
    return [by_name[k] for k in table.key]


def _key_select(table: TableSchema) -> tuple[str, str]:
    """The key as selected (converted like the rows) and the ORDER BY that matches Python."""
    columns = _key_columns(table)
    return (", ".join(select_expression(c) for c in columns),
            ", ".join(key_sql(c)[0] for c in columns))


@hookimpl
def table_stats(conn: MssqlConnection, table: TableSchema) -> TableStats:
    select, order = _key_select(table)
    desc = ", ".join(f"{key_sql(c)[0]} DESC" for c in _key_columns(table))
    convert = row_converter(tuple(_key_columns(table)))
    first = conn.rows(f"SELECT TOP 1 {select} FROM {_table(table.table)} ORDER BY {order}")
    last = conn.rows(f"SELECT TOP 1 {select} FROM {_table(table.table)} ORDER BY {desc}")
    estimate = conn.rows("SELECT SUM(rows) FROM sys.partitions WHERE object_id = OBJECT_ID(%s)"
                         " AND index_id IN (0, 1)", [_table(table.table)])
    rows = int(estimate[0][0] or 0) if estimate else 0
    return TableStats(convert(first[0]) if first else None,
                      convert(last[0]) if last else None, rows)


@hookimpl
def next_boundary(conn: MssqlConnection, table: TableSchema, start: Key | None, size: int
                  ) -> Key | None:
    select, order = _key_select(table)
    where, args = key_range(_key_columns(table), start, None)
    rows = conn.rows(f"SELECT {select} FROM {_table(table.table)} WHERE {where} ORDER BY "
                     f"{order} OFFSET %s ROWS FETCH NEXT 1 ROWS ONLY", [*args, size])
    return row_converter(tuple(_key_columns(table)))(rows[0]) if rows else None


# --- the four fetch tasks ---------------------------------------------------------------------

_HEAD_PROBE = ("SELECT TOP 1 database_transaction_begin_lsn FROM "
               "sys.dm_tran_database_transactions")


def log_head(conn: MssqlConnection) -> int:
    """A fresh LSN at the end of the log, as ``numeric(25,0)``: a savepoint makes this
    session's transaction write a log record, whose LSN lies above every commit before it."""
    conn.query("BEGIN TRANSACTION; SAVE TRANSACTION sdk_mark")
    try:
        rows = conn.rows(
            "SELECT t.database_transaction_begin_lsn FROM sys.dm_tran_database_transactions t "
            "JOIN sys.dm_tran_current_transaction c ON c.transaction_id = t.transaction_id "
            "WHERE t.database_id = DB_ID()")
    finally:
        conn.query("IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION")
    if not rows or rows[0][0] is None:
        raise ConfigurationError(
            "cannot read the transaction log position (sys.dm_tran_database_transactions): "
            "grant VIEW SERVER STATE (VIEW SERVER PERFORMANCE STATE on SQL Server 2022) to the "
            "sync's login; see sdk check")
    return int(rows[0][0])


@hookimpl
def current_offset(conn: MssqlConnection) -> Offset:
    """The log head, once every user transaction that wrote below it has ended: every change
    below it is then committed and visible, and every later commit lies above it."""
    head = log_head(conn)
    deadline = time.monotonic() + conn.wait_seconds
    while True:
        open_writers = conn.rows(
            "SELECT s.session_id FROM sys.dm_tran_database_transactions t "
            "JOIN sys.dm_tran_session_transactions s ON s.transaction_id = t.transaction_id "
            "WHERE t.database_id = DB_ID() AND t.database_transaction_begin_lsn < %s "
            "AND s.session_id <> @@SPID", [head])
        if not open_writers:
            return make_offset(from_numeric(head))
        if time.monotonic() > deadline:
            sessions = sorted({int(r[0]) for r in open_writers})
            raise RetriableError(
                f"transactions stayed open for {conn.wait_seconds:.0f} s in sessions "
                f"{sessions}: a watermark waits for the writers in progress at it to end "
                "(?wait_seconds=N)")
        time.sleep(0.01)


@hookimpl
def read_range(conn: MssqlConnection, table: TableSchema, split: SnapshotSplit,
               fetch_size: int) -> Iterator[Sequence[Row]]:
    """The split under SNAPSHOT isolation: no shared locks, one consistent view."""
    where, args = key_range(_key_columns(table), split.start, split.end)
    columns = ", ".join(select_expression(c) for c in table.columns)
    convert = row_converter(table.columns)
    conn.query("SET TRANSACTION ISOLATION LEVEL SNAPSHOT")
    conn.query("BEGIN TRANSACTION")
    cur = conn.raw.cursor()
    try:
        cur.execute(*statement(f"SELECT {columns} FROM {_table(table.table)} WHERE {where}",
                               args))
        while batch := cur.fetchmany(fetch_size):
            yield [convert(tuple(r)) for r in batch]
    finally:
        with contextlib.suppress(Exception):
            while cur.fetchmany(fetch_size):  # a closed generator: drain the result first
                pass
        cur.close()
        conn.query("IF @@TRANCOUNT > 0 COMMIT TRANSACTION")
        conn.query("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")


def max_lsn(conn: MssqlConnection) -> str | None:
    """``sys.fn_cdc_get_max_lsn()``: the last commit LSN the capture job wrote (None before
    its first run)."""
    raw = conn.rows("SELECT sys.fn_cdc_get_max_lsn()")[0][0]
    return lsn_hex(raw) if raw is not None and any(bytes(raw)) else None


def scanned_lsn(conn: MssqlConnection) -> str | None:
    """The end of the log the capture job's last finished scan session reached
    (``sys.dm_cdc_log_scan_sessions``), or None if not visible. In an idle database the max
    LSN may stay below a watermark while the scans have passed it."""
    rows = _try_rows(conn, "SELECT end_lsn FROM sys.dm_cdc_log_scan_sessions "
                           "WHERE end_time IS NOT NULL AND session_id > 0")
    best: str | None = None
    for (text,) in rows or []:
        with contextlib.suppress(ValueError, AttributeError):
            lsn = from_colon_text(text)
            best = lsn if best is None or lsn > best else best
    return best


def wait_for_capture(conn: MssqlConnection, lsn: str) -> str | None:
    """Wait until the capture job has processed the log up to ``lsn``; return the max LSN."""
    deadline = time.monotonic() + conn.capture_wait_seconds
    while True:
        top = max_lsn(conn)
        if top is not None and top >= lsn:
            return top
        scanned = scanned_lsn(conn)
        if scanned is not None and scanned >= lsn:
            return top
        if time.monotonic() > deadline:
            raise RetriableError(
                f"the CDC capture job has not reached LSN 0x{lsn} after "
                f"{conn.capture_wait_seconds:.0f} s (sys.fn_cdc_get_max_lsn() is "
                f"0x{top or '0'}): check that SQL Server Agent is running and that the job "
                f"cdc.{conn.database}_capture runs (EXEC sys.sp_cdc_start_job @job_type = "
                "N'capture'); ?capture_wait_seconds=N waits longer")
        time.sleep(min(conn.poll_seconds, 0.5))


def _utc_offset(conn: MssqlConnection) -> int:
    return int(conn.rows("SELECT DATEPART(TZOFFSET, SYSDATETIMEOFFSET())")[0][0])


@hookimpl
def stream_log(conn: MssqlConnection, tables: Sequence[TableSchema], start: Offset,
               end: Offset | None) -> Iterator[ChangeEvent | Heartbeat]:
    begin = parts(start)
    instances = load_instances(conn.query)
    offset_minutes = _utc_offset(conn)
    if end is not None:
        stop = parts(end)
        if stop <= begin:
            return
        top = wait_for_capture(conn, stop[0])
        if top is None:
            return  # the capture job never wrote a change: the range is empty
        yield from read_changes(conn.query, tables, instances, begin, stop, min(stop[0], top),
                                offset_minutes)
        return
    position = begin
    while True:
        top = max_lsn(conn)
        if top is not None and top >= position[0]:
            yield from read_changes(conn.query, tables, instances, position, None, top,
                                    offset_minutes)
            (raw,) = conn.rows("SELECT sys.fn_cdc_increment_lsn(%s)", [lsn_bytes(top)])[0]
            position = (lsn_hex(raw), ZERO, 0)
            instances = load_instances(conn.query)  # a new instance after a schema change
        yield Heartbeat(make_offset(*position))
        time.sleep(conn.poll_seconds)


@hookimpl
def compare_offset(a: Offset, b: Offset) -> int:
    x, y = parts(a), parts(b)
    return (x > y) - (x < y)


@hookimpl
def earliest_offset(conn: MssqlConnection) -> Offset | None:
    """The lowest LSN every capture instance still holds (the highest of their minimums)."""
    lows = []
    for chain in load_instances(conn.query).values():
        (raw,) = conn.rows("SELECT sys.fn_cdc_get_min_lsn(%s)", [chain[0].name])[0]
        if raw is not None and any(bytes(raw)):
            lows.append(lsn_hex(raw))
    return make_offset(max(lows)) if lows else None


@hookimpl
def offset_at_time(conn: MssqlConnection, timestamp: dt.datetime) -> Offset | None:
    """``sys.fn_cdc_map_time_to_lsn('smallest greater than or equal', t)`` (server time)."""
    local = timestamp.astimezone(dt.UTC) + dt.timedelta(minutes=_utc_offset(conn))
    (raw,) = conn.rows("SELECT sys.fn_cdc_map_time_to_lsn(N'smallest greater than or equal', "
                       "CONVERT(datetime, %s, 121))",
                       [local.strftime("%Y-%m-%d %H:%M:%S.%f")[:23]])[0]
    return make_offset(raw) if raw is not None and any(bytes(raw)) else None


# --- TLS, and the database a checkpoint belongs to --------------------------------------------


@hookimpl
def connection_security(conn: MssqlConnection) -> list[ConnectionSecurity]:
    """Encrypted or not (``sys.dm_exec_connections``); never verified through pymssql."""
    return _security.security(conn.rows, conn.encryption)


@hookimpl
def server_identity(conn: MssqlConnection) -> dict[str, str]:
    """The database's GUIDs (``database_guid``, ``recovery_fork_guid``): never a name."""
    return _security.identity(conn.rows)


@hookimpl
def check_offset(conn: MssqlConnection, offset: Offset) -> None:
    """The offset's LSN must lie at or below the log's end (not ``fn_cdc_get_max_lsn``, which
    lags the log by the capture job's cycle) and at or above some capture instance's
    ``fn_cdc_get_min_lsn``."""
    lsn = parts(offset)[0]
    head = from_numeric(log_head(conn))
    minimums = []
    for chain in load_instances(conn.query).values():
        for instance in chain:
            if instance.start_lsn is not None:
                (raw,) = conn.rows("SELECT sys.fn_cdc_get_min_lsn(%s)", [instance.name])[0]
                minimums.append((instance.name, raw))
    _security.check(lsn, head, minimums)
