"""The main job: keep a copy of chosen source tables in a target, exactly once, resumable.

``run_sync`` runs the ``cdc`` stream into a :class:`~sdk.spark.executor.mirror.Mirror` on
Spark (local mode unless told otherwise), with the checkpoint and the state under one
directory, so running it again with the same ``checkpoint`` resumes exactly where it stopped
or crashed.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

from ..algorithm.lineage import SOURCE_FILE
from ..algorithm.progress import TableState
from ..dialect.errors import (
    ConfigurationError,
    SdkError,
)
from ..dialect.manager import Dialect, default_manager
from ..dialect.types import Connection, FinishedSplit, TableSchema
from ..job.metrics import MetricsServer
from ..job.spec import (
    READER_OPTIONS,
    UNTIL,
    BeforePrepare,
    SourceSpec,
    SyncSettings,
    checkpoint_paths,
    resolve,
)
from ..job.target import Target
from .driver.following import noting_changed_tables
from .driver.source import (
    CdcDataSource,
    CdcStreamReader,
    check_target,
    save_resolved,
)
from .driver.stream_progress import CAUGHT_UP_AT
from .executor.mirror import Mirror, Tally
from .session import EarlySession, spark_session
from .startup.headstart import STOPPING, HeadStart
from .startup.headworkers import (
    Worker,
    discard,
    early_workers,
    ends_without_spark,
    head_start_cores,
    local_cores,
)
from .state.checkpoint_format import record_format
from .state.engine_state import (
    APPLIED_FILE,
    APPLIED_KEYS,
    PROGRESS_FILE,
    VERIFY_FILE,
    captured_tables,
    check_checkpoint_source,
    checkpointed,
    latest_name,
    ledger_prefix,
    live_progress,
)
from .state.handoff import HEAD_START_FILE, spark_position, taken_up, untouched
from .state.lease import CheckpointLease
from .state.statestore import StateStore

TRANSIENT = ("RetriableError",)
"""What marks a failure as passing, in the text of the exception Spark reports (the Python
error of a task arrives inside a JVM exception, so its class is matched by name)."""

log = logging.getLogger(__name__)


class Retries:
    """Backoff over one outage: 1, 2, 4 ... up to 30 s between attempts, given up after
    ``seconds`` of failure with no batch in between."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.since: float | None = None
        self.delay = 1.0

    def reset(self) -> None:
        self.since, self.delay, self.reshaped = None, 1.0, 0

    reshaped = 0
    """Restarts for new columns since the last batch (a typed stream's schema change)."""

    count = 0
    """Restarts so far (for the metrics)."""

    def wait_or_raise(self, failure: BaseException, stop: threading.Event) -> None:
        text = str(failure)
        if "SchemaChangedError" in text and not stop.is_set() and self.reshaped < 10:
            # one table's typed stream met new columns: started again, its schema has them
            self.reshaped += 1
            log.warning("sync: a table's columns changed; the stream starts again with them")
            return
        now = time.monotonic()
        self.since = self.since if self.since is not None else now
        if stop.is_set() or not any(mark in text for mark in TRANSIENT):
            raise user_error(failure) or failure
        if now - self.since + self.delay > self.seconds:
            found = user_error(failure)
            if found is None:
                raise failure
            raise type(found)(f"{found} (gave up after {now - self.since:.0f} s of failure: "
                              "--retry-seconds)") from failure
        found = user_error(failure)
        reason = str(found) if found is not None else text.splitlines()[0]
        log.warning("sync: %s; restarting from the checkpoint in %.0f s (giving up after "
                    "%.0f s of failure)", reason, self.delay, self.seconds)
        if stop.wait(self.delay):  # told to stop while waiting: end with the fault
            raise user_error(failure) or failure
        self.delay = min(self.delay * 2, 30.0)
        self.count += 1


def user_error(failure: BaseException) -> SdkError | None:
    """The error a task raised for the user to act on (a schema change it cannot follow, an
    expired log position, a value a target refused), out of the JVM exception Spark reports
    it in, Spark's exception kept as its cause (the full trace); None for others."""
    from ..job.failures import task_error

    found = task_error(str(failure))
    if found is not None:
        found.__cause__ = failure
    return found


@dataclass
class SyncSummary:
    """What a run did."""

    rows_applied: int
    seconds: float
    phase: str
    caught_up: bool
    lag_seconds: float | None = None
    """Commit-to-applied time of the newest change in the last batch that applied one."""
    skipped: int = 0
    """Changes set aside in the dead-letter table (``errors.mode=skip``)."""


LOCAL_CHECKPOINTS = \
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
"""Spark's checkpoint writer for a local checkpoint. The default goes through Hadoop's
``FileContext``, which on a local disk starts a ``readlink`` process for files it commits
(some processes and milliseconds of driver CPU a batch). This one writes a temporary file
and renames it, which a local file system does atomically (Spark uses it wherever
``FileContext`` is missing); other file systems keep the default."""

class ChangeLog:
    """A ``foreachBatch`` step writing each micro-batch as Parquet under
    ``<path>/batch_id=<N>``, replacing that folder: a replayed batch rewrites its own output
    instead of adding a copy, so the change log stays exactly once."""

    def __init__(self, path: str) -> None:
        self.path = path.rstrip("/")

    def __call__(self, df: Any, batch_id: int) -> None:
        df.write.mode("overwrite").parquet(f"{self.path}/batch_id={batch_id}")


def _prepare(settings: SyncSettings) -> tuple[SourceSpec, dict[str, str], str, str]:
    """Check a sync's settings, options, tables and source before Spark runs (a resumed sync
    keeps its tables): its resolved source, the query's options, its state directory and
    Spark checkpoint."""
    if settings.until not in UNTIL:
        raise ConfigurationError(f"--until takes one of {', '.join(UNTIL)}, not "
                                 f"{settings.until!r}")
    state_dir, spark_checkpoint = checkpoint_paths(settings.checkpoint)
    if local_cores(settings.master) is None and "://" not in settings.checkpoint:
        # the tasks read and write the state directory too, wherever they run
        log.warning("sync: checkpoint %s is a path of this machine, and master %s may run "
                    "tasks on others: every executor must see that directory at that path "
                    "(a shared mount), or give --checkpoint a URI of shared storage "
                    "(hdfs://...)", state_dir.removesuffix("/state"), settings.master)
    reader_options = READER_OPTIONS.canonical({
        "url": settings.source, "tables": settings.tables, "state.dir": state_dir,
        **settings.options})
    if settings.target is None and settings.changes is None:
        raise ConfigurationError("give a --target to mirror into, a --changes path, or both")
    if settings.target is not None and settings.changes is None:
        # chained: each task applies what it reads
        reader_options["target"] = settings.target
        if settings.target_schema is not None:
            reader_options["target.schema"] = settings.target_schema
    _check_resumed_source(settings.source, state_dir, settings.checkpoint)
    resolved = resolve(reader_options, before_prepare=_before_prepare(settings, state_dir))
    # the advice was logged just now: the query's own resolve (in a Python worker) keeps quiet
    reader_options["preflight.advice"] = "quiet"
    return resolved, reader_options, state_dir, spark_checkpoint


def _before_prepare(settings: SyncSettings, state_dir: str) -> BeforePrepare:
    """What runs between choosing the tables and preparing their capture: the target user's
    rights checked (a refused sync leaves no slot or publication behind), then the tables
    whose token changed while a resumed sync was stopped recorded."""
    noting = noting_changed_tables(state_dir)
    target = Target.of(settings.target, settings.target_schema) \
        if settings.target is not None else None

    def before(dialect: Dialect, conn: Connection, schemas: list[TableSchema]) -> None:
        if target is not None:
            target.check_rights(schemas)
        if noting is not None:
            noting(dialect, conn, schemas)
    return before


def _check_resumed_source(source: str, state_dir: str, checkpoint: str) -> None:
    """For a resumed sync, before anything touches the source (its capture prepared, a slot
    made): the source is the server the checkpoint follows, or another one of its topology
    holding every change the checkpoint read (a failover, followed once the sync owns the
    checkpoint), and its log holds the position the sync resumes from
    (:func:`.engine_state.check_checkpoint_source`)."""
    store = StateStore(state_dir, create=False)
    if store.read_json(SOURCE_FILE) is None and latest_name(store) is None:
        return
    dialect, config = default_manager().source_for_url(source)
    conn = dialect.connect(config)
    try:
        with dialect.passing_faults():
            check_checkpoint_source(store, dialect, conn, config.masked_url, checkpoint)
    finally:
        conn.close()


Report = Callable[[dict[str, Any]], None]
"""What is told the progress now and then (``sdk sync``'s display)."""


def run_sync(settings: SyncSettings | str, *fields: Any, report: Report | None = None,
             report_seconds: float = 2.0, early: EarlySession | None = None,
             workers: list[Worker] | None = None, **named: Any) -> SyncSummary:
    """Sync as ``settings`` say (:class:`~sdk.job.spec.SyncSettings`; or give its fields:
    ``run_sync(source, target, tables, checkpoint, until, options, master=..., ...)``):
    ``settings.tables`` of ``settings.source`` into ``settings.target`` until
    ``settings.until``:

    - ``snapshot``: stop once every table's snapshot is applied;
    - ``caught-up``: stop once the log phase reached the source's position at start;
    - ``never``: follow the log until SIGINT/SIGTERM, then stop after the current batch (a
      second signal stops at once, the batch in flight left to the restart).

    ``target`` is mirrored with ``apply_changes``; ``changes`` (a path any Spark writer takes)
    also keeps every change as Parquet. At least one of them is needed.

    Once running, a passing fault of the source (a ``RetriableError``: a lost or unreachable
    connection, a restarting server) restarts the stream from its checkpoint, with backoff,
    for up to ``retry_seconds`` of consecutive failure; the checkpoint keeps it exactly once.
    A problem found before the stream starts (bad URL, refused login) fails at once.
    ``metrics_port`` serves the progress as Prometheus metrics (:mod:`sdk.job.metrics`).
    ``report`` is given the progress every ``report_seconds``. ``early``: the session, already
    starting (``sdk sync`` starts it before it imports the engine; made for
    ``jvm_rows(target, changes)``); else it is made once the checks passed. ``workers``:
    the head start's worker processes (:func:`.headworkers.early_workers`), started by the
    caller and owned by the sync from here; else started here when the settings allow.
    """
    if not isinstance(settings, SyncSettings):
        settings = SyncSettings(settings, *fields, **named)
    workers = early_workers(settings) if workers is None else workers
    try:
        resolved, reader_options, state_dir, spark_checkpoint = _prepare(settings)
        store = StateStore(state_dir)
        lease = CheckpointLease(store)
        lease.acquire()  # one sync per checkpoint, taken before this one changes anything
        record_format(store)  # this release's from now on (an older format upgraded in place)
    except BaseException:
        discard(workers)
        raise
    try:
        metrics = MetricsServer(settings.metrics_port) \
            if settings.metrics_port is not None else None
    except BaseException:
        discard(workers)
        lease.release()
        raise
    head: HeadStart | None = None
    stop, now = threading.Event(), threading.Event()  # a first signal, and a second one
    try:
        run = _Run(settings, resolved, lease, state_dir, metrics, report, report_seconds)
        first = {**reader_options, "resolved": save_resolved(state_dir, resolved.tables)}
        head = _head_start(settings, run, reader_options, first, spark_checkpoint, stop, now,
                           workers)
        if head is None:  # not after all (the checkpoint's state): its workers not kept
            discard(workers)
            workers = []
        # a head start heeds signals while Spark starts; without one they stop it at once
        with _signals_set(stop, now) if head is not None else contextlib.nullcontext():
            if head is not None and ends_without_spark(settings.head_start, settings.master,
                                                       settings.until, True):
                head.wait()  # a bounded sync: Spark starts only if the head start fell short
                if head.reached or stop.is_set():
                    return run.summary()
            query = _Query(settings, run, reader_options, first, spark_checkpoint, early, head)
        if head is not None and stop.is_set():  # stopped in the head start: no stream
            if not head.warned:
                log.warning(STOPPING)
            with _signals_set(stop, now):
                head.join()
            return run.summary()
        summary = run.follow(query, stop, now)
        _settle_committed(first, spark_checkpoint)
        return summary
    finally:
        if head is not None:
            head.join()
        else:  # the head start's workers, unused when something failed before it began
            discard(workers)
        if metrics is not None:
            metrics.close()
        lease.release()


def _head_start(settings: SyncSettings, run: _Run, reader_options: dict[str, str],
                first: dict[str, str], spark_checkpoint: str, stop: threading.Event,
                now: threading.Event, workers: list[Worker]) -> HeadStart | None:
    """Start the driver's head start (:mod:`.headstart`) when the ``head-start`` setting asks
    for one and it can run: a chained sync on a local master on Linux with a local checkpoint
    whose last batch committed, after any head start before it was taken up; else None.
    ``workers``: its worker processes, if started already."""
    cores = head_start_cores(settings)
    tally = run.mirror
    if cores is None or not isinstance(tally, Tally):
        return None
    usable, last = spark_position(spark_checkpoint)
    record = run.store.read_json(HEAD_START_FILE)
    previous = record if usable and untouched(record, last) else None
    if not usable or (previous is None and not taken_up(record, last)):
        return None
    reader_options["cores"] = first["cores"] = str(cores)  # the query's own, so its splits
    def progress() -> None:  # asked every 0.1 s while a batch runs: the file read when due
        if run.due():
            run.report_now(run.store.read_json(PROGRESS_FILE) or {})

    head = HeadStart(lambda: _stream_reader(first), run.store, last, cores, settings.until,
                     tally.add, progress, stop, now, previous, workers)
    run.started, run.began = time.monotonic(), time.time()
    run.head_started = True
    head.start()
    return head


def _stream_reader(options: dict[str, str]) -> CdcStreamReader:
    """A stream reader of the query's own ``options``, in the driver's process."""
    source = CdcDataSource(options)
    return cast(CdcStreamReader, source.streamReader(source.schema()))


def _settle_committed(first: dict[str, str], spark_checkpoint: str) -> None:
    """Once the stream stopped: what its last committed batch allows (the source's log
    acknowledged up to it, older states dropped). Spark does it for a batch as it plans the
    next one, so a bounded sync would otherwise hold a run's worth of log at the source (a
    PostgreSQL slot's WAL) until its next run; a failure is left to that run."""
    if "://" in spark_checkpoint:
        return
    usable, last = spark_position(spark_checkpoint)
    if not usable or last is None:
        return
    reader = None
    try:
        reader = _stream_reader(first)
        reader.settle(last)
    except Exception as exc:
        log.warning("sync: the source's log is acknowledged by the next run, not this one: %s",
                    exc)
    finally:
        if reader is not None:
            reader.stop()


_SETTLED = (TableState.STREAMING.value, TableState.DROPPED.value)
"""The table states a consistent target has: each table's changes applied from the log."""


class _Run:
    """:func:`run_sync` once it owns the checkpoint: the outputs made, the progress reported,
    the summary at the end."""

    def __init__(self, settings: SyncSettings, resolved: SourceSpec, lease: CheckpointLease,
                 state_dir: str, metrics: MetricsServer | None, report: Report | None,
                 report_seconds: float) -> None:
        self.settings, self.resolved, self.lease = settings, resolved, lease
        self.state_dir, self.metrics = state_dir, metrics
        self.report, self.report_seconds = report, report_seconds
        self.spec = checkpointed(resolved)
        self.store = StateStore(state_dir)
        self.mirror = self._mirror(bool(self.store.list_dir("states")))
        self.change_log = ChangeLog(settings.changes) if settings.changes is not None else None
        self.started, self.began = time.monotonic(), time.time()  # again when it starts
        self.last_report = 0.0
        self.retries = Retries(settings.retry_seconds)
        self.staged: dict[str, FinishedSplit] = {}  # the staged splits live_progress read
        self.head_started = False  # the run began with the driver's head start
        applied = self.store.read_json(APPLIED_FILE) if self.mirror is not None else None
        self.consistent_since: float | None = (applied or {}).get("consistent_since")

    def _mirror(self, resumed: bool) -> Mirror | Tally | None:
        """What applies each batch to the target, if there is one: the tasks themselves
        (chained: a tally of their reports) or a :class:`Mirror`."""
        spec, target, schema = self.spec, self.settings.target, self.settings.target_schema
        if resumed and target is not None:  # what the target lost is read again, not trusted
            check_target(spec, spec.target or Target.of(target, schema))
        if spec.target is not None:
            spec.target.create_tables(spec.tables, own=resumed)
            return Tally()
        if target is None:
            return None
        store = self.store
        return Mirror(target, spec.tables, envelope=spec.envelope, target_schema=schema,
                      shuffle=False, more_tables=lambda: captured_tables(store, not spec.envelope),
                      own_tables=resumed, ledger_prefix=lambda: ledger_prefix(store),
                      consistency=spec.apply_consistency)

    def each_batch(self, df: Any, batch_id: int) -> None:
        """The ``foreachBatch`` step: the change log written and the mirror applied."""
        change_log, mirror = self.change_log, self.mirror
        both = change_log is not None and mirror is not None
        if both:
            df = df.persist()  # one read of the batch for both
        try:
            if change_log is not None:
                change_log(df, batch_id)
            if mirror is not None:
                mirror(df, batch_id)
        finally:
            if both:
                df.unpersist()

    def with_applied(self, progress: dict[str, Any]) -> dict[str, Any]:
        """``progress`` with what the mirror applied, its rate, the skipped and the lag."""
        mirror = self.mirror
        total = sum(mirror.applied.values()) if mirror is not None else 0
        seconds = max(time.monotonic() - self.started, 1e-9)
        report = {**progress, "applied": total, "applied_per_second": total / seconds}
        skipped = sum(mirror.skipped.values()) if mirror is not None else 0
        if skipped:
            report["skipped"] = skipped
        if mirror is not None and progress.get("phase") in ("log", "done"):
            # caught up with nothing left to apply: no lag; else the newest change applied's,
            # but no more than since the head was last reached (what waits committed after:
            # WAL other databases wrote moves the head, and is no lag of this sync's tables)
            lag, since = mirror.lag_seconds, progress.get(CAUGHT_UP_AT)
            if lag is not None and since is not None:
                lag = min(lag, max(0.0, time.time() - float(since)))
            report["lag_seconds"] = 0.0 if progress.get("caught_up") else lag
        if mirror is not None and mirror.newest is not None:
            report["source_commit"] = mirror.newest
        self.consistent_since = self._consistent_since(progress)
        if self.consistent_since is not None:
            report["consistent_since"] = self.consistent_since
        target = self._target()
        if target is not None and not target.transactional:
            report["per_table_commits"] = True
        return report

    def _consistent_since(self, progress: dict[str, Any]) -> float | None:
        """Since when a reader of the target sees only states the source had: from the first
        report in the log phase with every table streaming (a table read again commits per
        split: not then), when each log batch is one target transaction; kept across runs."""
        target = self._target()
        tables = progress.get("tables") or {}
        if target is None or not target.transactional or progress.get("phase") != "log" or \
                not tables or any(t.get("state") not in _SETTLED for t in tables.values()):
            return None
        return self.consistent_since or time.time()

    def _target(self) -> Target | None:
        """The target the run applies to, chained or through a :class:`Mirror`."""
        target: Target | None = self.spec.target if self.spec.target is not None else \
            getattr(self.mirror, "target", None)
        return target

    def due(self) -> bool:
        """Whether a report is due (someone to tell, and the interval passed)."""
        return time.monotonic() - self.last_report >= self.report_seconds and \
            (self.report is not None or self.metrics is not None)

    def report_now(self, progress: dict[str, Any]) -> None:
        """Report the progress (to ``report``, the applied file and the metrics) when it is
        time to."""
        if not self.due():
            return
        current = self.with_applied(live_progress(self.store, self.staged) or progress)
        if progress.get("updated_at", self.began) < self.began:  # the last run's report
            current = {**{k: v for k, v in current.items()
                          if k not in ("caught_up", "lag_seconds")}, "resuming": True}
        if self.report is not None:
            self.report(current)
        if "resuming" not in current:
            self._record(current)
        if self.metrics is not None:
            self.metrics.update(current)
            self.metrics.update_verify(self.store.read_json(VERIFY_FILE))
            self.metrics.retries = self.retries.count
        self.last_report = time.monotonic()

    def follow(self, query: _Query, stop: threading.Event, now: threading.Event
               ) -> SyncSummary:
        """Run the query until the sync is done, restarting it after a passing fault;
        ``stop`` and ``now`` are set by a first and a second signal."""
        if not self.head_started:
            self.started, self.began = time.monotonic(), time.time()
        with _signals_set(stop, now):
            while True:
                try:
                    active = query.start()
                except Exception as exc:  # the source unreachable while restarting
                    self.retries.wait_or_raise(exc, stop)
                    continue
                self._watch(active, stop, now)
                failure = active.exception()
                if failure is None:
                    break
                self.retries.wait_or_raise(failure, stop)
        return self.summary()

    def _watch(self, query: Any, stop: threading.Event, now: threading.Event) -> None:
        """Watch a running query until it ends: report, stop it once the sync is done or told
        to stop (after the batch in flight commits, unless told twice)."""
        until = self.settings.until
        while query.isActive:
            try:
                query.awaitTermination(0.5)
            except Exception:  # it failed: query.exception() says how
                return
            if self.lease.lost:  # another sync took the checkpoint over while this one stalled
                query.stop()
                raise self.lease.refusal()
            progress = self.store.read_json(PROGRESS_FILE) or {}  # its tables: live_progress
            if query.lastProgress is not None:
                self.retries.reset()  # a batch went through: the source is back
            self.report_now(progress)
            done_snapshot = until == "snapshot" and progress.get("phase") in ("log", "done")
            if stop.is_set() or done_snapshot:
                if stop.is_set() and not now.is_set():
                    log.warning(STOPPING)
                while query.isActive and query.status["isTriggerActive"] and not now.is_set():
                    time.sleep(0.1)  # let the batch in flight commit
                query.stop()

    def _record(self, current: dict[str, Any]) -> None:
        """Keep what this run applied, for ``sdk status`` (:data:`APPLIED_FILE`)."""
        if self.mirror is not None:
            self.store.write_json({k: current[k] for k in APPLIED_KEYS if k in current}
                                  | {"updated_at": time.time()}, APPLIED_FILE)

    def summary(self) -> SyncSummary:
        """What the run did (the display told the last of it)."""
        mirror = self.mirror
        progress = live_progress(self.store, self.staged) or {}
        final = {**self.with_applied(progress), "final": True}
        self._record(final)  # what sdk status shows: as of the last batch, not the last report
        if self.report is not None:
            self.report(final)
        applied = sum(mirror.applied.values()) if mirror is not None else 0
        return SyncSummary(applied, time.monotonic() - self.started,
                           progress.get("phase", "snapshot"), bool(progress.get("caught_up")),
                           mirror.batch_lag if mirror is not None else None,
                           sum(mirror.skipped.values()) if mirror is not None else 0)


class _Query:
    """Starts the sync's streaming query, on the Spark session made (or ``early``'s) and its
    workers warmed up: the first start takes the tables resolved before, a restart after a
    fault resolves them again (as a new sync would)."""

    def __init__(self, settings: SyncSettings, run: _Run, reader_options: dict[str, str],
                 first: dict[str, str], spark_checkpoint: str, early: EarlySession | None,
                 head: HeadStart | None) -> None:
        spec = run.spec
        spark = early.session() if early is not None else \
            spark_session(settings.master, rows_in_jvm=spec.target is None)
        if spark_checkpoint.startswith(("/", "file:")):
            spark.conf.set("spark.sql.streaming.checkpointFileManagerClass", LOCAL_CHECKPOINTS)
        reader_options.setdefault("cores", str(spark.sparkContext.defaultParallelism))
        from .startup.warmup import warm_tasks, warm_workers

        mirror = run.mirror
        writes = spec.target.dialect_name if spec.target is not None else \
            mirror.target.dialect_name if isinstance(mirror, Mirror) else None
        dialects = [spec.dialect_obj.name] + ([writes] if writes else [])  # the tasks'
        warm_workers(spark, warm_tasks(spark.sparkContext.defaultParallelism), dialects)
        self.spark, self.run, self.checkpoint = spark, run, spark_checkpoint
        self.until, self.options = settings.until, reader_options
        first.setdefault("cores", reader_options["cores"])
        self.first: dict[str, str] | None = first
        self.head = head
        self.poll_ms = round(spec.head_poll_seconds * 1000)

    def start(self) -> Any:
        """Start the query (its first start: with the tables resolved before)."""
        if self.head is not None:  # its batch in flight ends while the query starts
            self.head.hand_over()
        stream = self.spark.readStream.format("cdc").options(**(self.first or self.options))
        writer = stream.load().writeStream.foreachBatch(self.run.each_batch) \
            .option("checkpointLocation", self.checkpoint)
        if self.until == "caught-up":
            query = writer.trigger(availableNow=True).start()
        else:  # a batch at most every poll interval: the stream asks for the log head no more
            query = writer.trigger(processingTime=f"{self.poll_ms} milliseconds").start()
        self.first = None
        return query


@contextlib.contextmanager
def _signals_set(stop: threading.Event, now: threading.Event) -> Iterator[None]:
    """SIGINT and SIGTERM set ``stop``, a second one ``now`` (in the main thread: signals
    reach no other), the handlers before put back after."""
    def on_signal(*_: Any) -> None:
        (now if stop.is_set() else stop).set()

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    main = threading.current_thread() is threading.main_thread()
    if main:
        for sig in previous:
            signal.signal(sig, on_signal)
    try:
        yield
    finally:
        if main:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
