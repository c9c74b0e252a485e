"""The phases of a sync, written once: what to do next, as transitions over :class:`SyncState`.

Both drivers call this and nothing else to move a sync along: :class:`~.runner.SyncRunner`
(one process, the tests' reference) and the Spark stream reader (splits read by executors,
states kept in a checkpoint). The machine decides; the drivers only read and commit:

- ``SNAPSHOT``: :meth:`PhaseMachine.next_batch` hands out up to ``max_splits`` splits; the
  driver reads them and :meth:`~PhaseMachine.fold`\\ s each one's watermark in before asking
  for the next batch. Once every split was handed out and folded, the snapshot finishes: the
  sync stops (``startup.mode=snapshot``) or the log phase starts at the smallest watermark.
- ``LOG``: each batch is the fixed log range ``[log_from, state.position)`` up to the head the
  driver sees; a table whose largest watermark the position passed leaves the filter (its
  pure-log phase). A driver may end a batch early (:meth:`~PhaseMachine.cut_log_batch`).
  A table removed in this phase (:meth:`~PhaseMachine.remove_tables`) leaves at an offset
  read after it was seen gone: a batch ends there, so its changes before it are emitted and
  none after.
  A table added in this phase (:meth:`~PhaseMachine.add_tables`, e.g. created on the source
  after the sync started) gets a plan: its split batches then alternate with log batches, so
  the log keeps flowing for the other tables, and each split is read at a watermark above the
  log position (the filter's rule for a table with some splits read is in ``incremental``).
- ``DONE``: nothing more.

No Spark and no database code: the dialect is asked only for offsets, boundaries and
comparisons, through the connection the driver passes.
"""

from __future__ import annotations

import datetime as dt
import logging
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

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
from .assigner import SplitAssigner, choose_key
from .incremental import IncrementalFilter
from .settings import StartupMode, SyncOptions
from .state import Phase, SyncState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Batch:
    """One unit of work: ``state`` is the sync state once the batch is done, except that the
    watermarks of ``splits`` are not folded in yet (the driver reads them first).

    A batch either hands out snapshot ``splits``, or reads the log range
    ``[log_from, state.position)``, or neither (the state changed without work to do, e.g. the
    snapshot finished or a table turned pure-log).
    """

    state: SyncState
    splits: tuple[SnapshotSplit, ...] = ()
    log_from: Offset | None = None

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state.to_json(), "splits": [s.to_json() for s in self.splits],
                "log_from": self.log_from.to_json() if self.log_from else None}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Batch:
        return cls(SyncState.from_json(data["state"]),
                   tuple(SnapshotSplit.from_json(s) for s in data["splits"]),
                   Offset.from_json(data["log_from"]) if data["log_from"] else None)


class PhaseMachine:
    """Startup, hand-out, fold, end of snapshot and log batches over one dialect."""

    def __init__(self, dialect: Dialect, options: SyncOptions) -> None:
        self.dialect = dialect
        self.options = options
        self.assigner = SplitAssigner(dialect, options)
        self._filter: IncrementalFilter | None = None
        self._filter_source: tuple[object, object] = (None, None)
        self._log_turn = False  # in the log phase with tables added: whose turn is next

    # --- startup -----------------------------------------------------------------------------

    def start(self, conn: Connection, tables: Sequence[TableSchema]) -> SyncState:
        """The first state for ``tables`` under the configured startup mode."""
        schemas = {s.table: choose_key(s, self.options) for s in tables}
        mode = self.options.startup_mode
        if mode in (StartupMode.INITIAL, StartupMode.SNAPSHOT):
            # where the log phase starts at the latest (a snapshot alone reads no log)
            begun = self.dialect.current_offset(conn) if mode is StartupMode.INITIAL else None
            plans = {t: self.assigner.plan(conn, s) for t, s in schemas.items()}
            return SyncState(Phase.SNAPSHOT, schemas, plans,
                             stop_after_snapshot=mode is StartupMode.SNAPSHOT,
                             snapshot_from=begun)
        return SyncState(Phase.LOG, schemas, position=self._startup_offset(conn, mode))

    def _startup_offset(self, conn: Connection, mode: StartupMode) -> Offset:
        dialect = self.dialect
        if mode is StartupMode.LATEST:
            return dialect.current_offset(conn)
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
            found = dialect.earliest_offset(conn)
        else:
            if self.options.timestamp_millis is None:
                raise ConfigurationError("startup.mode=timestamp needs startup.timestamp-millis")
            when = dt.datetime.fromtimestamp(self.options.timestamp_millis / 1000, dt.UTC)
            found = dialect.offset_at_time(conn, when)
        if found is None:
            raise ConfigurationError(f"dialect {dialect.name!r} found no offset for "
                                     f"startup.mode={mode.value}")
        return found

    def all_splits(self, conn: Connection, tables: Sequence[TableSchema]
                   ) -> list[SnapshotSplit]:
        """Every split of ``tables`` at once, for a one-off snapshot read (no log phase)."""
        state = SyncState(Phase.SNAPSHOT, {s.table: s for s in tables},
                          {s.table: self.assigner.plan(conn, s) for s in tables})
        return self.hand_out(conn, state, sys.maxsize)[1]

    # --- the next batch ----------------------------------------------------------------------

    def next_batch(self, conn: Connection, state: SyncState,
                   head: Callable[[Offset], Offset], max_splits: int) -> Batch | None:
        """The next unit of work after ``state`` (whose handed-out splits must all be folded
        in), or None when there is nothing to do now. ``head(position)`` gives the log
        position the driver may read up to from ``position``; it is asked only in the log
        phase. Finishing the snapshot is a batch of its own, with no work: the driver commits
        the end of the snapshot before the first log batch."""
        if state.phase is Phase.SNAPSHOT:
            state, splits = self.hand_out(conn, state, max_splits)
            if splits:
                return Batch(state, tuple(splits))
            return Batch(self.finish_snapshot(conn, state))  # a step of its own
        if state.phase is not Phase.LOG:
            return None
        current = self.drop_left(state)
        if current.plans and not self._log_turn:
            return self._added_tables_batch(conn, current, max_splits)
        self._log_turn = False
        dropped = self.drop_pure(current)
        assert dropped.position is not None
        end = head(dropped.position)
        for at in dropped.leaving.values():  # a batch ends where a table leaves, not past it
            if self.dialect.compare_offset(at, end) < 0:
                end = at
        if self.dialect.compare_offset(end, dropped.position) > 0:
            return Batch(replace(dropped, position=end), log_from=dropped.position)
        if dropped.plans:  # nothing new in the log: no need to wait for its turn
            return self._added_tables_batch(conn, dropped, max_splits)
        return Batch(dropped) if dropped is not state else None

    def _added_tables_batch(self, conn: Connection, state: SyncState, max_splits: int
                            ) -> Batch:
        """The next splits of the tables added in the log phase; the log's turn is next."""
        self._log_turn = True
        state, splits = self.hand_out(conn, state, max_splits)
        return Batch(state, tuple(splits))

    def add_tables(self, conn: Connection, state: SyncState, tables: Sequence[TableSchema]
                   ) -> SyncState:
        """``state`` with ``tables`` (not captured yet) to be snapshotted while the log keeps
        flowing: from here on the log emits a change of one of them only once the split
        holding its key was read, and at or above that split's watermark. Only in the log
        phase; a table already captured is refused."""
        if state.phase is not Phase.LOG:
            raise ValueError(f"tables are added in the log phase, not {state.phase.value}")
        schemas, plans = dict(state.tables), dict(state.plans)
        for schema in tables:
            if schema.table in schemas:
                raise ValueError(f"table {schema.table} is captured already")
            schemas[schema.table] = chosen = choose_key(schema, self.options)
            plans[schema.table] = self.assigner.plan(conn, chosen)
            log.info("table %s added at %s: its snapshot runs beside the log", schema.table,
                     state.position)
        return replace(state, tables=schemas, plans=plans)

    def reread(self, conn: Connection, state: SyncState, table: TableId,
               where: str | None = None, request: str | None = None) -> SyncState:
        """``state`` with ``table`` to be read again while its changes keep flowing (a
        snapshot on demand), only the rows meeting ``where`` when given. Each split is read
        ``since`` the log position at its hand-out: the keys it holds are then sent as at its
        watermark (those gone as deletes), and the filter drops the split's changes below
        it; the changes of keys whose split is not read yet flow on. ``request`` is recorded
        as served. Only in the log phase, for a table streaming (not being read)."""
        if state.phase is not Phase.LOG:
            raise ValueError(f"tables are read again in the log phase, not {state.phase.value}")
        if table not in state.tables:
            raise ValueError(f"table {table} is not captured")
        if table in state.plans or table in state.finished or table in state.leaving:
            raise ValueError(f"table {table} is being read or leaving")
        plan = self.assigner.plan(conn, state.tables[table])
        log.info("table %s read again%s at %s", table, f" where {where}" if where else "",
                 state.position)
        return replace(state, plans={**state.plans, table: plan},
                       rereads={**state.rereads, table: where},
                       served=(*state.served, request) if request else state.served)

    def remove_tables(self, state: SyncState, tables: Iterable[TableId], at: Offset
                      ) -> SyncState:
        """``state`` with ``tables`` leaving the capture once the log position reaches ``at``
        (e.g. dropped on the source, or no longer selected by the patterns): their changes
        before ``at`` are still emitted, none after. ``at`` must be a log position read after
        the table was seen gone, so the table's last change lies before it. Only in the log
        phase; tables not captured, or leaving already, are ignored."""
        if state.phase is not Phase.LOG:
            raise ValueError(f"tables are removed in the log phase, not {state.phase.value}")
        leaving = dict(state.leaving)
        for table in tables:
            if table in state.tables and table not in leaving:
                leaving[table] = at
                log.info("table %s leaves the capture at %s", table, at)
        return replace(state, leaving=leaving) if leaving != state.leaving else state

    def drop_left(self, state: SyncState) -> SyncState:
        """``state`` without the leaving tables whose offset the log position reached."""
        position = state.position
        assert position is not None
        compare = self.dialect.compare_offset
        gone = {t for t, at in state.leaving.items() if compare(position, at) >= 0}
        if not gone:
            return state
        log.info("tables no longer captured from %s: %s", position,
                 ", ".join(str(t) for t in gone))
        return replace(state,
                       tables={t: s for t, s in state.tables.items() if t not in gone},
                       plans={t: p for t, p in state.plans.items() if t not in gone},
                       finished={t: f for t, f in state.finished.items() if t not in gone},
                       leaving={t: o for t, o in state.leaving.items() if t not in gone},
                       versions={t: v for t, v in state.versions.items() if t not in gone})

    def hand_out(self, conn: Connection, state: SyncState, limit: int
                 ) -> tuple[SyncState, list[SnapshotSplit]]:
        """Up to ``limit`` next splits, table after table, and the state with their plans
        advanced (a table whose last split was handed out leaves ``plans``)."""
        plans, rereads = dict(state.plans), dict(state.rereads)
        handed: list[SnapshotSplit] = []
        for table, plan in state.plans.items():
            if len(handed) >= limit:
                break
            schema = state.tables[table]
            while len(handed) < limit:
                nxt = self.assigner.next_split(conn, schema, plan)
                if nxt is None:
                    break
                split, plan = nxt
                if table in state.rereads:
                    split = replace(split, where=state.rereads[table], since=state.position)
                handed.append(split)
            if plan.done:
                del plans[table]
                rereads.pop(table, None)
            else:
                plans[table] = plan
        return replace(state, plans=plans, rereads=rereads), handed

    def fold(self, state: SyncState, done: Iterable[FinishedSplit]) -> SyncState:
        """``state`` with the read splits' watermarks added to their tables' finished splits.
        A split folded twice, or of a table not in the snapshot, is a bug in the driver."""
        finished = dict(state.finished)
        for item in done:
            table = item.split.table
            if table not in state.tables or state.phase is Phase.DONE:
                raise ValueError(f"split {item.split.split_id} does not belong to this "
                                 f"snapshot (phase {state.phase.value})")
            have = finished.get(table, ())
            if any(f.split.index == item.split.index for f in have):
                raise ValueError(f"split {item.split.split_id} was folded in twice")
            finished[table] = (*have, item)
        return replace(state, finished=finished)

    def finish_snapshot(self, conn: Connection, state: SyncState) -> SyncState:
        """End the snapshot once every split was handed out (and folded): stop, or start the
        log phase at the smallest watermark, where the oldest split's window begins, or where
        the snapshot began when that is earlier (a schema change made before the first split
        is then met in the log)."""
        if state.plans:
            raise ValueError("the snapshot cannot finish while tables have splits left")
        if state.stop_after_snapshot:
            log.info("snapshot finished; startup.mode=snapshot: stopping")
            return replace(state, phase=Phase.DONE, finished={})
        start = self.filter_for(state).start_offset()
        begun = state.snapshot_from
        if begun is not None and (start is None or
                                  self.dialect.compare_offset(begun, start) < 0):
            start = begun
        if start is None:  # nothing was read: no watermark to start from
            start = self.dialect.current_offset(conn)
        log.info("snapshot finished; log phase starts at %s", start)
        return replace(state, phase=Phase.LOG, position=start, snapshot_from=None)

    def drop_pure(self, state: SyncState) -> SyncState:
        """Forget the finished splits of tables whose every watermark is at or below the log
        position: from there on each of their changes is emitted (the pure-log phase)."""
        assert state.position is not None
        if not state.finished:
            return state
        pure = self.filter_for(state).pure_at(state.position)  # tables being read not among them
        if not pure:
            return state
        log.info("tables in pure log phase from %s: %s", state.position,
                 ", ".join(str(t) for t in pure))
        return replace(state, finished={t: s for t, s in state.finished.items()
                                        if t not in pure})

    def cut_log_batch(self, batch: Batch, at: Offset) -> Batch:
        """``batch`` ending at ``at`` (the first event the driver did not take) instead of the
        head: the rest of the range is the next batch's."""
        assert batch.log_from is not None and batch.state.position is not None
        compare = self.dialect.compare_offset
        if not compare(batch.log_from, at) <= 0 <= compare(batch.state.position, at):
            raise ValueError(f"{at} is outside the batch's log range")
        return replace(batch, state=replace(batch.state, position=at))

    def filter_for(self, state: SyncState) -> IncrementalFilter:
        """The incremental filter of ``state``'s finished splits (kept while they are the
        same object: building it sorts every split)."""
        known_finished, known_plans = self._filter_source
        if self._filter is None or known_finished is not state.finished or \
                known_plans is not state.plans:
            self._filter = log_filter(state, self.dialect.compare_offset)
            self._filter_source = (state.finished, state.plans)
        return self._filter


def log_filter(state: SyncState, compare: Callable[[Offset, Offset], int]) -> IncrementalFilter:
    """The incremental filter of ``state``'s log batches: its finished splits, and in the log
    phase the tables added or read again there (those with plans) as partly read."""
    pending = list(state.plans) if state.phase is Phase.LOG else []
    return IncrementalFilter(state.finished, compare, pending, open=state.rereads)


def splits_per_batch(batch_rows: int, split_size: int) -> int:
    """How many splits a snapshot batch hands out for about ``batch_rows`` rows: enough work
    that a batch's fixed costs (planning, state, scheduling, the sink's call) stay small, while
    each split is still read and applied by a task of its own (memory stays O(split))."""
    return max(1, -(-batch_rows // split_size))
