"""The algorithm end to end in one process: startup, snapshot splits, then the log phase.

:class:`SyncRunner` advances a :class:`SyncState` one step at a time: a step does one batch of
the :class:`~.machine.PhaseMachine` (reads its splits, or its log range) and returns the events
to emit with the state after them. A caller that commits each step's events and state together
(a transactional or idempotent sink) gets exactly-once output across crashes: after a crash it
resumes from the last committed state, and the step in flight is simply done again. The Spark
engine runs the same machine with the reads spread over executors; this runner is its
sequential reference.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace

from ..dialect.manager import Dialect
from ..dialect.types import (
    Capability,
    ChangeEvent,
    Connection,
    FinishedSplit,
    Offset,
    Row,
    SchemaChange,
    TableId,
    TableSchema,
    TableTruncated,
)
from .following import Request, schema_change_rereads, take_up_requests
from .machine import Batch, PhaseMachine
from .policy import follow_truncation, judge_schema_change
from .reader import PhaseHooks, SharedView, SplitResult, read_split
from .schema import projector
from .settings import SyncOptions
from .state import Phase, SyncState
from .throttle import throttle

log = logging.getLogger(__name__)


class SyncRunner:
    """Runs the snapshot, backfill and incremental algorithm over one dialect."""

    def __init__(self, dialect: Dialect, connect: Callable[[], Connection],
                 options: SyncOptions | None = None, hooks: PhaseHooks | None = None,
                 splits_per_step: int = 1, schema_changes: str = "evolve") -> None:
        self.dialect = dialect
        self.schema_changes = schema_changes
        self.requests: list[Request] = []
        """Snapshot requests not served yet, in the order asked."""
        self._steps = 0
        self.options = options or SyncOptions()
        self.hooks = hooks or PhaseHooks()
        self.machine = PhaseMachine(dialect, self.options)
        self.splits_per_step = splits_per_step
        self._connect = connect
        self._conn: Connection | None = None
        self.last_split: SplitResult | None = None
        self.view = SharedView(dialect, connect, self.options)
        self.snapshot_pace = throttle(self.options.snapshot_rows_per_second)
        self.log_pace = throttle(self.options.log_changes_per_second)

    @property
    def conn(self) -> Connection:
        if self._conn is None:
            self._conn = self._connect()
        return self._conn

    def close(self) -> None:
        self.view.close()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def start(self, tables: Sequence[TableSchema]) -> SyncState:
        """The first state for ``tables`` under the configured startup mode."""
        return self.machine.start(self.conn, tables)

    def request_snapshot(self, table: TableId, where: str | None = None,
                         request_id: str | None = None) -> str:
        """Ask for ``table`` to be read again while its changes keep flowing (only the rows
        meeting ``where`` when given), served in the log phase as the Spark engine serves
        ``sdk snapshot``: its id, recorded in the state once served or refused."""
        request_id = request_id or f"request-{len(self.requests)}-{table}"
        self.requests.append(Request(request_id, table, where))
        return request_id

    def _serve_requests(self, state: SyncState) -> SyncState:
        """``state`` with the requests that can be served now taken up
        (:func:`.following.take_up_requests`); those whose table is busy wait."""
        taken = take_up_requests(state, self.requests,
                                 self.dialect.has(Capability.FILTERED_READS),
                                 lambda s, r: self.machine.reread(self.conn, s, r.table,
                                                                  r.where, r.id))
        for request, refusal in taken.refused:
            log.warning("snapshot request %s refused: %s", request.id, refusal)
        self.requests = taken.waiting
        return taken.state

    def step(self, state: SyncState) -> tuple[list[ChangeEvent], SyncState]:
        """Do one batch: read the next splits, or the next log range."""
        self._steps += 1
        state = self._serve_requests(state)
        batch = self.machine.next_batch(self.conn, state, self._head, self.splits_per_step)
        if batch is None:
            return [], state
        if batch.state.phase is not Phase.SNAPSHOT:
            self.view.close()
        if batch.splits:
            return self._read_splits(batch)
        if batch.log_from is not None:
            return self._read_log(batch)
        return [], batch.state

    def _head(self, position: Offset) -> Offset:
        self.hooks.before_log_batch(position)
        return self.dialect.current_offset(self.conn)

    def _read_splits(self, batch: Batch) -> tuple[list[ChangeEvent], SyncState]:
        events: list[ChangeEvent] = []
        done: list[FinishedSplit] = []
        for split in batch.splits:
            schema = batch.state.tables[split.table]
            result = read_split(self.dialect, self.conn, schema, split, self.options,
                                self.hooks, self.view.token(), self.snapshot_pace)
            self.last_split = result
            done.append(FinishedSplit(split, result.watermark, len(result.rows)))
            events.extend(ChangeEvent(split.table, "r", schema.key_of(row), row,
                                      result.watermark) for row in result.rows)
            events.extend(ChangeEvent(split.table, "d", key, None, result.watermark)
                          for key in result.deleted)  # a table read again: keys gone
        return events, self.machine.fold(batch.state, done)

    def _read_log(self, batch: Batch) -> tuple[list[ChangeEvent], SyncState]:
        """The batch's log range, at most ``log.batch.max-events`` of it; the schema changes
        met are followed (the tables that gained columns read again), a truncation stops
        the run (a stream of row changes cannot carry it), as :mod:`.policy` says."""
        assert batch.log_from is not None and batch.state.position is not None
        limit = self.options.log_batch_max_events
        read: list[ChangeEvent] = []
        shapes = dict(batch.state.tables)
        changes: list[SchemaChange] = []
        ignored: dict[TableId, Callable[[Row | None], Row | None]] = {}
        stream = self.dialect.stream_log(self.conn, list(shapes.values()), batch.log_from,
                                         batch.state.position)
        try:
            for item in stream:
                if isinstance(item, TableTruncated):
                    follow_truncation(batch.state, item, False, self.dialect.compare_offset)
                elif isinstance(item, SchemaChange) and item.table in shapes:
                    verdict = judge_schema_change(shapes[item.table], item,
                                                  self.schema_changes, self.options)
                    if verdict.schema is None:
                        ignored[item.table] = projector(item.schema,
                                                        batch.state.tables[item.table])
                    else:
                        ignored.pop(item.table, None)
                        shapes[item.table] = verdict.schema
                        changes.append(SchemaChange(verdict.schema, item.offset))
                elif isinstance(item, ChangeEvent):
                    if len(read) == limit:  # the first event not taken starts the next batch
                        batch = self.machine.cut_log_batch(batch, item.offset)
                        break
                    project = ignored.get(item.table)
                    read.append(item if project is None else replace(
                        item, after=project(item.after), before=project(item.before)))
                    if self.log_pace is not None:
                        self.log_pace.take(1)
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
        return self.machine.filter_for(batch.state).filter(read), \
            self._follow_schema_changes(batch.state, changes)

    def _follow_schema_changes(self, state: SyncState, changes: list[SchemaChange]
                               ) -> SyncState:
        """``state`` with ``changes`` followed; each table that gained columns is asked to
        be read again (served once it is not being read)."""
        if not changes:
            return state
        state, rereads = schema_change_rereads(state, changes, self.options, self.requests,
                                               self._steps)
        self.requests.extend(rereads)
        return self._serve_requests(state)

    def run(self, state: SyncState, emit: Callable[[list[ChangeEvent], SyncState], None],
            until: Callable[[SyncState], bool]) -> SyncState:
        """Step until ``until(state)``; ``emit`` gets each step's events and state, to commit
        them together (with :attr:`requests`, the reads asked for and not served yet, which a
        runner made again after a crash must be given back)."""
        while not until(state):
            events, state = self.step(state)
            emit(events, state)
        return state


def caught_up(runner: SyncRunner, target: Offset) -> Callable[[SyncState], bool]:
    """A stop condition: the log phase reached ``target`` (or the sync is done)."""
    def check(state: SyncState) -> bool:
        if state.phase is Phase.DONE:
            return True
        return state.phase is Phase.LOG and state.position is not None and \
            runner.dialect.compare_offset(state.position, target) >= 0
    return check

