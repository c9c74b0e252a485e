"""The ``cdc`` PySpark data source: the algorithm on Spark over any dialect.

``spark.read.format("cdc")`` reads a snapshot of the chosen tables, each split consistent as of
its own watermark. ``spark.readStream.format("cdc")`` reads the snapshot in micro-batches of
splits, then the log, exactly once across crashes:

- Spark keeps only the offsets. Each offset names an immutable state file in ``state.dir``
  (split cursors, finished splits with watermarks, log position), so offsets stay small.
- A snapshot batch hands out splits; each task reads its split with the watermark algorithm,
  stages the merged rows and the watermark in ``state.dir`` and then emits them. A replayed batch
  (crash, retry, second action) serves the staged rows: identical data, identical watermark.
  The next ``latestOffset`` folds the watermarks into the state.
- A log batch is one task reading the fixed range ``[from, to)`` of the log and filtering it with
  the finished splits; bounded reads are repeatable, so a replay gives the same rows.
- The dialect's log is released (``acknowledge_offset``) only up to a committed end
  (:meth:`CdcStreamReader.settle`): in ``commit``, in the driver's head start, and for the
  last batch once ``sdk sync`` stopped the stream.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
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

from ...algorithm import Batch, Phase, PhaseMachine, SharedView
from ...algorithm.lineage import (
    SOURCE_FILE,
    check_position,
    resume_position,
    source_record,
)
from ...algorithm.policy import (
    applied_tables,
)
from ...dialect.codec import dumps, position_label
from ...dialect.errors import ConfigurationError
from ...dialect.types import (
    Connection,
    FinishedSplit,
    Offset,
    SnapshotSplit,
    TableId,
    TableSchema,
)
from ...job.spec import (
    READER_OPTIONS,
    SourceSpec,
    needs_capture,
    parse_options,
    prepare_source,
    resolve,
)
from ...job.target import Target, has_rows
from ..executor.batches import REPORT_SPARK, TableBatcher, envelope_schema
from ..executor.reads import (
    LogPartition,
    SplitPartition,
    read_log,
    read_splits,
)
from ..state.checkpoint_format import check_format, record_format
from ..state.engine_state import (
    EngineState,
    StateCache,
    checkpointed,
    follow_or_check_source,
    latest,
    ledger_prefix,
    read_progress,
    stage_name,
    start_stream,
)
from ..state.handoff import next_step, resumed_state, skips, wait_for_driver
from ..state.statestore import StateStore
from .following import Following, noting_changed_tables
from .requests import (
    SnapshotRequest,
    pending_requests,
    write_request,
)
from .stream_progress import StreamProgress

log = logging.getLogger(__name__)

OFFSET_VERSION = 1


def spark_schema(spec: SourceSpec) -> StructType:
    """The output's Spark schema: the envelope, or the one table's columns."""
    if spec.target is not None:
        return REPORT_SPARK
    if spec.envelope:
        return envelope_schema()[0]
    return TableBatcher(spec.tables[0]).spark_schema


class CdcDataSource(DataSource):
    """``format("cdc")``: options ``url``, ``tables``, ``state.dir`` and the algorithm's."""

    @classmethod
    def name(cls) -> str:
        return "cdc"

    def _spec(self) -> SourceSpec:
        """The resolved tables; their capture is prepared once a stream is asked for (a
        batch read, which reads no log, leaves nothing behind: no slot pins the WAL)."""
        spec = getattr(self, "_resolved", None)
        if spec is None:
            schemas = resolved_tables(self.options)
            self._prepared = schemas is not None  # by sdk sync, before the query
            spec = checkpointed(resolve(dict(self.options), schemas, prepare=False))
            self._resolved = spec
        return spec

    def _prepare(self, spec: SourceSpec, snapshot_only: bool = False) -> None:
        """Prepare the source's capture, once, when the read needs it (:func:`needs_capture`)."""
        if not getattr(self, "_prepared", False) and \
                needs_capture(spec.dialect_obj, spec.options, snapshot_only):
            advise = parse_options(self.options).source["advice"] == "log"
            prepare_source(spec, noting_changed_tables(spec.state_dir), advise)
            self._prepared = True

    def schema(self) -> StructType:
        return spark_schema(self._spec())

    def reader(self, schema: StructType) -> DataSourceReader:
        spec = self._spec()
        if spec.target is not None:
            raise ConfigurationError("option target applies a stream's batches exactly once: "
                                     "use spark.readStream (with a state.dir), not spark.read")
        self._prepare(spec, snapshot_only=True)  # none in consistent views: no log read
        return CdcBatchReader(spec)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        spec = self._spec()
        if not spec.state_dir:
            raise ConfigurationError(
                'a cdc stream needs option("state.dir", ...) on storage shared by the driver '
                "and the executors, e.g. <checkpointLocation>/cdc-state")
        if spec.target is not None and not getattr(self, "_prepared", False):
            spec.target.check_rights(spec.tables)  # each missing grant named, nothing made
            check_target(spec, spec.target)  # a restart: what the target lost is read again
            spec.target.create_tables(spec.tables)  # sdk sync made them before it started
        self._prepare(spec)
        return CdcStreamReader(spec)


RESOLVED_FILE = "resolved.json"
"""The tables ``sdk sync`` resolved, with the token its query's option ``resolved`` names."""


def save_resolved(state_dir: str, tables: Sequence[TableSchema]) -> str:
    """Record ``tables`` (resolved, their capture prepared, their target tables made) for the
    query about to start; its token, for option ``resolved``."""
    token = uuid.uuid4().hex
    StateStore(state_dir).write_json({"token": token, "tables": [t.to_json() for t in tables]},
                                     RESOLVED_FILE)
    return token


def resolved_tables(options: Mapping[str, str]) -> list[TableSchema] | None:
    """The tables option ``resolved`` names, when its token is the recorded one."""
    given = READER_OPTIONS.canonical(options)  # any spelling of the names
    token, state_dir = given.get("resolved"), given.get("state.dir")
    if not token or not state_dir:
        return None
    data = StateStore(state_dir).read_json(RESOLVED_FILE)
    if not data or data.get("token") != token:
        return None
    return [TableSchema.from_json(t) for t in data["tables"]]


TARGET_REQUEST = "target-"
"""The id prefix of the requests reading again a table the target lost (:func:`check_target`)."""


def check_target(spec: SourceSpec, target: Target) -> None:
    """At the start of a sync resumed from ``spec``'s state directory, before any target table
    is created: each table the checkpoint says was applied to ``target`` that the target lost
    (:meth:`Target.lost`) is read again whole, by a snapshot request of the sync's own (kept
    in the state directory, so a crash before it is served serves it after the restart), with
    one warning naming it and why. Where it cannot be read again (a snapshot-only sync), the
    sync stops with the reason."""
    if not spec.state_dir:
        return
    store = StateStore(spec.state_dir)
    engine = latest(store)
    if engine is None:
        return
    sync = engine.sync
    _check_reflected(spec, target, store, engine)
    captured = {t.table: t for t in spec.tables}
    written = [captured[t] for t in applied_tables(sync) if t in captured]
    lost = target.lost(written)
    report = read_progress(store)  # the rows each table's last read found
    read = {t: report.tables[str(t)].rows for t in sync.tables
            if str(t) in report.tables} if report is not None else {}
    lost.update(_emptied(spec, target, [t for t in written if t.table not in lost], read))
    if not lost:
        return
    if sync.phase is Phase.DONE or sync.stop_after_snapshot:
        table, why = next(iter(lost.items()))
        raise ConfigurationError(
            f"{why}: this sync cannot read it again (its snapshot is "
            f"{'done' if sync.phase is Phase.DONE else 'one-off'}, startup.mode=snapshot): "
            "take a new snapshot (a new --checkpoint directory)")
    waiting = {r.table for r in pending_requests(store)
               if r.id.startswith(TARGET_REQUEST) and r.id not in sync.served}
    for table, why in lost.items():
        if table in waiting:  # asked at an earlier start that ended before serving it
            log.warning("%s: it is read again whole (asked already)", why)
            continue
        digest = stage_name(SnapshotSplit(table, 0, None, None))
        request = SnapshotRequest(f"{TARGET_REQUEST}{time.time_ns():020d}-{digest}", table,
                                  None, time.time())
        write_request(store, request)
        log.warning("%s: it is read again whole (request %s)", why, request.id)


def _check_reflected(spec: SourceSpec, target: Target, store: StateStore,
                     engine: EngineState) -> None:
    """Stop when the target says this sync applied batches past the newest state its
    checkpoint holds (its ``_sdk_position`` row ahead of it): the checkpoint is an older copy
    (restored from a backup), or another process wrote with this sync's id. Resuming would
    apply older changes over newer ones and call the result caught up. After a failover the
    positions are another server's: not compared."""
    position = engine.sync.position
    recorded = store.read_json(SOURCE_FILE) or {}
    if position is None or not spec.tables or recorded.get("followed"):
        return
    first = target.table_for(next(iter(engine.sync.tables.values()), spec.tables[0]))
    sync_id = ledger_prefix(store).rstrip(":") or "sync"
    reflected = target.reflected(first.table.schema, sync_id)
    if reflected is None or reflected.dialect != position.dialect:
        return
    try:
        ahead = spec.dialect_obj.compare_offset(reflected, position) > 0
    except Exception:  # positions of two servers: nothing to say
        return
    if ahead:
        raise ConfigurationError(
            f"the target says sync {sync_id} applied the source up to "
            f"{position_label(reflected.json_text())}, past the newest state of checkpoint "
            f"{store.uri} ({position_label(position.json_text())}): the checkpoint is older "
            "than the target (restored from a copy?) or another process wrote with its id; "
            "resuming would apply older changes over newer ones. Resume from the checkpoint "
            "that wrote the target, or take a new snapshot into a fresh target (a new "
            "--checkpoint)")


def _emptied(spec: SourceSpec, target: Target, tables: list[TableSchema],
             read: Mapping[TableId, int]) -> dict[TableId, str]:
    """Of ``tables`` (in the target, their batches in its ledger), those the target holds no
    row of while the source does, each with why: emptied behind the sync's back (a TRUNCATE
    or DELETE at the target), or, where the sync's last read of the table (``read``: rows by
    table, from the progress report) found none, rows the source gained since. The source is
    asked only of the empty ones."""
    empty = target.empty(tables)
    if not empty:
        return {}
    dialect = spec.dialect_obj
    conn = dialect.connect(spec.config)
    try:
        with dialect.passing_faults():
            return {t: _empty_why(t, read.get(t))
                    for t in empty if has_rows(dialect, conn, spec.schema_of(t))}
    finally:
        conn.close()


def _empty_why(table: TableId, rows_read: int | None) -> str:
    """Why a table empty in the target while the source has rows is read again whole
    (``rows_read``: what the sync's last read of it found, None when not known)."""
    if rows_read != 0:
        return (f"table {table} is empty in the target while the source has rows and the "
                "target's ledger holds batches applied to it (emptied behind the sync's back: "
                "a TRUNCATE or DELETE there)")
    return (f"table {table} had no rows when the sync read it and has rows at the source now, "
            "none in the target yet")


# --- the readers (driver side) ----------------------------------------------------------------


F = TypeVar("F", bound=Callable[..., Any])


def _passing_faults(method: F) -> F:
    """``Dialect.passing_faults`` around a reader method (the reader's ``spec`` names the
    dialect)."""
    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self.spec.dialect_obj.passing_faults():
            return method(self, *args, **kwargs)
    return cast(F, wrapper)


def task_groups(splits: Sequence[SnapshotSplit], tasks: int) -> list[list[SnapshotSplit]]:
    """``splits`` dealt round-robin into at most ``tasks`` groups, one task each: a task pays
    its fixed costs (a Python worker, connections, a transaction) once for several splits."""
    groups = max(1, min(tasks, len(splits)))
    return [list(splits[i::groups]) for i in range(groups)]


class CdcBatchReader(DataSourceReader):
    """``spark.read``: every split of every table, each consistent as of its watermark."""

    def __init__(self, spec: SourceSpec) -> None:
        self.spec = spec

    @_passing_faults
    def partitions(self) -> Sequence[InputPartition]:
        spec = self.spec
        conn = spec.connect()
        try:
            every = PhaseMachine(spec.dialect_obj, spec.options).all_splits(conn, spec.tables)
        finally:
            conn.close()
        return [SplitPartition(group) for group in task_groups(list(every), spec.parallelism)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SplitPartition)
        yield from read_splits(self.spec, partition)


class CdcStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream``: snapshot batches, then log batches, exactly once."""

    def __init__(self, spec: SourceSpec) -> None:
        self.spec = spec
        assert spec.state_dir
        self.store = StateStore(spec.state_dir)
        check_format(self.store)  # a stream of its own (no sdk sync) is protected too
        record_format(self.store)
        self._conn: Connection | None = None
        self._view: SharedView | None = None
        self._cache = StateCache(self.store)
        self.machine = PhaseMachine(spec.dialect_obj, spec.options)
        self._following = Following(spec, self.store, self.machine)
        self._progress = StreamProgress(spec, self.store, self._following.outcomes)
        self._source_checked = False
        self._applied: Offset | None = None
        """Where the last committed log batch ended (what was applied), once known."""
        self._head_start: dict[str, Any] | None = None
        self._head_start_read = False

    def runs_head_start(self) -> None:
        """This reader runs the driver's head start: it takes up no record."""
        self._head_start_read = True

    def _driver_record(self) -> dict[str, Any] | None:
        """What the driver's head start did (:mod:`.headstart`), read once it has stopped."""
        if not self._head_start_read:
            self._head_start = wait_for_driver(self.store)
            self._head_start_read = True
        return self._head_start

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_head_start"], state["_head_start_read"] = None, False
        state["_conn"] = None
        state["_view"] = None
        state["_cache"] = StateCache(self.store, self._cache.planned)
        return state

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
        name = self._cache.save(engine)
        self._progress.write(engine.sync, engine.seq - 1,  # its own splits are still to run
                             self._applied if engine.log_from is not None else
                             engine.sync.position, engine.inflight)
        position = engine.sync.position
        return {"v": OFFSET_VERSION, "phase": engine.sync.phase.value, "state": name,
                "position": dumps(position.to_json()) if position else None}

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """Shown as the source's ``latestOffset`` in the streaming query progress."""
        return self._progress.shown()

    def _check_source(self, name: str | None) -> None:
        """Once per driver, before it reads a state: the source is the server this state
        directory follows (recorded at its first start), or another server of its topology
        the checkpoint then moves onto (a failover, see
        :func:`.engine_state.follow_or_check_source`), and its log holds the position the
        state ``name`` resumes from."""
        if self._source_checked:
            return
        dialect, url = self.spec.dialect_obj, self.spec.config.masked_url
        if self.store.read_json(SOURCE_FILE) is None:
            self.store.write_json(source_record(dialect, self.conn, url), SOURCE_FILE)
        elif follow_or_check_source(self.store, dialect, self.conn, url,
                                    self.spec.state_dir or "") is not None:
            self._cache.forget()  # loaded before the positions moved
        name = resumed_state(self._driver_record(), name)  # past what the driver committed
        sync = self._cache.load(name).sync if name is not None else None
        position = resume_position(sync, dialect) if sync is not None else None
        if position is not None:
            check_position(dialect, self.conn, position, url)
        self._source_checked = True

    @_passing_faults
    def initialOffset(self) -> dict[str, Any]:
        record = self._driver_record()
        if record and record.get("initial"):  # the driver began this checkpoint
            self._check_source(record["initial"]["state"])
            return dict(record["initial"])
        self._check_source(None)
        start_stream(self.store, self.spec.envelope)
        state = self.machine.start(self.conn, self.spec.tables)
        self._following.save_identities(self.spec.dialect_obj.table_identities(
            self.conn, [t.table for t in self.spec.tables]))
        return self._offset(EngineState(state))

    @_passing_faults
    def prepareForTriggerAvailableNow(self) -> None:
        self._progress.target = self.spec.dialect_obj.current_offset(self.conn)

    @_passing_faults
    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """Fold the last batch's splits in, then ask the phase machine for the next batch."""
        self._check_source(start["state"])
        step = next_step(self._driver_record(), start)
        if step is not None:  # batches the driver ran or began while Spark started
            return dict(step)
        engine = self._cache.load(start["state"])
        sync = engine.sync
        self._applied = sync.position  # the batch ending at start has committed
        if engine.inflight:
            sync = self.machine.fold(sync, self._staged(start["state"], engine))
            self._progress.write(sync, engine.seq, sync.position)  # before a table may turn
            # pure-log, dropping its splits
        waiting = pending_requests(self.store) if sync.phase is Phase.LOG else []
        following = self._following
        if engine.log_from is not None:
            sync = following.fold_schema_changes(start["state"], engine, sync, waiting)
            following.fold_truncations(self.conn, start["state"], engine, sync, waiting)
        sync = following.serve_requests(self.conn, following.follow_tables(self.conn, sync),
                                        waiting)
        self._progress.extend_target(sync)
        batch = self.machine.next_batch(self.conn, sync,
                                        functools.partial(self._progress.log_head, self.conn),
                                        self.spec.splits_per_batch)
        if batch is None:
            if sync is engine.sync:
                self._progress.write_if_moved(sync, engine.seq)
                return start
            batch = Batch(sync)
        if batch.state.phase is not Phase.SNAPSHOT:
            self._close_view()
        return self._offset(EngineState(batch.state, list(batch.splits), batch.log_from,
                                        engine.seq + 1))

    def _staged(self, name: str, engine: EngineState) -> list[FinishedSplit]:
        """The watermarks the split tasks of batch ``name`` staged."""
        done = []
        for split in engine.inflight:
            data = self.store.read_json("batches", name, f"{stage_name(split)}.json")
            if data is None:
                raise ConfigurationError(f"the watermark of split {split.split_id} is missing "
                                         f"from {self.store.uri}: was the state.dir cleaned?")
            done.append(FinishedSplit.from_json(data))
        return done

    @_passing_faults
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        if start == end or skips(self._driver_record(), start, end):
            return []
        self._check_source(start["state"])  # a restart replays its last batch first
        engine = self._cache.load(end["state"])
        # the rate limits count from the batch's hand-out (so Spark's task start-up too)
        planned = self._cache.planned.get(end["state"], time.time())
        if engine.inflight:
            token = self._view_token()
            groups = task_groups(engine.inflight, self.spec.parallelism)
            at_once = min(len(groups), self.spec.cores or len(groups))
            tables = engine.sync.tables
            return [SplitPartition(group, end["state"], token, 1 / at_once,
                                   [tables[t] for t in dict.fromkeys(s.table for s in group)],
                                   {str(s.table): engine.sync.version(s.table) for s in group},
                                   paced_from=planned if i < at_once else None)
                    for i, group in enumerate(groups)]
        if engine.log_from is not None:
            return [LogPartition(end["state"], planned)]
        return []

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, SplitPartition):
            yield from read_splits(self.spec, partition)
        else:
            assert isinstance(partition, LogPartition)
            yield from read_log(self.spec, partition)

    @_passing_faults
    def commit(self, end: dict[str, Any]) -> None:
        self.settle(end)

    def settle(self, end: dict[str, Any], keep: Collection[str] = ()) -> None:
        """What a committed batch ending at ``end`` allows: the log acknowledged up to it, and
        the stages and states before it dropped, but for the states named in ``keep`` (the
        driver's head start keeps the one Spark's checkpoint stands at)."""
        engine = self._cache.load(end["state"])
        if engine.sync.phase is Phase.LOG and engine.sync.position is not None:
            self.spec.dialect_obj.acknowledge_offset(self.conn, engine.sync.position)
        self._cache.collect_garbage(engine.seq, keep)

    def stop(self) -> None:
        self._close_view()
        if self._conn is not None:
            self._conn.close()
            self._conn = None
