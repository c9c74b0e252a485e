"""Reading the slot: the changes between two offsets, decoded from ``pgoutput`` messages.

psycopg 3 has no replication stream, so the slot's messages are read with
``pg_logical_slot_peek_binary_changes(slot, upto_lsn, upto_nchanges, ...)`` (:func:`_peek`),
in peeks of growing size (:data:`FIRST_PEEK_ROWS`, :data:`PEEK_GROWTH`): the slot always
decodes from its confirmed position, and the lower bound is a filter here. The messages are
decoded by :mod:`._pgoutput`; their text values are parsed with psycopg's own loaders (types the
snapshot reads as text stay text), so a change's values equal what a SELECT gives.

Schema changes: pgoutput sends a Relation message (names, type OIDs and modifiers, key flags)
before a table's first change in each decoding session and after each DDL touching it. Each
table's rows are shaped by a current schema, at first the one the read was given; a Relation
whose columns differ from it (names in order, or a type) gets a new schema
(:func:`_new_schema`), announced by a :class:`~sdk.SchemaChange` at the offset of the first
change in the new shape. The new columns, their order and types come from the log (the live
catalog adds only NOT NULL and the keys), so a bounded read repeated yields the same items.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sdk import (
    ChangeEvent,
    Column,
    ConfigurationError,
    FatalSyncError,
    Key,
    Offset,
    OffsetExpiredError,
    RetriableError,
    SchemaChange,
    TableSchema,
    TableTruncated,
)

from . import _pgoutput as pgo
from ._connection import PgConnection, q, qualified
from ._describe import describe
from ._offsets import NAME, lsn_int, lsn_text
from ._types import (
    STRING_KINDS,
    TEXT_TYPES,
    UNCHECKED_ENCODING,
    decode_text,
    kind_of,
    logical_column,
)

PG_EPOCH_MICROS = 946_684_800_000_000  # 2000-01-01 in Unix microseconds
PEEK_CHUNK = 5000

Plan = list[tuple[int, Callable[[Any], Any]]]
"""Per table column: its index in the relation's tuples and the function that parses its text
(``bytes.decode`` for the columns carried as text; :func:`._types.decode_text` from a
``SQL_ASCII`` database)."""
Target = tuple[TableSchema, pgo.Relation, Plan]
"""What a relation's changes need: the table they feed, the relation, and its plan."""
Shapes = dict[tuple[str, str], TableSchema]
"""Per table (schema, name): the schema its rows are currently shaped by."""
TypeRow = tuple[str | None, str | None, str, str | None]
"""A type OID and modifier described: ``typname``, ``typtype``, ``format_type``, the base
type's ``typname`` (as ``describe_table`` reads them; None for a type dropped since)."""


def _loader(conn: PgConnection, oid: int) -> Any:
    loader = conn.loaders.get(oid)
    if loader is None:
        from psycopg.pq import Format

        loader = conn.raw.adapters.get_loader(oid, Format.TEXT)(oid, conn.raw)
        conn.loaders[oid] = loader
    return loader


def _plan(conn: PgConnection, table: TableSchema, relation: pgo.Relation) -> Plan:
    """The plan of ``table`` against ``relation``, whose columns it has (made once per
    Relation message: the decoding loop keeps it with the relation's target)."""
    by_name = {name: (i, oid) for i, (name, oid, _) in enumerate(relation.columns)}
    # pgoutput writes text in the session's encoding, UTF-8 (``connect``); a SQL_ASCII
    # database's as stored, maybe not UTF-8 (:func:`_peek`), read by ``decode_text``
    unchecked = conn.server_encoding == UNCHECKED_ENCODING
    plan: Plan = []
    for column in table.columns:
        i, oid = by_name[column.name]
        kind = kind_of(column)
        if unchecked and (kind in TEXT_TYPES or kind in STRING_KINDS):
            plan.append((i, decode_text))
        else:
            plan.append((i, bytes.decode if kind in TEXT_TYPES else _loader(conn, oid).load))
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
            # a TOASTed value is never NULL: a NULL "before" is a key-only old row labelled
            # whole (a partition whose identity is not its FULL root's)
            raw = old[i] if old is not None and i < len(old) and old[i] is not None \
                else pgo.UNCHANGED
            if raw is pgo.UNCHANGED:
                name = relation.columns[i][0]
                raise FatalSyncError(
                    f"an update of {table.table} left the TOASTed column {name!r} unchanged, "
                    "and PostgreSQL logs no value for it without a before image: run ALTER "
                    f"TABLE {qualified(table.table)} REPLICA IDENTITY FULL (and on each of "
                    "its partitions, if partitioned) so updates log the whole old row, then "
                    "take a new snapshot (restart the sync with a new --checkpoint directory, "
                    "startup.mode=initial)")
        out.append(None if raw is None else load(raw))
    return tuple(out)


def check_slot(conn: PgConnection, start: int) -> None:
    """Refuse a read from ``start`` that the slot cannot serve: it is missing, lost, or was
    advanced past ``start``."""
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


def read_changes(conn: PgConnection, tables: Sequence[TableSchema], start: tuple[int, int],
                 end: tuple[int, int], shapes: Shapes | None = None
                 ) -> Iterator[ChangeEvent | SchemaChange | TableTruncated]:
    """The changes at ``start <= (commit LSN, index in transaction) < end``; an end inside a
    transaction (a batch cut there) decodes that transaction and stops at the index.

    Each table's rows are shaped by its schema in ``tables``, or in ``shapes`` when given
    there (an open-ended stream's reads, each from where the last ended, carry it over),
    until a :class:`SchemaChange` changes it; ``shapes`` gets the schemas of the read's end."""
    wanted = {(t.table.schema, t.table.name): t for t in tables}
    if shapes is not None:
        wanted.update({k: shape for k, shape in shapes.items() if k in wanted})
    upto = end[0] + 1 if end[1] else end[0]
    position, limit = start, FIRST_PEEK_ROWS
    while True:  # peeks of more messages each time, each read on from where the last ended
        got = _Peeked()
        yield from _decode_rows(conn, wanted, _peek(conn, upto, limit, got), position, end,
                                got)
        position = max(position, (got.last_commit + 1, 0))
        if got.rows < limit or position >= end:  # the peek reached ``upto``
            break
        limit *= PEEK_GROWTH
    if shapes is not None:
        shapes.update(wanted)


FIRST_PEEK_ROWS = 5_000
"""The messages the first peek of a read decodes at most (whole transactions: it may give
more): the server decodes all it gives before the first one comes, so a read's first changes
come after ~5 ms of decoding rather than after decoding the whole range, which may be a long
backlog of which the batch reads only ``log.batch.changes``."""
PEEK_GROWTH = 4
"""How many times more messages each next peek decodes at most. A peek decodes from the
slot's confirmed position (and gives again what the last one gave, skipped here), so a read of
N messages decodes about 4/3 N, plus its last peek's overshoot (up to 3 N), however long the
range; one peek of the whole range decoded all of it for every batch. A peek's decoding
keeps the reader waiting while the writer applies what the last ones gave, so the steps
stay moderate (docs/operations.md has the figures)."""


@dataclasses.dataclass
class _Peeked:
    """What a peek gave: how many messages, and the commit LSN of the last transaction in them
    (a peek of limited messages ends at a transaction's end)."""

    rows: int = 0
    last_commit: int = 0


def _peek(conn: PgConnection, end: int, limit: int, got: _Peeked
          ) -> Iterator[list[tuple[Any, ...]]]:
    """The slot's messages up to ``end``, about ``limit`` of them at most (whole transactions),
    in batches, counted in ``got``. Only one session can use a slot at a time (parallel
    snapshot tasks backfill at once), so wait while it is busy; the first fetch runs the
    whole decoding, so a busy slot shows up before anything is yielded."""
    import psycopg

    # publication_names is a list of identifiers (folded to lower case unless quoted), so the
    # name goes quoted: a publication named ``MyPub`` or ``a,b`` is found as created. The
    # cursor is binary: each message's bytea arrives as it is, not as hex text the server
    # encodes and the client decodes again
    # A SQL_ASCII database's text goes out as stored only to a SQL_ASCII session (to a UTF8
    # one it is checked, and one value that is not UTF-8 would fail the whole read): the
    # fetches, where the server decodes, run in one, the catalog queries between them in UTF8
    unchecked = conn.server_encoding == UNCHECKED_ENCODING
    deadline = time.monotonic() + conn.wait_seconds
    while True:
        try:
            with conn.raw.transaction(), conn.raw.cursor(name="sdk_peek", binary=True) as cursor:
                cursor.execute("SELECT data FROM pg_logical_slot_peek_binary_changes(%s, "
                               "%s::pg_lsn, %s, 'proto_version', '1', "
                               "'publication_names', %s)",
                               (conn.slot, lsn_text(end), limit, q(conn.publication)))
                rows = _fetch(conn, cursor, unchecked)
                while rows:
                    got.rows += len(rows)
                    yield rows
                    rows = _fetch(conn, cursor, unchecked)
            return
        except psycopg.errors.ObjectInUse:
            if time.monotonic() > deadline:
                raise RetriableError(
                    f"replication slot {conn.slot!r} stayed in use by another session for "
                    f"{conn.wait_seconds:.0f} s") from None
            time.sleep(random.uniform(0.02, 0.2))


def _fetch(conn: PgConnection, cursor: Any, unchecked: bool) -> list[tuple[Any, ...]]:
    """The peek's next messages; ``unchecked``: fetched in a SQL_ASCII session (:func:`_peek`),
    the transaction's setting back to UTF8 before they are decoded."""
    if not unchecked:
        return list(cursor.fetchmany(PEEK_CHUNK))
    conn.raw.execute("SET LOCAL client_encoding TO 'SQL_ASCII'")
    rows = list(cursor.fetchmany(PEEK_CHUNK))
    conn.raw.execute("SET LOCAL client_encoding TO 'UTF8'")
    return rows


def _described(conn: PgConnection, relation: pgo.Relation,
               types: dict[tuple[int, int], TypeRow]) -> list[Column]:
    """The relation's columns as ``describe_table`` would describe columns of their type OIDs
    and modifiers, all nullable (the log does not say); ``types`` caches the server's
    descriptions of type OIDs and modifiers."""
    wanted = [(oid, relation.modifier(i)) for i, (_, oid, _) in enumerate(relation.columns)]
    missing = list(dict.fromkeys(t for t in wanted if t not in types))
    if missing:
        rows = conn.query(
            "SELECT t.typname, t.typtype, format_type(m.oid, m.typmod), bt.typname "
            "FROM unnest(%s::oid[], %s::int4[]) WITH ORDINALITY AS m(oid, typmod, i) "
            "LEFT JOIN pg_type t ON t.oid = m.oid LEFT JOIN pg_type bt ON "
            "bt.oid = t.typbasetype ORDER BY m.i",
            ([oid for oid, _ in missing], [typmod for _, typmod in missing]))
        types.update(zip(missing, rows, strict=True))
    out = []
    for (name, _, _), (oid, typmod) in zip(relation.columns, wanted, strict=True):
        typname, typtype, formatted, base = types[oid, typmod]
        out.append(logical_column(name, typname or "", typtype or "", formatted, True, typmod,
                                  base))
    return out


def _same_column(a: Column, b: Column) -> bool:
    """Whether ``a`` and ``b`` are one column with one type (their nullability aside)."""
    return (a.name, a.type, a.source_type, a.precision, a.scale) == \
        (b.name, b.type, b.source_type, b.precision, b.scale)


def _new_schema(conn: PgConnection, old: TableSchema, relation: pgo.Relation,
                described: list[Column]) -> TableSchema:
    """The schema of the rows ``relation`` shapes, replacing ``old``.

    Its columns are the relation's, in its order, each as the live catalog
    (``describe_table``) has it when it still has that column with that type, else as the
    relation's type OID and modifier describe it (a later DDL changed the live table), and
    nullable unless the live catalog's column of that name is NOT NULL. The key is the one
    the relation's key flags (the replica identity) name, in the order of a live key on those
    columns, else ``old``'s; the primary and unique keys are the live ones the columns still
    hold."""
    try:
        live: TableSchema | None = describe(conn, old.table)
    except ConfigurationError:  # the table is gone by now
        live = None
    by_name = {c.name: c for c in live.columns} if live is not None else {}
    columns = []
    for column in described:
        now = by_name.get(column.name)
        if now is not None and _same_column(now, column):
            columns.append(now)
        else:
            columns.append(dataclasses.replace(column, nullable=now is None or now.nullable))
    names = {c.name for c in columns}
    live_keys = [live.primary_key, *live.unique_keys] if live is not None else []
    flagged = () if relation.replica_identity == "f" else tuple(
        name for name, _, is_key in relation.columns if is_key)
    if flagged and set(flagged) != set(old.key):
        key = next((k for k in live_keys if k and set(k) == set(flagged)), flagged)
    elif old.key and set(old.key) <= names:
        key = old.key
    else:
        raise FatalSyncError(
            f"the log's rows of {old.table} no longer have its key column(s) "
            f"{', '.join(old.key)} (renamed or dropped), and its replica identity names no "
            "other key: take a new snapshot (restart the sync with a new --checkpoint "
            "directory)")
    if live is not None and live.primary_key and set(live.primary_key) <= names:
        primary = live.primary_key
    elif relation.replica_identity == "d" and flagged:
        primary = key
    else:
        primary = ()
    not_null = {c.name for c in columns if not c.nullable}
    unique = tuple(k for k in (live.unique_keys if live is not None else ())
                   if set(k) <= not_null)
    return TableSchema(old.table, tuple(columns), primary, unique, key)


def _target_of(conn: PgConnection, wanted: Shapes, relid: int,
               types: dict[tuple[int, int], TypeRow]) -> tuple[Target | None, bool]:
    """What the changes of relation ``relid`` feed, if wanted, and whether the table's schema
    changed with it: then ``wanted`` has the new one."""
    relation = conn.relations[relid]
    name = (relation.schema, relation.name)
    table = wanted.get(name)
    if table is None:
        return None, False
    described = _described(conn, relation, types)
    changed = len(described) != len(table.columns) or not all(
        _same_column(a, b) for a, b in zip(described, table.columns, strict=False))
    if changed:
        table = wanted[name] = _new_schema(conn, table, relation, described)
    return (table, relation, _plan(conn, table, relation)), changed


def _decode_rows(conn: PgConnection, wanted: Shapes,
                 batches: Iterator[list[tuple[Any, ...]]], start: tuple[int, int],
                 end: tuple[int, int], got: _Peeked
                 ) -> Iterator[ChangeEvent | SchemaChange | TableTruncated]:
    """The loop that runs per change, so its work per transaction and per relation is done
    once: the commit LSN and time, whether the transaction lies strictly inside the bounds
    (then no change needs the bound check), the table and plan a relation feeds (and, when
    its Relation message changed the table's shape, the SchemaChange yielded before the first
    change in the new shape). ``wanted`` holds each table's current schema; ``got`` gets
    the commit LSN of each transaction begun."""
    lsn = commit_ts = index = 0
    lsn_field: tuple[str, int] = ("lsn", 0)
    whole = False
    targets: dict[int, Target | None] = {}  # relation id -> what its changes feed, if wanted
    types: dict[tuple[int, int], TypeRow] = {}
    decode, decode_change, offset_of = pgo.decode, pgo.decode_change, Offset.from_sorted
    changes, begin, begin_kind, commit_kind = pgo.CHANGES, pgo.BEGIN, pgo.BEGIN_KIND, \
        pgo.COMMIT_KIND
    relid_of, tuple_at, insert, new = pgo.UINT32.unpack_from, pgo.tuple_at, pgo.INSERT_KIND, \
        pgo.NEW_MARKER
    for rows in batches:
        for (data,) in rows:
            kind = data[0]  # Begin, Commit and the changes go by their kind byte
            if kind in changes:
                n = index
                index += 1
                if not whole and not start <= (lsn, n) < end:
                    continue
                (relid,) = relid_of(data, 1)
                if relid in targets:
                    target = targets[relid]
                    if target is None:
                        continue
                    offset = offset_of(NAME, (lsn_field, ("n", n)))
                    if data[5] == new:  # an Insert, or an Update without an old tuple
                        table, relation, plan = target
                        values, _, unchanged = tuple_at(data, 6)
                        after = _values(table, relation, plan, values, unchanged, None)
                        yield ChangeEvent(table.table, "c" if kind == insert else "u",
                                          table.key_of(after), after, offset, None, None,
                                          commit_ts)
                    else:
                        yield _change(target, decode_change(data), offset, commit_ts)
                    continue
                change = decode_change(data)
                target, changed = _target_of(conn, wanted, relid, types)
                if changed:  # other relations feeding the table: planned again when next met
                    assert target is not None
                    for other in [r for r, t in targets.items()
                                  if t is not None and t[0].table == target[0].table]:
                        del targets[other]
                targets[relid] = target
                if target is not None:
                    offset = offset_of(NAME, (lsn_field, ("n", n)))
                    if changed:
                        yield SchemaChange(target[0], offset)
                    yield _change(target, change, offset, commit_ts)
            elif kind == begin_kind:
                lsn, commit_ts, _ = begin.unpack_from(data, 1)
                index, lsn_field = 0, ("lsn", lsn)
                got.last_commit = lsn
                commit_ts += PG_EPOCH_MICROS
                whole = start[0] < lsn < end[0]
            elif kind == commit_kind:  # nothing the changes need
                continue
            elif isinstance(message := decode(data), pgo.Relation):
                conn.relations[message.relid] = message
                targets.pop(message.relid, None)
            elif isinstance(message, pgo.Truncate):
                # at the index of the transaction's next change: a batch cut there reads it
                if not whole and not start <= (lsn, index) < end:
                    continue
                offset = offset_of(NAME, (lsn_field, ("n", index)))
                for r in message.relids:
                    hit = conn.relations.get(r)
                    emptied = wanted.get((hit.schema, hit.name)) if hit else None
                    if emptied is not None:
                        yield TableTruncated(emptied.table, offset)


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
                f"{qualified(table.table)} REPLICA IDENTITY FULL")
        out.append(load(raw))
    return tuple(out)
