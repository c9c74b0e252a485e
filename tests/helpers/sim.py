"""An in-memory database with a change log, and a dialect over it, for adversarial tests of the
algorithm. Pure logic only: the real dialects are tested against their real servers.

The log can run ahead of visibility, as MySQL's binlog and PostgreSQL's WAL do: a *delayed*
write is in the log at once but visible to reads only when published. A dialect whose
``current_offset`` returns the raw log head then breaks the visibility guarantee (``leaky``);
the safe one first waits for the changes in flight to become visible (here: publishes them),
as the PostgreSQL dialect waits for the transactions in progress. (Returning the oldest
in-flight offset instead is a safe *low* mark but not a valid *high* one: a read may already
see a later change, which the log phase would then emit again.)
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from sdk import (
    Capability,
    ChangeEvent,
    Column,
    DialectInfo,
    DialectManager,
    Key,
    LogicalType,
    LogItem,
    Offset,
    Row,
    SchemaChange,
    SnapshotSplit,
    SnapshotView,
    TableId,
    TableSchema,
    TableStats,
    TableTruncated,
    hookimpl,
)

NAME = "mem"
TABLE = TableId("db", "t")
SCHEMA = TableSchema(TABLE, (Column("id", LogicalType.INT64, "int", False),
                             Column("v", LogicalType.INT64, "int")), ("id",))
WIDER = TableSchema(TABLE, (*SCHEMA.columns, Column("w", LogicalType.INT64, "int")), ("id",))
"""The table after :meth:`MemoryDatabase.add_column`: ``w`` is 0 in the rows it held, and
``v + 1000`` in the rows written after."""


@dataclass
class Entry:
    """One logged change."""

    op: str
    key: Key
    after: Row | None
    old_key: Key | None = None
    before: Row | None = None


@dataclass
class MemoryDatabase:
    """One table ``db.t (id, v)`` and its log; ``on_fetch`` runs between read batches."""

    rows: dict[Key, Row] = field(default_factory=dict)
    log: list[Entry] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)
    on_fetch: Callable[[], None] = lambda: None
    schema: TableSchema = SCHEMA

    def _row(self, key: Key, value: int | None) -> Row:
        if self.schema is WIDER:
            return (key[0], value, (value or 0) + 1000)
        return (key[0], value)

    def write(self, op: str, key: Key, value: int | None = None, new_key: Key | None = None,
              delayed: bool = False) -> None:
        """Log a change and make it visible (now, or at :meth:`publish` when delayed)."""
        before = self.rows.get(key) if not self._pending_key(key) else None
        if op == "d":
            entry = Entry("d", key, None, before=before)
        elif op == "c":
            entry = Entry("c", key, self._row(key, value))
        else:
            target = new_key or key
            entry = Entry("u", target, self._row(target, value),
                          old_key=key if target != key else None, before=before)
        self.log.append(entry)
        if delayed:
            self.pending.append(len(self.log) - 1)
        else:
            self._apply(entry)

    def truncate(self) -> None:
        """Log a TRUNCATE (op ``t``, no key) and empty the table."""
        self.publish()
        self.log.append(Entry("t", (), None))
        self.rows.clear()

    def add_column(self) -> None:
        """Log ``ALTER TABLE t ADD COLUMN w`` (op ``s``, no key): the rows held get 0."""
        if self.schema is WIDER:
            return
        self.publish()
        self.schema = WIDER
        self.log.append(Entry("s", (), None))
        self.rows = {k: (*row, 0) for k, row in self.rows.items()}

    def _pending_key(self, key: Key) -> bool:
        return any(key in (self.log[i].key, self.log[i].old_key) for i in self.pending)

    def publish(self) -> None:
        """Make every delayed change visible, in log order."""
        for index in sorted(self.pending):
            self._apply(self.log[index])
        self.pending.clear()

    def _apply(self, entry: Entry) -> None:
        if entry.old_key is not None:
            self.rows.pop(entry.old_key, None)
        if entry.op == "d":
            self.rows.pop(entry.key, None)
        else:
            assert entry.after is not None
            self.rows[entry.key] = entry.after

    def busy_keys(self) -> set[Key]:
        """Keys with an unpublished change (a row lock: nobody else may write them)."""
        out: set[Key] = set()
        for i in self.pending:
            out.add(self.log[i].key)
            if self.log[i].old_key is not None:
                out.add(self.log[i].old_key)  # type: ignore[arg-type]
        return out


@dataclass
class MemoryConnection:
    db: MemoryDatabase
    view: dict[Key, Row] | None = None

    def close(self) -> None:
        return None


class MemoryDialect:
    """The hooks over :class:`MemoryDatabase`; ``leaky`` breaks visibility on purpose."""

    def __init__(self, leaky: bool = False, atomic: bool = False) -> None:
        self.leaky = leaky
        self.atomic = atomic

    @hookimpl
    def dialect_info(self) -> DialectInfo:
        caps = {Capability.EARLIEST, Capability.SCHEMA_CHANGES} | \
            ({Capability.ATOMIC_SNAPSHOT} if self.atomic else set())
        return DialectInfo(NAME, "in-memory simulation", capabilities=frozenset(caps))

    @hookimpl
    def connect(self, config: Any) -> MemoryConnection:
        raise NotImplementedError("tests pass connections directly")

    @hookimpl
    def list_tables(self, conn: MemoryConnection) -> list[TableId]:
        return [TABLE]

    @hookimpl
    def describe_table(self, conn: MemoryConnection, table: TableId) -> TableSchema:
        return conn.db.schema

    @hookimpl
    def table_stats(self, conn: MemoryConnection, table: TableSchema) -> TableStats:
        keys = sorted(conn.db.rows)
        return TableStats(keys[0] if keys else None, keys[-1] if keys else None, len(keys))

    @hookimpl
    def next_boundary(self, conn: MemoryConnection, table: TableSchema, start: Key | None,
                      size: int) -> Key | None:
        keys = sorted(conn.db.rows)
        first = 0 if start is None else bisect_left(keys, start)
        return keys[first + size] if first + size < len(keys) else None

    @hookimpl
    def current_offset(self, conn: MemoryConnection) -> Offset:
        if not self.leaky:
            conn.db.publish()
        return Offset(NAME, seq=len(conn.db.log))

    @hookimpl
    def read_range(self, conn: MemoryConnection, table: TableSchema, split: SnapshotSplit,
                   fetch_size: int) -> Iterator[Sequence[Row]]:
        last: Key | None = None
        while True:
            source = conn.view if conn.view is not None else conn.db.rows
            keys = sorted(k for k in source if split.contains(k) and (last is None or k > last)
                          and _meets(split.where, source[k]))
            batch = [source[k][:len(table.columns)] for k in keys[:fetch_size]]  # its columns
            if not batch:
                return
            yield batch
            last = keys[len(batch) - 1]
            if conn.view is None:
                conn.db.on_fetch()

    @hookimpl
    def stream_log(self, conn: MemoryConnection, tables: Sequence[TableSchema], start: Offset,
                   end: Offset | None) -> Iterator[LogItem]:
        lo = start["seq"]
        hi = end["seq"] if end is not None else len(conn.db.log)
        assert isinstance(lo, int) and isinstance(hi, int)
        if TABLE not in [t.table for t in tables]:  # changes of tables read only
            return
        shape = next(t for t in tables if t.table == TABLE)
        for seq in range(lo, hi):
            e = conn.db.log[seq]
            if e.op == "t":
                yield TableTruncated(TABLE, Offset(NAME, seq=seq))
                continue
            row = e.after or e.before
            if (e.op == "s" or (row is not None and len(row) > len(shape.columns))) and \
                    len(shape.columns) < len(WIDER.columns):  # announced before its rows
                shape = WIDER
                yield SchemaChange(WIDER, Offset(NAME, seq=seq))
            if e.op == "s":
                continue
            yield ChangeEvent(TABLE, e.op, e.key, e.after, Offset(NAME, seq=seq),  # type: ignore[arg-type]
                              e.before, e.old_key)

    @hookimpl
    def compare_offset(self, a: Offset, b: Offset) -> int:
        x, y = a["seq"], b["seq"]
        assert isinstance(x, int) and isinstance(y, int)
        return (x > y) - (x < y)

    @hookimpl
    def earliest_offset(self, conn: MemoryConnection) -> Offset:
        return Offset(NAME, seq=0)

    @hookimpl
    def begin_snapshot(self, conn: MemoryConnection) -> SnapshotView | None:
        if not self.atomic:
            return None
        offset = self.current_offset(conn)
        conn.view = dict(conn.db.rows)  # exactly the changes below offset
        return SnapshotView(offset)

    @hookimpl
    def end_snapshot(self, conn: MemoryConnection) -> None:
        conn.view = None


def _meets(where: str | None, row: Row) -> bool:
    """The simulated table's rows condition: a Python expression on ``id`` and ``v``."""
    return where is None or bool(eval(where, {}, {"id": row[0], "v": row[1]}))


def memory_dialect(leaky: bool = False, atomic: bool = False) -> Any:
    """A fresh manager with the memory dialect registered; returns the Dialect facade."""
    manager = DialectManager(load_entry_points=False)
    manager.register(MemoryDialect(leaky, atomic), NAME)
    return manager.get(NAME)


def replay(events: Sequence[ChangeEvent]) -> dict[Key, Row]:
    """Apply events in order to an empty table, as an idempotent sink would."""
    table: dict[Key, Row] = {}
    for e in events:
        if e.old_key is not None:
            table.pop(e.old_key, None)
        if e.op == "d":
            table.pop(e.key, None)
        else:
            assert e.after is not None
            table[e.key] = e.after
    return table


def key_histories(log: Sequence[Entry], initial: dict[Key, Row]
                  ) -> dict[Key, list[tuple[int, Row | None]]]:
    """Each key's images in log order, as (offset, image or None when absent); the initial
    rows sit at offset -1 and entry ``i`` of the simulated log has offset ``i`` (the kit's
    ``sdk.testing.kit.key_histories`` does the same for a real dialect's log)."""
    out: dict[Key, list[tuple[int, Row | None]]] = {k: [(-1, v)] for k, v in initial.items()}
    for index, e in enumerate(log):
        if e.old_key is not None:
            out.setdefault(e.old_key, []).append((index, None))
        out.setdefault(e.key, []).append((index, None if e.op == "d" else e.after))
    return out


def check_exactly_once(events: Sequence[ChangeEvent],
                       histories: dict[Key, list[tuple[int, Row | None]]],
                       watermark_of: Callable[[Key], int]) -> None:
    """Per key, what was emitted is exactly the key's real history from its split's watermark
    on: its state at the watermark as one ``r`` event (if it existed then), then every later
    change once, in order. Nothing missing, nothing repeated, nothing stale."""
    per_key: dict[Key, list[tuple[str, int, Row | None]]] = {}
    for e in events:
        seq = e.offset["seq"]
        assert isinstance(seq, int)
        if e.old_key is not None:
            per_key.setdefault(e.old_key, []).append(("d", seq, None))
        per_key.setdefault(e.key, []).append((e.op, seq, None if e.op == "d" else e.after))
    for key in set(per_key) | set(histories):
        emitted = per_key.get(key, [])
        history = histories.get(key, [])
        mark = watermark_of(key)
        before = [img for off, img in history if off < mark]
        state_at_mark = before[-1] if before else None
        expected: list[tuple[str, int, Row | None]] = []
        if state_at_mark is not None:
            expected.append(("r", mark, state_at_mark))
        expected += [("d" if img is None else "cu", off, img)
                     for off, img in history if off >= mark]
        got = [("r" if op == "r" else "d" if op == "d" else "cu", seq, img)
               for op, seq, img in emitted]
        assert got == expected, (key, mark, got, expected)
