"""A sync target: where each source table is mirrored, and the exactly-once apply of a task's
changes there with the target dialect's ``apply_changes``. Spark-free: the mirror sink and the
``cdc`` source's chained writes (option ``target``) both run it in their tasks."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..dialect.apply import LEDGER
from ..dialect.codec import dumps
from ..dialect.config import ConnectionConfig
from ..dialect.errors import ConfigurationError
from ..dialect.manager import default_manager, get_dialect
from ..dialect.types import (
    Capability,
    ChangeEvent,
    Column,
    LogicalType,
    Offset,
    Requirement,
    SnapshotSplit,
    TableId,
    TableSchema,
)
from .failures import is_data_error

if TYPE_CHECKING:
    import pyarrow as pa

REPORT_SCHEMA = "table string, applied long, committed double, skipped long"
"""What each task reports as a Spark DDL schema: per source table, the changes it applied, the
commit time (seconds since the epoch) of the newest one that had a commit time, and the
changes it set aside (``errors.mode=skip``)."""

Refused = Callable[[TableSchema, ChangeEvent, BaseException], None]
"""Told each change the target refuses under ``errors.mode=skip`` (see :meth:`Applier.apply`)."""


POSITION = "_sdk_position"
"""The table in which a database target keeps, per sync, the source position its tables
reflect and the commit time of the last source transaction in it, written in the transaction
of the changes: a reader asks it, in its own transaction, as of which source commit what it
sees is (docs/operations.md)."""


def position_table(schema: str) -> TableSchema:
    """The :data:`POSITION` table in ``schema``: one row per sync (its id), the position as
    ``sdk status`` prints it (canonical JSON), the source commit time, when it was written."""
    return TableSchema(TableId(schema, POSITION), (
        Column("sync", LogicalType.STRING, "sdk", nullable=False),
        Column("source_position", LogicalType.STRING, "sdk"),
        Column("source_commit", LogicalType.TIMESTAMP_TZ, "sdk"),
        Column("applied_at", LogicalType.TIMESTAMP_TZ, "sdk")), ("sync",))


TRIM_BEHIND = 2
"""A batch deletes the target ledger's rows of its tables' batches this many or more before
its own (:meth:`Applier.trim`): a replay is only ever of the batch after Spark's last commit
(and a head start hands Spark only its last batch to replay), so two is a margin."""

_POSITION_MADE: set[tuple[str, str, tuple[str, str] | None]] = set()
"""The :data:`POSITION` tables this process made (or found) by target, URL and marker: made
once, not at every log batch."""


@dataclass
class Target:
    """The target database; each source table is mirrored under its own name, in
    ``schema_name`` when given, else in the source table's schema. Tables are mapped as they
    come (a table added to a running sync is mirrored like the first ones)."""

    dialect_name: str
    config: ConnectionConfig
    schema_name: str | None = None
    consistency: str = "transaction"
    """``transaction``: a log batch commits at once, every table of it, where the dialect can
    (``apply_transaction``); ``table``: each table's changes commit on their own."""

    @classmethod
    def of(cls, url: str, target_schema: str | None = None,
           consistency: str = "transaction") -> Target:
        """The target at ``url``; a dialect without ``apply_changes`` is refused."""
        dialect, config = default_manager().dialect_for_url(url)
        if not dialect.has(Capability.APPLY):
            raise ConfigurationError(f"dialect {dialect.name!r} cannot be a sync target "
                                     "(it does not implement apply_changes)")
        return cls(dialect.name, config, target_schema, consistency)

    @property
    def transactional(self) -> bool:
        """Whether a log batch is applied in one target transaction."""
        return self.consistency == "transaction" and \
            get_dialect(self.dialect_name).has(Capability.TRANSACTIONS)

    def table_for(self, source: TableSchema) -> TableSchema:
        """The target table of source table ``source``: its columns, under the target name."""
        return replace(source, table=TableId(self.schema_name or source.table.schema,
                                             source.table.name))

    def preflight(self, tables: Sequence[TableSchema]) -> list[Requirement]:
        """What the target user needs to mirror source tables ``tables``, each right with its
        GRANT (the dialect's ``target_preflight``): their target tables, and the ledger and
        :data:`POSITION` table of each of their schemas."""
        dialect = get_dialect(self.dialect_name)
        if not tables or not dialect.implements("target_preflight"):
            return []
        mirrored = {m.table: m for m in (self.table_for(t) for t in tables)}
        for schema in dict.fromkeys(t.schema for t in list(mirrored)):
            mirrored.setdefault(TableId(schema, POSITION), position_table(schema))
        conn = dialect.connect(self.config)
        try:
            with dialect.passing_faults():
                return dialect.target_preflight(conn, list(mirrored.values()))
        finally:
            conn.close()

    def check_rights(self, tables: Sequence[TableSchema]) -> None:
        """Refuse, naming each missing grant (a :class:`ConfigurationError`: exit 2, as a
        source's missing privilege), a target user who may not mirror ``tables``: asked before
        anything is made at the source or the target."""
        missing = [r for r in self.preflight(tables) if not r.ok and r.required]
        if missing:
            raise ConfigurationError(
                f"the target user {self.config.user} may not mirror the tables into "
                f"{self.config.masked_url}:\n" + "\n".join(str(r) for r in missing))

    def create_tables(self, tables: Iterable[TableSchema], own: bool = False) -> None:
        """Create the target table of each source table in ``tables`` that does not exist.
        An existing one with other columns is refused by the dialect, unless ``own`` (the
        tables of a sync resumed from its checkpoint): then it is one whose columns lag
        behind a schema change the sync followed, and it is altered to ``tables``'."""
        dialect = get_dialect(self.dialect_name)
        conn = dialect.connect(self.config)
        try:
            for table in tables:
                mirrored = self.table_for(table)
                try:
                    dialect.create_table(conn, mirrored)
                except ConfigurationError:
                    if not own or not dialect.has(Capability.ALTER):
                        raise
                    dialect.alter_table(conn, mirrored, mirrored)
                    dialect.create_table(conn, mirrored)
        finally:
            conn.close()


    def lost(self, tables: Sequence[TableSchema]) -> dict[TableId, str]:
        """Of source tables ``tables`` (whose rows the sync applied to this target, by its
        checkpoint), those whose target table the target lost, each with why: the table is
        missing, or it is there but its schema's ledger holds a batch of none of them (the
        database or schema dropped and created again, the ledger dropped). One call of the
        dialect's ``applied_tables``; nothing for a target without it. Asked before any
        table is created: ``create_table`` makes a missing one, silently."""
        dialect = get_dialect(self.dialect_name)
        if not tables or not dialect.implements("applied_tables"):
            return {}
        mirrored = {t.table: self.table_for(t) for t in tables}
        conn = dialect.connect(self.config)
        try:
            with dialect.passing_faults():
                found: dict[TableId, bool] = dialect.applied_tables(
                    conn, list(mirrored.values()))
        finally:
            conn.close()
        out: dict[TableId, str] = {}
        schemas: dict[str, list[TableId]] = {}
        for source, target in mirrored.items():
            if target.table not in found:
                out[source] = f"{_named(source, target.table)} is missing from the target"
            else:
                schemas.setdefault(target.table.schema, []).append(source)
        for sources in schemas.values():
            if not any(found[mirrored[t].table] for t in sources):
                out.update({t: f"{_named(t, mirrored[t].table)} is in the target, but the "
                               f"target's ledger ({LEDGER}) holds none of the batches applied "
                               "to it (its database or schema dropped and created again, or "
                               "the ledger dropped)" for t in sources})
        return out

    def reflected(self, schema: str, sync: str) -> Offset | None:
        """The source position sync ``sync``'s :data:`POSITION` row in ``schema`` says the
        target reflects (what its batches applied); None without one, or for a target that
        cannot say (no ``applied_tables`` or ``read_range``)."""
        dialect = get_dialect(self.dialect_name)
        if not dialect.implements("applied_tables") or not dialect.implements("read_range"):
            return None
        table = position_table(schema)
        conn = dialect.connect(self.config)
        try:
            with dialect.passing_faults():
                if table.table not in dialect.applied_tables(conn, [table]):
                    return None
                row = _position_row(dialect, conn, table, sync)
        finally:
            conn.close()
        return None if row is None or row[1] is None else \
            Offset.from_json(json.loads(row[1]))

    def empty(self, tables: Sequence[TableSchema]) -> list[TableId]:
        """Of source tables ``tables``, those whose target table holds no row (one read of a
        key a table; none for a target that cannot read its rows back)."""
        dialect = get_dialect(self.dialect_name)
        if not tables or not dialect.implements("read_range"):
            return []
        conn = dialect.connect(self.config)
        try:
            with dialect.passing_faults():
                return [t.table for t in tables
                        if not has_rows(dialect, conn, self.table_for(t))]
        finally:
            conn.close()


def _position_row(dialect: Any, conn: Any, table: TableSchema, sync: str
                  ) -> Sequence[Any] | None:
    """Sync ``sync``'s row of :data:`POSITION` table ``table``, None without one."""
    whole = SnapshotSplit(table.table, 0, None, None)
    return next((row for rows in dialect.read_range(conn, table, whole, 100) for row in rows
                 if row[0] == sync), None)


def has_rows(dialect: Any, conn: Any, table: TableSchema) -> bool:
    """Whether ``table`` holds a row, by the dialect's ``read_range`` of its key columns (the
    first batch of one row is enough)."""
    keys = table.key_columns()
    batches = dialect.read_range(conn, keys, SnapshotSplit(table.table, 0, None, None), 1)
    try:
        return any(len(batch) for batch in batches)
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()


def _read_events(source: TableSchema, rows: pa.Table, watermark: Offset) -> list[ChangeEvent]:
    """A snapshot split's Arrow rows (as :meth:`Applier.load` takes them) as read events."""
    from ..dialect.arrow import python_values

    values = [python_values(rows.column(i), c.type) for i, c in enumerate(source.columns)]
    key_of, table = source.key_of, source.table
    return [ChangeEvent(table, "r", key_of(row), row, watermark)
            for row in zip(*values, strict=True)]


def _named(source: TableId, target: TableId) -> str:
    """How a message names the target table of source table ``source``."""
    return f"table {source}" if source == target else f"table {source} (target {target})"


@dataclass
class Applier:
    """Applies changes to one :class:`Target` inside a task, on one connection opened on first
    use, and keeps what it applied for the task's report."""

    target: Target
    applied: dict[TableId, int] = field(default_factory=dict)
    newest: dict[TableId, int] = field(default_factory=dict)
    """The newest commit time (microseconds since the epoch) seen per table."""
    _conn: Any = None
    _transaction: Any = None
    """The open ``apply_transaction`` block (:meth:`begin`), if any."""
    _begun: bool = False
    """Between :meth:`begin` and :meth:`commit`."""
    marker: tuple[str, str] | None = None
    """``(schema, sync id)``: :meth:`begin` makes that schema's :data:`POSITION` table, which
    :meth:`mark` writes."""

    def apply(self, source: TableSchema, events: Sequence[ChangeEvent], batch_id: str,
              replaces: SnapshotSplit | None = None, refused: Refused | None = None) -> None:
        """Apply ``events`` of source table ``source`` in one transaction recording
        ``batch_id``; a batch id applied before writes nothing (a replay) and counts nothing.
        ``replaces``: the events are the whole key range of this split (a table read again),
        so target rows in it that they do not hold are deleted too. ``refused``: each change
        the target refuses for a value (a data error) is found and handed to it, the others
        applied (:meth:`_apply`); without it the refusal raises."""
        if not events and replaces is None:
            return
        table = source.table
        dialect = get_dialect(self.target.dialect_name)
        stamps = [e.commit_ts for e in events if e.commit_ts is not None]
        if stamps:
            self.newest[table] = max(self.newest.get(table, -2**63), max(stamps))
        with dialect.passing_faults():  # a target that drops out is retried like a source
            self._connect(dialect)
            mirrored = self.target.table_for(source)
            if replaces is not None:
                events = [*self._stale(mirrored, replaces, events), *events]
            with self._joined(dialect):
                self._apply(dialect, source, mirrored, events, batch_id, refused)

    def _joined(self, dialect: Any) -> AbstractContextManager[object]:
        """The transaction an apply runs in: the one :meth:`begin` opened, else one of its
        own from the dialect's ``apply_transaction`` (``apply.consistency=table``: a table's
        changes commit by themselves, applied as that block applies, as a replica does), else
        the apply's own (no such hook)."""
        if self._transaction is not None or not dialect.has(Capability.TRANSACTIONS):
            return contextlib.nullcontext()
        joined: AbstractContextManager[object] = dialect.apply_transaction(self._conn)
        return joined

    def _apply(self, dialect: Any, source: TableSchema, mirrored: TableSchema,
               events: Sequence[ChangeEvent], batch_id: str, refused: Refused | None) -> None:
        """``apply_changes`` of ``events`` as one batch; refused for a value (a data error)
        with ``refused`` given, each half as its own batch (``<id>/0``, ``<id>/1``: the same
        halves when a replay meets the same refusal, the ledger skipping what committed) down
        to the single changes refused, which ``refused`` is told."""
        try:
            done = dialect.apply_changes(self._conn, mirrored, events, batch_id)
        except Exception as exc:
            if refused is None or not is_data_error(exc) or dialect.is_retriable(exc):
                raise
            if len(events) == 1:
                refused(source, events[0], exc)
                return
            half = len(events) // 2
            self._apply(dialect, source, mirrored, events[:half], f"{batch_id}/0", refused)
            self._apply(dialect, source, mirrored, events[half:], f"{batch_id}/1", refused)
            return
        table = source.table
        self.applied[table] = self.applied.get(table, 0) + (len(events) if done else 0)

    @property
    def loads(self) -> bool:
        """Whether the target loads snapshot splits as Arrow tables (:meth:`load`)."""
        return get_dialect(self.target.dialect_name).implements("load_snapshot")

    def load(self, source: TableSchema, rows: pa.Table, batch_id: str,
             refused: Refused | None = None, watermark: Offset | None = None) -> None:
        """Load a first read of a snapshot split of source table ``source`` (its columns in
        order, typed as :mod:`sdk.dialect.arrow` gives) with the target's ``load_snapshot``, in one
        transaction recording ``batch_id``; a replay writes and counts nothing. Refused for
        a value with ``refused`` given, the rows are applied as changes read at
        ``watermark`` instead (:meth:`apply`), which finds the ones refused."""
        dialect = get_dialect(self.target.dialect_name)
        with dialect.passing_faults():
            self._connect(dialect)
            mirrored = self.target.table_for(source)
            with self._joined(dialect):
                try:
                    done = dialect.load_snapshot(self._conn, mirrored, rows, batch_id)
                except Exception as exc:
                    if refused is None or not is_data_error(exc) or dialect.is_retriable(exc):
                        raise
                    self._apply(dialect, source, mirrored,
                                _read_events(source, rows, watermark or Offset("snapshot")),
                                batch_id, refused)
                    return
        table = source.table
        self.applied[table] = self.applied.get(table, 0) + (rows.num_rows if done else 0)

    def alter(self, old: TableSchema, new: TableSchema) -> None:
        """Alter the target table of source table ``old`` to hold ``new``'s rows (the target
        dialect's ``alter_table``; done again after a replay, it changes nothing)."""
        dialect = get_dialect(self.target.dialect_name)
        if not dialect.has(Capability.ALTER):
            raise ConfigurationError(
                f"table {new.table}'s columns changed, and target dialect {dialect.name!r} "
                "cannot alter its tables (no alter_table): use schema.changes=ignore, or a "
                "new snapshot")
        with dialect.passing_faults():
            self._connect(dialect)
            dialect.alter_table(self._conn, self.target.table_for(old),
                                self.target.table_for(new))

    def _stale(self, mirrored: TableSchema, split: SnapshotSplit,
               events: Sequence[ChangeEvent]) -> list[ChangeEvent]:
        """Deletes of the target rows in ``split``'s key range that ``events`` do not hold
        (read with the target dialect's ``read_range``; deletes first, so a key read back in
        another form than the source's is deleted and then written again, never lost). A
        replay finds the batch applied and writes nothing."""
        dialect = get_dialect(self.target.dialect_name)
        held = {e.key for e in events if e.op != "d"}
        whole = SnapshotSplit(mirrored.table, split.index, split.start, split.end)
        keys = mirrored.key_columns()  # the key columns are all it needs to read
        stale = [key for batch in dialect.read_range(self._conn, keys, whole, 10_000)
                 for key in map(keys.key_of, batch) if key not in held]
        offset = events[0].offset if events else Offset("target")
        return [ChangeEvent(split.table, "d", key, None, offset) for key in stale]

    def report(self, skipped: Mapping[TableId, int] | None = None) -> list[dict[str, Any]]:
        """Rows of :data:`REPORT_SCHEMA`: one per table this applier was given changes of, or
        that had changes ``skipped`` (set aside under ``errors.mode=skip``)."""
        skipped = skipped or {}
        tables = list(dict.fromkeys([*self.applied, *self.newest, *skipped]))
        return [{"table": str(t), "applied": self.applied.get(t, 0),
                 "committed": self.newest[t] / 1e6 if t in self.newest else None,
                 "skipped": skipped.get(t, 0)}
                for t in tables]

    def begin(self) -> None:
        """Open the target transaction that the applies up to :meth:`commit` join (the
        dialect's ``apply_transaction``), when the target is :attr:`Target.transactional`;
        else each apply commits by itself. Connects either way. Called on the thread that
        applies."""
        dialect = get_dialect(self.target.dialect_name)
        with dialect.passing_faults():
            self._connect(dialect)
            if self.marker is not None and self._made not in _POSITION_MADE:
                # before the block: MySQL's DDL commits by itself
                dialect.create_table(self._conn, position_table(self.marker[0]))
                _POSITION_MADE.add(self._made)
            self._begun = True
            if not self.target.transactional:
                return
            transaction = dialect.apply_transaction(self._conn)
            transaction.__enter__()
        self._transaction = transaction

    def mark(self, position: Offset, commit_ts: int | None, batch_id: str) -> None:
        """Record in the :data:`POSITION` table of :attr:`marker` that the target reflects the
        source up to ``position`` (its last change committed at ``commit_ts``, microseconds
        since the epoch; None: the commit recorded before stays), in the transaction of the
        changes (:meth:`begin`)."""
        if self.marker is None:
            return
        schema, sync = self.marker
        table = position_table(schema)
        dialect = get_dialect(self.target.dialect_name)
        with dialect.passing_faults(), self._joined(dialect):
            if commit_ts is None:  # a batch without changes: the last commit stays
                row = _position_row(dialect, self._conn, table, sync)
                commit = None if row is None else row[2]
            else:
                commit = dt.datetime.fromtimestamp(commit_ts / 1e6, dt.UTC)
            row = (sync, dumps(position.to_json()), commit, dt.datetime.now(dt.UTC))
            dialect.apply_changes(self._conn, table, [
                ChangeEvent(table.table, "u", (sync,), row, position)], batch_id)

    @property
    def _made(self) -> tuple[str, str, tuple[str, str] | None]:
        """This applier's key in :data:`_POSITION_MADE`."""
        return self.target.dialect_name, self.target.config.url, self.marker

    def trim(self, ranges: Sequence[tuple[str, str]]) -> None:
        """Delete, in the transaction of the changes, the target ledger's rows of the tables
        this applier applied (and of the :data:`POSITION` table) whose batch ids are in any of
        ``ranges`` (``[low, high)``): batches no replay can ask about (the dialect's
        ``trim_ledger``; nothing without it)."""
        dialect = get_dialect(self.target.dialect_name)
        if not ranges or not dialect.implements("trim_ledger") or self._conn is None:
            return
        tables = [TableId(self.target.schema_name or t.schema, t.name) for t in self.applied]
        if self.marker is not None:
            tables.append(TableId(self.marker[0], POSITION))
        with dialect.passing_faults(), self._joined(dialect):
            for table in dict.fromkeys(tables):
                for low, high in ranges:
                    dialect.trim_ledger(self._conn, TableSchema(table, (), ()), low, high)

    def commit(self) -> None:
        """Commit the transaction :meth:`begin` opened, if any (a failure before it leaves it
        to :meth:`close`, which rolls it back with the connection)."""
        transaction, self._transaction = self._transaction, None
        self._begun = False
        if transaction is not None:
            with get_dialect(self.target.dialect_name).passing_faults():
                transaction.__exit__(None, None, None)

    def connect(self) -> None:
        """Open the target connection now rather than on first use: a writer thread does it
        while its task reads the first changes (the target driver's import and the login
        would otherwise wait until they are read)."""
        dialect = get_dialect(self.target.dialect_name)
        with dialect.passing_faults():
            self._connect(dialect)

    def _connect(self, dialect: Any) -> None:
        """Open the applier's target connection on first use."""
        if self._conn is None:
            self._conn = dialect.connect(self.target.config)

    def close(self) -> None:
        """Close the connection; a transaction still open is rolled back with it (and the
        :data:`POSITION` table made again by the next :meth:`begin`: it may be what failed)."""
        if self._begun:
            _POSITION_MADE.discard(self._made)
        self._transaction = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def add_reports(applied: dict[str, int], rows: Iterable[Sequence[Any]],
                skipped: dict[str, int] | None = None) -> float | None:
    """Add report rows ``(table, applied, committed, skipped)`` to ``applied`` and ``skipped``
    (per table name); the newest commit time among them, or None."""
    newest: float | None = None
    for table, count, committed, *rest in rows:
        applied[table] = applied.get(table, 0) + count
        if skipped is not None and rest and rest[0]:
            skipped[table] = skipped.get(table, 0) + rest[0]
        if committed is not None and (newest is None or committed > newest):
            newest = committed
    return newest


class Pipeline:
    """Jobs run one at a time, in order, on one background thread: a task reads the next chunk
    of changes while the last one is applied (the target's server works and the thread waits
    on its socket without the GIL). :meth:`submit` first waits for the job before, so at most
    two chunks are held, and raises its failure."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sdk-apply")
        self._pending: Future[None] | None = None

    def submit(self, job: Callable[[], None]) -> None:
        self.wait()
        self._pending = self._pool.submit(job)

    def wait(self) -> None:
        """Wait for the job in flight; raise its failure."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def shutdown(self) -> None:
        """Wait for a job still running, without raising its failure (the caller is already
        raising one, or has called :meth:`wait`)."""
        self._pool.shutdown(wait=True)
