"""The MySQL and MariaDB dialect: snapshots with pymysql, changes from the binlog read on a
replication connection of its own and decoded by the dialect.

Visibility (docs/design.md, 'The visibility hazard'): a binlog position is written before the engine
commit makes a transaction visible, so the raw ``SHOW BINLOG STATUS`` position is not a safe
watermark. On MariaDB and Percona Server, ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` reports the
exact binlog position of its read view (``Binlog_snapshot_file/position``): ``current_offset`` takes
one (every change below it is visible to any later read) and ``begin_snapshot`` reads each split
inside one (low == high, no backfill). Upstream MySQL has no such status: there the offset is
the raw position and the window is not closed (see docs/dialects/mysql.md).
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sdk import (
    Capability,
    ChangeEvent,
    Column,
    ConfigurationError,
    ConnectionConfig,
    DialectInfo,
    DriverMissingError,
    Key,
    LogicalType,
    LogItem,
    Offset,
    OffsetExpiredError,
    Requirement,
    RetriableError,
    Row,
    SnapshotSplit,
    SnapshotView,
    TableId,
    TableSchema,
    TableStats,
    hookimpl,
)
from sdk.dialect.apply import (
    LEDGER,
    NetChanges,
    check_target_columns,
    ledger_tables,
    net_changes,
    write_transaction,
)
from sdk.dialect.checksum import Checksum
from sdk.dialect.sql import lexicographic_range, with_condition

from . import _arrow, _checksum, _target, _tls, _visibility
from ._binlog import CONNECTION_LOST, read_changes
from ._connect import open_connection
from ._lineage import _quoted, _text, refuse_unlisted
from ._lineage import check_offset as check_offset
from ._lineage import locate_offset as locate_offset
from ._lineage import server_identity as server_identity
from ._names import _table, q, qp
from ._offsets import (
    NAME,
    MariadbGtidState,
    canonical_mariadb_gtid,
    gtid_of,
    make_offset,
    parts,
    position_key,
)
from ._rights import _account, _grants, held, target_rights
from ._rows import TableMap, describe_column, storage_matches
from ._tls import connection_security as connection_security
from ._types import logical_column, normalizer, select_term, zero_date, zero_dates

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    import pyarrow as pa

SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")
HEARTBEAT_SECONDS = 0.5  # an open-ended stream_log's heartbeat period (option heartbeat_seconds)
READ_TIMEOUT_SECONDS = 60
"""Silence after which a binlog connection counts as dead (option ``read_timeout``): the server
sends events or heartbeats, so a connection quiet this long hangs (a dropped network path, a
frozen proxy) and is reopened rather than waited on for ever."""
HASHES_FETCHED = 10_000  # keys and hashes row_hashes fetches at a time
MAX_GTID_TEXT = 1024  # a longer MySQL GTID set is left out of offsets
_STATUS_STATEMENTS = ("SHOW BINARY LOG STATUS", "SHOW BINLOG STATUS", "SHOW MASTER STATUS")


@dataclass
class MySqlConnection:
    """A pymysql connection plus what the binlog reader needs to open its own."""

    raw: Any
    settings: dict[str, Any]
    database: str | None
    snapshot_status: bool
    mariadb: bool
    heartbeat_seconds: float = HEARTBEAT_SECONDS
    in_view: bool = False
    status_sql: str | None = None  # the binlog status statement this server accepts
    out_of_range: str = "error"  # a target's values MySQL cannot hold: error or null
    batch: bool = False  # inside an apply_transaction block: writes are savepoints in it
    zero_dates: str = "error"  # a source's dates Python cannot hold: BadValue (error) or None
    closes_window: bool = False  # upstream MySQL with GTIDs: heads wait for flushed commits
    gtid_mark: tuple[str, int, str] | None = None
    """MariaDB: the last binlog position this connection knows the GTID position of (a
    split's watermark), from which the next one's is carried forward."""
    _binlogs: list[str] = field(default_factory=list)

    def cursor(self) -> Any:
        return self.raw.cursor()

    def query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.raw.cursor() as cur:
            cur.execute(sql, args or None)  # no args: '%' in the text stays as it is
            return list(cur.fetchall())

    def close(self) -> None:
        self.raw.close()


@hookimpl
def dialect_info() -> DialectInfo:
    return DialectInfo(
        name=NAME, title="MySQL / MariaDB (binlog)", drivers=("pymysql", "pymysqlreplication"),
        extra="mysql", url_schemes=("mysql", "mariadb"),
        capabilities=frozenset({Capability.BEFORE_IMAGES, Capability.FILTERED_READS,
                                Capability.SCHEMA_CHANGES}),
        url_options=(
            ("heartbeat_seconds", "binlog heartbeat period, seconds (default 0.5)"),
            ("read_timeout", "seconds a binlog read may hang before it is reopened (default 60; "
                             "at least two heartbeats)"),
            ("connect_timeout", "seconds to wait for a connection (default 10)"),
            ("out_of_range", "as a target: a value MySQL cannot hold is an error (default) or "
                             "null"),
            ("zero_dates", "as a source: a date Python cannot hold (MySQL's zero date, a zero "
                           "year, month or day) is an error (default; errors.mode says what "
                           "follows) or null"),
            *_tls.URL_OPTIONS,
        ))


@hookimpl
def connect(config: ConnectionConfig) -> MySqlConnection:
    """A connection to the URL's server; of a URL naming several (one replication topology),
    to the first that takes writes (``read_only`` off: the primary), else to the first that
    answers. A sync on it follows the primary: after a failover its restart lands on the new
    one, and the checkpoint moves there by GTID."""
    if not config.hosts:
        return _connect_one(config)
    answered: list[MySqlConnection] = []
    failures: list[str] = []
    try:
        for host, port in config.hosts:
            try:
                conn = _connect_one(config.with_host(host, port))
            except RetriableError as exc:
                failures.append(str(exc))
                continue
            ((read_only,),) = conn.query("SELECT @@GLOBAL.read_only")
            if not int(read_only):
                return conn
            answered.append(conn)
        if answered:
            first = answered.pop(0)
            log.warning("%s: no host takes writes (all read_only); reading from %s:%s",
                        config.masked_url, first.settings["host"], first.settings["port"])
            return first
        raise RetriableError(f"no host of {config.masked_url} answered: "
                             + "; ".join(failures))
    finally:
        for other in answered:
            other.close()


def _connect_one(config: ConnectionConfig) -> MySqlConnection:
    try:
        import pymysql
    except ImportError:
        raise DriverMissingError("the mysql dialect needs pymysql: pip install 'sdk[mysql]'") \
            from None
    try:
        heartbeat = float(config.options.get("heartbeat_seconds", HEARTBEAT_SECONDS))
    except ValueError:
        heartbeat = 0.0
    if not heartbeat > 0:
        raise ConfigurationError("heartbeat_seconds must be a positive number of seconds")
    try:
        read_timeout = int(config.options.get("read_timeout", READ_TIMEOUT_SECONDS))
    except ValueError:
        read_timeout = 0
    if read_timeout < 2 * heartbeat:
        raise ConfigurationError(
            "read_timeout must be a whole number of seconds at least twice heartbeat_seconds "
            f"({heartbeat:g}): an idle server sends nothing but heartbeats")
    zero_policy = zero_dates(config.options)
    try:  # TLS files are opened here, on the driver first: a bad one stops before any task
        tls = _tls.parse(config.options)
        tls_kwargs = _tls.connection_kwargs(tls)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{config.masked_url}: {exc}") from None
    # every connection of the dialect opens from these (binlog reader, side connections)
    settings = {"host": config.host or "127.0.0.1", "port": config.port or 3306,
                "user": config.user or "root", "password": config.password or "",
                "read_timeout": read_timeout, **tls_kwargs}
    try:
        raw = open_connection(True, host=settings["host"], port=settings["port"],
                              user=settings["user"], password=settings["password"],
                              database=config.database, charset="utf8mb4", autocommit=True,
                              init_command=SESSION_SETTINGS,
                              connect_timeout=int(config.options.get("connect_timeout", "10")),
                              **tls_kwargs)
    except pymysql.err.OperationalError as exc:
        reason = _tls.failure(exc, tls, settings["host"])
        if reason is None and exc.args and exc.args[0] in CONNECTION_LOST:
            # no answer: a passing fault, maybe
            raise RetriableError(f"cannot connect to {config.masked_url}: {exc.args[-1]}") \
                from None
        raise ConfigurationError(
            f"cannot connect to {config.masked_url}: {reason or exc.args[-1]}") from None
    with raw.cursor() as cur:
        cur.execute("SELECT VERSION()")
        (version,) = cur.fetchone()
        cur.execute("SHOW STATUS LIKE 'binlog_snapshot_file'")
        snapshot_status = cur.fetchone() is not None
    conn = MySqlConnection(raw, settings, config.database, snapshot_status,
                           "mariadb" in version.lower(), heartbeat,
                           out_of_range=_target.out_of_range(config.options),
                           zero_dates=zero_policy)
    conn.closes_window = not conn.mariadb and not snapshot_status and \
        _visibility.gtid_mode_on(conn)
    return conn


RETRIABLE_CODES = CONNECTION_LOST | {
    2055,  # lost connection (system error)
    1053,  # server shutdown in progress
    1205,  # lock wait timeout
    1213,  # deadlock
}


@hookimpl
def is_retriable(error: BaseException) -> bool:
    """Lost, refused or dropped connections, a server shutting down, lock waits and
    deadlocks; ``InterfaceError`` is pymysql's word for a connection already closed."""
    import pymysql

    if isinstance(error, pymysql.err.InterfaceError):
        return True
    return isinstance(error, pymysql.err.OperationalError | pymysql.err.InternalError) and \
        bool(error.args) and error.args[0] in RETRIABLE_CODES


# --- preflight --------------------------------------------------------------------------------


_SETTINGS = [
    ("log_bin", "ON", "start the server with log_bin = mysql-bin (needs a restart)"),
    ("binlog_format", "ROW", "SET GLOBAL binlog_format = 'ROW' (and in my.cnf)"),
    ("binlog_row_image", "FULL", "SET GLOBAL binlog_row_image = 'FULL' (and in my.cnf)"),
    ("binlog_row_metadata", "FULL", "SET GLOBAL binlog_row_metadata = 'FULL' (and in my.cnf)"),
]


@hookimpl
def preflight(conn: MySqlConnection, tables: Sequence[TableId]) -> list[Requirement]:
    variables = dict(conn.query(
        "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin', 'binlog_format', "
        "'binlog_row_image', 'binlog_row_metadata', 'server_id', 'expire_logs_days', "
        "'binlog_expire_logs_seconds')"))
    checks = []
    for name, wanted, fix in _SETTINGS:
        value = str(variables.get(name, "missing"))
        ok = value.upper() in (wanted, "1" if wanted == "ON" else wanted)
        checks.append(Requirement(f"{name}={wanted}", ok, f"{name} is {value}", fix))
    server_id = int(variables.get("server_id", 0))
    checks.append(Requirement("server_id set", server_id != 0, f"server_id is {server_id}",
                              "SET GLOBAL server_id = 1 (any unique non-zero id)"))
    seconds = int(variables.get("binlog_expire_logs_seconds", 0) or 0) or \
        int(float(variables.get("expire_logs_days", 0) or 0) * 86400)
    checks.append(Requirement(
        "binlog retention of a day or more", seconds == 0 or seconds >= 86400,
        f"binlogs expire after {seconds} s" if seconds else "binlogs never expire",
        "SET GLOBAL binlog_expire_logs_seconds = 604800"))
    if not conn.mariadb and not conn.snapshot_status:  # upstream MySQL: see _visibility
        checks.append(Requirement(
            "gtid_mode=ON (watermarks wait for flushed transactions to commit)",
            conn.closes_window, "without GTIDs a transaction written to the binlog but not yet "
            "committed when a split is read can be missed",
            "SET GLOBAL enforce_gtid_consistency = ON, then gtid_mode OFF_PERMISSIVE -> "
            "ON_PERMISSIVE -> ON", required=False))
    grants = _grants(conn)
    account = _account(conn)
    for privilege, alternatives in (("REPLICATION SLAVE", {"REPLICATION SLAVE",
                                                           "REPLICATION REPLICA"}),
                                    ("REPLICATION CLIENT", {"REPLICATION CLIENT",
                                                            "BINLOG MONITOR"})):
        ok = bool(grants.get("*.*", set()) & (alternatives | {"ALL PRIVILEGES"}))
        checks.append(Requirement(f"privilege {privilege}", ok, "",
                                  f"GRANT {privilege} ON *.* TO {account}"))
    for table in tables:
        ok = "SELECT" in held(grants, table.schema, table.name)
        checks.append(Requirement(f"SELECT on {table}", ok, "",
                                  f"GRANT SELECT ON {_table(table)} TO {account}"))
    return checks


# --- tables and splits ------------------------------------------------------------------------


@hookimpl
def list_tables(conn: MySqlConnection) -> list[TableId]:
    sql = ("SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE "
           "TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA NOT IN %s")
    args: list[Any] = [SYSTEM_SCHEMAS]
    if conn.database:
        sql += " AND TABLE_SCHEMA = %s"
        args.append(conn.database)
    return [TableId(s, n) for s, n in conn.query(sql + " ORDER BY 1, 2", args)]


@hookimpl
def describe_table(conn: MySqlConnection, table: TableId) -> TableSchema:
    rows = conn.query(
        "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, NUMERIC_PRECISION, "
        "NUMERIC_SCALE, COLLATION_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
        "AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION", (table.schema, table.name))
    if not rows:
        raise ConfigurationError(f"table {table} does not exist or is not readable")
    columns = []
    for name, data_type, column_type, nullable, precision, scale, collation in rows:
        source = f"{column_type} COLLATE {collation}" if collation else column_type
        columns.append(logical_column(name, data_type, source, nullable == "YES",
                                      precision, scale))
    indexes: dict[str, list[str]] = {}
    for index, _, column in conn.query(
            "SELECT INDEX_NAME, SEQ_IN_INDEX, COLUMN_NAME FROM information_schema.STATISTICS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND NON_UNIQUE = 0 "
            "ORDER BY INDEX_NAME, SEQ_IN_INDEX", (table.schema, table.name)):
        indexes.setdefault(index, []).append(column)
    not_null = {c.name for c in columns if not c.nullable}
    primary = tuple(indexes.pop("PRIMARY", ()))
    unique = tuple(tuple(cols) for cols in indexes.values() if set(cols) <= not_null)
    return TableSchema(table, tuple(columns), primary, unique)


CODE_POINT_ORDERED = frozenset({"ascii", "utf8", "utf8mb3", "utf8mb4", "ucs2", "utf16",
                                "utf32"})
"""Character sets whose binary collation orders text as its characters' code points, as
Python does (a single-byte set's orders its bytes: latin1's 0x80 is U+20AC)."""


def _key_expressions(table: TableSchema, quote: Callable[[str], str] = qp) -> list[str]:
    """Key columns as SQL, quoted with ``quote`` (:func:`qp` for statements with parameters);
    text with a non-binary collation compares under its binary twin, so the database and
    Python agree on key order (docs/design.md, 'Keys and half-open ranges': keys compare as
    Python tuples), and text of a character set whose binary collation orders bytes that do
    not sort as code points (latin1, cp1251...) as utf8mb4 (no index serves that order)."""
    out = []
    by_name = {c.name: c for c in table.columns}
    for name in table.key:
        column = by_name[name]
        _, _, collation = column.source_type.partition(" COLLATE ")
        charset = collation.split("_")[0]
        if column.type is not LogicalType.STRING or not collation:
            out.append(quote(name))
        elif charset not in CODE_POINT_ORDERED:
            out.append(f"CONVERT({quote(name)} USING utf8mb4) COLLATE utf8mb4_bin")
        elif not collation.endswith("_bin"):
            out.append(f"{quote(name)} COLLATE {charset}_bin")
        else:
            out.append(quote(name))
    return out


def _key_range(table: TableSchema, start: Key | None, end: Key | None
               ) -> tuple[str, list[Any]]:
    """``start <= key < end`` spelled out lexicographically, which the range optimiser serves
    from the index for compound keys too."""
    return lexicographic_range(_key_expressions(table), start, end)


SESSION_SETTINGS = ("SET time_zone = '+00:00', sql_mode = CONCAT_WS(',', "
                    "NULLIF(@@SESSION.sql_mode, ''), 'STRICT_ALL_TABLES')")
"""Every connection's session: UTC, and strict writes, so a value a target column cannot hold
(a key longer than its VARCHAR) is refused, never cut or changed silently, whatever the
server's own ``sql_mode`` (reads are not affected)."""

_DATES = (LogicalType.DATE, LogicalType.TIMESTAMP, LogicalType.TIMESTAMP_TZ)


def _normalized_rows(table: TableSchema, rows: Sequence[tuple[Any, ...]], policy: str,
                     columns: Sequence[Column] | None = None) -> list[Row]:
    """Rows as SELECT gave them on the dialect's connection, brought to the dialect's values.
    Its conversions made each TIMESTAMP an aware UTC datetime, so dates and timestamps only
    need a zero date (the text pymysql leaves) made a BadValue, or None under ``policy``
    (the ``zero_dates`` option) ``null``. ``columns``: what the rows hold, if not the
    table's columns (its key's)."""
    converters = [(i, zero_date(policy) if c.type in _DATES else f)
                  for i, c in enumerate(columns or table.columns)
                  if (f := normalizer(c, policy))]
    if not converters:
        return list(rows)
    out = []
    for row in rows:
        values = list(row)
        for i, convert in converters:
            values[i] = convert(values[i])
        out.append(tuple(values))
    return out


@hookimpl
def table_stats(conn: MySqlConnection, table: TableSchema) -> TableStats:
    keys = ", ".join(_key_expressions(table, q))  # these two statements have no parameters
    desc = ", ".join(f"{k} DESC" for k in _key_expressions(table, q))
    names = ", ".join(q(k) for k in table.key)
    first = conn.query(f"SELECT {names} FROM {_table(table.table)} ORDER BY {keys} LIMIT 1")
    last = conn.query(f"SELECT {names} FROM {_table(table.table)} ORDER BY {desc} LIMIT 1")
    estimate = conn.query("SELECT TABLE_ROWS FROM information_schema.TABLES WHERE "
                          "TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                          (table.table.schema, table.table.name))
    rows = int(estimate[0][0] or 0) if estimate else 0
    return TableStats(tuple(first[0]) if first else None, tuple(last[0]) if last else None,
                      rows)


@hookimpl
def next_boundary(conn: MySqlConnection, table: TableSchema, start: Key | None, size: int
                  ) -> Key | None:
    where, args = _key_range(table, start, None)
    names = ", ".join(qp(k) for k in table.key)
    rows = conn.query(f"SELECT {names} FROM {_table(table.table, True)} WHERE {where} ORDER BY "
                      f"{', '.join(_key_expressions(table))} LIMIT 1 OFFSET %s", [*args, size])
    return tuple(rows[0]) if rows else None


# --- the four fetch tasks ---------------------------------------------------------------------


def _status_row(conn: MySqlConnection) -> tuple[Any, ...]:
    """The row of the binlog status: File, Position, ..., and on MySQL Executed_Gtid_Set last.
    The statement is ``SHOW BINARY LOG STATUS`` on MySQL 8.2+ (8.4 removed ``SHOW MASTER
    STATUS``), ``SHOW BINLOG STATUS`` on MariaDB 10.5.2+, ``SHOW MASTER STATUS`` before; the
    first one the server accepts is remembered on the connection (no failing query per call)."""
    import pymysql

    rows: list[tuple[Any, ...]] = []
    denied = None
    if conn.status_sql:
        rows = conn.query(conn.status_sql)
    else:
        for statement in _STATUS_STATEMENTS:
            try:
                rows = conn.query(statement)
            except pymysql.err.MySQLError as exc:  # another spelling exists on this server
                if exc.args and exc.args[0] in ACCESS_DENIED:
                    denied = exc
                continue
            conn.status_sql = statement
            break
    if rows:
        return rows[0]
    if denied is not None and not conn.status_sql:
        raise ConfigurationError(
            f"the capture user may not read the binlog position ({denied.args[1]}): "
            f"GRANT REPLICATION CLIENT ON *.* TO {_account(conn)} (MariaDB 10.5+: BINLOG "
            "MONITOR)") from None
    raise ConfigurationError("the server reports no binlog position: start it with log_bin "
                             "(see sdk check)")


ACCESS_DENIED = (1227, 1045, 1044, 1142, 1143)
"""The server's "you may not" errors: a privilege missing (specific, database, table or
column access denied)."""


def _mysql_gtid(text: Any) -> str | None:
    """MySQL's executed GTID set as offset text: newlines removed; None when GTIDs are off or
    the set is too long to copy into every offset (a history of many servers)."""
    if not isinstance(text, str):
        return None
    text = text.replace("\n", "").replace("\r", "").strip()
    return text if text and len(text) <= MAX_GTID_TEXT else None


def _status_offset(conn: MySqlConnection) -> Offset:
    """The binlog head; on upstream MySQL with GTIDs only once every transaction below it is
    committed and visible (see ``_visibility``), so it is a safe watermark."""
    row = _status_row(conn)
    if conn.closes_window:
        _visibility.wait_until_visible(conn)
    gtid = _mysql_gtid(row[4]) if not conn.mariadb and len(row) > 4 else None
    return make_offset(row[0], int(row[1]), 0, gtid)


def _snapshot_position(conn: MySqlConnection) -> tuple[str, int]:
    status = dict(conn.query("SHOW STATUS LIKE 'binlog_snapshot_%'"))
    return status["Binlog_snapshot_file"], int(status["Binlog_snapshot_position"])


def binlog_gtid_pos(conn: MySqlConnection, file: str, pos: int) -> str | None:
    """MariaDB's GTID position at ``file:pos`` (``BINLOG_GTID_POS``), None when the server
    cannot say (the file is gone, or ``pos`` is not an event boundary). The server reads the
    file from its start to ``pos`` for this: about 20 ms per 10 MB of binlog."""
    rows = conn.query("SELECT BINLOG_GTID_POS(%s, %s)", (file, pos))
    value = rows[0][0] if rows else None
    if isinstance(value, bytes):
        value = value.decode()
    return canonical_mariadb_gtid(value) if isinstance(value, str) else None


def _mariadb_gtid_at(conn: MySqlConnection, file: str, pos: int) -> str | None:
    """MariaDB's GTID position at ``file:pos``, cheaply when ``file:pos`` is the binlog's end:
    ``@@gtid_binlog_pos`` read between two ``SHOW BINLOG STATUS`` that both report ``file:pos``
    is the state there (the server updates both under the binlog lock). Otherwise, when a
    writer moved the end meanwhile, ``BINLOG_GTID_POS`` computes it exactly."""
    before = _status_row(conn)
    ((position,),) = conn.query("SELECT @@GLOBAL.gtid_binlog_pos")
    after = _status_row(conn)
    if (before[0], int(before[1])) == (after[0], int(after[1])) == (file, pos):
        if isinstance(position, bytes):
            position = position.decode()
        return canonical_mariadb_gtid(str(position or ""))
    return binlog_gtid_pos(conn, file, pos)


@hookimpl
def current_offset(conn: MySqlConnection) -> Offset:
    if not conn.snapshot_status:
        return _status_offset(conn)
    conn.query("START TRANSACTION WITH CONSISTENT SNAPSHOT")
    try:
        file, pos = _snapshot_position(conn)
        if conn.mariadb:
            return make_offset(file, pos, 0, _mariadb_gtid_at(conn, file, pos))
        return make_offset(file, pos)  # Percona: its GTID set is not tied to the snapshot
    finally:
        conn.query("COMMIT")


def _split_query(table: TableSchema, split: SnapshotSplit, select: str | None = None
                 ) -> tuple[str, list[Any]]:
    """The SELECT of ``split``'s rows (its key range and condition) and its parameters: of
    the columns as the snapshot reads them, or of the expressions ``select``."""
    where, args = _key_range(table, split.start, split.end)
    where = with_condition(where, split.where)
    columns = select or ", ".join(select_term(c, qp(c.name)) for c in table.columns)
    return f"SELECT {columns} FROM {_table(table.table, True)} WHERE {where}", args


@hookimpl
def read_range(conn: MySqlConnection, table: TableSchema, split: SnapshotSplit,
               fetch_size: int) -> Iterator[Sequence[Row]]:
    import pymysql.cursors

    with conn.raw.cursor(pymysql.cursors.SSCursor) as cur:  # args: formatted even when empty
        cur.execute(*_split_query(table, split))
        while batch := cur.fetchmany(fetch_size):
            yield _normalized_rows(table, batch, conn.zero_dates)


@hookimpl
def read_range_arrow(conn: MySqlConnection, table: TableSchema, split: SnapshotSplit
                     ) -> pa.Table | None:
    """The split's rows as Arrow, cut from the protocol's packets (:mod:`._arrow`); None for
    a table with a column that path does not read, and (under ``zero_dates=error``) for a
    split holding a date Python cannot hold: ``read_range`` reads it as a BadValue."""
    if not all(_arrow.readable(c) for c in table.columns):
        return None
    return _arrow.read_split(conn.raw, table, *_split_query(table, split),
                             zero_dates=conn.zero_dates)


@hookimpl
def checksum_range(conn: MySqlConnection, table: TableSchema, split: SnapshotSplit
                   ) -> Checksum | None:
    """The count and sum of the split's row hashes in one statement (:mod:`._checksum`);
    None, having read nothing, for a table with a column the server does not write
    canonically."""
    hashed = _checksum.row_hash(table, qp, conn.zero_dates)
    if hashed is None:
        return None
    with conn.raw.cursor() as cur:  # args: formatted even when empty (the '%' doubled)
        cur.execute(*_split_query(table, split, f"COUNT(*), SUM({hashed})"))
        rows, total = cur.fetchone()
    return Checksum.of_sum(rows, total)


@hookimpl
def row_hashes(conn: MySqlConnection, table: TableSchema, split: SnapshotSplit
               ) -> Iterator[tuple[Key, int]] | None:
    """Each row's key (as ``read_range`` reads it) and hash, in key order; None as
    :func:`checksum_range`."""
    hashed = _checksum.row_hash(table, qp, conn.zero_dates)
    if hashed is None:
        return None
    by_name = {c.name: c for c in table.columns}
    keys = [by_name[k] for k in table.key]
    sql, args = _split_query(table, split, ", ".join(
        [*(select_term(c, qp(c.name)) for c in keys), hashed]))
    return _hashes(conn, table, keys, f"{sql} ORDER BY {', '.join(_key_expressions(table))}",
                   args)


def _hashes(conn: MySqlConnection, table: TableSchema, keys: Sequence[Column], sql: str,
            args: list[Any]) -> Iterator[tuple[Key, int]]:
    """The keys and hashes ``sql`` selects, read unbuffered, keys as ``read_range``'s."""
    import pymysql.cursors

    width = len(keys)
    with conn.raw.cursor(pymysql.cursors.SSCursor) as cur:
        cur.execute(sql, args)
        while batch := cur.fetchmany(HASHES_FETCHED):
            found = _normalized_rows(table, [r[:width] for r in batch], conn.zero_dates, keys)
            for key, row in zip(found, batch, strict=True):
                yield tuple(key), int(row[width])


def _check_retained(conn: MySqlConnection, file: str) -> None:
    files = [r[0] for r in conn.query("SHOW BINARY LOGS")]
    if file not in files:
        refuse_unlisted(file, files)


class _LiveSchemas:
    """The ``reshape`` of a stream (``_binlog.read_changes``): the new schema of a table whose
    binlog rows no longer have the columns of the one they were shaped by.

    Its columns are the table map's, in its order: each as the live table describes it
    (``describe_table``) where the live column still has the table map's storage (its
    nullability taken from the table map), else described from the table map's metadata (a
    later ALTER may have changed or dropped it since). Its primary key is the table map's
    (``binlog_row_metadata = FULL`` writes it; not the first NOT NULL unique key the server
    writes for a table without one), else the old one; a key chosen other than the primary key
    is kept while its columns are there. The catalogue is read on the stream's
    connection when it is free, else (an open snapshot view, an unbuffered read) on a
    connection of its own, opened once and closed with the stream."""

    def __init__(self, conn: MySqlConnection) -> None:
        self.conn = conn
        self.side: MySqlConnection | None = None

    def _connection(self) -> MySqlConnection:
        result = getattr(self.conn.raw, "_result", None)
        if not self.conn.in_view and not getattr(result, "unbuffered_active", False):
            return self.conn
        if self.side is None:
            conn = self.conn
            # as connect opens one, over the connection's settings
            options = {**conn.settings, "database": conn.database, "charset": "utf8mb4",
                       "autocommit": True, "init_command": SESSION_SETTINGS}
            raw = open_connection(True, **options)
            self.side = MySqlConnection(raw, conn.settings, conn.database, conn.snapshot_status,
                                        conn.mariadb)
        return self.side

    def __call__(self, table_map: TableMap, old: TableSchema, mariadb: bool,
                 collation_name: Callable[[int], str]) -> TableSchema:
        try:
            live: TableSchema | None = describe_table(self._connection(), old.table)
        except ConfigurationError:  # the table is gone
            live = None
        by_name = {c.name: c for c in live.columns} if live is not None else {}
        columns = []
        for binlog in table_map.columns:
            column = by_name.get(binlog.name or "")
            if column is None or not storage_matches(column, binlog, collation_name):
                column = describe_column(binlog, mariadb, collation_name)
            elif column.nullable != binlog.nullable:
                column = replace(column, nullable=binlog.nullable)
            columns.append(column)
        names = {c.name for c in columns}
        described = live or old
        if table_map.primary_key is not None:
            primary = tuple(columns[i].name for i in table_map.primary_key)
            if not described.primary_key and primary in described.unique_keys:
                primary = ()  # the first NOT NULL unique key, standing in for a missing one
        else:
            primary = old.primary_key if set(old.primary_key) <= names else ()
        chosen = old.key if old.key != old.primary_key else ()
        if chosen and set(chosen) <= names:
            key = chosen
        elif primary or set(old.key) <= names:
            key = primary or old.key
        else:
            raise OffsetExpiredError(
                f"the binlog rows of {old.table} no longer have its key column(s) "
                f"{', '.join(k for k in old.key if k not in names)} and the table has no "
                "primary key: choose another key and take a new snapshot of it")
        not_null = {c.name for c in columns if not c.nullable}
        unique = tuple(k for k in described.unique_keys if set(k) <= not_null)
        return TableSchema(old.table, tuple(columns), primary, unique, key)

    def close(self) -> None:
        if self.side is not None:
            self.side.close()
            self.side = None


@hookimpl
def stream_log(conn: MySqlConnection, tables: Sequence[TableSchema], start: Offset,
               end: Offset | None) -> Iterator[LogItem]:
    """The binlog's changes of ``tables``; a table whose columns change in the log gets a
    ``SchemaChange`` before its first change in the new shape (see :class:`_LiveSchemas`)."""
    _check_retained(conn, parts(start)[0])
    if end is not None and position_key(parts(end)) <= position_key(parts(start)):
        return
    gtid = None  # MariaDB's GTID position is followed along the log; MySQL's set is not
    if conn.mariadb:
        gtid = gtid_of(start)
        if gtid is None:
            file, pos, _ = parts(start)
            gtid = binlog_gtid_pos(conn, file, pos)
    live = _LiveSchemas(conn)
    try:
        yield from read_changes(conn.settings, tables, parts(start),
                                parts(end) if end is not None else None, gtid,
                                conn.heartbeat_seconds, live, conn.zero_dates)
    finally:
        live.close()


@hookimpl
def compare_offset(a: Offset, b: Offset) -> int:
    x, y = position_key(parts(a)), position_key(parts(b))
    return (x > y) - (x < y)


@hookimpl
def same_transaction(a: Offset, b: Offset) -> bool:
    """One transaction's changes share the position it starts at (they differ in ``n``)."""
    return parts(a)[:2] == parts(b)[:2]


# --- optional hooks ---------------------------------------------------------------------------


@hookimpl
def begin_snapshot(conn: MySqlConnection) -> SnapshotView | None:
    if not conn.snapshot_status:
        return None
    base = (_quiet_end(conn) or conn.gtid_mark) if conn.mariadb else None
    conn.query("START TRANSACTION WITH CONSISTENT SNAPSHOT")
    conn.in_view = True
    file, pos = _snapshot_position(conn)
    # the GTID position lets a failover find the watermark on a replica; BINLOG_GTID_POS
    # would scan the file under writes, so it is the end's read before (or the last
    # watermark's), plus the transactions logged since, when that is cheap (else None: the
    # engine places it by another one)
    gtid = _gtid_after(conn, base, file, pos)
    if gtid is not None:
        conn.gtid_mark = (file, pos, gtid)
    return SnapshotView(make_offset(file, pos, 0, gtid))


def _quiet_end(conn: MySqlConnection, tries: int = 3) -> tuple[str, int, str] | None:
    """MariaDB's binlog end and its GTID position, when two status reads around
    ``@@gtid_binlog_pos`` agree (no transaction logged between) within ``tries``."""
    for _ in range(tries):
        before = _status_row(conn)
        ((position,),) = conn.query("SELECT @@GLOBAL.gtid_binlog_pos")
        after = _status_row(conn)
        if (before[0], int(before[1])) == (after[0], int(after[1])):
            text = position.decode() if isinstance(position, bytes) else str(position or "")
            return str(before[0]), int(before[1]), canonical_mariadb_gtid(text)
    return None


GTID_EVENTS_READ = 1000  # binlog events read to carry a GTID position forward, at most


_GTID_INFO = re.compile(r"\bGTID (\d+)-\d+-\d+")
"""A GTID in what ``SHOW BINLOG EVENTS`` says of a ``Gtid`` event."""


def _gtid_after(conn: MySqlConnection, base: tuple[str, int, str] | None, file: str,
                pos: int) -> str | None:
    """The GTID position at ``file:pos``, from ``base`` (an earlier point of the same file
    and its position) and the GTIDs of the transactions logged between; None when that is
    not cheap to know (another file, too many events, no privilege)."""
    if base is None or base[0] != file or base[1] > pos:
        return None
    if base[1] == pos:
        return base[2]
    import pymysql

    try:
        rows = conn.query(f"SHOW BINLOG EVENTS IN '{_quoted(file)}' FROM {int(base[1])} "
                          f"LIMIT {GTID_EVENTS_READ}")
    except pymysql.err.MySQLError:  # no privilege, or the file purged: not known cheaply
        return None
    state = MariadbGtidState(base[2])
    for row in rows:
        at, kind, info = int(row[1]), _text(row[2]), _text(row[5])
        if at >= pos:
            return state.text if at == pos else None
        if kind == "Gtid":  # "BEGIN GTID 0-1-5", with " cid=N" when committed in a group
            found = _GTID_INFO.search(info)
            if found is None:
                return None
            state.add(int(found.group(1)), found.group(0).rsplit(" ", 1)[-1])
    return None


@hookimpl
def end_snapshot(conn: MySqlConnection) -> None:
    if conn.in_view:
        conn.query("COMMIT")
        conn.in_view = False


@hookimpl
def earliest_offset(conn: MySqlConnection) -> Offset:
    files = conn.query("SHOW BINARY LOGS")
    return make_offset(files[0][0], 4)


# --- the dialect as a sync target -------------------------------------------------------------


@hookimpl
def target_preflight(conn: MySqlConnection, tables: Sequence[TableSchema]
                     ) -> list[Requirement]:
    return target_rights(conn, tables)


@hookimpl
def create_table(conn: MySqlConnection, table: TableSchema) -> None:
    existing = [r[0] for r in conn.query(
        "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND "
        "TABLE_NAME = %s ORDER BY ORDINAL_POSITION", (table.table.schema, table.table.name))]
    check_target_columns(existing, table)
    schema = table.table.schema
    found = {name for (name,) in conn.query(
        "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND "
        "TABLE_NAME = %s", (schema, LEDGER))}
    has_schema = bool(found) or bool(existing) or bool(conn.query(
        "SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (schema,)))
    # only what is missing: a user without CREATE uses the tables made for it as they are
    statements = ([] if has_schema else [f"CREATE DATABASE IF NOT EXISTS {q(schema)}"]) + \
        ([] if existing else [_target.create_sql(table, _table(table.table), q)]) + \
        ([] if found else [_target.ledger(q(schema)).create_sql()])
    import pymysql

    try:
        _ddl(conn, *statements)
    except pymysql.err.MySQLError as exc:
        if not exc.args or exc.args[0] not in ACCESS_DENIED:
            raise
        raise ConfigurationError(
            f"the target user may not create what the sync needs in {schema} "
            f"({exc.args[1]}): GRANT CREATE ON {q(schema)}.* TO {_account(conn)}, or make the "
            f"tables (and {LEDGER}) beforehand as a user who may (the sync then writes them "
            "as they are)") from None


def _ddl(conn: MySqlConnection, *statements: str) -> None:
    """Run DDL, which commits the transaction open before it; inside an
    :func:`apply_transaction` block, open the next one at once (the session autocommits)."""
    for statement in statements:
        conn.query(statement)
    if conn.batch and statements:
        conn.query("BEGIN")


@hookimpl
def applied_tables(conn: MySqlConnection, tables: Sequence[TableSchema]
                   ) -> dict[TableId, bool]:
    """One look at ``information_schema`` for the tables and their databases' ledgers, and
    one probe of each database's ledger per table (its key)."""
    schemas = sorted({t.table.schema for t in tables})
    if not schemas:
        return {}
    existing = {(s, n) for s, n in conn.query(
        "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA "
        "IN %s", [tuple(schemas)])}

    def held(schema: str, names: list[str]) -> list[str | None]:
        sql = _target.ledger(q(schema)).holding_sql(len(names))
        return [r[0] for r in conn.query(sql, names)]
    return ledger_tables(tables, existing, held)


@hookimpl
def trim_ledger(conn: MySqlConnection, table: TableSchema, low: str, high: str) -> None:
    conn.query(_target.ledger(q(table.table.schema)).trim_sql(), (table.table.name, low, high))


@hookimpl
def alter_table(conn: MySqlConnection, old: TableSchema, new: TableSchema) -> None:
    """Add, drop and widen columns so the mirror table holds ``new``'s rows, in its order."""
    existing = {name: kind for name, kind in conn.query(
        "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = "
        "%s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION", (new.table.schema, new.table.name))}
    _ddl(conn, *_target.alter_sql(new, _table(new.table), existing, q))


@contextlib.contextmanager
def _claiming(conn: MySqlConnection, table: TableSchema, batch_id: str) -> Iterator[Any]:
    """One transaction that claims ``batch_id`` for ``table`` (a savepoint inside an
    :func:`apply_transaction` block): its cursor, or None (nothing to write) when the batch
    was applied before; rolled back on an error."""
    with write_transaction(conn.query, conn.batch), conn.raw.cursor() as cur:
        done = _target.ledger(q(table.table.schema)).claim(cur, table, batch_id)
        yield cur if done else None


@hookimpl
def apply_transaction(conn: MySqlConnection) -> contextlib.AbstractContextManager[object]:
    """One transaction the apply hooks inside join (each a savepoint), with
    ``foreign_key_checks = 0`` as a replica applies: the target's foreign keys and cascades
    do not run again on changes the source already checked and whose cascaded deletes are in
    its log. An ``alter_table`` inside commits what came before it, as MySQL's DDL does."""
    return _batch(conn)


@contextlib.contextmanager
def _batch(conn: MySqlConnection) -> Iterator[None]:
    conn.query("SET SESSION foreign_key_checks = 0")
    try:
        with write_transaction(conn.query, False):
            conn.batch = True
            try:
                yield
            finally:
                conn.batch = False
    finally:
        conn.query("SET SESSION foreign_key_checks = 1")


@hookimpl
def apply_changes(conn: MySqlConnection, table: TableSchema, events: Sequence[ChangeEvent],
                  batch_id: str) -> bool:
    """Claim the batch, then write its net changes in multi-row statements
    (:func:`._target.write`); values are checked before anything is written."""
    net = net_changes(_target.checked(table, events, conn.out_of_range))
    net = replace(net, deletes=[tuple(map(_target.value, k)) for k in net.deletes])
    with _claiming(conn, table, batch_id) as cur:
        if cur is None:
            return False
        _target.write(cur, table, _table(table.table, True), net, qp)
    return True


@hookimpl
def load_snapshot(conn: MySqlConnection, table: TableSchema, rows: pa.Table,
                  batch_id: str) -> bool:
    """Claim the batch, then upsert the split's rows in multi-row statements whose values
    Arrow's kernels wrote as literals (:func:`._target.literal_rows`), not pymysql value by
    value; a column that needs it sends the rows through :func:`apply_changes`' checked path."""
    from pymysql.constants import SERVER_STATUS

    plain = bool(conn.raw.server_status & SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES)
    literals = _target.literal_rows(table, rows, plain)
    checked = None if literals is not None else \
        _target.checked_rows(table, rows, conn.out_of_range)
    with _claiming(conn, table, batch_id) as cur:
        if cur is None:
            return False
        if checked is not None:
            _target.write(cur, table, _table(table.table, True), NetChanges([], checked), qp)
            return True
        head, tail = _target.upsert_parts(table, _table(table.table), q)
        for statement in _target.insert_statements(literals, head, tail,
                                                   _target.STATEMENT_BYTES):
            cur.execute(statement)
    return True
