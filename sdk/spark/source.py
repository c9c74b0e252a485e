"""The ``cdc`` PySpark data source: the algorithm on Spark over any dialect.

``spark.read.format("cdc")`` reads a snapshot of the chosen tables, each split consistent as of
its own watermark. ``spark.readStream.format("cdc")`` reads the snapshot in micro-batches of
splits, then the log, exactly once across crashes:

- Spark keeps only the offsets. Each offset names an immutable state file in ``stateDir``
  (split cursors, finished splits with watermarks, log position), so offsets stay small.
- A snapshot batch hands out splits; each task reads its split with the watermark algorithm,
  stages the merged rows and the watermark in ``stateDir`` and then emits them. A replayed batch
  (crash, retry, second action) serves the staged rows: identical data, identical watermark.
  The next ``latestOffset`` folds the watermarks into the state.
- A log batch is one task reading the fixed range ``[from, to)`` of the log and filtering it with
  the finished splits; bounded reads are repeatable, so a replay gives the same rows.
- The dialect's log is released (``acknowledge_offset``) only in ``commit``, only up to the
  committed end.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from ..algorithm import (
    Batch,
    IncrementalFilter,
    Phase,
    PhaseMachine,
    SharedView,
    SyncOptions,
    SyncState,
    choose_key,
    read_split,
)
from ..algorithm.progress import progress_of
from ..codec import dumps
from ..config import ConnectionConfig
from ..dialects import Dialect, default_manager, get_dialect
from ..errors import ConfigurationError, PreflightError
from ..tables import parse_patterns, select_tables
from ..types import (
    ChangeEvent,
    Connection,
    FinishedSplit,
    Offset,
    SnapshotSplit,
    TableId,
    TableSchema,
)
from .arrow import TableBatcher, envelope_batch, envelope_schema, event_rows
from .statestore import StateStore

log = logging.getLogger(__name__)

BATCH_ROWS = 50_000
OFFSET_VERSION = 1


@dataclass
class SourceSpec:
    """Everything a reader needs, resolved once on the driver and shipped to tasks."""

    dialect: str
    config: ConnectionConfig
    tables: list[TableSchema]
    options: SyncOptions
    envelope: bool
    state_dir: str | None
    splits_per_batch: int
    parallelism: int
    head_poll_seconds: float

    @property
    def dialect_obj(self) -> Dialect:
        return get_dialect(self.dialect)

    def connect(self) -> Connection:
        return self.dialect_obj.connect(self.config)

    def table_map(self) -> dict[Any, TableSchema]:
        return {t.table: t for t in self.tables}

    def spark_schema(self) -> StructType:
        if self.envelope:
            return envelope_schema()[0]
        return TableBatcher(self.tables[0]).spark_schema


_ENGINE_OPTIONS = {"url", "tables", "statedir", "envelope", "snapshot.splits-per-batch",
                   "parallelism", "log.poll-interval.ms"}


def resolve(options: dict[str, str]) -> SourceSpec:
    """Parse the reader options, discover the tables, check and prepare the source."""
    opts = {k.lower(): v for k, v in options.items()}
    if "url" not in opts:
        raise ConfigurationError('the cdc source needs option("url", "<database URL>")')
    dialect, config = default_manager().dialect_for_url(opts["url"])
    sync_options = SyncOptions.from_strings(
        {k: v for k, v in opts.items() if k not in _ENGINE_OPTIONS})
    with dialect.passing_faults():
        schemas = _discover(dialect, config, opts, sync_options)
    envelope = opts.get("envelope", "false").lower() == "true" or len(schemas) > 1
    return SourceSpec(
        dialect=dialect.name, config=config, tables=schemas, options=sync_options,
        envelope=envelope, state_dir=opts.get("statedir"),
        splits_per_batch=int(opts.get("snapshot.splits-per-batch", "8")),
        parallelism=int(opts.get("parallelism", "8")),
        head_poll_seconds=int(opts.get("log.poll-interval.ms", "500")) / 1000)


def _discover(dialect: Dialect, config: ConnectionConfig, opts: dict[str, str],
              sync_options: SyncOptions) -> list[TableSchema]:
    """The chosen tables' schemas, their capture prepared and the source's preflight passed."""
    conn = dialect.connect(config)
    try:
        available = dialect.list_tables(conn)
        chosen = select_tables(available, parse_patterns(opts.get("tables", "*")))
        if not chosen:
            raise ConfigurationError(f"no tables to capture in {config.masked_url}")
        schemas = [choose_key(dialect.describe_table(conn, t), sync_options) for t in chosen]
        dialect.prepare_capture(conn, schemas)
        checks = dialect.preflight(conn, chosen)
        for advice in (r for r in checks if not r.ok and not r.required):
            log.warning("%s: %s", config.masked_url, advice)
        missing = [r for r in checks if not r.ok and r.required]
        if missing:
            raise PreflightError(f"{config.masked_url} is not ready for change capture:\n"
                                 + "\n".join(str(r) for r in missing))
    finally:
        conn.close()
    return schemas


class CdcDataSource(DataSource):
    """``format("cdc")``: options ``url``, ``tables``, ``stateDir`` and the algorithm's."""

    @classmethod
    def name(cls) -> str:
        return "cdc"

    def _spec(self) -> SourceSpec:
        spec = getattr(self, "_resolved", None)
        if spec is None:
            spec = resolve(dict(self.options))
            self._resolved = spec
        return spec

    def schema(self) -> StructType:
        return self._spec().spark_schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        return CdcBatchReader(self._spec())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        spec = self._spec()
        if not spec.state_dir:
            raise ConfigurationError(
                'a cdc stream needs option("stateDir", ...) on storage shared by the driver '
                "and the executors, e.g. <checkpointLocation>/cdc-state")
        return CdcStreamReader(spec)


# --- reading splits and log ranges (executor side) -------------------------------------------


@dataclass
class SplitPartition(InputPartition):
    """Snapshot splits for one task; ``stage`` names where their output is staged, if
    anywhere."""

    splits: list[tuple[int, SnapshotSplit]]
    stage: str | None = None
    view_token: str | None = None
    """A shared snapshot view the splits join (see :class:`sdk.algorithm.SharedView`)."""

    def __post_init__(self) -> None:
        super().__init__(None)


@dataclass
class LogPartition(InputPartition):
    """The log range of one micro-batch: ``state`` names the state file of its end offset."""

    state: str

    def __post_init__(self) -> None:
        super().__init__(None)


def _split_output(spec: SourceSpec, schema: TableSchema, rows: list[Any], watermark: Offset
                  ) -> list[pa.RecordBatch]:
    out = []
    for start in range(0, max(len(rows), 1), BATCH_ROWS):
        chunk = rows[start:start + BATCH_ROWS]
        if spec.envelope:
            events = [ChangeEvent(schema.table, "r", schema.key_of(r), r, watermark)
                      for r in chunk]
            out.append(envelope_batch(spec.table_map(), events, 0))
        else:
            out.append(TableBatcher(schema).snapshot_batch(chunk, dumps(watermark.to_json())))
    return [b for b in out if b.num_rows]


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a task turns rows into Arrow batches.

    A task holds up to a split's rows or a batch's events (acyclic tuples and events, freed by
    reference counting); with the collector on, each of its passes walks all of them again, so
    the cost grows with what is held. Measured on 100k log changes: 0.44x of the dialect's raw
    stream with it on, 1.0x paused. Cycles made meanwhile are collected when it resumes.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


F = TypeVar("F", bound=Callable[..., Any])


def _passing_faults(method: F) -> F:
    """``Dialect.passing_faults`` around a reader method (the reader's ``spec`` names the
    dialect)."""
    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self.spec.dialect_obj.passing_faults():
            return method(self, *args, **kwargs)
    return cast(F, wrapper)


def read_splits(spec: SourceSpec, partition: SplitPartition) -> Iterator[pa.RecordBatch]:
    """Read a partition's splits, staging each split's output first when ``stage`` is set."""
    with gc_paused(), spec.dialect_obj.passing_faults():
        yield from _read_splits(spec, partition)


def _read_splits(spec: SourceSpec, partition: SplitPartition) -> Iterator[pa.RecordBatch]:
    store = StateStore(spec.state_dir) if partition.stage and spec.state_dir else None
    dialect = spec.dialect_obj
    conn: Connection | None = None
    try:
        for table_index, split in partition.splits:
            schema = spec.tables[table_index]
            name = f"{table_index}-{split.index}"
            if store is not None and partition.stage is not None:
                staged = store.read_json("batches", partition.stage, f"{name}.json")
                if staged is not None:
                    table = store.read_arrow("batches", partition.stage, f"{name}.arrow")
                    assert table is not None, f"stage of split {split.split_id} lost its rows"
                    yield from table.to_batches(BATCH_ROWS)
                    continue
            if conn is None:
                conn = dialect.connect(spec.config)
            result = read_split(dialect, conn, schema, split, spec.options,
                                view_token=partition.view_token)
            batches = _split_output(spec, schema, result.rows, result.watermark)
            if store is not None and partition.stage is not None:
                arrow_schema = (envelope_schema()[1] if spec.envelope
                                else TableBatcher(schema).arrow_schema)
                store.write_arrow(pa.Table.from_batches(batches, schema=arrow_schema),
                                  "batches", partition.stage, f"{name}.arrow")
                done = FinishedSplit(split, result.watermark, len(result.rows))
                store.write_json(done.to_json(), "batches", partition.stage, f"{name}.json")
            yield from batches
    finally:
        if conn is not None:
            conn.close()


def read_log(spec: SourceSpec, partition: LogPartition) -> Iterator[pa.RecordBatch]:
    """Read one micro-batch's log range and emit what the incremental filter lets through."""
    with gc_paused(), spec.dialect_obj.passing_faults():
        yield from _read_log(spec, partition)


def _read_log(spec: SourceSpec, partition: LogPartition) -> Iterator[pa.RecordBatch]:
    assert spec.state_dir
    engine = EngineState.load(StateStore(spec.state_dir), partition.state)
    dialect = spec.dialect_obj
    flt = IncrementalFilter(engine.sync.finished, dialect.compare_offset)
    assert engine.log_from is not None and engine.sync.position is not None
    conn = dialect.connect(spec.config)
    tables = spec.table_map()
    batchers = {t: TableBatcher(s) for t, s in tables.items()}
    seq = 0
    pending: list[ChangeEvent] = []

    def flush() -> pa.RecordBatch:
        nonlocal seq
        if spec.envelope:
            batch = envelope_batch(tables, pending, seq)
        else:
            batcher = batchers[spec.tables[0].table]
            rows, ops, offsets, stamps = event_rows(batcher, pending)
            batch = batcher.batch(rows, ops, offsets, stamps, seq)
        seq += batch.num_rows
        pending.clear()
        return batch

    try:
        for item in dialect.stream_log(conn, spec.tables, engine.log_from, engine.sync.position):
            if isinstance(item, ChangeEvent):
                routed = flt.route(item)
                if routed is not None:
                    pending.append(routed)
                    if len(pending) >= BATCH_ROWS:
                        yield flush()
        if pending:
            yield flush()
    finally:
        conn.close()


class CdcBatchReader(DataSourceReader):
    """``spark.read``: every split of every table, each consistent as of its watermark."""

    def __init__(self, spec: SourceSpec) -> None:
        self.spec = spec

    @_passing_faults
    def partitions(self) -> Sequence[InputPartition]:
        spec = self.spec
        index_of = {t.table: i for i, t in enumerate(spec.tables)}
        conn = spec.connect()
        try:
            every = PhaseMachine(spec.dialect_obj, spec.options).all_splits(conn, spec.tables)
        finally:
            conn.close()
        splits = [(index_of[s.table], s) for s in every]
        groups = max(1, min(spec.parallelism, len(splits)))
        return [SplitPartition(splits[i::groups]) for i in range(groups)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SplitPartition)
        yield from read_splits(self.spec, partition)


# --- the streaming reader (driver side) -------------------------------------------------------


CHUNK_SPLITS = 256
"""Finished splits per stored chunk. A state names its chunks instead of holding the splits,
so a micro-batch writes only the chunk its new splits land in: the bytes stored per batch stay
flat however many splits a snapshot has finished (with them inline, a snapshot of n splits wrote
O(n^2) bytes: 40 MiB for 2,000 splits, growing with the square)."""

ChunkCache = dict[tuple[TableId, int], tuple[tuple[FinishedSplit, ...], str]]
"""(table, chunk number) -> the chunk's splits and digest, as last stored by this process."""


@dataclass
class EngineState:
    """What an offset stands for: the sync state, the splits handed out in the batch that ends
    here (their watermarks are not folded in yet), and the log range this batch reads."""

    sync: SyncState
    inflight: list[tuple[int, SnapshotSplit]] = field(default_factory=list)
    log_from: Offset | None = None
    seq: int = 0

    def save(self, store: StateStore, chunks: ChunkCache | None = None) -> str:
        """Store under ``<seq>-<content hash>``; the name is what the offset carries. The
        finished splits go to content-addressed chunks of ``CHUNK_SPLITS``; ``chunks`` skips
        re-encoding those this process stored already (a finished table only grows)."""
        cache: ChunkCache = {} if chunks is None else chunks
        finished = []
        for table, splits in self.sync.finished.items():
            digests = []
            for number, at in enumerate(range(0, len(splits), CHUNK_SPLITS)):
                chunk = splits[at:at + CHUNK_SPLITS]
                known = cache.get((table, number))
                if known is None or known[0] != chunk:
                    known = (chunk, store.put_content([f.to_json() for f in chunk], "chunks"))
                    cache[(table, number)] = known
                digests.append(known[1])
            finished.append(digests)
        content = {"sync": self.sync.to_json(finished=False), "finished": finished,
                   "inflight": [[i, s.to_json()] for i, s in self.inflight],
                   "log_from": self.log_from.to_json() if self.log_from else None}
        digest = store.put_content(content, "content")
        name = f"{self.seq:012d}-{digest}"
        if store.read_bytes("states", f"{name}.json") is None:
            store.write_json({"content": digest}, "states", f"{name}.json")
        return name

    @classmethod
    def load(cls, store: StateStore, name: str) -> EngineState:
        pointer = store.read_json("states", f"{name}.json")
        if pointer is None:
            raise ConfigurationError(f"state {name} is missing from {store.uri}: the stateDir "
                                     "does not belong to this checkpoint")
        data = store.read_json("content", f"{pointer['content']}.json")
        sync = data["sync"]
        if "finished" in data:  # else: a state stored with its finished splits inline
            sync["finished"] = [[split for digest in digests
                                 for split in _read_chunk(store, digest)]
                                for digests in data["finished"]]
        return cls(SyncState.from_json(sync),
                   [(i, SnapshotSplit.from_json(s)) for i, s in data["inflight"]],
                   Offset.from_json(data["log_from"]) if data["log_from"] else None,
                   int(name.split("-", 1)[0]))

    @staticmethod
    def chunks_of(store: StateStore, content: str) -> list[str]:
        """The chunks a stored content names (none for one with its splits inline)."""
        data = store.read_json("content", f"{content}.json")
        return [d for digests in (data or {}).get("finished", []) for d in digests]


def _read_chunk(store: StateStore, digest: str) -> list[dict[str, Any]]:
    data = store.read_json("chunks", f"{digest}.json")
    if data is None:
        raise ConfigurationError(f"chunk {digest} of the finished splits is missing from "
                                 f"{store.uri}: was the stateDir cleaned?")
    assert isinstance(data, list)
    return data


class CdcStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream``: snapshot batches, then log batches, exactly once."""

    def __init__(self, spec: SourceSpec) -> None:
        self.spec = spec
        assert spec.state_dir
        self.store = StateStore(spec.state_dir)
        self._conn: Connection | None = None
        self._head: tuple[float, Offset | None] = (0.0, None)
        self._target: Offset | None = None
        self._progress: dict[str, Any] | None = None
        self._view: SharedView | None = None
        self._states: dict[str, EngineState] = {}
        """The states this driver saved or loaded last, by name: each batch names its start
        and end state three times (latestOffset, partitions, commit)."""
        self._chunks: ChunkCache = {}
        self.machine = PhaseMachine(spec.dialect_obj, spec.options)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_conn"] = None
        state["_view"] = None
        state["_states"] = {}
        state["_chunks"] = {}
        return state

    def _load(self, name: str) -> EngineState:
        engine = self._states.get(name)
        if engine is None:
            engine = self._keep(name, EngineState.load(self.store, name))
        return engine

    def _keep(self, name: str, engine: EngineState) -> EngineState:
        self._states[name] = engine
        while len(self._states) > 4:
            del self._states[next(iter(self._states))]
        return engine

    def _view_token(self) -> str | None:
        """The snapshot view this driver shares with the split tasks, opened on first use."""
        if self._view is None:
            self._view = SharedView(self.spec.dialect_obj, self.spec.connect, self.spec.options)
        return self._view.token()

    def _close_view(self) -> None:
        if self._view is not None:
            self._view.close()
            self._view = None

    @property
    def conn(self) -> Connection:
        if self._conn is None:
            self._conn = self.spec.connect()
        return self._conn

    def _offset(self, engine: EngineState) -> dict[str, Any]:
        name = engine.save(self.store, self._chunks)
        self._keep(name, engine)
        self._report(engine.sync)
        position = engine.sync.position
        return {"v": OFFSET_VERSION, "phase": engine.sync.phase.value, "state": name,
                "position": dumps(position.to_json()) if position else None}

    def _report(self, sync: SyncState) -> None:
        """Write the progress report that ``sdk status`` and :func:`progress` read."""
        head = self._head[1]
        caught_up = None
        if head is not None and sync.position is not None:
            compare = self.spec.dialect_obj.compare_offset
            if self._target is not None and compare(head, self._target) > 0:
                head = self._target  # Trigger.AvailableNow: caught up means at its target
            caught_up = compare(sync.position, head) >= 0
        previous = self._progress or self.store.read_json("progress.json")
        self._progress = progress_of(sync, self.spec.options.split_size, previous,
                                     head, caught_up)
        self.store.write_json(self._progress, "progress.json")

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """Shown as the source's ``latestOffset`` in the streaming query progress."""
        report = self._progress
        if report is None:
            return None
        tables = {name: f"{t['splits_done']}/{t['splits_estimated']} splits, {t['rows']} rows"
                  for name, t in report["tables"].items()}
        return {"phase": report["phase"], "rows": int(report["rows"]), "tables": tables,
                "caught_up": bool(report.get("caught_up", False))}

    @_passing_faults
    def initialOffset(self) -> dict[str, Any]:
        return self._offset(EngineState(self.machine.start(self.conn, self.spec.tables)))

    @_passing_faults
    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.spec.dialect_obj.current_offset(self.conn)

    def _log_head(self, position: Offset) -> Offset:
        """The log head, asked at most every ``log.poll-interval.ms``; never past the
        Trigger.AvailableNow target."""
        at, head = self._head
        if head is None or time.monotonic() - at >= self.spec.head_poll_seconds:
            head = self.spec.dialect_obj.current_offset(self.conn)
            self._head = (time.monotonic(), head)
        if self._target is not None and \
                self.spec.dialect_obj.compare_offset(head, self._target) > 0:
            return self._target
        return head

    @_passing_faults
    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """Fold the last batch's splits in, then ask the phase machine for the next batch."""
        engine = self._load(start["state"])
        sync = engine.sync
        if engine.inflight:
            sync = self.machine.fold(sync, self._staged(start["state"], engine))
            self._report(sync)  # before a table may turn pure-log and drop its splits
        batch = self.machine.next_batch(self.conn, sync, self._log_head,
                                        self.spec.splits_per_batch)
        if batch is None:
            if sync is engine.sync:
                return start
            batch = Batch(sync)
        if batch.state.phase is not Phase.SNAPSHOT:
            self._close_view()
        index_of = {t.table: i for i, t in enumerate(self.spec.tables)}
        inflight = [(index_of[s.table], s) for s in batch.splits]
        return self._offset(EngineState(batch.state, inflight, batch.log_from, engine.seq + 1))

    def _staged(self, name: str, engine: EngineState) -> list[FinishedSplit]:
        """The watermarks the split tasks of batch ``name`` staged."""
        done = []
        for table_index, split in engine.inflight:
            data = self.store.read_json("batches", name, f"{table_index}-{split.index}.json")
            if data is None:
                raise ConfigurationError(f"the watermark of split {split.split_id} is missing "
                                         f"from {self.store.uri}: was the stateDir cleaned?")
            done.append(FinishedSplit.from_json(data))
        return done

    @_passing_faults
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        if start == end:
            return []
        engine = self._load(end["state"])
        if engine.inflight:
            token = self._view_token()
            return [SplitPartition([item], end["state"], token) for item in engine.inflight]
        if engine.log_from is not None:
            return [LogPartition(end["state"])]
        return []

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, SplitPartition):
            yield from read_splits(self.spec, partition)
        else:
            assert isinstance(partition, LogPartition)
            yield from read_log(self.spec, partition)

    @_passing_faults
    def commit(self, end: dict[str, Any]) -> None:
        engine = self._load(end["state"])
        if engine.sync.phase is Phase.LOG and engine.sync.position is not None:
            self.spec.dialect_obj.acknowledge_offset(self.conn, engine.sync.position)
        self._collect_garbage(engine.seq)

    def _collect_garbage(self, committed_seq: int) -> None:
        """Drop the stages and states of batches before the committed one: Spark never goes
        back to them (a restart replays at most the batch after the last commit)."""
        for name in self.store.list_dir("batches"):
            if int(name.split("-", 1)[0]) < committed_seq:
                self.store.delete_dir("batches", name)
        keep: set[str] = set()
        drop: list[tuple[str, str]] = []
        for file in self.store.list_dir("states"):
            pointer = self.store.read_json("states", file)
            if pointer is None:
                continue
            if int(file.split("-", 1)[0]) < committed_seq - 1:
                drop.append((file, pointer["content"]))
            else:
                keep.add(pointer["content"])
        kept_chunks = {c for content in keep for c in EngineState.chunks_of(self.store, content)}
        for file, content in drop:
            self.store.delete_file("states", file)
            if content not in keep:
                self.store.delete_file("content", f"{content}.json")
        gone = {file.removesuffix(".json") for file in self.store.list_dir("chunks")} - kept_chunks
        for digest in gone:
            self.store.delete_file("chunks", f"{digest}.json")
        if gone:  # a later save must write such a chunk again, not trust the cache
            self._chunks = {k: v for k, v in self._chunks.items() if v[1] not in gone}

    def stop(self) -> None:
        self._close_view()
        if self._conn is not None:
            self._conn.close()
            self._conn = None
