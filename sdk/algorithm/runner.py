"""The algorithm end to end in one process: startup, snapshot splits, then the log phase.

:class:`SyncRunner` advances a :class:`SyncState` one step at a time: a step reads one split
or one log batch and returns the events to emit with the state after them. A caller that
commits each step's events and state together (a transactional or idempotent sink) gets
exactly-once output across crashes: after a crash it resumes from the last committed state,
and the step in flight is simply done again. The Spark engine runs the same pieces spread over
executors; this runner is their sequential reference and what the tests drive.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace

from ..dialects import Dialect
from ..errors import ConfigurationError
from ..types import (
    Capability,
    ChangeEvent,
    Connection,
    FinishedSplit,
    Offset,
    TableSchema,
)
from .assigner import SplitAssigner, choose_key
from .incremental import IncrementalFilter
from .options import StartupMode, SyncOptions
from .reader import PhaseHooks, SharedView, SplitResult, read_split
from .state import Phase, SyncState

log = logging.getLogger(__name__)


class SyncRunner:
    """Runs the snapshot, backfill and incremental algorithm over one dialect."""

    def __init__(self, dialect: Dialect, connect: Callable[[], Connection],
                 options: SyncOptions | None = None, hooks: PhaseHooks | None = None) -> None:
        self.dialect = dialect
        self.options = options or SyncOptions()
        self.hooks = hooks or PhaseHooks()
        self.assigner = SplitAssigner(dialect, self.options)
        self._connect = connect
        self._conn: Connection | None = None
        self._filter: IncrementalFilter | None = None
        self._filter_source: object = None
        self.last_split: SplitResult | None = None
        self.view = SharedView(dialect, connect, self.options)

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

    # --- startup -----------------------------------------------------------------------------

    def start(self, tables: Sequence[TableSchema]) -> SyncState:
        """The first state for ``tables`` under the configured startup mode."""
        schemas = {s.table: choose_key(s, self.options) for s in tables}
        mode = self.options.startup_mode
        if mode in (StartupMode.INITIAL, StartupMode.SNAPSHOT):
            plans = {t: self.assigner.plan(self.conn, s) for t, s in schemas.items()}
            return SyncState(Phase.SNAPSHOT, schemas, plans,
                             stop_after_snapshot=mode is StartupMode.SNAPSHOT)
        return SyncState(Phase.LOG, schemas, position=self._startup_offset(mode))

    def _startup_offset(self, mode: StartupMode) -> Offset:
        dialect = self.dialect
        if mode is StartupMode.LATEST:
            return dialect.current_offset(self.conn)
        if mode is StartupMode.SPECIFIC_OFFSET:
            if not self.options.specific_offset:
                raise ConfigurationError("startup.mode=specific-offset needs "
                                         "startup.specific-offset")
            offset = Offset.from_json(self.options.specific_offset)
            if offset.dialect != dialect.name:
                raise ConfigurationError(f"startup.specific-offset is a {offset.dialect!r} "
                                         f"offset, but the source is {dialect.name!r}")
            return offset
        needed = Capability.EARLIEST if mode is StartupMode.EARLIEST else Capability.TIMESTAMP
        if not dialect.has(needed):
            raise ConfigurationError(f"dialect {dialect.name!r} does not support "
                                     f"startup.mode={mode.value}")
        if mode is StartupMode.EARLIEST:
            found = dialect.earliest_offset(self.conn)
        else:
            if self.options.timestamp_millis is None:
                raise ConfigurationError("startup.mode=timestamp needs startup.timestamp-millis")
            when = dt.datetime.fromtimestamp(self.options.timestamp_millis / 1000, dt.UTC)
            found = dialect.offset_at_time(self.conn, when)
        if found is None:
            raise ConfigurationError(f"dialect {dialect.name!r} found no offset for "
                                     f"startup.mode={mode.value}")
        return found

    # --- steps -------------------------------------------------------------------------------

    def step(self, state: SyncState) -> tuple[list[ChangeEvent], SyncState]:
        """Do one unit of work: read the next split, or the next log batch."""
        if state.phase is Phase.SNAPSHOT:
            return self._snapshot_step(state)
        if state.phase is Phase.LOG:
            return self._log_step(state)
        return [], state

    def _snapshot_step(self, state: SyncState) -> tuple[list[ChangeEvent], SyncState]:
        plans = dict(state.plans)
        for table, plan in state.plans.items():
            schema = state.tables[table]
            nxt = self.assigner.next_split(self.conn, schema, plan)
            if nxt is None:
                del plans[table]
                continue
            split, plans[table] = nxt
            result = read_split(self.dialect, self.conn, schema, split, self.options,
                                self.hooks, self.view.token())
            self.last_split = result
            done = FinishedSplit(split, result.watermark, len(result.rows))
            finished = dict(state.finished)
            finished[table] = (*finished.get(table, ()), done)
            events = [ChangeEvent(table, "r", schema.key_of(row), row, result.watermark)
                      for row in result.rows]
            if plans[table].done:
                del plans[table]
            return events, self._after_snapshot(replace(state, plans=plans, finished=finished))
        return [], self._after_snapshot(replace(state, plans=plans))

    def _after_snapshot(self, state: SyncState) -> SyncState:
        if state.plans:
            return state
        self.view.close()
        if state.stop_after_snapshot:
            log.info("snapshot finished; startup.mode=snapshot: stopping")
            return replace(state, phase=Phase.DONE, finished={})
        start = self._filter_for(state).start_offset()
        log.info("snapshot finished; log phase starts at %s", start)
        return replace(state, phase=Phase.LOG, position=start)

    def _filter_for(self, state: SyncState) -> IncrementalFilter:
        if self._filter is None or self._filter_source is not state.finished:
            self._filter = IncrementalFilter(state.finished, self.dialect.compare_offset)
            self._filter_source = state.finished
        return self._filter

    def _log_step(self, state: SyncState) -> tuple[list[ChangeEvent], SyncState]:
        assert state.position is not None
        self.hooks.before_log_batch(state.position)
        end = self.dialect.current_offset(self.conn)
        if self.dialect.compare_offset(end, state.position) <= 0:
            return [], state
        flt = self._filter_for(state)
        limit = self.options.log_batch_max_events
        read: list[ChangeEvent] = []
        new_position = end
        stream = self.dialect.stream_log(self.conn, list(state.tables.values()),
                                         state.position, end)
        try:
            for item in stream:
                if not isinstance(item, ChangeEvent):
                    continue
                if len(read) == limit:
                    new_position = item.offset  # the first event not taken starts the next batch
                    break
                read.append(item)
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
        events = flt.filter(read)
        finished = state.finished
        pure = flt.advance(new_position)
        if pure:
            finished = {t: s for t, s in finished.items() if t not in pure}
            log.info("tables in pure log phase from %s: %s", new_position,
                     ", ".join(str(t) for t in pure))
        return events, replace(state, position=new_position, finished=finished)

    def run(self, state: SyncState, emit: Callable[[list[ChangeEvent], SyncState], None],
            until: Callable[[SyncState], bool]) -> SyncState:
        """Step until ``until(state)``; ``emit`` gets each step's events and state, to commit
        them together."""
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

