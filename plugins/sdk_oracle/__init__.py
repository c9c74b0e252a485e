"""The Oracle dialect: snapshots with ``AS OF SCN`` through python-oracledb (thin mode), changes
from LogMiner (:mod:`._miner`), whose ``SQL_REDO`` text :mod:`._redo` parses and :mod:`._types`
types.

Offsets are commit SCNs (with the commit's redo address and the change's index in its
transaction, and the SCN mining restarts from): see :mod:`._miner`. The snapshot is atomic:
``begin_snapshot`` fixes an SCN ``n`` and every split reads ``AS OF SCN n``, so a split's low and
high watermarks are both ``n + 1`` and no backfill is needed. Transactions open at ``n`` commit
after it; the offset's ``mine`` field makes the log reader start at the oldest one's first SCN
(from ``V$TRANSACTION``) while emitting only commits at or after ``n + 1``.

URL: ``oracle://user:pw@host:1521/SERVICE``; options ``?pdb=NAME`` (the user is a ``C##``
common user connected to the CDB root: mine there, read tables in PDB ``NAME``),
``?flush_table=NAME`` (default ``SDK_LOGMNR_FLUSH``, ``none`` to disable),
``?window_scns=N`` (the first mining window), ``?poll_seconds=S``; TLS with ``?protocol=tcps``
and python-oracledb's own option names (:mod:`._tls`).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator, Sequence
from typing import Any

from sdk import (
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
    SnapshotView,
    TableId,
    TableSchema,
    TableStats,
    TableTruncated,
    hookimpl,
)
from sdk.dialect.sql import lexicographic_range

from . import _miner, _security
from ._miner import NAME, Session, compare, make_offset, parts
from ._tls import URL_OPTIONS as TLS_OPTIONS
from ._tls import tls_settings
from ._types import LOB_TYPES, NLS_SESSION, base_type, from_fetch, logical_column, select_expr

FLUSH_TABLE = "SDK_LOGMNR_FLUSH"


def q(name: str) -> str:
    """A quoted identifier (Oracle names are case-sensitive once quoted)."""
    return '"' + name.replace('"', '""') + '"'


def _table(table: TableId) -> str:
    return f"{q(table.schema)}.{q(table.name)}"


@hookimpl
def dialect_info() -> DialectInfo:
    return DialectInfo(
        name=NAME, title="Oracle (LogMiner, python-oracledb thin mode)", drivers=("oracledb",),
        extra="oracle", url_schemes=("oracle",),
        url_options=(
            ("pdb", "the pluggable database the tables live in (a C## user in the root)"),
            ("connect_timeout", "seconds to wait for a connection (default 10)"),
            ("flush_table", "the flush table (default SDK_LOGMNR_FLUSH; none to disable)"),
            ("window_scns", "SCNs of the first mining window (default 20000)"),
            ("poll_seconds", "how often an open stream polls (default 1)"),
            *TLS_OPTIONS,
        ))


@hookimpl
def connect(config: ConnectionConfig) -> Session:
    try:
        import oracledb
    except ImportError:
        raise DriverMissingError("the oracle dialect needs python-oracledb: "
                                 "pip install 'sdk[oracle]'") from None
    options = config.options
    dsn = f"{config.host or '127.0.0.1'}:{config.port or 1521}/{config.database or ''}"
    tls, tls_kwargs = tls_settings(options)
    try:
        raw = oracledb.connect(user=config.user, password=config.password, dsn=dsn,
                               tcp_connect_timeout=float(options.get("connect_timeout", "10")),
                               **tls_kwargs)
    except oracledb.Error as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else "unreachable"
        refused = tls_refusal(exc)
        if refused is not None:
            raise ConfigurationError(f"cannot connect to {config.masked_url}: TLS: {refused}"
                                     ) from None
        kind = RetriableError if is_retriable(exc) else ConfigurationError
        raise kind(f"cannot connect to {config.masked_url}: {message}") from None
    flush = options.get("flush_table", FLUSH_TABLE)
    session = Session(
        raw, pdb=options.get("pdb") or None,
        flush_table=None if flush.lower() == "none" else _flush_name(flush),
        window=int(options.get("window_scns", "20000")),
        poll_seconds=float(options.get("poll_seconds", "1")), tls=tls)
    setup_session(session)
    return session


TLS_NAME_ERRORS = (
    "DPY-6002",  # the server certificate's DN is not ssl_server_cert_dn
    "DPY-6006",  # the name on the server certificate is not the host's
)


def tls_refusal(error: BaseException) -> str | None:
    """Why TLS failed, when it did: the certificate not trusted, its DN not the one expected,
    no common version. Not retriable (python-oracledb wraps it in the retriable DPY-6005)."""
    import ssl

    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, ssl.SSLError):
            return str(seen).strip().splitlines()[0] or type(seen).__name__
        for line in str(seen).strip().splitlines():
            if line.startswith(TLS_NAME_ERRORS):
                return line
        seen = seen.__cause__ or seen.__context__
    return None


def _flush_name(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_$#]{0,127}", name):
        raise ConfigurationError(f"flush_table={name!r} must be a plain table name")
    return name.upper()


def setup_session(session: Session) -> None:
    """Pin the NLS formats ``SQL_REDO`` is written in, and learn the server's UTC offset
    (``V$LOGMNR_CONTENTS.TIMESTAMP`` is the server's local time)."""
    session.run(NLS_SESSION)
    (offset,) = session.rows("SELECT TO_CHAR(SYSTIMESTAMP, 'TZH:TZM') FROM DUAL")[0]
    sign = -1 if offset.strip().startswith("-") else 1
    hours, minutes = offset.strip().lstrip("+-").split(":")
    session.db_utc_offset = sign * dt.timedelta(hours=int(hours), minutes=int(minutes))
    if session.pdb is not None:
        session.container = "CDB$ROOT"
        session.use("pdb")


RETRIABLE = {
    "ORA-00060",  # deadlock
    "ORA-01033", "ORA-01034", "ORA-01089",  # starting up, not available, shutting down
    "ORA-03113", "ORA-03114", "ORA-03135",  # end of file on channel, not connected, lost
    "ORA-12170", "ORA-12514", "ORA-12528", "ORA-12537", "ORA-12541",  # listener, timeouts
    "DPY-4011",  # the database or network closed the connection
    "DPY-6005",  # cannot connect
}


@hookimpl
def is_retriable(error: BaseException) -> bool:
    """Oracle's and python-oracledb's codes for lost or refused connections, an instance
    starting or stopping, and deadlocks (the message starts with the code)."""
    import oracledb

    if not isinstance(error, oracledb.Error):
        return False
    detail = error.args[0] if error.args else ""
    code = getattr(detail, "full_code", None) or str(detail).split(":", 1)[0].strip()
    return code in RETRIABLE


# --- preflight and capture objects -----------------------------------------------------------

PRIVILEGES = ("CREATE SESSION", "LOGMINING", "SELECT ANY TRANSACTION", "FLASHBACK ANY TABLE")
VIEWS = ("V_$DATABASE", "V_$LOG", "V_$LOGFILE", "V_$ARCHIVED_LOG", "V_$ARCHIVE_DEST_STATUS",
         "V_$TRANSACTION", "V_$LOGMNR_CONTENTS", "V_$LOGMNR_LOGS")


def _probe(session: Session, sql: str) -> str | None:
    """Run ``sql``; None when it works, else the first line of the error."""
    try:
        session.rows(sql)
    except Exception as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return None


@hookimpl
def preflight(conn: Session, tables: Sequence[TableId]) -> list[Requirement]:
    conn.use("root")
    (user,) = conn.rows("SELECT USER FROM DUAL")[0]
    mode, minimal, all_cols, cdb = conn.rows(
        "SELECT LOG_MODE, SUPPLEMENTAL_LOG_DATA_MIN, SUPPLEMENTAL_LOG_DATA_ALL, CDB "
        "FROM V$DATABASE")[0]
    privs = {p for (p,) in conn.rows("SELECT PRIVILEGE FROM SESSION_PRIVS")}
    grantee = q(user)
    checks = [
        Requirement("ARCHIVELOG mode", mode == "ARCHIVELOG", f"LOG_MODE is {mode}",
                    "as SYSDBA: SHUTDOWN IMMEDIATE; STARTUP MOUNT; ALTER DATABASE ARCHIVELOG; "
                    "ALTER DATABASE OPEN"),
        Requirement("minimal supplemental logging", minimal in ("YES", "IMPLICIT"),
                    f"SUPPLEMENTAL_LOG_DATA_MIN is {minimal}",
                    "ALTER DATABASE ADD SUPPLEMENTAL LOG DATA"),
    ]
    for privilege in PRIVILEGES:
        checks.append(Requirement(f"privilege {privilege}", privilege in privs, f"user {user}",
                                  f"GRANT {privilege} TO {grantee}"
                                  + (" CONTAINER=ALL" if conn.pdb else "")))
    if conn.pdb is not None:
        checks.append(Requirement("privilege SET CONTAINER", "SET CONTAINER" in privs,
                                  f"user {user} reads tables in PDB {conn.pdb}",
                                  f"GRANT SET CONTAINER TO {grantee} CONTAINER=ALL"))
        checks.append(Requirement("a common (C##) user in CDB$ROOT", cdb == "YES",
                                  f"?pdb={conn.pdb} mines from the CDB root",
                                  "connect to the CDB root service as a C## user"))
    for view in VIEWS:
        error = _probe(conn, f"SELECT 1 FROM {view.replace('V_$', 'V$')} WHERE 1 = 0")
        checks.append(Requirement(f"SELECT on {view}", error is None, error or "",
                                  f"GRANT SELECT ON SYS.{view} TO {grantee}"))
    execute = conn.rows("SELECT COUNT(*) FROM ALL_OBJECTS WHERE OWNER = 'SYS' AND "
                        "OBJECT_NAME = 'DBMS_LOGMNR'")[0][0]
    checks.append(Requirement("EXECUTE on DBMS_LOGMNR", int(execute) > 0, "",
                              f"GRANT EXECUTE ON SYS.DBMS_LOGMNR TO {grantee}"))
    if conn.flush_table:
        error = _probe(conn, f"SELECT SCN FROM {conn.flush_table} WHERE 1 = 0")
        checks.append(Requirement(
            f"flush table {conn.flush_table}", error is None,
            error or "commits force redo to disk before each read",
            f"GRANT CREATE TABLE TO {grantee} (the dialect creates it), or CREATE TABLE "
            f"{user}.{conn.flush_table} (SCN NUMBER); INSERT INTO {user}.{conn.flush_table} "
            "VALUES (0); COMMIT", required=False))
    conn.use("pdb")
    for table in tables:
        checks.extend(_table_checks(conn, table, all_cols == "YES", grantee))
    return checks


def _table_checks(conn: Session, table: TableId, database_all: bool, grantee: str
                  ) -> list[Requirement]:
    groups = {g for (g,) in conn.rows(
        "SELECT LOG_GROUP_TYPE FROM ALL_LOG_GROUPS WHERE OWNER = :1 AND TABLE_NAME = :2",
        [table.schema, table.name])}
    logged = database_all or "ALL COLUMN LOGGING" in groups
    error = _probe(conn, f"SELECT 1 FROM {_table(table)} WHERE 1 = 0")
    lobs = [name for name, kind in conn.rows(
        "SELECT COLUMN_NAME, DATA_TYPE FROM ALL_TAB_COLS WHERE OWNER = :1 AND TABLE_NAME = :2 "
        "AND HIDDEN_COLUMN = 'NO' AND VIRTUAL_COLUMN = 'NO'", [table.schema, table.name])
        if base_type(kind) in LOB_TYPES]
    return [
        Requirement(f"supplemental logging (ALL) COLUMNS on {table}", logged,
                    "an update's after image is its logged before image with the SET applied",
                    f"ALTER TABLE {_table(table)} ADD SUPPLEMENTAL LOG DATA (ALL) COLUMNS"),
        Requirement(f"SELECT on {table}", error is None, error or "",
                    f"GRANT SELECT ON {_table(table)} TO {grantee}"),
        Requirement(f"no LOB/XMLType columns in {table}", not lobs,
                    f"LogMiner does not log the values of {', '.join(lobs)} in row changes"
                    if lobs else "",
                    f"exclude {table} from capture, or store those columns as VARCHAR2/RAW"),
    ]


@hookimpl
def prepare_capture(conn: Session, tables: Sequence[TableSchema]) -> None:
    """Create the one-row flush table when it is missing and the user may."""
    if not conn.flush_table:
        return
    conn.use("root")
    if _probe(conn, f"SELECT SCN FROM {conn.flush_table} WHERE 1 = 0") is None:
        return
    try:
        conn.run(f"CREATE TABLE {conn.flush_table} (SCN NUMBER)")
        conn.run(f"INSERT INTO {conn.flush_table} VALUES (0)")
        conn.raw.commit()
    except Exception as exc:
        if "ORA-00955" not in str(exc):  # created meanwhile by another task
            conn.raw.rollback()


# --- tables and splits ------------------------------------------------------------------------


@hookimpl
def list_tables(conn: Session) -> list[TableId]:
    conn.use("pdb")
    return [TableId(o, t) for o, t in conn.rows(
        "SELECT T.OWNER, T.TABLE_NAME FROM ALL_TABLES T JOIN ALL_USERS U ON U.USERNAME = T.OWNER "
        "WHERE U.ORACLE_MAINTAINED = 'N' AND T.TEMPORARY = 'N' AND T.NESTED = 'NO' "
        "AND T.SECONDARY = 'N' AND T.DROPPED = 'NO' AND T.TABLE_NAME <> :1 "
        "ORDER BY T.OWNER, T.TABLE_NAME", [conn.flush_table or ""])]


@hookimpl
def describe_table(conn: Session, table: TableId) -> TableSchema:
    conn.use("pdb")
    rows = conn.rows(
        "SELECT COLUMN_NAME, DATA_TYPE, DATA_PRECISION, DATA_SCALE, NULLABLE FROM ALL_TAB_COLS "
        "WHERE OWNER = :1 AND TABLE_NAME = :2 AND HIDDEN_COLUMN = 'NO' "
        "AND VIRTUAL_COLUMN = 'NO' ORDER BY COLUMN_ID", [table.schema, table.name])
    if not rows:
        raise ConfigurationError(f"table {table} does not exist or is not readable")
    columns = tuple(logical_column(name, kind, None if p is None else int(p),
                                   None if s is None else int(s), nullable == "Y")
                    for name, kind, p, s, nullable in rows)
    keys: dict[str, tuple[str, list[str]]] = {}
    for name, kind, column in conn.rows(
            "SELECT C.CONSTRAINT_NAME, C.CONSTRAINT_TYPE, K.COLUMN_NAME FROM ALL_CONSTRAINTS C "
            "JOIN ALL_CONS_COLUMNS K ON K.OWNER = C.OWNER AND "
            "K.CONSTRAINT_NAME = C.CONSTRAINT_NAME WHERE C.OWNER = :1 AND C.TABLE_NAME = :2 "
            "AND C.CONSTRAINT_TYPE IN ('P', 'U') AND C.STATUS = 'ENABLED' "
            "ORDER BY C.CONSTRAINT_NAME, K.POSITION", [table.schema, table.name]):
        keys.setdefault(name, (kind, []))[1].append(column)
    not_null = {c.name for c in columns if not c.nullable}
    primary = next((tuple(cols) for kind, cols in keys.values() if kind == "P"), ())
    unique = tuple(tuple(cols) for kind, cols in keys.values()
                   if kind == "U" and set(cols) <= not_null)
    return TableSchema(table, columns, primary, unique)


def _key_columns(table: TableSchema) -> list[str]:
    return [q(k) for k in table.key]


def _source(conn: Session, table: TableSchema) -> str:
    """The table, ``AS OF SCN`` the open snapshot view if there is one."""
    name = _table(table.table)
    return f"{name} AS OF SCN {int(conn.snapshot_scn)}" if conn.snapshot_scn is not None \
        else name


def _key_values(table: TableSchema, row: Sequence[Any]) -> Key:
    by_name = {c.name: c for c in table.columns}
    return tuple(from_fetch(by_name[k], v) for k, v in zip(table.key, row, strict=True))


def _cursor_rows(conn: Session, sql: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
    cursor = conn.raw.cursor()
    try:
        cursor.outputtypehandler = output_type_handler
        cursor.execute(sql, args)
        return [tuple(r) for r in cursor.fetchall()]
    finally:
        cursor.close()


@hookimpl
def table_stats(conn: Session, table: TableSchema) -> TableStats:
    conn.use("pdb")
    keys = ", ".join(_key_columns(table))
    desc = ", ".join(f"{k} DESC" for k in _key_columns(table))
    source = _table(table.table)
    first = _cursor_rows(conn, f"SELECT {keys} FROM {source} ORDER BY {keys} "
                               "FETCH FIRST 1 ROWS ONLY", [])
    last = _cursor_rows(conn, f"SELECT {keys} FROM {source} ORDER BY {desc} "
                              "FETCH FIRST 1 ROWS ONLY", [])
    estimate = conn.rows("SELECT NUM_ROWS FROM ALL_TABLES WHERE OWNER = :1 AND TABLE_NAME = :2",
                         [table.table.schema, table.table.name])
    rows = int(estimate[0][0]) if estimate and estimate[0][0] is not None else 0
    return TableStats(_key_values(table, first[0]) if first else None,
                      _key_values(table, last[0]) if last else None, rows)


def _range(table: TableSchema, start: Key | None, end: Key | None) -> tuple[str, list[Any]]:
    # Oracle has no row-value inequality, so the range is spelled out (binds by position)
    return lexicographic_range(_key_columns(table), start, end, mark=":k", always="1 = 1")


@hookimpl
def next_boundary(conn: Session, table: TableSchema, start: Key | None, size: int
                  ) -> Key | None:
    conn.use("pdb")
    where, args = _range(table, start, None)
    keys = ", ".join(_key_columns(table))
    rows = _cursor_rows(conn, f"SELECT {keys} FROM {_source(conn, table)} WHERE {where} "
                              f"ORDER BY {keys} OFFSET {int(size)} ROWS FETCH NEXT 1 ROWS ONLY",
                        args)
    return _key_values(table, rows[0]) if rows else None


def output_type_handler(cursor: Any, metadata: Any) -> Any:
    """Fetch NUMBER as Decimal (never float) and LOBs as str/bytes."""
    import decimal

    import oracledb

    kind = metadata.type_code
    if kind is oracledb.DB_TYPE_NUMBER:
        return cursor.var(decimal.Decimal, arraysize=cursor.arraysize)
    if kind in (oracledb.DB_TYPE_CLOB, oracledb.DB_TYPE_NCLOB):
        return cursor.var(oracledb.DB_TYPE_LONG, arraysize=cursor.arraysize)
    if kind is oracledb.DB_TYPE_BLOB:
        return cursor.var(oracledb.DB_TYPE_LONG_RAW, arraysize=cursor.arraysize)
    return None


# --- the four fetch tasks ---------------------------------------------------------------------


@hookimpl
def current_offset(conn: Session) -> Offset:
    """``CURRENT_SCN + 1``: every commit at or below ``CURRENT_SCN`` is visible to a later
    read (Oracle's read consistency waits for a commit in progress), and the offset carries the
    start SCN of the oldest open transaction for the log reader."""
    return conn.watermark()


@hookimpl
def read_range(conn: Session, table: TableSchema, split: SnapshotSplit, fetch_size: int
               ) -> Iterator[Sequence[Row]]:
    conn.use("pdb")
    where, args = _range(table, split.start, split.end)
    select = ", ".join(select_expr(c, q(c.name)) for c in table.columns)
    columns = table.columns
    cursor = conn.raw.cursor()
    try:
        cursor.outputtypehandler = output_type_handler
        cursor.arraysize = fetch_size
        cursor.prefetchrows = fetch_size + 1
        cursor.execute(f"SELECT {select} FROM {_source(conn, table)} WHERE {where}", args)
        while batch := cursor.fetchmany(fetch_size):
            yield [tuple(from_fetch(c, v) for c, v in zip(columns, row, strict=True))
                   for row in batch]
    finally:
        cursor.close()


@hookimpl
def stream_log(conn: Session, tables: Sequence[TableSchema], start: Offset,
               end: Offset | None) -> Iterator[ChangeEvent | Heartbeat | TableTruncated]:
    return _miner.read(conn, tables, start, end)


@hookimpl
def compare_offset(a: Offset, b: Offset) -> int:
    return compare(a, b)


# --- snapshots and startup positions ----------------------------------------------------------


@hookimpl
def begin_snapshot(conn: Session, token: str | None) -> SnapshotView | None:
    """Fix an SCN ``n`` (or join the one in ``token``, ``"n:mine"``): reads on ``conn`` then
    run ``AS OF SCN n`` and see exactly the commits at or below ``n``."""
    if token is not None:
        match = re.fullmatch(r"(\d+):(\d+)", token)
        if match is None:
            return None
        scn, mine = int(match.group(1)), int(match.group(2))
        offset = make_offset(scn + 1, mine=mine)
    else:
        offset = conn.watermark()
        scn, _, _, mine = parts(offset)
        scn -= 1
    conn.snapshot_scn = scn
    return SnapshotView(offset, f"{scn}:{mine}")


@hookimpl
def end_snapshot(conn: Session) -> None:
    conn.snapshot_scn = None


@hookimpl
def earliest_offset(conn: Session) -> Offset | None:
    conn.use("root")
    (oldest,) = conn.rows(_miner.OLDEST_LOG)[0]
    return None if oldest is None else make_offset(int(oldest))


# --- TLS, and the database a checkpoint belongs to --------------------------------------------


@hookimpl
def connection_security(conn: Session) -> list[ConnectionSecurity]:
    """TCPS or not (``NETWORK_PROTOCOL``), with what the URL asked of the certificate check."""
    return _security.security(conn)


@hookimpl
def server_identity(conn: Session) -> dict[str, str]:
    """DBID, database name and incarnation (``V$DATABASE``): SCNs compare only within them."""
    return _security.identity(conn)


@hookimpl
def check_offset(conn: Session, offset: Offset) -> None:
    """An offset past ``CURRENT_SCN`` is another database's or a lost future's; one below the
    oldest redo listed was purged."""
    _security.check(conn, offset)
