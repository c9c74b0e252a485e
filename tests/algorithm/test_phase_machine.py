"""The phase state machine's transitions, one at a time, on the simulated database.

The property tests (tests/algorithm/test_algorithm_properties.py) drive whole syncs through it;
these pin each transition's contract, including the guards no correct driver trips.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from helpers.sim import SCHEMA, TABLE, MemoryConnection, MemoryDatabase, memory_dialect

from sdk import ChangeEvent, FinishedSplit, Offset, TableId
from sdk.algorithm import (
    Batch,
    Phase,
    PhaseMachine,
    StartupMode,
    SyncOptions,
    SyncState,
    log_filter,
)
from sdk.dialect.codec import dumps

OTHER = replace(SCHEMA, table=TableId("db", "u"))


def mem(seq: int) -> Offset:
    return Offset("mem", seq=seq)


@pytest.fixture
def db() -> MemoryDatabase:
    return MemoryDatabase(rows={(k,): (k, k) for k in range(10)})


def machine(**options: object) -> PhaseMachine:
    return PhaseMachine(memory_dialect(), SyncOptions(**options))  # type: ignore[arg-type]


def finish_all(m: PhaseMachine, conn: MemoryConnection, state: SyncState, watermark: int
               ) -> SyncState:
    """Hand out and fold every split, each with ``watermark``."""
    while True:
        state, splits = m.hand_out(conn, state, 100)
        if not splits:
            return state
        state = m.fold(state, [FinishedSplit(s, mem(watermark), 0) for s in splits])


def test_hand_out_takes_at_most_the_limit_table_after_table(db: MemoryDatabase) -> None:
    m, conn = machine(split_size=4), MemoryConnection(db)
    state = m.start(conn, [SCHEMA, OTHER])
    handed: list[tuple[TableId, int]] = []
    for _ in range(10):
        state, splits = m.hand_out(conn, state, 2)
        assert len(splits) <= 2
        if not splits:
            break
        handed += [(s.table, s.index) for s in splits]
        state = m.fold(state, [FinishedSplit(s, mem(0), 0) for s in splits])
    assert handed == [(TABLE, 0), (TABLE, 1), (TABLE, 2), (OTHER.table, 0),
                      (OTHER.table, 1), (OTHER.table, 2)]
    assert not state.plans


def test_a_split_folded_twice_or_out_of_the_snapshot_is_refused(db: MemoryDatabase) -> None:
    m, conn = machine(split_size=4), MemoryConnection(db)
    state, (split, *_) = m.hand_out(conn, m.start(conn, [SCHEMA]), 1)
    done = FinishedSplit(split, mem(0), 0)
    folded = m.fold(state, [done])
    with pytest.raises(ValueError, match="folded in twice"):
        m.fold(folded, [done])
    with pytest.raises(ValueError, match="does not belong"):
        m.fold(replace(state, tables={}), [done])
    with pytest.raises(ValueError, match="does not belong"):
        m.fold(replace(state, phase=Phase.DONE), [done])


def test_the_snapshot_finishes_only_when_every_split_was_handed_out(db: MemoryDatabase) -> None:
    m, conn = machine(split_size=4), MemoryConnection(db)
    state = m.start(conn, [SCHEMA])
    with pytest.raises(ValueError, match="splits left"):
        m.finish_snapshot(conn, state)


def test_the_log_phase_starts_at_the_smallest_watermark(db: MemoryDatabase) -> None:
    m, conn = machine(split_size=4), MemoryConnection(db)
    state = m.start(conn, [SCHEMA])
    marks = iter([7, 3, 9])
    while True:
        state, splits = m.hand_out(conn, state, 1)
        if not splits:
            break
        state = m.fold(state, [FinishedSplit(splits[0], mem(next(marks)), 0)])
    assert state.snapshot_from == mem(0)  # the log's head when the snapshot began
    done = m.finish_snapshot(conn, replace(state, snapshot_from=mem(5)))
    assert (done.phase, done.position) == (Phase.LOG, mem(3))
    assert done.finished == state.finished
    done = m.finish_snapshot(conn, state)  # the snapshot began below every watermark
    assert (done.phase, done.position, done.snapshot_from) == (Phase.LOG, mem(0), None)


def test_snapshot_mode_stops_and_forgets_the_splits(db: MemoryDatabase) -> None:
    m, conn = machine(split_size=4, startup_mode=StartupMode.SNAPSHOT), MemoryConnection(db)
    state = finish_all(m, conn, m.start(conn, [SCHEMA]), 0)
    batch = m.next_batch(conn, state, lambda p: mem(99), 8)
    assert batch is not None and batch.state.phase is Phase.DONE and not batch.state.finished
    assert m.next_batch(conn, batch.state, lambda p: mem(99), 8) is None


def test_nothing_read_starts_the_log_at_the_current_offset(db: MemoryDatabase) -> None:
    m, conn = machine(), MemoryConnection(db)
    db.write("u", (1,), 5)
    state = m.finish_snapshot(conn, SyncState(Phase.SNAPSHOT, {}))
    assert state.position == mem(1)


def test_log_batches_run_from_the_position_to_the_head(db: MemoryDatabase) -> None:
    m, conn = machine(split_size=4), MemoryConnection(db)
    state = finish_all(m, conn, replace(m.start(conn, [SCHEMA]), snapshot_from=None), 5)
    asked: list[Offset] = []

    def head(position: Offset) -> Offset:
        asked.append(position)
        return mem(12)

    finished = m.next_batch(conn, state, head, 8)  # the end of the snapshot: its own batch
    assert finished is not None and finished.state.phase is Phase.LOG and not asked
    assert not finished.splits and finished.log_from is None
    batch = m.next_batch(conn, finished.state, head, 8)
    assert batch is not None and asked == [mem(5)]
    assert (batch.log_from, batch.state.position) == (mem(5), mem(12))
    assert not batch.state.finished  # every watermark is 5: pure-log from the start
    assert m.next_batch(conn, batch.state, lambda p: mem(12), 8) is None


def test_a_table_turns_pure_log_once_the_position_passes_its_largest_watermark(
        db: MemoryDatabase) -> None:
    m, conn = machine(split_size=4), MemoryConnection(db)
    state = m.start(conn, [SCHEMA])
    for mark in (2, 8, 4):
        state, splits = m.hand_out(conn, state, 1)
        state = m.fold(state, [FinishedSplit(splits[0], mem(mark), 0)])
    state = m.finish_snapshot(conn, state)
    first = m.next_batch(conn, state, lambda p: mem(8), 8)
    assert first is not None and TABLE in first.state.finished  # at 2: still filtered
    second = m.next_batch(conn, first.state, lambda p: mem(8), 8)
    assert second is not None and not second.state.finished and second.log_from is None


def test_a_log_batch_cut_short_ends_at_the_first_event_not_taken(db: MemoryDatabase) -> None:
    m = machine()
    batch = Batch(SyncState(Phase.LOG, {TABLE: SCHEMA}, position=mem(9)), log_from=mem(2))
    assert m.cut_log_batch(batch, mem(5)).state.position == mem(5)
    for outside in (mem(1), mem(10)):
        with pytest.raises(ValueError, match="outside"):
            m.cut_log_batch(batch, outside)


def test_a_batch_restores_from_its_json(db: MemoryDatabase) -> None:
    m, conn = machine(split_size=4), MemoryConnection(db)
    batch = m.next_batch(conn, m.start(conn, [SCHEMA]), lambda p: mem(0), 2)
    assert batch is not None and len(batch.splits) == 2
    again = Batch.from_json(json.loads(dumps(batch.to_json())))
    assert again == batch


def test_a_log_read_from_a_position_routes_only_the_tables_not_yet_pure_there(
        db: MemoryDatabase) -> None:
    m, conn = machine(split_size=100), MemoryConnection(db)
    state = m.start(conn, [SCHEMA, OTHER])
    state, splits = m.hand_out(conn, state, 100)
    marks = {TABLE: 5, OTHER.table: 9}
    state = m.fold(state, [FinishedSplit(s, mem(marks[s.table]), 0) for s in splits])
    flt = log_filter(state, memory_dialect().compare_offset)
    assert flt.filtered_tables == {TABLE, OTHER.table}
    flt.from_position(mem(6))
    assert flt.filtered_tables == {OTHER.table}  # TABLE's events from 6 on all pass
    early = ChangeEvent(OTHER.table, "u", (1,), (1, 2), mem(7), (1, 1))
    assert flt.route(early) is None  # OTHER's split was read at 9: it holds this change
    assert flt.route(replace(early, table=TABLE)) is not None
