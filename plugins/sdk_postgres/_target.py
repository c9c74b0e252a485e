"""PostgreSQL as a sync target: mirror tables kept with idempotent batches.

A batch is applied set-based: its net changes (:func:`sdk.dialect.apply.net_changes`) are copied
(``COPY ... FROM STDIN``, in binary form where :mod:`._binary` writes every column, else text)
into temporary staging tables dropped at commit, then written with one
``DELETE ... USING`` and one ``INSERT ... SELECT ... ON CONFLICT DO UPDATE``. Fewer rows than
:data:`BULK_ROWS` go by ``executemany`` instead, which is faster when staging costs more than
the rows. Snapshot rows (:func:`load`) are copied straight into the table, and merged as above
only when one of their keys is already there.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from sdk import Column, ConfigurationError, LogicalType, TableSchema
from sdk.dialect.apply import Ledger, NetChanges

from ._binary import TYPNAMES, binary_types, copy_binary, end_to_end

if TYPE_CHECKING:
    import pyarrow as pa

L = LogicalType

_TYPES = {
    L.BOOLEAN: "boolean", L.INT8: "smallint", L.INT16: "smallint", L.INT32: "integer",
    L.INT64: "bigint", L.FLOAT32: "real", L.FLOAT64: "double precision", L.STRING: "text",
    L.BINARY: "bytea", L.DATE: "date", L.TIME: "time", L.TIMESTAMP: "timestamp",
    L.TIMESTAMP_TZ: "timestamptz", L.INTERVAL: "interval", L.JSON: "json",
}


def target_type(column: Column) -> str:
    """The PostgreSQL type that holds every value of ``column`` exactly."""
    if column.type is L.DECIMAL:
        if column.precision is None or column.precision > 1000:
            return "numeric"
        return f"numeric({column.precision},{column.scale or 0})"
    return _TYPES[column.type]


def create_sql(table: TableSchema, quoted: str, q: Any) -> str:
    columns = ", ".join(f"{q(c.name)} {target_type(c)}" for c in table.columns)
    return (f"CREATE TABLE IF NOT EXISTS {quoted} ({columns}, "
            f"PRIMARY KEY ({', '.join(q(k) for k in table.key)}))")


def statements(table: TableSchema, quoted: str, q: Any) -> tuple[str, str]:
    """The DELETE by key and the upsert, each value cast to its column's type."""
    casts = {c.name: target_type(c) for c in table.columns}
    delete = f"DELETE FROM {quoted} WHERE " + " AND ".join(
        f"{q(k)} = %s::{casts[k]}" for k in table.key)
    values = ", ".join(f"%s::{casts[c]}" for c in table.column_names)
    updates = ", ".join(f"{q(c)} = EXCLUDED.{q(c)}" for c in table.column_names
                        if c not in table.key) or f"{q(table.key[0])} = EXCLUDED.{q(table.key[0])}"
    names = ", ".join(q(c) for c in table.column_names)
    upsert = (f"INSERT INTO {quoted} ({names}) VALUES ({values}) ON CONFLICT "
              f"({', '.join(q(k) for k in table.key)}) DO UPDATE SET {updates}")
    return delete, upsert


def ledger(schema: str) -> Ledger:
    """The applied-batch ledger of the mirror tables in ``schema`` (quoted)."""
    return Ledger(schema, "text")


BULK_ROWS = 100
"""Deletes or upserts of a batch at least this many go through a staging table, fewer by
``executemany`` (benchmarks/target_apply.py measures both)."""
STAGE, STAGE_KEYS = "_sdk_stage", "_sdk_stage_keys"
"""The temporary staging tables of upserts and of deleted keys (dropped at commit)."""


def _column_list(names: Sequence[str], q: Callable[[str], str], alias: str = "") -> str:
    return ", ".join(f"{alias}{q(n)}" for n in names)


def stage_sql(table: TableSchema, q: Callable[[str], str], keys_only: bool) -> tuple[str, str]:
    """The (re)creation of a staging table (typed like :func:`statements`' casts, so a value is
    read as the row-by-row statements read it) and its ``COPY``; no parameters, so ``q``."""
    columns = [c for c in table.columns if not keys_only or c.name in table.key]
    if keys_only:  # in key order, as NetChanges.deletes holds the key values
        by_name = {c.name: c for c in columns}
        columns = [by_name[k] for k in table.key]
    name = STAGE_KEYS if keys_only else STAGE
    # dropped first: a batch applied in one transaction (apply_transaction) stages a table,
    # or a chunk, after another, and ON COMMIT DROP waits for the end of the batch
    create = (f"DROP TABLE IF EXISTS pg_temp.{name}; CREATE TEMP TABLE {name} ("
              + ", ".join(f"{q(c.name)} {target_type(c)}" for c in columns)
              + ") ON COMMIT DROP")
    copy = f"COPY pg_temp.{name} ({_column_list([c.name for c in columns], q)}) FROM STDIN"
    return create, copy


def merge_sql(table: TableSchema, quoted: str, q: Callable[[str], str]) -> tuple[str, str]:
    """The set-based DELETE (of the keys staged in ``STAGE_KEYS``) and upsert (of the rows in
    ``STAGE``) into ``quoted``, the target table; no parameters, so ``q``."""
    match = " AND ".join(f"t.{q(k)} = s.{q(k)}" for k in table.key)
    delete = f"DELETE FROM {quoted} AS t USING pg_temp.{STAGE_KEYS} AS s WHERE {match}"
    names = _column_list(table.column_names, q)
    updates = ", ".join(f"{q(c)} = EXCLUDED.{q(c)}" for c in table.column_names
                        if c not in table.key) or f"{q(table.key[0])} = EXCLUDED.{q(table.key[0])}"
    upsert = (f"INSERT INTO {quoted} ({names}) SELECT {names} FROM pg_temp.{STAGE} ON CONFLICT "
              f"({_column_list(table.key, q)}) DO UPDATE SET {updates}")
    return delete, upsert


def copy_values(table: TableSchema, rows: Sequence[tuple[Any, ...]], keys_only: bool
                ) -> Sequence[tuple[Any, ...]]:
    """``rows`` as ``COPY`` should read them. The row-by-row statements send an instant as
    ``timestamptz`` and cast it, so a ``timestamp`` or ``date`` column gets its UTC wall time
    (sessions run in UTC); ``COPY`` reads text, where such a column ignores the offset, so
    instants in those columns are sent in UTC."""
    names = list(table.key) if keys_only else list(table.column_names)
    by_name = {c.name: c for c in table.columns}
    wall = [i for i, n in enumerate(names) if by_name[n].type in (L.TIMESTAMP, L.DATE)]
    # sources give such columns naive values, so look before copying every row
    if not any(isinstance(v, dt.datetime) and v.tzinfo is not None
               for i in wall for v in map(itemgetter(i), rows)):
        return rows
    out = []
    for row in rows:
        values = list(row)
        for i in wall:
            v = values[i]
            if isinstance(v, dt.datetime) and v.tzinfo is not None:
                values[i] = v.astimezone(dt.UTC)
        out.append(tuple(values))
    return out


_ARROW_COPIED = frozenset({L.BOOLEAN, L.INT8, L.INT16, L.INT32, L.INT64, L.FLOAT32, L.FLOAT64,
                           L.STRING, L.DECIMAL, L.DATE, L.TIMESTAMP, L.TIMESTAMP_TZ})
"""Column types whose Python values Arrow takes and writes as ``COPY`` text that PostgreSQL reads
as the same value ``write_row``'s text gives."""


def _arrow_rows(table: TableSchema, rows: Sequence[tuple[Any, ...]], keys_only: bool,
                binary: bool = False) -> pa.Table | None:
    """``rows`` (of the key columns, in key order, when ``keys_only``) as an Arrow table typed
    as :func:`sdk.dialect.arrow.arrow_type` gives (a real as a double); None for a column of another
    type (bytes too, unless for the ``binary`` form) or a value Arrow refuses (a decimal with
    more digits than its scale, a year past 9999, a wide decimal)."""
    import pyarrow as pa

    from sdk.dialect.arrow import arrow_type, converter, wide

    columns = _copied_columns(table, keys_only)
    taken = _ARROW_COPIED | {L.BINARY} if binary else _ARROW_COPIED
    if any(c.type not in taken or (c.type is L.DECIMAL and wide(c)) for c in columns):
        return None
    arrays = []
    try:
        for i, column in enumerate(columns):
            values = list(map(itemgetter(i), rows))
            convert = converter(column)
            if convert is not None:
                values = list(map(convert, values))
            # a real's value as the double Python holds: Arrow's float32 turns a value out of
            # its range into inf or 0, where PostgreSQL refuses it
            kind = pa.float64() if column.type is L.FLOAT32 else arrow_type(column)
            arrays.append(pa.array(values, type=kind))
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None
    return pa.Table.from_arrays(arrays, names=[c.name for c in columns])


def _copied_columns(table: TableSchema, keys_only: bool) -> list[Column]:
    """The columns a ``COPY`` of ``table``'s rows (of its key, in key order) writes."""
    by_name = {c.name: c for c in table.columns}
    return [by_name[n] for n in (table.key if keys_only else table.column_names)]


def copy_rows(cursor: Any, copy: str, table: TableSchema, rows: Sequence[tuple[Any, ...]],
              keys_only: bool, binary: bool = False) -> None:
    """Run ``COPY`` statement ``copy`` with ``rows`` (of the key columns when ``keys_only``):
    made a column at a time by Arrow into binary fields (``binary``: the table's columns are
    typed as :func:`target_type` says, so a staging table's) or text (:func:`copy_text`,
    ~1.3 us a row of six columns against ~3-4 for psycopg's ``write_row``, and the log's
    writer thread holds the GIL its reader needs for less), or row by row for values Arrow does
    not take as they are."""
    values = copy_values(table, rows, keys_only)
    data: list[memoryview] | None = None
    form = ""
    if values is rows and cursor.connection.info.encoding == "utf-8":
        columns = _copied_columns(table, keys_only)
        binary = binary and binary_types(columns)
        arrow = _arrow_rows(table, rows, keys_only, binary)
        if arrow is not None:
            data, form = _copy_data(arrow, columns, binary)
    with cursor.copy(copy + form) as stream:
        if data is not None:
            for part in data:
                stream.write(part)
        else:
            for row in values:
                stream.write_row(row)


def load(cursor: Any, table: TableSchema, quoted: str, rows: Sequence[tuple[Any, ...]],
         q: Callable[[str], str]) -> bool:
    """Copy snapshot ``rows`` (keys distinct) straight into the target table with one ``COPY``
    under a savepoint: into a table that does not hold their keys yet (a first snapshot) that
    is all, without :func:`write`'s staging table and merge, about half the server's work.
    False, with nothing written, when a key is there already (a table snapshotted again, a
    target with rows: the ``COPY`` fails at once) or the rows are too few to be worth it; the
    caller then writes them with :func:`write`."""
    from psycopg.errors import UniqueViolation  # the driver, imported where used

    if len(rows) < BULK_ROWS:
        return False
    try:
        copy = f"COPY {quoted} ({_column_list(table.column_names, q)}) FROM STDIN"
        with cursor.connection.transaction():  # a savepoint within the caller's transaction
            copy_rows(cursor, copy, table, rows, False)
    except UniqueViolation:
        return False
    return True


_SPECIAL = r"[\\\t\n\r]"
"""What ``COPY``'s text format escapes in a value (a backslash and the three separators)."""


def _text_column(column: pa.ChunkedArray) -> pa.ChunkedArray | None:
    """One column as ``COPY`` text, NULL as ``\\N``; None for a type or value Arrow does not
    write as PostgreSQL reads it (bytes, dates and timestamps past years 1-9999); an interval's
    ISO 8601 text goes as it is."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from sdk.dialect.arrow import python_units

    kind = column.type
    if pa.types.is_string(kind):
        if pc.any(pc.match_substring_regex(column, _SPECIAL)).as_py():
            for char, escaped in (("\\", "\\\\"), ("\t", "\\t"), ("\n", "\\n"),
                                  ("\r", "\\r")):
                column = pc.replace_substring(column, char, escaped)
        return pc.fill_null(column, "\\N")
    if (pa.types.is_timestamp(kind) and kind.unit == "us") or pa.types.is_date32(kind):
        if python_units(column, L.DATE if pa.types.is_date32(kind) else L.TIMESTAMP) is None:
            return None
        if pa.types.is_timestamp(kind) and kind.tz is not None:
            # the UTC wall time and its offset: Arrow's own text of an aware timestamp looks
            # up the zone for every value (~30 times slower)
            wall = column.cast(pa.timestamp("us")).cast(pa.string())
            return pc.fill_null(pc.binary_join_element_wise(wall, "+00", ""), "\\N")
    elif not (pa.types.is_integer(kind) or pa.types.is_floating(kind)
              or pa.types.is_boolean(kind) or pa.types.is_decimal(kind)):
        return None
    return pc.fill_null(column.cast(pa.string()), "\\N")


def copy_text(rows: pa.Table) -> list[memoryview] | None:
    """``rows`` in ``COPY``'s text format (UTF-8), made a column at a time by Arrow's kernels
    rather than a Python value per cell; None when a column needs the row path
    (:func:`_text_column`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    columns = []
    for column in rows.columns:
        text = _text_column(column)
        if text is None:
            return None
        columns.append(text)
    if not columns or not rows.num_rows:
        return []
    lines = pc.binary_join_element_wise(
        pc.binary_join_element_wise(*columns, "\t"), pa.scalar(""), "\n")
    return [end_to_end(chunk) for chunk in lines.chunks if len(chunk)]


def _copy_data(rows: pa.Table, columns: Sequence[Column], binary: bool
               ) -> tuple[list[memoryview] | None, str]:
    """``rows`` (of ``columns``) as ``COPY`` data and the statement's format option: binary
    when asked for and :func:`._binary.copy_binary` writes every value, else text (None: the
    row path)."""
    data = copy_binary(rows, columns) if binary else None
    if data is not None:
        return [memoryview(data)], " (FORMAT binary)"
    return copy_text(rows), ""


def load_arrow(cursor: Any, table: TableSchema, quoted: str, quoted_params: str,
               rows: pa.Table, q: Callable[[str], str], qp: Callable[[str], str]) -> None:
    """Load snapshot ``rows`` (keys distinct, as ``load_snapshot`` takes them) into the target
    table: their ``COPY`` data, binary (:func:`._binary.copy_binary`) when the table's columns
    have the types it writes, else text (:func:`copy_text`), straight into it under a
    savepoint, or, when a key is there already, into a staging table merged like
    :func:`write`'s upserts. A column Arrow cannot write sends the rows through :func:`load`
    and :func:`write`."""
    from psycopg.errors import UniqueViolation

    from sdk.dialect.arrow import python_values

    data: list[memoryview] | None = None
    form = ""
    if cursor.connection.info.encoding == "utf-8":
        binary = binary_types(table.columns) and typed_as_created(cursor, quoted, table)
        data, form = _copy_data(rows, table.columns, binary)
    if data is None:
        columns = [python_values(rows.column(i), c.type) for i, c in enumerate(table.columns)]
        values = list(zip(*columns, strict=True))
        if not load(cursor, table, quoted, values, q):
            write(cursor, table, quoted, quoted_params, NetChanges([], values), q, qp, True)
        return
    names = _column_list(table.column_names, q)
    try:
        with cursor.connection.transaction(), \
                cursor.copy(f"COPY {quoted} ({names}) FROM STDIN{form}") as stream:
            for part in data:
                stream.write(part)
        return
    except UniqueViolation:
        pass
    create, copy = stage_sql(table, q, False)
    cursor.execute(create)
    with cursor.copy(copy + form) as stream:
        for part in data:
            stream.write(part)
    try:
        with cursor.connection.transaction():  # a savepoint: see displacing
            cursor.execute(merge_sql(table, quoted, q)[1])
    except UniqueViolation as exc:
        displacing(cursor, table, quoted, q, exc, True)


def typed_as_created(cursor: Any, quoted: str, table: TableSchema) -> bool:
    """Whether each of the target table's columns has the type a binary ``COPY`` of its
    logical type writes (:data:`._binary.TYPNAMES`): a table the sync created, or one made
    alike. A binary field read as another type is refused, or worse, taken as other bytes."""
    cursor.execute(
        "SELECT a.attname, t.typname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
        "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped", (quoted,))
    found = dict(cursor.fetchall())
    return all(found.get(c.name) in TYPNAMES.get(c.type, ()) for c in table.columns)


def write(cursor: Any, table: TableSchema, quoted: str, quoted_params: str, net: NetChanges,
          q: Callable[[str], str], qp: Callable[[str], str], snapshot: bool = False) -> None:
    """Write ``net`` (a claimed batch's changes) to the target table, named ``quoted`` in
    statements without parameters and ``quoted_params`` in those with, using the psycopg
    ``cursor`` inside the caller's transaction: deletes first, then upserts (their keys
    differ), each set staged and merged or, when small, by ``executemany``. Upserts that
    meet a secondary unique index of the target are written by :func:`displacing`
    (``snapshot``: the rows are a snapshot's)."""
    from psycopg.errors import UniqueViolation

    if net.deletes:
        if len(net.deletes) < BULK_ROWS:
            cursor.executemany(statements(table, quoted_params, qp)[0], net.deletes)
        else:
            _stage(cursor, table, q, net.deletes, True)
            cursor.execute(merge_sql(table, quoted, q)[0])
    if not net.upserts:
        return
    try:
        with cursor.connection.transaction():  # a savepoint: see displacing
            if len(net.upserts) < BULK_ROWS:
                cursor.executemany(statements(table, quoted_params, qp)[1], net.upserts)
                return
            _stage(cursor, table, q, net.upserts, False)
            cursor.execute(merge_sql(table, quoted, q)[1])
    except UniqueViolation as exc:
        _stage(cursor, table, q, net.upserts, False)
        displacing(cursor, table, quoted, q, exc, snapshot)


def _stage(cursor: Any, table: TableSchema, q: Callable[[str], str],
           rows: Sequence[tuple[Any, ...]], keys_only: bool) -> None:
    """Copy ``rows`` (keys when ``keys_only``) into a new staging table (:func:`stage_sql`)."""
    create, copy = stage_sql(table, q, keys_only)
    cursor.execute(create)
    copy_rows(cursor, copy, table, rows, keys_only, binary=True)


REPLICA_ROLE = "session_replication_role"
"""The setting a session applies in as a replica does (:func:`applying`)."""


def displacing(cursor: Any, table: TableSchema, quoted: str, q: Callable[[str], str],
               error: Exception, snapshot: bool) -> None:
    """Upsert the staged rows where the target table has a unique index besides its key:
    first delete the rows whose values of such an index the staged rows take, under another
    key: of the batch (two rows that swap an email in one source transaction), which the
    upsert writes again, or, for ``snapshot`` rows, any (an earlier split's row whose value
    the source gave to this one since: its change is in the log, which writes it again).
    Deleting must not run the target's foreign keys (their ``ON DELETE`` actions): done in
    :data:`REPLICA_ROLE` ``replica``, or where no foreign key references the table; else
    the error, with what to grant."""
    cursor.execute(f"SELECT current_setting('{REPLICA_ROLE}') = 'replica', ARRAY(SELECT conname"
                   "::text FROM pg_constraint WHERE confrelid = %s::regclass AND "
                   "contype = 'f')", (quoted,))
    replica, referencing = cursor.fetchone()
    if referencing and not replica:
        raise ConfigurationError(
            f"the target table {quoted} has a unique index besides its key that this batch's "
            f"rows take from one another ({error}); the sync writes them by deleting and "
            f"inserting the rows, which would run foreign keys {', '.join(referencing)} of "
            f"the target: grant the target user SET ON PARAMETER {REPLICA_ROLE} (PostgreSQL "
            "15 and later; a superuser has it) so the sync applies as a replica does, or "
            "drop those foreign keys")
    cursor.execute("SELECT array_agg(a.attname::text ORDER BY k.n) FROM pg_index i, "
                   "unnest(i.indkey) WITH ORDINALITY AS k(attnum, n), pg_attribute a WHERE "
                   "i.indrelid = %s::regclass AND i.indisunique AND NOT "
                   "i.indisprimary AND i.indexprs IS NULL AND i.indpred IS NULL AND "
                   "a.attrelid = i.indrelid AND a.attnum = k.attnum GROUP BY i.indexrelid",
                   (quoted,))
    names = set(table.column_names)
    other_key = " OR ".join(f"t.{q(k)} IS DISTINCT FROM s.{q(k)}" for k in table.key)
    staged = " AND ".join(f"b.{q(k)} = t.{q(k)}" for k in table.key)
    held = "" if snapshot else f" AND EXISTS (SELECT 1 FROM pg_temp.{STAGE} AS b WHERE {staged})"
    for (columns,) in cursor.fetchall():
        if set(columns) <= names:
            same = " AND ".join(f"t.{q(c)} = s.{q(c)}" for c in columns)
            cursor.execute(f"DELETE FROM {quoted} AS t USING pg_temp.{STAGE} AS s WHERE {same} "
                           f"AND ({other_key}){held}")
    from psycopg.errors import UniqueViolation

    try:
        with cursor.connection.transaction():
            cursor.execute(merge_sql(table, quoted, q)[1])
    except UniqueViolation as exc:  # a row the batch does not write holds the value
        raise ConfigurationError(
            f"the target table {quoted} has a unique index that refuses a row the source "
            f"holds ({exc}): the source does not keep that index (or keeps it deferred); drop "
            "it at the target, or make it match the source's") from None


def alter_sql(old: TableSchema, new: TableSchema, quoted: str, existing: dict[str, str],
              q: Any) -> list[str]:
    """The statements that make table ``quoted`` (``existing``: its columns and their types as
    ``format_type`` spells them) hold ``new``'s columns: each missing one added, each one
    ``new`` lacks dropped, each whose type differs changed (values cast). None when it does
    already, so running them again after a replay changes nothing."""
    out = []
    wanted = {c.name: c for c in new.columns}
    for name in existing:
        if name not in wanted:
            out.append(f"ALTER TABLE {quoted} DROP COLUMN IF EXISTS {q(name)}")
    for column in new.columns:
        kind = target_type(column)
        if column.name not in existing:
            out.append(f"ALTER TABLE {quoted} ADD COLUMN IF NOT EXISTS {q(column.name)} {kind}")
        elif existing[column.name] != kind:
            out.append(f"ALTER TABLE {quoted} ALTER COLUMN {q(column.name)} TYPE {kind} "
                       f"USING {q(column.name)}::{kind}")
    return out


@contextlib.contextmanager
def applying(conn: Any) -> Iterator[None]:
    """One transaction of a :class:`~._connection.PgConnection` that the apply hooks join, in
    ``session_replication_role = replica`` where the session may set it, as PostgreSQL's own
    logical replication applies: the target's foreign keys, cascades and triggers do not
    run again on changes the source already checked and whose cascaded deletes are in its
    log (so a parent's delete may precede its child's within the batch)."""
    if conn.replica_role is None:
        conn.replica_role = may_set_replica_role(conn)
    with conn.raw.transaction():
        if conn.replica_role:
            conn.raw.execute(f"SET LOCAL {REPLICA_ROLE} = replica")
        yield


def may_set_replica_role(conn: Any) -> bool:
    """Whether the session's user may set ``session_replication_role``: a superuser, or on
    PostgreSQL 15 and later one granted ``SET ON PARAMETER session_replication_role``."""
    if conn.raw.info.server_version >= 150000:
        sql = ("SELECT rolsuper OR has_parameter_privilege('session_replication_role', 'SET') "
               "FROM pg_roles WHERE rolname = current_user")
    else:
        sql = "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
    row = conn.raw.execute(sql).fetchone()
    return bool(row and row[0])
