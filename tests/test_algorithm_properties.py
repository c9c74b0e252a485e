"""The algorithm under adversarial concurrency, proven on a simulated database.

Hypothesis draws a table, a schedule of concurrent inserts, updates (including key moves) and
deletes fired at every seam of every split read (before/after each watermark, between fetch
batches) and before each log batch, changes that reach the log before they become visible, and
crashes after any step (the step's output is lost and the run restores from the last committed
state JSON). Whatever it draws:

- replaying the emitted events in order into an empty table gives exactly the source table;
- in exactly-once mode every key's emitted events are exactly its real history from its split's
  watermark on (no change twice, none missing, none stale);
- a dialect whose ``current_offset`` ignores the visibility hazard is caught.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sim import (
    SCHEMA,
    TABLE,
    MemoryConnection,
    MemoryDatabase,
    check_exactly_once,
    key_histories,
    memory_dialect,
    replay,
)

from sdk import ChangeEvent, Key, Offset, Row
from sdk.algorithm import (
    IncrementalFilter,
    Phase,
    PhaseHooks,
    StartupMode,
    SyncOptions,
    SyncRunner,
    SyncState,
)

KEY_SPACE = 40


@dataclass
class Action:
    kind: str  # c, u, d, move, publish
    selector: int
    value: int
    delayed: bool


actions = st.builds(Action, st.sampled_from(["c", "u", "d", "move", "publish", "c", "u"]),
                    st.integers(0, 1000), st.integers(0, 99), st.booleans())


@dataclass
class Scenario:
    initial: dict[Key, Row]
    schedule: list[list[Action]]
    split_size: int
    fetch_size: int
    batch_events: int
    exactly_once: bool
    atomic: bool
    crashes: set[int] = field(default_factory=set)


@st.composite
def scenarios(draw: st.DrawFn, exactly_once: bool | None = None, atomic: bool | None = None,
              crashes: bool = True) -> Scenario:
    keys = draw(st.sets(st.integers(0, KEY_SPACE - 1), max_size=25))
    return Scenario(
        initial={(k,): (k, k * 10) for k in keys},
        schedule=draw(st.lists(st.lists(actions, max_size=3), max_size=40)),
        split_size=draw(st.integers(1, 6)),
        fetch_size=draw(st.integers(1, 4)),
        batch_events=draw(st.integers(1, 6)),
        exactly_once=draw(st.booleans()) if exactly_once is None else exactly_once,
        atomic=draw(st.booleans()) if atomic is None else atomic,
        crashes=draw(st.sets(st.integers(0, 80), max_size=5)) if crashes else set(),
    )


def perform(db: MemoryDatabase, action: Action) -> None:
    """Apply one drawn action, resolved against the current state (skipped when impossible)."""
    if action.kind == "publish":
        db.publish()
        return
    busy = db.busy_keys()
    existing = sorted(k for k in db.rows if k not in busy)
    free = [(k,) for k in range(KEY_SPACE) if (k,) not in db.rows and (k,) not in busy]
    if action.kind == "c":
        if free:
            key = free[action.selector % len(free)]
            db.write("c", key, action.value, delayed=action.delayed)
        return
    if not existing:
        return
    key = existing[action.selector % len(existing)]
    if action.kind == "d":
        db.write("d", key, delayed=action.delayed)
    elif action.kind == "u":
        db.write("u", key, action.value, delayed=action.delayed)
    elif free:
        target = free[action.value % len(free)]
        db.write("u", key, action.value, new_key=target, delayed=action.delayed)


@dataclass
class Outcome:
    db: MemoryDatabase
    events: list[ChangeEvent]
    first_log_state: SyncState | None
    final_state: SyncState


def run(scenario: Scenario, leaky: bool = False,
        mode: StartupMode = StartupMode.INITIAL) -> Outcome:
    db = MemoryDatabase(rows=dict(scenario.initial))
    schedule = list(scenario.schedule)

    def tick(*_: object) -> None:
        if schedule:
            for action in schedule.pop(0):
                perform(db, action)

    db.on_fetch = tick
    dialect = memory_dialect(leaky=leaky, atomic=scenario.atomic)
    hooks = PhaseHooks(tick, tick, tick, tick, tick)
    options = SyncOptions(split_size=scenario.split_size, fetch_size=scenario.fetch_size,
                          exactly_once=scenario.exactly_once, atomic_snapshot=scenario.atomic,
                          log_batch_max_events=scenario.batch_events, startup_mode=mode)

    def new_runner() -> SyncRunner:
        return SyncRunner(dialect, lambda: MemoryConnection(db), options, hooks)

    runner = new_runner()
    state = runner.start([SCHEMA])
    committed = state.dumps()
    events: list[ChangeEvent] = []
    first_log: SyncState | None = None
    for step in range(2000):
        if state.phase is Phase.DONE:
            break
        if not schedule and not db.pending:
            head = Offset("mem", seq=len(db.log))
            if state.phase is Phase.LOG and state.position == head:
                break
        if not schedule and db.pending:
            db.publish()
        out, new_state = runner.step(state)
        if step in scenario.crashes:
            runner = new_runner()  # the step's output and the runner's memory are lost
            state = SyncState.loads(committed)
            continue
        events.extend(out)
        committed = new_state.dumps()
        state = SyncState.loads(committed)
        if first_log is None and state.phase is Phase.LOG:
            first_log = state
    else:
        pytest.fail("the run did not finish in 2000 steps")
    return Outcome(db, events, first_log, state)


def watermarks(outcome: Outcome) -> Callable[[Key], int]:
    assert outcome.first_log_state is not None
    flt = IncrementalFilter(outcome.first_log_state.finished, lambda a, b: 0)
    splits = flt._tables[TABLE]

    def of(key: Key) -> int:
        seq = splits.watermark_of(key)["seq"]
        assert isinstance(seq, int)
        return seq
    return of


SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(scenarios())
def test_replaying_the_output_gives_the_source_table(scenario: Scenario) -> None:
    outcome = run(scenario)
    assert replay(outcome.events) == outcome.db.rows


@SETTINGS
@given(scenarios(exactly_once=True))
def test_exactly_once_emits_each_change_once_in_order(scenario: Scenario) -> None:
    outcome = run(scenario)
    histories = key_histories(outcome.db.log, scenario.initial)
    check_exactly_once(outcome.events, histories, watermarks(outcome))


@settings(max_examples=150, deadline=None)
@given(scenarios(exactly_once=False))
def test_at_least_once_converges_with_idempotent_upserts(scenario: Scenario) -> None:
    outcome = run(scenario)
    assert replay(outcome.events) == outcome.db.rows


@settings(max_examples=100, deadline=None)
@given(scenarios(crashes=False))
def test_snapshot_mode_stops_after_a_snapshot_equal_to_each_splits_view(
        scenario: Scenario) -> None:
    outcome = run(scenario, mode=StartupMode.SNAPSHOT)
    assert outcome.final_state.phase is Phase.DONE
    assert all(e.op == "r" for e in outcome.events)
    keys = [e.key for e in outcome.events]
    assert len(keys) == len(set(keys))


def hazard_scenario() -> Scenario:
    """A change logged before the low watermark but visible only after the read."""
    return Scenario(
        initial={(1,): (1, 10), (2,): (2, 20)},
        schedule=[[Action("u", 0, 77, delayed=True)],  # before low: logged, invisible
                  [], [], [Action("publish", 0, 0, False)]],  # visible after the read
        split_size=10, fetch_size=10, batch_events=10, exactly_once=True, atomic=False)


def test_visibility_hazard_is_closed_by_a_safe_current_offset() -> None:
    outcome = run(hazard_scenario(), leaky=False)
    assert replay(outcome.events) == outcome.db.rows == {(1,): (1, 77), (2,): (2, 20)}


def test_leaky_current_offset_loses_the_change_and_is_caught() -> None:
    outcome = run(hazard_scenario(), leaky=True)
    assert outcome.db.rows[(1,)] == (1, 77)
    assert replay(outcome.events)[(1,)] == (1, 10)  # the update was lost


def test_property_suite_catches_a_leaky_dialect() -> None:
    @settings(max_examples=500, deadline=None, database=None)
    @given(scenarios(exactly_once=True, atomic=False, crashes=False))
    def leaky(scenario: Scenario) -> None:
        outcome = run(scenario, leaky=True)
        assert replay(outcome.events) == outcome.db.rows

    with pytest.raises(AssertionError):
        leaky()
