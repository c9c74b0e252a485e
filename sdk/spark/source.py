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
from dataclasses import replace
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

from ..algorithm import Batch, Phase, PhaseMachine, SharedView, SyncState
from ..algorithm.lineage import (
    SOURCE_FILE,
    check_not_past_head,
    check_position,
    resume_position,
    source_record,
)
from ..algorithm.policy import (
    SCHEMA_REQUEST,
    TRUNCATED_REQUEST,
    RequestStep,
    applied_tables,
    busy,
    check_recreated,
    fold_schema_changes,
    judge_request,
    own_request_id,
    recreated_request,
    served,
    truncations_to_reread,
)
from ..algorithm.progress import ProgressReport, progress_of
from ..dialect.codec import dumps, position_label
from ..dialect.errors import ConfigurationError
from ..dialect.manager import Dialect
from ..dialect.types import (
    Capability,
    Connection,
    FinishedSplit,
    Offset,
    SnapshotSplit,
    TableId,
    TableSchema,
)
from ..job.spec import (
    READER_OPTIONS,
    BeforePrepare,
    SourceSpec,
    TableWatch,
    needs_capture,
    parse_options,
    prepare_source,
    resolve,
)
from ..job.target import Target, has_rows
from .batches import REPORT_SPARK, TableBatcher, envelope_schema
from .checkpoint_format import check_format, record_format
from .engine_state import (
    CUTS,
    ChunkCache,
    EngineState,
    checkpointed,
    follow_or_check_source,
    latest,
    ledger_prefix,
    read_progress,
    stage_name,
    staged_schema_changes,
    staged_truncations,
    start_stream,
    with_cut,
    write_progress,
)
from .handoff import next_step, resumed_state, skips, wait_for_driver
from .reads import (
    LogPartition,
    SplitPartition,
    read_log,
    read_splits,
)
from .requests import (
    SnapshotRequest,
    claim_request,
    forget_requests,
    pending_requests,
    write_request,
)
from .statestore import StateStore

log = logging.getLogger(__name__)

"""The id prefix of the requests reading a truncated table again (:meth:`CdcStreamReader.
_fold_truncations`)."""
IDENTITIES_FILE = "identities.json"
"""Per captured table, the incarnation token (``table_identities``) the sync holds it at."""

PENDING_FILE = "rereads-pending.json"
"""Per captured table whose token changed, the token met, until the state holds its read."""


def identities(store: StateStore) -> dict[TableId, str]:
    """The incarnation token recorded of each captured table (:data:`IDENTITIES_FILE`)."""
    return {TableId(schema, name): token
            for schema, name, token in store.read_json(IDENTITIES_FILE) or []}


def pending_rereads(store: StateStore) -> dict[TableId, tuple[str, str | None]]:
    """The tables met with another token whose read the state does not hold yet: the token
    met, and the one the table had once its capture was prepared again (None: not yet)."""
    return {TableId(schema, name): (met, after)
            for schema, name, met, after in store.read_json(PENDING_FILE) or []}


def _write_pending(store: StateStore, pending: dict[TableId, tuple[str, str | None]]) -> None:
    store.write_json([[t.schema, t.name, *v] for t, v in
                      sorted(pending.items(), key=lambda i: str(i[0]))], PENDING_FILE)


def add_pending_rereads(store: StateStore, met: Mapping[TableId, tuple[str, str | None]],
                        keep: bool = False) -> None:
    """Record ``met`` tables (their token met and after); ``keep``: not over a table's
    pending read."""
    pending = pending_rereads(store)
    new = {t: v for t, v in met.items() if pending.get(t) != v and not
           (keep and t in pending)}
    if new:
        _write_pending(store, {**pending, **new})


def drop_pending_rereads(store: StateStore, tables: Sequence[TableId]) -> None:
    """Forget the pending reads of ``tables``: the state holds them."""
    pending = pending_rereads(store)
    if any(t in pending for t in tables):
        _write_pending(store, {t: v for t, v in pending.items() if t not in tables})


def noting_changed_tables(state_dir: str | None) -> BeforePrepare | None:
    """What a sync on ``state_dir`` calls before its capture is prepared: the tables whose
    token changed while it was stopped are recorded (:func:`note_changed_tables`)."""
    if not state_dir:
        return None
    return functools.partial(note_changed_tables, state_dir)


def note_changed_tables(state_dir: str, dialect: Dialect, conn: Connection,
                        schemas: Sequence[TableSchema]) -> None:
    """Before a resumed sync prepares its capture (which may undo what changed a table's
    token: a table put back into its publication): record each captured table whose token
    is not the one the sync holds, so that its driver reads it again."""
    store = StateStore(state_dir)
    recorded = identities(store)
    if not recorded or not dialect.implements("table_identities"):
        return
    now = dialect.table_identities(conn, [s.table for s in schemas if s.table in recorded])
    add_pending_rereads(store, {t: (v, None) for t, v in now.items() if recorded[t] != v},
                        keep=True)

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
        self._head: tuple[float, Offset | None] = (0.0, None)
        self._target: Offset | None = None
        self._progress: ProgressReport | None = None
        self._view: SharedView | None = None
        self._states: dict[str, EngineState] = {}
        """The states this driver saved or loaded last, by name: each batch names its start
        and end state three times (latestOffset, partitions, commit)."""
        self._chunks: ChunkCache = {}
        self.machine = PhaseMachine(spec.dialect_obj, spec.options)
        self._watch = TableWatch(spec) if spec.follows_tables else None
        self._outcomes: dict[str, dict[str, Any]] = {}
        """The snapshot requests taken up by this driver, for the progress report."""
        self._planned: dict[str, float] = {}
        """When this driver handed out the batch ending at each state (``time.time()``): the
        rate limits count from there."""
        self._source_checked = False
        self._progress_tables: Mapping[str, Any] | None = None
        """The per-table progress this driver wrote last (written again only when changed)."""
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
        state["_states"] = {}
        state["_chunks"] = {}
        return state

    def _load(self, name: str) -> EngineState:
        engine = self._states.get(name)
        if engine is None:
            return self._keep(name, EngineState.load(self.store, name))
        cut = with_cut(self.store, name, engine)  # its batch may have been cut since planned
        return engine if cut is engine else self._keep(name, cut)

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
        self._planned[name] = time.time()
        while len(self._planned) > 4:  # as _keep: a batch is planned, read and committed
            del self._planned[next(iter(self._planned))]
        self._keep(name, engine)
        self._report(engine.sync, engine.seq - 1,  # its own splits are still to run
                     self._applied if engine.log_from is not None else engine.sync.position,
                     engine.inflight)
        position = engine.sync.position
        return {"v": OFFSET_VERSION, "phase": engine.sync.phase.value, "state": name,
                "position": dumps(position.to_json()) if position else None}

    def _report(self, sync: SyncState, counted: int, applied: Offset | None,
                inflight: Sequence[SnapshotSplit] = ()) -> None:
        """Write the progress report that ``sdk status`` and :func:`progress` read: ``sync``
        counts the splits of the states up to number ``counted``; those of a later batch are
        counted as they are staged (:func:`.engine_state.live_progress`). Its log position
        is ``applied`` (where the last committed batch ended, None before one), not the end
        of a batch planned: caught up once that reaches the head."""
        head = self._head[1]
        caught_up = None
        if head is not None and sync.position is not None:
            compare = self.spec.dialect_obj.compare_offset
            if self._target is not None and compare(head, self._target) > 0:
                head = self._target  # Trigger.AvailableNow: caught up means at its target
            caught_up = applied is not None and compare(applied, head) >= 0
        previous = self._progress
        if previous is None:  # a new driver: the report on disk, its tables written already
            previous = read_progress(self.store)
            if previous is not None:
                self._progress_tables = previous.tables
        report = progress_of(replace(sync, position=applied), self.spec.options.split_size,
                             previous, head, caught_up, inflight)
        requests = {**(previous.requests if previous else {}), **self._outcomes}
        self._progress = replace(report, counted=counted,
                                 requests=dict(list(requests.items())[-20:]))  # the last ones
        self._progress_tables = write_progress(self.store, self._progress,
                                               self._progress_tables)

    def _report_caught_up(self, sync: SyncState, counted: int) -> None:
        """With no new batch: report again when the log head moved relative to what was
        applied (caught up now, or fallen behind), not at every poll."""
        head = self._head[1]
        if head is None or sync.position is None or sync.phase is not Phase.LOG:
            return
        caught_up = self.spec.dialect_obj.compare_offset(sync.position, head) >= 0
        if self._progress is None or self._progress.reached_head != caught_up or \
                self._progress.position != dumps(sync.position.to_json()):
            self._report(sync, counted, sync.position)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """Shown as the source's ``latestOffset`` in the streaming query progress."""
        report = self._progress
        if report is None:
            return None
        tables = {name: f"{t.splits_done}/{t.splits_estimated} splits, {t.rows} rows"
                  for name, t in report.tables.items()}
        return {"phase": report.phase_name, "rows": report.rows, "tables": tables,
                "caught_up": bool(report.caught_up)}

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
            self._states.clear()  # loaded before the positions moved
            self._chunks = {}
        name = resumed_state(self._driver_record(), name)  # past what the driver committed
        sync = self._load(name).sync if name is not None else None
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
        self._save_identities(self.spec.dialect_obj.table_identities(
            self.conn, [t.table for t in self.spec.tables]))
        return self._offset(EngineState(state))

    @_passing_faults
    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.spec.dialect_obj.current_offset(self.conn)

    def _extend_target(self, sync: SyncState) -> None:
        """Under Trigger.AvailableNow, read the log up to the highest watermark of the
        splits still filtered too: a table read again (or snapshotted) after the target was
        taken then reaches its pure-log phase in this run, and requests waiting for it (a
        table read again after a schema change) are served before the run ends."""
        if self._target is None:
            return
        compare = self.spec.dialect_obj.compare_offset
        for splits in sync.finished.values():
            for split in splits:
                if compare(split.watermark, self._target) > 0:
                    self._target = split.watermark

    def _log_head(self, position: Offset) -> Offset:
        """The log head, asked at most every ``log.poll-interval.ms``; never past the
        Trigger.AvailableNow target."""
        at, head = self._head
        if head is None or time.monotonic() - at >= self.spec.head_poll_seconds:
            head = self.spec.dialect_obj.current_offset(self.conn)
            self._head = (time.monotonic(), head)
            check_not_past_head(self.spec.dialect_obj, position, head,
                                self.spec.config.masked_url)
        if self._target is not None and \
                self.spec.dialect_obj.compare_offset(head, self._target) > 0:
            return self._target
        return head

    @_passing_faults
    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """Fold the last batch's splits in, then ask the phase machine for the next batch."""
        self._check_source(start["state"])
        step = next_step(self._driver_record(), start)
        if step is not None:  # batches the driver ran or began while Spark started
            return dict(step)
        engine = self._load(start["state"])
        sync = engine.sync
        self._applied = sync.position  # the batch ending at start has committed
        if engine.inflight:
            sync = self.machine.fold(sync, self._staged(start["state"], engine))
            self._report(sync, engine.seq, sync.position)  # before a table may turn
            # pure-log, dropping its splits
        waiting = pending_requests(self.store) if sync.phase is Phase.LOG else []
        if engine.log_from is not None:
            sync = self._fold_schema_changes(start["state"], engine, sync, waiting)
            self._fold_truncations(start["state"], engine, sync, waiting)
        sync = self._serve_requests(self._follow_tables(sync), waiting)
        self._extend_target(sync)
        batch = self.machine.next_batch(self.conn, sync, self._log_head,
                                        self.spec.splits_per_batch)
        if batch is None:
            if sync is engine.sync:
                self._report_caught_up(sync, engine.seq)
                return start
            batch = Batch(sync)
        if batch.state.phase is not Phase.SNAPSHOT:
            self._close_view()
        return self._offset(EngineState(batch.state, list(batch.splits), batch.log_from,
                                        engine.seq + 1))

    def _follow_tables(self, sync: SyncState) -> SyncState:
        """``sync`` with the tables a look at the source found added (their target tables
        created first) or leaving; in the log phase, every ``tables.discovery-interval.ms``."""
        if self._watch is None or sync.phase is not Phase.LOG:
            return sync
        found = self._watch.look(self.conn, sync.tables, sync.leaving)
        if found is None:
            return sync
        if found.gone:
            assert found.at is not None
            sync = self.machine.remove_tables(sync, found.gone, found.at)
        if found.added:
            if self.spec.target is not None:
                self.spec.target.create_tables(found.added)
            sync = self.machine.add_tables(self.conn, sync, found.added)
            self._save_identities(self.spec.dialect_obj.table_identities(
                self.conn, [t.table for t in found.added]))
        if found.identities:
            sync = self._follow_recreated(sync, found.identities)
        return sync

    def _follow_recreated(self, sync: SyncState, tokens: dict[TableId, str]) -> SyncState:
        """``sync`` with each captured table whose incarnation token changed (dropped and
        created again under its name, taken out of what captures it, while the log flowed or
        the sync was stopped) read again whole, its capture prepared again first: the read
        deletes the mirror's rows the new table does not hold and brings those the log may
        lack. A change met is recorded in :data:`PENDING_FILE` before the capture is
        prepared again (which may undo what changed the token: a table put back into its
        publication), and the token the table then has is taken as its own in
        ``identities.json`` once the state holds the read (request
        ``recreated/<token met>/<table>``), so a batch planned again plans the read again."""
        assert self._watch is not None
        recorded = identities(self.store)
        pending = pending_rereads(self.store)
        seen: dict[TableId, str] = {}
        for table, identity in tokens.items():
            met, after = pending.get(table, (None, None))
            if met is not None and recreated_request(met, table) in sync.served:
                drop_pending_rereads(self.store, [table])  # its read is held: the token
                recorded[table] = seen[table] = after or identity  # after it is the table's
                met = None
            if met is None and recorded.get(table) not in (None, identity):
                met = identity
            request = recreated_request(met, table) if met is not None else ""
            if met is None or request in sync.served:
                seen[table] = identity
                continue
            if busy(sync, table):
                continue  # being read or leaving: looked at again later
            check_recreated(table, sync.tables[table],
                            self.spec.dialect_obj.describe_table(self.conn, table),
                            self.spec.options)
            add_pending_rereads(self.store, {table: (met, None)})
            self._watch.prepare_again(self.conn, sync.tables[table])
            after = self.spec.dialect_obj.table_identities(self.conn, [table]).get(table)
            add_pending_rereads(self.store, {table: (met, after)})
            sync = self.machine.reread(self.conn, sync, table, None, request)
            log.warning("table %s was dropped and created again, taken out of what captures "
                        "it (a publication), or rows left or joined it outside the log (a "
                        "partition truncated, attached, detached or dropped): it is read "
                        "again whole (request %s)", table, request)
        self._save_identities(seen)
        return sync

    def _save_identities(self, tokens: dict[TableId, str]) -> None:
        """Record ``tokens`` over those recorded (written only when one is new)."""
        recorded = identities(self.store)
        if all(recorded.get(t) == v for t, v in tokens.items()):
            return
        recorded.update(tokens)
        self.store.write_json([[t.schema, t.name, v] for t, v in
                               sorted(recorded.items(), key=lambda i: str(i[0]))],
                              IDENTITIES_FILE)

    def _fold_schema_changes(self, name: str, engine: EngineState, sync: SyncState,
                             requests: list[SnapshotRequest]) -> SyncState:
        """``sync`` with the schema changes log batch ``name`` followed
        (:func:`.policy.fold_schema_changes`); a table that gained columns is read again, by
        a request of the sync's own added to ``requests`` (written again if this is done
        again after a crash)."""
        changes = staged_schema_changes(self.store, name)
        if not changes:
            return sync
        waiting = [r.table for r in requests if r.id not in sync.served and r.where is None]
        sync, rereads = fold_schema_changes(sync, changes, self.spec.options, waiting)
        for table in rereads:
            request = self._own_request(SCHEMA_REQUEST, engine, table, requests)
            log.warning("table %s gained columns: it is read again (request %s)", table,
                        request.id)
        return sync

    def _fold_truncations(self, name: str, engine: EngineState, sync: SyncState,
                          requests: list[SnapshotRequest]) -> None:
        """Each table log batch ``name`` met truncated (``TRUNCATE``, dropped, replaced) is
        read again whole (:func:`.policy.truncations_to_reread`): a request of the sync's own
        added to ``requests``, whose read deletes the target rows the table no longer
        holds. With the tables followed, a table dropped for good leaves instead (its
        request is then dropped with it)."""
        waiting = [r.table for r in requests if r.id not in sync.served and r.where is None]
        exists = None if self._watch is not None else self._exists
        for item in truncations_to_reread(sync, staged_truncations(self.store, name), waiting,
                                          exists):
            request = self._own_request(TRUNCATED_REQUEST, engine, item.table, requests)
            if self._watch is not None:
                self._watch.due()
            log.warning("table %s is read again whole (request %s)", item.table, request.id)

    def _own_request(self, prefix: str, engine: EngineState, table: TableId,
                     requests: list[SnapshotRequest]) -> SnapshotRequest:
        """A request of the sync's own to read ``table`` again whole, written and added to
        ``requests``."""
        digest = stage_name(SnapshotSplit(table, 0, None, None))
        request = SnapshotRequest(own_request_id(prefix, engine.seq, digest), table, None,
                                  time.time())
        write_request(self.store, request)
        requests.append(request)
        return request

    def _exists(self, table: TableId) -> bool:
        try:
            self.spec.dialect_obj.describe_table(self.conn, table)
        except ConfigurationError:
            return False
        return True

    def _serve_requests(self, sync: SyncState, waiting: list[SnapshotRequest]) -> SyncState:
        """``sync`` with the snapshot requests ``waiting`` in the state directory taken up as
        :func:`.policy.judge_request` says (see :mod:`.requests`): the files of those
        ``sync`` holds already are deleted (it is a committed state), and one withdrawn
        before this claims it (:func:`.requests.claim_request`) is passed over."""
        if sync.phase is not Phase.LOG:
            return sync
        forget_requests(self.store, [r.id for r in waiting if r.id in sync.served])
        filtered = self.spec.dialect_obj.has(Capability.FILTERED_READS)
        for request in waiting:
            table = request.table
            step, refusal = judge_request(sync, request.id, table, request.where, filtered)
            if step in (RequestStep.DONE, RequestStep.WAIT):
                continue
            if step is RequestStep.LEFT:
                sync = served(sync, request.id)
            elif not claim_request(self.store, request.id):
                log.warning("snapshot request %s of %s withdrawn", request.id, table)
            elif step is RequestStep.REFUSED:
                log.warning("snapshot request %s refused: %s", request.id, refusal)
                self._outcomes[request.id] = {"table": str(table), "state": "refused",
                                              "reason": refusal, "at": request.at}
                sync = served(sync, request.id)
            else:
                sync = self.machine.reread(self.conn, sync, table, request.where, request.id)
                log.warning("snapshot request %s: table %s read again%s", request.id, table,
                            f" where {request.where}" if request.where else "")
                self._outcomes[request.id] = {"table": str(table), "state": "served",
                                              "where": request.where, "at": request.at}
        return sync

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
        engine = self._load(end["state"])
        # the rate limits count from the batch's hand-out (so Spark's task start-up too)
        planned = self._planned.get(end["state"], time.time())
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
        engine = self._load(end["state"])
        if engine.sync.phase is Phase.LOG and engine.sync.position is not None:
            self.spec.dialect_obj.acknowledge_offset(self.conn, engine.sync.position)
        self._collect_garbage(engine.seq, keep)

    def _collect_garbage(self, committed_seq: int, keep_states: Collection[str] = ()) -> None:
        """Drop the stages and states of batches before the committed one but ``keep_states``:
        Spark never goes back to them (a restart replays at most the batch after the last
        commit)."""
        for name in self.store.list_dir("batches"):
            if int(name.split("-", 1)[0]) < committed_seq:
                self.store.delete_dir("batches", name)
        keep: set[str] = set()
        drop: list[tuple[str, str]] = []
        for file in self.store.list_dir("states"):
            if not file.endswith(".json"):  # a state being written (its temporary file)
                continue
            pointer = self.store.read_json("states", file)
            if pointer is None:
                continue
            if int(file.split("-", 1)[0]) < committed_seq - 1 and \
                    file.removesuffix(".json") not in keep_states:
                drop.append((file, pointer["content"]))
            else:
                keep.add(pointer["content"])
        kept_chunks = {c for content in keep for c in EngineState.chunks_of(self.store, content)}
        for file, content in drop:
            self.store.delete_file("states", file)
            self.store.delete_file(CUTS, file)
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
