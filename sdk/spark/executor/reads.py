"""The executor side of the ``cdc`` source: reading a task's snapshot splits (staged in the
state directory so a replayed batch serves the same rows) or a micro-batch's log range."""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from ...algorithm import log_filter, read_split
from ...algorithm.policy import follow_truncation, judge_schema_change
from ...algorithm.schema import projector
from ...algorithm.throttle import throttle
from ...dialect.codec import dumps
from ...dialect.errors import ConfigurationError, SchemaChangedError
from ...dialect.types import (
    ChangeEvent,
    Connection,
    FinishedSplit,
    Key,
    Offset,
    SchemaChange,
    SnapshotSplit,
    TableId,
    TableSchema,
    TableTruncated,
)
from ...job.failures import doing
from ...job.spec import SourceSpec
from ...job.target import TRIM_BEHIND, Applier, Pipeline
from ..state.engine_state import (
    SCHEMA_STAGE,
    TRUNCATED_STAGE,
    EngineState,
    check_task_source,
    ledger_prefix,
    stage_name,
    staged_schema_changes,
    with_cut,
    write_cut,
)
from ..state.statestore import StateStore
from .batches import REPORT_ARROW, TableBatcher, envelope_batch, envelope_schema, event_rows
from .collector import gc_paused
from .deadletter import Rejects

log = logging.getLogger(__name__)

BATCH_ROWS = 50_000


@dataclass
class SplitPartition(InputPartition):
    """Snapshot splits for one task; ``stage`` names where their output is staged, if
    anywhere."""

    splits: list[SnapshotSplit]
    stage: str | None = None
    view_token: str | None = None
    """A shared snapshot view the splits join (see :class:`sdk.algorithm.SharedView`)."""
    share: float = 1.0
    """This task's share of ``snapshot.rows-per-second`` (1 / the tasks reading at once)."""
    schemas: list[TableSchema] | None = None
    """The schemas of the splits' tables, as the sync state has them (a stream's tables may
    be added after it started); None: the source's tables (a batch read)."""
    versions: dict[str, int] | None = None
    """The schema versions of the splits' tables, by name (absent: 1)."""
    paced_from: float | None = None
    """When the batch was planned (``time.time()``) for a task of its first wave, which
    should start reading then: its pace counts from there (see
    :class:`sdk.algorithm.throttle.Throttle`)."""

    def __post_init__(self) -> None:
        super().__init__(None)

    def schema_of(self, spec: SourceSpec, table: TableId) -> TableSchema:
        for schema in self.schemas or ():
            if schema.table == table:
                return schema
        return spec.schema_of(table)

    def version_of(self, table: TableId) -> int:
        return (self.versions or {}).get(str(table), 1)


@dataclass
class LogPartition(InputPartition):
    """The log range of one micro-batch: ``state`` names the state file of its end offset."""

    state: str
    paced_from: float | None = None
    """When the batch was planned (``time.time()``): ``log.changes-per-second`` counts from
    there."""

    def __post_init__(self) -> None:
        super().__init__(None)


def _envelope_out(spec: SourceSpec) -> bool:
    """Whether split output is the envelope: a chained task stages the table's typed
    columns, whatever the stream carries."""
    return spec.envelope and spec.target is None


def _split_output(spec: SourceSpec, schema: TableSchema, rows: list[Any], watermark: Offset,
                  deleted: list[Key], version: int) -> list[pa.RecordBatch]:
    """A split's rows as batches of the table's typed columns or of the envelope, then the
    deletes of a table read again (its keys gone at the watermark)."""
    out = []
    batcher = TableBatcher(schema)
    for start in range(0, max(len(rows), 1), BATCH_ROWS):
        chunk = rows[start:start + BATCH_ROWS]
        if _envelope_out(spec):
            events = [ChangeEvent(schema.table, "r", schema.key_of(r), r, watermark)
                      for r in chunk]
            out.append(envelope_batch({schema.table: schema}, events, 0,
                                      {schema.table: version}))
        else:
            out.append(batcher.snapshot_batch(chunk, dumps(watermark.to_json()), version))
    if deleted:
        gone = _deletes(schema, deleted, watermark)
        if _envelope_out(spec):
            out.append(envelope_batch({schema.table: schema}, gone, 0, {schema.table: version}))
        else:
            out.append(batcher.batch(*event_rows(batcher, gone), 0, version))
    return [b for b in out if b.num_rows]


def _deletes(schema: TableSchema, keys: list[Key], watermark: Offset) -> list[ChangeEvent]:
    return [ChangeEvent(schema.table, "d", key, None, watermark) for key in keys]


def _staged_rows(schema: TableSchema, staged: pa.Table) -> tuple[list[Any], list[Key]]:
    """A staged split's rows and deleted keys (typed columns: a chained task's stage)."""
    values = TableBatcher(schema).rows_of(staged)
    ops = staged.column("_op").to_pylist()
    return ([row for row, op in zip(values, ops, strict=True) if op != "d"],
            [schema.key_of(row) for row, op in zip(values, ops, strict=True) if op == "d"])


def _table_columns(schema: TableSchema, staged: pa.Table) -> pa.Table:
    """A staged split's own columns (a chained task's stage: the table's typed columns, then
    the metadata), as a target's ``load_snapshot`` takes them."""
    width = len(schema.columns)
    return pa.Table.from_arrays(staged.columns[:width], names=list(schema.column_names))


def _stage_schema(spec: SourceSpec, schema: TableSchema) -> pa.Schema:
    if _envelope_out(spec):
        return envelope_schema()[1]
    return TableBatcher(schema).arrow_schema


def split_ledger_id(stage: str, split: SnapshotSplit) -> str:
    """The ledger id of a split applied by a chained task: its batch's state and its own id,
    the same when the batch is replayed, new when a table is snapshotted again."""
    return f"{stage}/{split.split_id}"


def log_ledger_id(state: str) -> str:
    """The ledger id of a log batch applied by a chained task."""
    return f"log/{state}"


def ledger_trims(prefix: str, state: str) -> list[tuple[str, str]]:
    """The ranges of ledger ids (``[low, high)``) of the sync with ``prefix`` that the log
    batch ending at ``state`` deletes: split loads (``<state>/<split>``) and log batches
    (``log/<state>/...``) of states ``TRIM_BEHIND`` and more before it (state names begin with
    their number, 12 digits: the ids sort by it)."""
    below = int(state.split("-", 1)[0]) - TRIM_BEHIND + 1
    if below <= 0:
        return []
    return [(f"{prefix}{0:012d}", f"{prefix}{below:012d}"),
            (f"{prefix}{log_ledger_id(f'{0:012d}')}", f"{prefix}{log_ledger_id(f'{below:012d}')}")]


def read_splits(spec: SourceSpec, partition: SplitPartition) -> Iterator[pa.RecordBatch]:
    """Read a partition's splits, staging each split's output first when ``stage`` is set."""
    with gc_paused(), spec.dialect_obj.passing_faults():
        yield from _read_splits(spec, partition)


def _read_splits(spec: SourceSpec, partition: SplitPartition) -> Iterator[pa.RecordBatch]:
    """The partition's output in its mode, chosen once: the batches read (a batch read), the
    batches staged first (a stream) or, chained, each split applied to the target and the
    task's report."""
    store = StateStore(spec.state_dir) if partition.stage and spec.state_dir else None
    sink = Applier(spec.target) if spec.target is not None else None
    if sink is not None and store is None:
        raise ConfigurationError("option target needs a stream (spark.readStream) with a "
                                 "state.dir: each split is staged before it is applied")
    reader = _SplitReader(spec, partition, store)
    try:
        if sink is not None:
            yield from _applied(reader, sink)
        elif store is not None:
            yield from _staged(reader)
        else:
            yield from _read(reader)
    finally:
        reader.close()
        if sink is not None:
            sink.close()


@dataclass
class _Split:
    """One split of a task: its table's schema, the name of its stage, what its changes the
    target refuses go to (``rejects``, written to its dead-letter file ``letter``) and, once
    read or replayed, its output."""

    split: SnapshotSplit
    schema: TableSchema
    name: str
    rejects: Rejects
    letter: str
    watermark: Offset | None = None
    rows: list[Any] | None = None
    """The rows as read (None: read as Arrow columns, or replayed from the stage)."""
    deleted: list[Key] = field(default_factory=list)
    batches: list[pa.RecordBatch] = field(default_factory=list)
    staged: pa.Table | None = None


class _SplitReader:
    """Reads a task's splits from the source (one connection, opened at the first read and
    checked against the sync's source; the pace shared with the task's other splits) and
    stages them in ``store``, if given."""

    def __init__(self, spec: SourceSpec, partition: SplitPartition,
                 store: StateStore | None) -> None:
        self.spec, self.partition, self.store = spec, partition, store
        self.dialect = spec.dialect_obj
        self.conn: Connection | None = None
        self.pace = throttle(spec.options.snapshot_rows_per_second, partition.share,
                             partition.paced_from)
        self.dead = StateStore(spec.state_dir) if spec.state_dir else None
        self.rejected: list[Rejects] = []  # each split's
        self.columnar = not _envelope_out(spec)

    def splits(self) -> Iterator[_Split]:
        """The partition's splits, in order, not read yet."""
        for split in self.partition.splits:
            name = stage_name(split)
            rejects = Rejects(self.spec.errors_mode, self.dead)
            self.rejected.append(rejects)
            letter = f"{self.partition.stage or 'read'}-{name}"  # the split's dead-letter file
            yield _Split(split, self.partition.schema_of(self.spec, split.table), name,
                         rejects, letter)

    def replay(self, one: _Split) -> bool:
        """Whether ``one`` was staged already (a replay): then its staged rows and watermark,
        as read the first time, are set on it."""
        assert self.store is not None and self.partition.stage is not None
        stage = self.partition.stage
        finished = self.store.read_json("batches", stage, f"{one.name}.json")
        if finished is None:
            return False
        one.staged = self.store.read_arrow("batches", stage, f"{one.name}.arrow")
        assert one.staged is not None, f"stage of split {one.split.split_id} lost its rows"
        one.watermark = FinishedSplit.from_json(finished).watermark
        return True

    def read(self, one: _Split) -> int:
        """Read ``one`` from the source into its output batches; the rows it read."""
        spec, split, schema = self.spec, one.split, one.schema
        if self.conn is None:
            self.conn = self.dialect.connect(spec.config)
            if spec.state_dir:
                check_task_source(StateStore(spec.state_dir), self.dialect, self.conn)
        version = self.partition.version_of(split.table)
        with doing(f"reading {_split_text(split)}", self.dialect.is_retriable, split.table):
            mark = one.rejects.mark()
            result = read_split(self.dialect, self.conn, schema, split, spec.options,
                                view_token=self.partition.view_token, pace=self.pace,
                                columnar=self.columnar)
            one.watermark, one.deleted = result.watermark, result.deleted
            if result.columns is not None:  # read as Arrow: the rows stay columns
                one.batches = TableBatcher(schema).columns_batches(
                    result.columns, dumps(one.watermark.to_json()), version)
            else:
                one.rows = one.rejects.rows(schema, result.rows, mark, one.watermark)
                one.rejects.write(one.letter)  # before the stage: a replay reads that
                one.batches = _split_output(spec, schema, one.rows, one.watermark,
                                            one.deleted, version)
        return result.count

    def stage(self, one: _Split, count: int) -> None:
        """Stage ``one``'s output and mark it finished (``count`` rows read), so a replay
        serves the same."""
        assert self.store is not None and self.partition.stage is not None
        assert one.watermark is not None
        stage = self.partition.stage
        one.staged = pa.Table.from_batches(one.batches,
                                           schema=_stage_schema(self.spec, one.schema))
        self.store.write_arrow(one.staged, "batches", stage, f"{one.name}.arrow")
        done = FinishedSplit(one.split, one.watermark, count)
        self.store.write_json(done.to_json(), "batches", stage, f"{one.name}.json")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


def _read(reader: _SplitReader) -> Iterator[pa.RecordBatch]:
    """A batch read: each split's batches as read."""
    for one in reader.splits():
        reader.read(one)
        yield from one.batches


def _staged(reader: _SplitReader) -> Iterator[pa.RecordBatch]:
    """A stream's splits: each staged, then its batches; a replayed one's from its stage."""
    for one in reader.splits():
        if reader.replay(one):
            assert one.staged is not None
            yield from one.staged.to_batches(BATCH_ROWS)
            continue
        reader.stage(one, reader.read(one))
        yield from one.batches


def _applied(reader: _SplitReader, sink: Applier) -> Iterator[pa.RecordBatch]:
    """A chained task: each split staged, then applied to the target (a first read loaded
    while the next split is read), then the task's report."""
    stage = reader.partition.stage
    assert reader.store is not None and stage is not None
    prefix = ledger_prefix(reader.store)
    loader = Pipeline()
    try:
        loader.submit(sink.connect)  # while the first split is read
        for one in reader.splits():
            if not reader.replay(one):
                reader.stage(one, reader.read(one))
            split, schema, watermark, staged = one.split, one.schema, one.watermark, one.staged
            assert watermark is not None and staged is not None
            ledger_id = prefix + split_ledger_id(stage, split)
            if split.since is None and sink.loads:  # a first read: rows only, as read
                # loaded while the next split is read (the split is staged already)
                loader.submit(functools.partial(
                    _load, sink, split, schema, _table_columns(schema, staged), ledger_id,
                    one.rejects, one.letter, watermark))
                continue
            loader.wait()
            rows, deleted = (one.rows, one.deleted) if one.rows is not None else \
                _staged_rows(schema, staged)  # replayed or read as columns
            whole_range = split.since is not None and split.where is None  # read again
            rejects = one.rejects
            with doing(f"applying {_split_text(split)} to the target", table=split.table,
                       applying=True, skips=rejects.skips):
                sink.apply(schema, [*(ChangeEvent(split.table, "r", schema.key_of(r), r,
                                                  watermark) for r in rows),
                                    *_deletes(schema, deleted, watermark)],
                           ledger_id, split if whole_range else None,
                           rejects.refused if rejects.skips else None)
            rejects.write(one.letter)
        with doing("loading snapshot splits into the target"):
            loader.wait()
        yield pa.RecordBatch.from_pylist(sink.report(_skipped(reader.rejected)),
                                         schema=REPORT_ARROW)
    finally:
        loader.shutdown()


def _load(sink: Applier, split: SnapshotSplit, schema: TableSchema, rows: pa.Table,
          ledger_id: str, rejects: Rejects, letter: str, watermark: Offset) -> None:
    """Load a first read of a split (on the loader's thread); under ``errors.mode=skip`` the
    rows the target refuses are set aside in the split's dead-letter file."""
    with doing(f"loading {_split_text(split)} into the target", table=split.table,
               applying=True, skips=rejects.skips):
        sink.load(schema, rows, ledger_id, rejects.refused if rejects.skips else None,
                  watermark)
    rejects.write(letter)


def _skipped(rejected: list[Rejects]) -> dict[TableId, int]:
    """Changes set aside per table, over ``rejected``."""
    out: dict[TableId, int] = {}
    for rejects in rejected:
        for table, count in rejects.skipped.items():
            out[table] = out.get(table, 0) + count
    return out


def read_log(spec: SourceSpec, partition: LogPartition) -> Iterator[pa.RecordBatch]:
    """Read one micro-batch's log range and emit what the incremental filter lets through."""
    with gc_paused(), spec.dialect_obj.passing_faults(), \
            doing(f"reading or applying the log batch of state {partition.state}",
                  spec.dialect_obj.is_retriable):
        yield from _read_log(spec, partition)


def _split_text(split: SnapshotSplit) -> str:
    """A split as a summary names it: its table, number and key range."""
    def key(value: Any, end: str) -> str:
        text = end if value is None else "(" + ", ".join(map(repr, value)) + ")"
        return text if len(text) <= 80 else text[:77] + "..."
    return (f"split {split.split_id} (keys from {key(split.start, 'the first')} to "
            f"{key(split.end, 'the last')})")


def _read_log(spec: SourceSpec, partition: LogPartition) -> Iterator[pa.RecordBatch]:
    assert spec.state_dir
    store = StateStore(spec.state_dir)
    engine = EngineState.load(store, partition.state)
    shapes = Shapes(spec, engine, store, partition.state)
    if spec.target is not None:
        yield from _apply_log(spec, partition, shapes)
        return
    tables = dict(shapes.tables)  # the columns of the changes read since the last change
    versions = dict(shapes.versions)  # and their schema versions
    batcher = None if spec.envelope else TableBatcher(spec.tables[0])  # a typed stream's
    seq = 0
    pending: list[ChangeEvent] = []
    rejects = Rejects(spec.errors_mode, store)
    mark = rejects.mark()

    def flush() -> pa.RecordBatch:
        nonlocal seq, pending, mark
        pending = rejects.events(tables, pending, mark)
        mark = rejects.mark()
        if batcher is None:
            batch = envelope_batch(tables, pending, seq, versions)
        else:
            output = batcher.table
            events: list[ChangeEvent] = pending
            shape = tables[output.table]
            if shape.columns != output.columns:  # a replay after a restart for new columns
                project = projector(shape, output)
                events = [replace(e, after=project(e.after), before=project(e.before))
                          for e in pending]
            rows, ops, offsets, stamps = event_rows(batcher, events)
            batch = batcher.batch(rows, ops, offsets, stamps, seq,
                                  versions.get(output.table, 1))
        seq += batch.num_rows
        pending = []
        return batch

    for item in _log_events(spec, engine, shapes, partition.paced_from):
        if isinstance(item, SchemaChange):  # the envelope's images carry the new columns
            if pending:
                yield flush()
            tables, versions = dict(shapes.tables), dict(shapes.versions)
            continue
        pending.append(item)
        if len(pending) >= BATCH_ROWS:
            yield flush()
    if pending:
        yield flush()
    rejects.write(f"log-{partition.state}")


def _apply_log(spec: SourceSpec, partition: LogPartition, shapes: Shapes
               ) -> Iterator[pa.RecordBatch]:
    """A chained log batch: its changes applied in log order, in chunks of at most
    ``BATCH_ROWS`` changes (memory stays O(chunk) however far behind the batch starts; the
    first ones smaller, :func:`chunk_rows`), each chunk's changes of a table recording
    ``log/<state>/<chunk>``, on a writer thread while the next chunk is read
    (:class:`~sdk.job.target.Pipeline`). All of it commits in one target transaction where
    the target can (``apply.consistency=transaction``; the batch ends between two source
    transactions, :func:`_log_events`), else each chunk's table by itself. The bounded read
    is repeatable, so a replay cuts the same chunks and skips those that committed. A schema
    change ends the chunk; the target's table is altered (idempotently) before the next one."""
    assert spec.target is not None
    sink = Applier(spec.target)
    writer = Pipeline()
    prefix = ledger_prefix(shapes.store)
    chunks = _LogChunks(spec, partition, shapes, sink, writer, prefix)
    engine = shapes.engine
    if shapes.tables:  # the position the batch leaves the target at, with its changes
        first = sink.target.table_for(next(iter(shapes.tables.values())))
        sink.marker = (first.table.schema, prefix.rstrip(":") or "sync")
    try:
        writer.submit(sink.begin)  # connects while the first chunk is read
        last = chunks.read(_log_events(spec, engine, shapes, partition.paced_from))
        end = with_cut(shapes.store, partition.state, engine).sync.position
        if end is not None and sink.marker is not None:  # where it was cut, if it was
            writer.submit(functools.partial(
                sink.mark, end, None if last is None else last.commit_ts,
                f"{prefix}{log_ledger_id(partition.state)}/position"))
        writer.submit(functools.partial(sink.trim, ledger_trims(prefix, partition.state)))
        writer.submit(sink.commit)
        writer.wait()
    finally:
        writer.shutdown()
        sink.close()
    yield pa.RecordBatch.from_pylist(sink.report(_skipped(chunks.rejected)),
                                     schema=REPORT_ARROW)


class _LogChunks:
    """A chained log batch's changes cut into chunks, each handed to the writer thread while
    the next is read (:func:`_apply_log`), with its ledger id, its dead letters and the
    columns its changes were read with."""

    def __init__(self, spec: SourceSpec, partition: LogPartition, shapes: Shapes,
                 sink: Applier, writer: Pipeline, prefix: str) -> None:
        self.spec, self.partition, self.shapes = spec, partition, shapes
        self.sink, self.writer = sink, writer
        self.ledger = f"{prefix}{log_ledger_id(partition.state)}"
        self.current = dict(shapes.tables)  # the columns of the changes read since the last
        self.chunk: dict[TableId, list[ChangeEvent]] = {}  # schema change
        self.held = self.number = 0
        self.limit = chunk_rows(0)  # the changes the chunk being read may hold
        self.rejected: list[Rejects] = []  # each chunk's
        self.mark = Rejects.mark()

    def read(self, items: Iterator[ChangeEvent | SchemaChange]) -> ChangeEvent | None:
        """Cut ``items`` into chunks; a schema change ends one, and the target's table is
        altered before the next. Returns the last change."""
        last_table: TableId | None = None
        changes: list[ChangeEvent] = []
        last: ChangeEvent | None = None
        for item in items:
            if isinstance(item, SchemaChange):
                last_table = None
                if self.held:
                    self.flush()
                self.writer.wait()
                self.sink.alter(self.current[item.table], item.schema)
                self.current[item.table] = item.schema
                continue
            if item.table is not last_table:  # runs of one table's changes: one lookup a run
                last_table = item.table
                changes = self.chunk.setdefault(last_table, [])
            changes.append(item)
            last = item
            self.held += 1
            if self.held >= self.limit:
                self.flush()
                last_table = None
        self.flush()
        return last

    def flush(self) -> None:
        """Hand the chunk read so far to the writer thread, its dead letters set aside."""
        events, ledger = self.chunk, f"{self.ledger}/{self.number}"
        schemas = dict(self.current)
        rejects = Rejects(self.spec.errors_mode, self.shapes.store)
        self.rejected.append(rejects)
        if Rejects.mark() != self.mark:
            events = {t: kept for t, changes in events.items()
                      if (kept := rejects.events(schemas, changes, self.mark))}
            self.mark = Rejects.mark()
        letter = f"log-{self.partition.state}-{self.number}"
        rejects.write(letter)
        refused = rejects.refused if rejects.skips else None
        sink = self.sink

        def apply() -> None:
            for table, changes in events.items():
                with doing(f"applying {len(changes)} changes of {table} (from log position "
                           f"{changes[0].offset.json_text()}) to the target", table=table,
                           applying=True, skips=rejects.skips):
                    sink.apply(schemas[table], changes, ledger, refused=refused)
            rejects.write(letter)

        self.writer.submit(apply)
        self.chunk, self.held, self.number = {}, 0, self.number + 1
        self.limit = chunk_rows(self.number)


FIRST_CHUNK_ROWS = 5_000
"""The changes of a log batch's first chunk; each next one holds twice as many, up to
``BATCH_ROWS``."""


def chunk_rows(number: int) -> int:
    """The changes chunk ``number`` of a chained log batch holds at most: small first ones, so
    the writer thread applies while the rest is read rather than after a batch of one chunk;
    a function of the number alone, so a replay cuts the same chunks. Never more than
    ``BATCH_ROWS``, so chunk ``n`` ends no later than it did with chunks of ``BATCH_ROWS``."""
    return min(BATCH_ROWS, FIRST_CHUNK_ROWS << min(number, 30))


class Shapes:
    """The columns each table's rows have within one log batch, as the log's schema changes
    move them, under ``schema.changes``: ``evolve`` takes a change (staged for the driver),
    ``ignore`` reads the rows as the sync's columns, ``stop`` (or a change that could lose
    values) ends the batch with an error naming it. A stream of one table's typed columns
    stops at a change it has not met before with :class:`SchemaChangedError`: restarted, its
    columns are the new ones (:func:`.engine_state.checkpointed`) and it follows the change
    when the batch replays."""

    def __init__(self, spec: SourceSpec, engine: EngineState, store: StateStore,
                 state: str) -> None:
        self.spec, self.engine, self.store, self.state = spec, engine, store, state
        self.tables: dict[TableId, TableSchema] = dict(engine.sync.tables)
        self.versions: dict[TableId, int] = dict(engine.sync.versions)
        self._ignored: dict[TableId, Any] = {}
        self._staged: list[dict[str, Any]] = []
        self._truncated: list[dict[str, Any]] = []
        self._met = {(c.table, c.offset) for c in staged_schema_changes(store, state)}
        """The changes an earlier run of this batch followed or stopped at."""

    def change(self, item: SchemaChange) -> SchemaChange | None:
        """The change to follow, or None (ignored, or nothing the sync carries changed)."""
        table = item.table
        current = self.tables.get(table)
        if current is None:
            return None
        verdict = judge_schema_change(current, item, self.spec.schema_changes,
                                      self.spec.options)
        if verdict.schema is None:
            self._ignored[table] = projector(item.schema, self.engine.sync.tables[table])
            return None
        item, quiet = SchemaChange(verdict.schema, item.offset), verdict.quiet
        self._ignored.pop(table, None)
        self.tables[table] = item.schema
        if not quiet:
            self.versions[table] = self.versions.get(table, 1) + 1
        self._staged.append({"schema": item.schema.to_json(),
                             "offset": item.offset.to_json()})
        self.store.write_json(self._staged, "batches", self.state, SCHEMA_STAGE)
        if not quiet and not self.spec.envelope and self.spec.target is None and \
                (table, item.offset) not in self._met:
            raise SchemaChangedError(
                f"table {table} changed in the log at {item.offset} ({verdict.described}): "
                "this stream of the table's typed columns stops before the change; restart "
                "the query and it reads on with the new columns (schema version "
                f"{self.versions[table]}), the rows before the change read as the new columns")
        return item

    def truncated(self, item: TableTruncated) -> None:
        """Stage a truncation of a captured table for the driver, which reads the table again
        whole (a chained batch: its target deletes the rows the new read lacks), as
        :func:`.policy.follow_truncation` says."""
        if not follow_truncation(self.engine.sync, item, self.spec.target is not None,
                                 self.spec.dialect_obj.compare_offset):
            return
        self._truncated.append(item.to_json())
        self.store.write_json(self._truncated, "batches", self.state, TRUNCATED_STAGE)

    @property
    def ignoring(self) -> bool:
        """Whether some table's change is ignored (its events need :meth:`event`)."""
        return bool(self._ignored)

    def event(self, event: ChangeEvent) -> ChangeEvent:
        """``event`` with its images read as the sync's columns when its table's change is
        ignored."""
        project = self._ignored.get(event.table)
        if project is None:
            return event
        return replace(event, after=project(event.after), before=project(event.before))


class BatchSize:
    """The bytes a log batch has read so far, estimated from every ``EVERY``-th change (a
    change's values: text and bytes by their length, anything else as 8): a function of the
    changes alone, so a replay cuts where the first read did; about 0.17 us a change (a count
    and a modulo, the sampling itself one change in 64)."""

    EVERY = 64

    def __init__(self, limit: int) -> None:
        self.limit, self.count, self.sampled, self.sampled_bytes = limit, 0, 0, 0

    def full(self, change: ChangeEvent) -> bool:
        """Count ``change``; whether the batch is over its limit before it."""
        self.count += 1
        if self.count % self.EVERY:
            return False
        values = change.after if change.after is not None else change.key
        self.sampled += 1
        self.sampled_bytes += 16 + sum(len(v) if isinstance(v, str | bytes) else 8
                                       for v in values)
        return self.sampled_bytes / self.sampled * self.count > self.limit


def _log_events(spec: SourceSpec, engine: EngineState, shapes: Shapes,
                paced_from: float | None = None) -> Iterator[ChangeEvent | SchemaChange]:
    """The changes of a log batch's range (``engine``: its end state) of the tables the sync
    captures there, that the incremental filter lets through, and the schema changes it
    follows (``shapes``); read at ``log.changes-per-second`` from ``paced_from``. A range
    holding more than ``log.batch.changes`` changes, or about ``log.batch.bytes`` of them
    (:class:`BatchSize`), is cut before the first change past them that starts a source
    transaction (the dialect's ``same_transaction``; without it, at that change):
    :func:`.engine_state.write_cut`, the batch ends there, the next one reads on. A
    transaction larger than the limits is one batch."""
    dialect = spec.dialect_obj
    flt = log_filter(engine.sync, dialect.compare_offset)
    pace = throttle(spec.options.log_changes_per_second, since=paced_from)
    assert engine.log_from is not None and engine.sync.position is not None
    flt.from_position(engine.log_from)  # the range's changes are at or past its start
    route = flt.route if flt.filtered_tables else None  # None: every change passes
    left = spec.log_batch_changes  # changes this batch may still read
    size = BatchSize(spec.log_batch_bytes)
    within = dialect.same_transaction
    previous: Offset | None = None  # the last change's offset
    over = False  # the limits were met inside a transaction, which the batch takes whole
    conn = dialect.connect(spec.config)
    try:
        check_task_source(shapes.store, dialect, conn)
    except BaseException:
        conn.close()
        raise
    stream = dialect.stream_log(conn, list(engine.sync.tables.values()), engine.log_from,
                                engine.sync.position)
    try:
        for item in stream:
            if isinstance(item, ChangeEvent):
                if over or not left or size.full(item):
                    if within is None or previous is None or not within(previous, item.offset):
                        write_cut(shapes.store, shapes.state, item.offset)
                        return
                    over = True
                else:
                    left -= 1
                previous = item.offset
                if pace is not None:
                    pace.take(1)
                routed = item if route is None else route(item)
                if routed is not None:
                    yield shapes.event(routed) if shapes.ignoring else routed
            elif isinstance(item, SchemaChange):
                followed = shapes.change(item)
                if followed is not None:
                    yield followed
            elif isinstance(item, TableTruncated):
                shapes.truncated(item)
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()
        conn.close()
