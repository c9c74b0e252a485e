"""The sync policy (sdk/algorithm/policy.py) decision by decision: what a schema change, a
truncation, a snapshot request and a table created again do, whichever driver asks."""

from __future__ import annotations

from dataclasses import replace

import pytest
from helpers.sim import SCHEMA, TABLE

from sdk import (
    Column,
    ConfigurationError,
    FatalSyncError,
    FinishedSplit,
    LogicalType,
    Offset,
    SnapshotSplit,
    TableId,
)
from sdk.algorithm import Phase, SyncOptions, SyncState
from sdk.algorithm.assigner import TablePlan
from sdk.algorithm.policy import (
    TRUNCATED_REQUEST,
    RequestStep,
    applied_tables,
    check_recreated,
    fold_schema_changes,
    follow_truncation,
    judge_request,
    judge_schema_change,
    truncations_to_reread,
)
from sdk.dialect.types import SchemaChange, TableTruncated

AT = Offset("mem", seq=7)
OPTIONS = SyncOptions()
WIDER = replace(SCHEMA, columns=(*SCHEMA.columns, Column("w", LogicalType.INT64, "int")))
NARROWED = replace(SCHEMA, columns=(SCHEMA.columns[0],
                                    Column("v", LogicalType.INT32, "smallint")))
OTHER = TableId("db", "other")


def _log_state(**kwargs: object) -> SyncState:
    return replace(SyncState(Phase.LOG, {TABLE: SCHEMA}, position=AT), **kwargs)


def test_a_gained_column_is_followed_and_read_again_unless_a_read_waits() -> None:
    state, rereads = fold_schema_changes(_log_state(), [SchemaChange(WIDER, AT)], OPTIONS)
    assert state.tables[TABLE].column_names == ("id", "v", "w")
    assert state.version(TABLE) == 2 and rereads == [TABLE]
    _, rereads = fold_schema_changes(_log_state(), [SchemaChange(WIDER, AT)], OPTIONS, [TABLE])
    assert rereads == []


def test_a_dropped_column_is_followed_without_a_read() -> None:
    state, rereads = fold_schema_changes(_log_state(tables={TABLE: WIDER}),
                                         [SchemaChange(SCHEMA, AT)], OPTIONS)
    assert state.tables[TABLE].column_names == ("id", "v") and rereads == []


@pytest.mark.parametrize("policy", ["evolve", "stop"])
def test_a_narrowed_type_always_stops(policy: str) -> None:
    with pytest.raises(ConfigurationError, match="can lose values"):
        judge_schema_change(SCHEMA, SchemaChange(NARROWED, AT), policy, OPTIONS)


def test_the_schema_policies_follow_stop_or_ignore_a_change() -> None:
    change = SchemaChange(WIDER, AT)
    assert judge_schema_change(SCHEMA, change, "evolve", OPTIONS).schema == WIDER
    assert judge_schema_change(SCHEMA, change, "ignore", OPTIONS).schema is None
    with pytest.raises(ConfigurationError, match=r"schema\.changes=stop"):
        judge_schema_change(SCHEMA, change, "stop", OPTIONS)
    quiet = judge_schema_change(SCHEMA, SchemaChange(SCHEMA, AT), "stop", OPTIONS)
    assert quiet.quiet and quiet.schema == SCHEMA


def test_a_truncation_is_read_again_with_a_target_and_stops_a_stream_of_changes() -> None:
    state = _log_state()
    truncated, dropped = TableTruncated(TABLE, AT), TableTruncated(TABLE, AT, dropped=True)
    assert follow_truncation(state, truncated, has_target=True)
    with pytest.raises(FatalSyncError, match="cannot express"):
        follow_truncation(state, truncated, has_target=False)
    assert not follow_truncation(state, dropped, has_target=False)
    assert not follow_truncation(state, TableTruncated(OTHER, AT), has_target=False)


def test_truncations_read_again_once_and_not_a_table_gone_for_good() -> None:
    state = _log_state()
    items = [TableTruncated(TABLE, AT), TableTruncated(TABLE, AT), TableTruncated(OTHER, AT)]
    assert truncations_to_reread(state, items, [], None) == items[:1]
    assert truncations_to_reread(state, items, [TABLE], None) == []
    gone = [TableTruncated(TABLE, AT, dropped=True)]
    assert truncations_to_reread(state, gone, [], lambda t: False) == []
    assert truncations_to_reread(state, gone, [], lambda t: True) == gone
    assert truncations_to_reread(state, gone, [], None) == gone  # it leaves at the next look


def test_each_request_step() -> None:
    state = _log_state()
    assert judge_request(state, "a", TABLE, None, False) == (RequestStep.SERVE, None)
    assert judge_request(replace(state, served=("a",)), "a", TABLE, None, False)[0] is \
        RequestStep.DONE
    step, reason = judge_request(state, "a", TABLE, "v > 1", False)
    assert step is RequestStep.REFUSED and "condition" in (reason or "")
    assert judge_request(state, "a", TABLE, "v > 1", True)[0] is RequestStep.SERVE
    step, reason = judge_request(state, "a", OTHER, None, True)
    assert step is RequestStep.REFUSED and "not captured" in (reason or "")
    assert judge_request(state, f"{TRUNCATED_REQUEST}1", OTHER, None, True)[0] is \
        RequestStep.LEFT
    plan = TablePlan(TABLE)
    for busy in (replace(state, plans={TABLE: plan}), replace(state, leaving={TABLE: AT})):
        assert judge_request(busy, "a", TABLE, None, True)[0] is RequestStep.WAIT


def test_a_table_created_again_is_read_again_only_as_the_table_captured() -> None:
    check_recreated(TABLE, SCHEMA, SCHEMA, OPTIONS)
    for other in (WIDER, NARROWED):
        with pytest.raises(ConfigurationError, match="created again"):
            check_recreated(TABLE, SCHEMA, other, OPTIONS)


def test_the_tables_a_state_says_were_applied() -> None:
    """What a resumed sync checks its target still holds (the rest it reads again whole)."""
    plan, split = TablePlan(TABLE), FinishedSplit(SnapshotSplit(TABLE, 0, None, None), AT, 1)
    snapshot = SyncState(Phase.SNAPSHOT, {TABLE: SCHEMA, OTHER: SCHEMA},
                         plans={TABLE: plan, OTHER: plan})
    assert applied_tables(snapshot) == []
    assert applied_tables(replace(snapshot, finished={TABLE: (split,)})) == [TABLE]
    log = _log_state(tables={TABLE: SCHEMA, OTHER: SCHEMA})
    assert applied_tables(log) == [TABLE, OTHER]
    assert applied_tables(replace(log, leaving={OTHER: AT})) == [TABLE]
    assert applied_tables(replace(log, plans={OTHER: plan})) == [TABLE]  # added, nothing read
    assert applied_tables(replace(log, plans={OTHER: plan}, rereads={OTHER: None})) == \
        [TABLE, OTHER]  # read again: its rows are there


def test_a_truncation_every_split_was_read_after_is_passed_over() -> None:
    """The log phase may begin below the splits' watermarks (where the snapshot began): a
    truncation there is in every split already, and neither stops nor re-reads anything."""
    def compare(a: Offset, b: Offset) -> int:
        x, y = a["seq"], b["seq"]
        assert isinstance(x, int) and isinstance(y, int)
        return (x > y) - (x < y)

    early = TableTruncated(TABLE, Offset("mem", seq=2))
    split = FinishedSplit(SnapshotSplit(TABLE, 0, None, None), Offset("mem", seq=5), 1)
    state = _log_state(finished={TABLE: (split,)})
    assert not follow_truncation(state, early, False, compare)
    assert truncations_to_reread(state, [early], [], None, compare) == []
    late = TableTruncated(TABLE, Offset("mem", seq=5))  # at the watermark: not in the split
    with pytest.raises(FatalSyncError):
        follow_truncation(state, late, False, compare)
    reread = replace(state, rereads={TABLE: None})  # its splits send only keys changed since
    assert follow_truncation(reread, early, True, compare)
    with pytest.raises(FatalSyncError):
        follow_truncation(_log_state(), early, False, compare)  # no split read: pure log


def test_a_truncation_before_the_splits_of_a_read_again_is_followed() -> None:
    """The splits of a table read again (``since`` set) send only the keys changed since their
    hand-out: a truncation below their watermarks is not in them, whether the read is still
    running (``rereads``) or done."""
    def compare(a: Offset, b: Offset) -> int:
        return (a["seq"] > b["seq"]) - (a["seq"] < b["seq"])  # type: ignore[operator]

    early = TableTruncated(TABLE, Offset("mem", seq=2))
    again = FinishedSplit(SnapshotSplit(TABLE, 0, None, None, since=Offset("mem", seq=1)),
                          Offset("mem", seq=5), 1)
    assert follow_truncation(_log_state(finished={TABLE: (again,)}), early, True, compare)
