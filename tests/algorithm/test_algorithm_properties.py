"""The algorithm under adversarial concurrency, proven on a simulated database.

Both drivers of the one phase state machine (:class:`sdk.algorithm.PhaseMachine`) run here: the
in-process :class:`SyncRunner`, and a model of the Spark stream reader (batches of several
splits planned into an offset log before they are read, split output staged, watermarks folded
in when the next batch is planned, a crash between planning and reading replays the planned
batch). Hypothesis draws a table, a schedule of concurrent inserts, updates (including key
moves) and deletes fired at every seam of every split read (before/after each watermark,
between fetch batches) and before each log batch, changes that reach the log before they become
visible, and crashes after any step (the step's output is lost and the run restores from the
last committed state JSON or offset log). Every committed state keeps the machine's invariants
(each split folded once, every handed-out split accounted for). Whatever it draws:

- replaying the emitted events in order into an empty table gives exactly the source table;
- in exactly-once mode every key's emitted events are exactly its real history from its split's
  watermark on (no change twice, none missing, none stale);
- a dialect whose ``current_offset`` ignores the visibility hazard is caught.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from helpers.sim import (
    SCHEMA,
    TABLE,
    WIDER,
    MemoryConnection,
    MemoryDatabase,
    check_exactly_once,
    key_histories,
    memory_dialect,
    replay,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdk import (
    Capability,
    ChangeEvent,
    FatalSyncError,
    FinishedSplit,
    Key,
    Offset,
    Row,
    SchemaChange,
    SnapshotSplit,
    TableId,
    TableTruncated,
)
from sdk.algorithm import (
    Batch,
    IncrementalFilter,
    Phase,
    PhaseHooks,
    PhaseMachine,
    SharedView,
    StartupMode,
    SyncOptions,
    SyncRunner,
    SyncState,
    log_filter,
    read_split,
)
from sdk.algorithm.policy import (
    TRUNCATED_REQUEST,
    RequestStep,
    fold_schema_changes,
    follow_truncation,
    judge_request,
    judge_schema_change,
    served,
    truncations_to_reread,
)
from sdk.dialect.codec import dumps

KEY_SPACE = 40


@dataclass
class Action:
    kind: str  # c, u, d, move, publish, alter (a column added)
    selector: int
    value: int
    delayed: bool


actions = st.builds(Action, st.sampled_from(["c", "u", "d", "move", "publish", "c", "u"]),
                    st.integers(0, 1000), st.integers(0, 99), st.booleans())
living_actions = st.builds(Action, st.sampled_from(["c", "u", "d", "move", "publish", "c", "u",
                                                    "alter", "truncate"]),
                           st.integers(0, 1000), st.integers(0, 99), st.booleans())
"""With the table's columns changing, and its rows truncated, under the sync too."""


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
    splits_per_batch: int = 1
    driver: str = "runner"  # or "microbatch": the Spark stream reader's way
    requests: dict[int, str | None] = field(default_factory=dict)
    """Snapshot requests by the step they are made at, with their condition (the memory
    dialect reads no condition: such a request is refused)."""


@st.composite
def scenarios(draw: st.DrawFn, exactly_once: bool | None = None, atomic: bool | None = None,
              crashes: bool = True, requests: bool = False) -> Scenario:
    keys = draw(st.sets(st.integers(0, KEY_SPACE - 1), max_size=25))
    return Scenario(
        initial={(k,): (k, k * 10) for k in keys},
        schedule=draw(st.lists(st.lists(living_actions if requests else actions, max_size=3),
                               max_size=40)),
        split_size=draw(st.integers(1, 6)),
        fetch_size=draw(st.integers(1, 4)),
        batch_events=draw(st.integers(1, 6)),
        exactly_once=draw(st.booleans()) if exactly_once is None else exactly_once,
        atomic=draw(st.booleans()) if atomic is None else atomic,
        crashes=draw(st.sets(st.integers(0, 160), max_size=6)) if crashes else set(),
        splits_per_batch=draw(st.integers(1, 3)),
        driver=draw(st.sampled_from(["runner", "microbatch"])),
        requests=draw(st.dictionaries(st.integers(0, 60), st.sampled_from([None, None, "v > 5"]),
                                      max_size=3)) if requests else {},
    )


def perform(db: MemoryDatabase, action: Action) -> None:
    """Apply one drawn action, resolved against the current state (skipped when impossible)."""
    if action.kind == "publish":
        db.publish()
        return
    if action.kind == "alter":
        db.add_column()
        return
    if action.kind == "truncate":
        db.truncate()
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
    snapshot: dict[TableId, tuple[FinishedSplit, ...]]
    """The finished splits once every split was folded in (the watermarks of the snapshot)."""
    final_state: SyncState


@dataclass
class World:
    """A drawn scenario set up: the database, its schedule of writes and the sync's parts."""

    scenario: Scenario
    leaky: bool
    mode: StartupMode
    db: MemoryDatabase = field(init=False)
    schedule: list[list[Action]] = field(init=False)

    def __post_init__(self) -> None:
        self.db = MemoryDatabase(rows=dict(self.scenario.initial))
        self.schedule = list(self.scenario.schedule)
        self.db.on_fetch = self.tick
        self.dialect = memory_dialect(leaky=self.leaky, atomic=self.scenario.atomic)
        self.hooks = PhaseHooks(self.tick, self.tick, self.tick, self.tick, self.tick)
        sc = self.scenario
        self.options = SyncOptions(split_size=sc.split_size, fetch_size=sc.fetch_size,
                                   exactly_once=sc.exactly_once, atomic_snapshot=sc.atomic,
                                   log_batch_max_events=sc.batch_events, startup_mode=self.mode)

    def tick(self, *_: object) -> None:
        if self.schedule:
            for action in self.schedule.pop(0):
                perform(self.db, action)

    def connect(self) -> MemoryConnection:
        return MemoryConnection(self.db)

    def settled(self, state: SyncState) -> bool:
        """Nothing left to write and the log phase at the log's end (or the sync done)."""
        if state.phase is Phase.DONE:
            return True
        if not self.schedule and self.db.pending:
            self.db.publish()
        return not self.schedule and not self.db.pending and state.phase is Phase.LOG \
            and state.position == Offset("mem", seq=len(self.db.log)) and not state.plans


def check_state(state: SyncState, handed: tuple[SnapshotSplit, ...] = ()) -> None:
    """Invariants of every committed state: each table's finished splits are its first splits,
    each once, and with ``handed`` (splits planned but not folded yet) they account for every
    split its plan handed out."""
    for table, splits in state.finished.items():
        assert [f.split.index for f in splits] == list(range(len(splits))), table
    for table, plan in state.plans.items():  # the log phase's: tables read again
        pending = sum(1 for s in handed if s.table == table)
        assert plan.next_index == len(state.finished.get(table, ())) + pending, table
    if state.phase is Phase.LOG:
        assert set(state.plans) <= set(state.rereads)
    elif state.phase is not Phase.SNAPSHOT:
        assert not state.plans and not handed


def run(scenario: Scenario, leaky: bool = False,
        mode: StartupMode = StartupMode.INITIAL) -> Outcome:
    world = World(scenario, leaky, mode)
    if scenario.driver == "microbatch":
        return run_microbatches(world)
    return run_steps(world)


def run_steps(world: World) -> Outcome:
    """The in-process runner: a crash loses the step's output and the runner's memory, and
    the run restores from the last committed state's JSON."""
    scenario = world.scenario

    def new_runner() -> SyncRunner:
        return SyncRunner(world.dialect, world.connect, world.options, world.hooks,
                          splits_per_step=scenario.splits_per_batch)

    runner = new_runner()
    state = runner.start([SCHEMA])
    committed = state.dumps()
    requests = list(runner.requests)  # committed with the state, as run() asks
    events: list[ChangeEvent] = []
    snapshot: dict[TableId, tuple[FinishedSplit, ...]] = {}
    for step in range(2000):
        if world.settled(state) and not runner.requests:
            break
        if step in scenario.requests:
            runner.request_snapshot(TABLE, scenario.requests[step], f"r{step}")
        out, new_state = runner.step(state)
        if step in scenario.crashes:
            runner = new_runner()
            runner.requests = list(requests)
            state = SyncState.loads(committed)
            continue
        events.extend(out)
        committed = new_state.dumps()
        requests = list(runner.requests)
        state = SyncState.loads(committed)
        check_state(state)
        if state.phase is Phase.SNAPSHOT:
            snapshot = dict(state.finished)
    else:
        pytest.fail("the run did not finish in 2000 steps")
    return Outcome(world.db, events, snapshot, state)


def run_microbatches(world: World) -> Outcome:
    """The Spark stream reader's use of the machine: each batch is planned into an offset log
    (the state with its splits handed out, or its log range) before it is read; split tasks
    stage their rows and watermark; planning the next batch folds the staged watermarks in.
    A crash after planning or after reading loses the driver's memory and the batch's output,
    and the planned batch is read again (staged splits are served from their stage)."""
    scenario, dialect, options = world.scenario, world.dialect, world.options
    machine = PhaseMachine(dialect, options)
    view = SharedView(dialect, world.connect, options)
    conn = world.connect()

    def head(position: Offset) -> Offset:
        world.hooks.before_log_batch(position)
        return dialect.current_offset(conn)

    offsets = [dumps(Batch(machine.start(conn, [SCHEMA])).to_json())]  # the offset log
    requests: dict[str, str | None] = {}  # the request files: they outlive a crash
    schema_stage: dict[int, list[SchemaChange]] = {}  # staged by a log batch, as its rows
    truncated: dict[int, list[TableTruncated]] = {}
    filtered = dialect.has(Capability.FILTERED_READS)

    def serve(state: SyncState) -> SyncState:
        """The driver's part of a snapshot request, as :func:`judge_request` decides."""
        if state.phase is not Phase.LOG:
            return state
        for request_id, where in list(requests.items()):
            step, _ = judge_request(state, request_id, TABLE, where, filtered)
            if step is RequestStep.SERVE:
                state = machine.reread(conn, state, TABLE, where, request_id)
            elif step in (RequestStep.REFUSED, RequestStep.LEFT):
                state = served(state, request_id)
            if step is not RequestStep.WAIT:
                del requests[request_id]
        return state

    stage: dict[tuple[int, int], tuple[list[ChangeEvent], FinishedSplit]] = {}
    committed = 0  # the last batch whose output the sink committed
    events: list[ChangeEvent] = []
    snapshot: dict[TableId, tuple[FinishedSplit, ...]] = {}

    def crash(point: int) -> bool:
        nonlocal machine, view
        if point not in scenario.crashes:
            return False
        view.close()
        machine, view = PhaseMachine(dialect, options), SharedView(dialect, world.connect,
                                                                   options)
        return True

    def read(number: int, batch: Batch) -> list[ChangeEvent]:
        out: list[ChangeEvent] = []
        for split in batch.splits:
            staged = stage.get((number, split.index))
            if staged is None:
                schema = batch.state.tables[split.table]
                result = read_split(dialect, conn, schema, split, options, world.hooks,
                                    view.token())
                staged = ([ChangeEvent(TABLE, "r", schema.key_of(r), r, result.watermark)
                           for r in result.rows] +
                          [ChangeEvent(TABLE, "d", k, None, result.watermark)
                           for k in result.deleted],
                          FinishedSplit(split, result.watermark, len(result.rows)))
                stage[(number, split.index)] = staged
            out.extend(staged[0])
            if split.since is not None and split.where is None:  # the target's range
                mirror = replay(events + out)  # is replaced by the rows read, as a chained
                read = {e.key for e in staged[0]}  # task's target does for a table read again
                out.extend(ChangeEvent(TABLE, "d", k, None, staged[1].watermark)
                           for k in mirror if split.contains(k) and k not in read)
        if batch.log_from is not None:
            flt = log_filter(batch.state, dialect.compare_offset)
            changes = []
            for item in dialect.stream_log(conn, list(batch.state.tables.values()),
                                           batch.log_from, batch.state.position):
                if isinstance(item, SchemaChange):  # staged for the driver, as Shapes does
                    verdict = judge_schema_change(batch.state.tables[item.table], item,
                                                  "evolve", options)
                    changes.append(SchemaChange(verdict.schema or item.schema, item.offset))
                if isinstance(item, TableTruncated) and \
                        follow_truncation(batch.state, item, True, dialect.compare_offset):
                    truncated.setdefault(number, []).append(item)  # staged for the driver
                if isinstance(item, ChangeEvent) and (routed := flt.route(item)) is not None:
                    out.append(routed)
            schema_stage[number] = changes
        return out

    for step in range(3000):
        last = Batch.from_json(json.loads(offsets[-1]))
        if step in scenario.requests:
            requests[f"r{step}"] = scenario.requests[step]
        if committed == len(offsets) - 1:
            if world.settled(last.state) and not last.splits and not requests and \
                    not schema_stage.get(len(offsets) - 1) and \
                    not truncated.get(len(offsets) - 1):
                break
            staged = [stage[(len(offsets) - 1, s.index)][1] for s in last.splits]
            state = machine.fold(last.state, staged)
            if schema_stage.get(len(offsets) - 1):  # the driver folds the batch's changes
                state, rereads = fold_schema_changes(
                    state, schema_stage[len(offsets) - 1], options,
                    [TABLE] if any(w is None for w in requests.values()) else [])
                requests.update({f"schema-{len(offsets) - 1}": None for _ in rereads})
            waiting = [TABLE] if any(w is None for w in requests.values()) else []
            for _ in truncations_to_reread(state, truncated.pop(len(offsets) - 1, []), waiting,
                                           None):
                requests[f"{TRUNCATED_REQUEST}{len(offsets) - 1}"] = None
            state = serve(state)
            if state.phase is Phase.SNAPSHOT:
                snapshot = dict(state.finished)
            planned = machine.next_batch(conn, state, head, scenario.splits_per_batch)
            if planned is None and state != last.state:
                planned = Batch(state)  # what was folded in is planned, as latestOffset does
            if planned is None:
                continue
            if planned.state.phase is not Phase.SNAPSHOT:
                view.close()
            offsets.append(dumps(planned.to_json()))
            check_state(planned.state, planned.splits)
            if crash(2 * step):
                continue
        number = committed + 1
        out = read(number, Batch.from_json(json.loads(offsets[number])))
        if crash(2 * step + 1):
            continue
        events.extend(out)
        committed = number
    else:
        pytest.fail("the run did not finish in 3000 steps")
    return Outcome(world.db, events, snapshot, Batch.from_json(json.loads(offsets[-1])).state)


def watermarks(outcome: Outcome) -> Callable[[Key], int]:
    assert outcome.snapshot
    flt = IncrementalFilter(outcome.snapshot, lambda a, b: 0)
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


@SETTINGS
@given(scenarios(requests=True))
def test_schema_changes_truncations_and_requests_keep_the_output_equal_to_the_source(
        scenario: Scenario) -> None:
    """A column added under the sync (followed, the table read again for its values), the
    table truncated (read again whole into the model's target; the runner, a stream of row
    changes, stops naming it) and tables read again on request (served or refused), by both
    drivers through the one policy, across crashes: the output still replays to the source."""
    try:
        outcome = run(scenario)
    except FatalSyncError as error:  # the runner emits row changes: no target to read into
        assert scenario.driver == "runner" and "cannot express" in str(error)
        return
    width = len(outcome.final_state.tables[TABLE].columns)  # the columns the sync captured
    assert replay(outcome.events) == {k: r[:width] for k, r in outcome.db.rows.items()}
    made = {f"r{s}" for s in scenario.requests}
    assert {s for s in outcome.final_state.served
            if not s.startswith(("schema-", TRUNCATED_REQUEST))} <= made
    if outcome.db.log and outcome.db.log[-1].op != "s" and \
            len(outcome.db.log[-1].after or ()) == len(WIDER.columns) and \
            outcome.final_state.position is not None and \
            outcome.final_state.position["seq"] == len(outcome.db.log):
        assert width == len(WIDER.columns)  # the log phase read a row of the new shape


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


DRIVERS = pytest.mark.parametrize("driver", ["runner", "microbatch"])


def hazard_scenario(driver: str) -> Scenario:
    """A change logged before the low watermark but visible only after the read."""
    return Scenario(
        initial={(1,): (1, 10), (2,): (2, 20)},
        schedule=[[Action("u", 0, 77, delayed=True)],  # before low: logged, invisible
                  [], [], [Action("publish", 0, 0, False)]],  # visible after the read
        split_size=10, fetch_size=10, batch_events=10, exactly_once=True, atomic=False,
        driver=driver)


@DRIVERS
def test_visibility_hazard_is_closed_by_a_safe_current_offset(driver: str) -> None:
    outcome = run(hazard_scenario(driver), leaky=False)
    assert replay(outcome.events) == outcome.db.rows == {(1,): (1, 77), (2,): (2, 20)}


@DRIVERS
def test_leaky_current_offset_loses_the_change_and_is_caught(driver: str) -> None:
    outcome = run(hazard_scenario(driver), leaky=True)
    assert outcome.db.rows[(1,)] == (1, 77)
    assert replay(outcome.events)[(1,)] == (1, 10)  # the update was lost


@DRIVERS
def test_a_column_added_before_the_first_watermark_is_followed(driver: str) -> None:
    """The log phase starts where the snapshot began when that is below every watermark, so a
    column added after the tables were described but before the first split is met."""
    scenario = Scenario(initial={(1,): (1, 10)}, schedule=[[Action("alter", 0, 0, False)]],
                        split_size=10, fetch_size=10, batch_events=10, exactly_once=True,
                        atomic=False, driver=driver)
    outcome = run(scenario)
    assert outcome.final_state.tables[TABLE].column_names == ("id", "v", "w")


@pytest.mark.slow
def test_property_suite_catches_a_leaky_dialect() -> None:
    @settings(max_examples=500, deadline=None, database=None)
    @given(scenarios(exactly_once=True, atomic=False, crashes=False))
    def leaky(scenario: Scenario) -> None:
        outcome = run(scenario, leaky=True)
        assert replay(outcome.events) == outcome.db.rows

    with pytest.raises(AssertionError):
        leaky()
