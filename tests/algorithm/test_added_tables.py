"""A table added while the log flows (PhaseMachine.add_tables: a table created on the source
after the sync started), on the simulated database with random writes between the steps: its
snapshot's split batches alternate with log batches, and its output is exactly once, as for a
table of the first snapshot: per key the row at its split's watermark, then every later change,
in order."""

from __future__ import annotations

import random
from typing import Any

import pytest
from helpers.sim import (
    SCHEMA,
    TABLE,
    MemoryConnection,
    MemoryDatabase,
    check_exactly_once,
    key_histories,
    memory_dialect,
    replay,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from sdk import ChangeEvent, FinishedSplit, Key
from sdk.algorithm import Phase, SyncOptions, SyncRunner, SyncState, log_filter
from sdk.dialect.types import Offset, SnapshotSplit


def _write(db: MemoryDatabase, rng: random.Random, space: int) -> None:
    key = (rng.randrange(space),)
    if key not in db.rows:
        db.write("c", key, rng.randrange(1000))
    elif rng.random() < 0.2:
        db.write("d", key)
    elif rng.random() < 0.2 and (moved := (rng.randrange(space),)) not in db.rows:
        db.write("u", key, rng.randrange(1000), new_key=moved)
    else:
        db.write("u", key, rng.randrange(1000))


class _World:
    """The simulated table of 30 rows in 60 keys, a runner over it, what it emitted, and a
    step that writes up to ``writes`` random changes before each batch."""

    def __init__(self, seed: int, atomic: bool, split_size: int, writes: int) -> None:
        self.rng = random.Random(seed)
        self.db = MemoryDatabase(rows={(k,): (k, k) for k in range(0, 60, 2)})
        self.initial = dict(self.db.rows)
        self.conn = MemoryConnection(self.db)
        self.dialect = memory_dialect(atomic=atomic)
        self.runner = SyncRunner(self.dialect, lambda: self.conn,
                                 SyncOptions(split_size=split_size), splits_per_step=2)
        self.emitted: list[ChangeEvent] = []
        self.writes = writes

    def step(self, state: SyncState, write: bool = True) -> SyncState:
        for _ in range(self.rng.randrange(self.writes + 1) if write else 0):
            _write(self.db, self.rng, 60)
        events, state = self.runner.step(state)
        self.emitted.extend(events)
        return state

    def parts(self) -> tuple[MemoryDatabase, MemoryConnection, Any, SyncRunner,
                             list[ChangeEvent], Any]:
        return self.db, self.conn, self.dialect, self.runner, self.emitted, self.step


def _run(seed: int, atomic: bool, split_size: int, writes: int) -> None:
    world = _World(seed, atomic, split_size, writes)
    db, conn, dialect, runner, emitted, step = world.parts()
    initial = world.initial

    state = runner.start([])  # the table does not exist yet, as far as the sync knows
    while state.phase is Phase.SNAPSHOT:
        state = step(state)
    for _ in range(world.rng.randrange(4)):
        state = step(state)
    assert not emitted
    state = runner.machine.add_tables(conn, state, [SCHEMA])
    with pytest.raises(ValueError, match="captured already"):
        runner.machine.add_tables(conn, state, [SCHEMA])
    splits: tuple[FinishedSplit, ...] = ()
    kinds: list[str] = []
    while state.plans or state.finished:  # its snapshot, beside the log, then the overlap
        before = state.position
        state = step(state)
        kinds.append("log" if state.position != before else "splits")
        splits = state.finished.get(TABLE, splits)
    while dialect.compare_offset(state.position, dialect.current_offset(conn)) < 0:
        state = step(state, write=False)  # the log catches up with the last writes

    assert replay(emitted) == db.rows
    marks = {f.split: f.watermark["seq"] for f in splits}

    def watermark_of(key: Key) -> int:
        (mark,) = [m for s, m in marks.items() if s.contains(key)]
        assert isinstance(mark, int)
        return mark
    check_exactly_once(emitted, key_histories(db.log, initial), watermark_of)
    assert kinds.count("splits") >= len(initial) // (2 * split_size)


@pytest.mark.parametrize("atomic", [False, True], ids=["watermarks", "atomic-view"])
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**9), split_size=st.integers(2, 12), writes=st.integers(0, 6))
def test_a_table_added_while_the_log_flows_is_captured_exactly_once(
        atomic: bool, seed: int, split_size: int, writes: int) -> None:
    _run(seed, atomic, split_size, writes)


def test_the_filter_holds_back_keys_of_splits_not_read_yet() -> None:
    def mem(seq: int) -> Offset:
        return Offset("mem", seq=seq)
    read = [FinishedSplit(SnapshotSplit(TABLE, 1, (10,), (20,)), mem(50), 3)]
    plans: Any = {TABLE: None}  # only which tables have plans matters to the filter
    flt = log_filter(SyncState(Phase.LOG, {}, plans, {TABLE: tuple(read)}, mem(40)),
                     memory_dialect().compare_offset)

    def event(key: int, seq: int, old: int | None = None) -> ChangeEvent:
        return ChangeEvent(TABLE, "u", (key,), (key, 0), mem(seq), None,
                           (old,) if old is not None else None)
    assert flt.route(event(5, 60)) is None  # split 0: not read yet, its read brings it
    assert flt.route(event(15, 45)) is None  # split 1, below its watermark
    assert flt.route(event(15, 50)) is not None
    assert flt.route(event(25, 60)) is None  # split 2: not read yet
    moved = flt.route(event(25, 55, old=15))  # only the old key's split was read
    assert moved is not None and moved.op == "d" and moved.key == (15,)


def test_split_batches_alternate_with_log_batches_while_the_log_moves() -> None:
    db = MemoryDatabase(rows={(k,): (k, k) for k in range(20)})
    conn = MemoryConnection(db)
    runner = SyncRunner(memory_dialect(), lambda: conn, SyncOptions(split_size=2))
    state = runner.start([])
    while state.phase is Phase.SNAPSHOT:
        _, state = runner.step(state)
    state = runner.machine.add_tables(conn, state, [SCHEMA])
    kinds = []
    for i in range(8):
        db.write("u", (i,), 100 + i)  # the log always has something new
        before = state.position
        _, state = runner.step(state)
        kinds.append("log" if state.position != before else "splits")
    assert kinds == ["splits", "log"] * 4


@pytest.mark.parametrize("pending", [False, True], ids=["streaming", "mid-snapshot"])
def test_a_removed_table_keeps_its_changes_before_the_offset_and_none_after(
        pending: bool) -> None:
    db = MemoryDatabase(rows={(k,): (k, k) for k in range(12)})
    conn = MemoryConnection(db)
    dialect = memory_dialect()
    runner = SyncRunner(dialect, lambda: conn, SyncOptions(split_size=3))
    emitted: list[ChangeEvent] = []
    state = runner.start([] if pending else [SCHEMA])
    while state.phase is Phase.SNAPSHOT:
        events, state = runner.step(state)
        emitted.extend(events)
    if pending:  # added, and removed after its first split batch
        state = runner.machine.add_tables(conn, state, [SCHEMA])
        events, state = runner.step(state)
        emitted.extend(events)
    for i in range(4):
        db.write("u", (i,), 100 + i)
    at = dialect.current_offset(conn)
    kept = {k: v for k, v in db.rows.items()}
    state = runner.machine.remove_tables(state, [TABLE], at)
    assert runner.machine.remove_tables(state, [TABLE], at) is state  # leaving already
    for i in range(4):
        db.write("u", (i,), 200 + i)  # after the offset: not captured
    db.write("d", (11,))
    while TABLE in state.tables or dialect.compare_offset(state.position,
                                                          dialect.current_offset(conn)) < 0:
        events, state = runner.step(state)
        emitted.extend(events)
    assert not state.leaving and TABLE not in state.finished and TABLE not in state.plans
    assert SyncState.from_json(state.to_json()) == state
    mine = [e for e in emitted if e.table == TABLE]
    assert all(dialect.compare_offset(e.offset, at) < 0 for e in mine if e.op != "r")
    if not pending:
        assert replay(mine) == kept


def _reread(seed: int, atomic: bool, split_size: int, writes: int, where: str | None) -> None:
    """A streaming table read again (a snapshot on demand) under random writes: the output
    replayed equals the table, and no key's change below its split's watermark follows the
    split's rows."""
    world = _World(seed, atomic, split_size, writes)
    db, conn, dialect, runner, emitted, step = world.parts()

    state = runner.start([SCHEMA])
    while state.phase is Phase.SNAPSHOT or state.finished:
        state = step(state)
    first = len(emitted)
    state = runner.machine.reread(conn, state, TABLE, where, "req-1")
    assert state.served == ("req-1",) and state.rereads == {TABLE: where}
    with pytest.raises(ValueError, match="being read"):
        runner.machine.reread(conn, state, TABLE)
    splits: tuple[FinishedSplit, ...] = ()
    while state.plans or state.finished:
        state = step(state)
        splits = state.finished.get(TABLE, splits)
        assert SyncState.from_json(state.to_json()) == state
    assert not state.rereads
    while dialect.compare_offset(state.position, dialect.current_offset(conn)) < 0:
        state = step(state, write=False)
    assert replay(emitted) == db.rows
    marks = {f.split: f.watermark for f in splits}
    seen: set[Any] = set()
    for event in emitted[first:]:
        (split,) = [s for s in marks if s.contains(event.key)]
        if event.op == "r" or event.offset == marks[split]:  # the split's own output
            assert event.offset == marks[split]
            seen.add(event.key)
        elif event.key in seen and event.old_key is None:
            assert dialect.compare_offset(event.offset, marks[split]) >= 0


@pytest.mark.parametrize("where", [None, "v % 3 == 0"], ids=["table", "predicate"])
@pytest.mark.parametrize("atomic", [False, True], ids=["watermarks", "atomic-view"])
@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**9), split_size=st.integers(2, 12), writes=st.integers(0, 6))
def test_a_table_read_again_while_its_changes_flow_ends_equal(
        where: str | None, atomic: bool, seed: int, split_size: int, writes: int) -> None:
    _reread(seed, atomic, split_size, writes, where)
