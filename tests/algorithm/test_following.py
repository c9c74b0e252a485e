"""What both drivers do between batches (sdk/algorithm/following.py): requests taken up in
order, a busy table's request kept waiting, a refused or withdrawn one not read, and the ids
of the sync's own re-reads the same when a batch is planned again."""

from __future__ import annotations

from dataclasses import replace

from helpers.sim import SCHEMA, TABLE

from sdk import Column, LogicalType, Offset, TableId
from sdk.algorithm import Phase, SyncOptions, SyncState
from sdk.algorithm.assigner import TablePlan
from sdk.algorithm.following import (
    Request,
    own_reread_id,
    schema_change_rereads,
    table_digest,
    take_up_requests,
)
from sdk.algorithm.policy import SCHEMA_REQUEST
from sdk.dialect.types import SchemaChange

AT = Offset("mem", seq=7)
OTHER = TableId("db", "other")
WIDER = replace(SCHEMA, columns=(*SCHEMA.columns, Column("w", LogicalType.INT64, "int")))


def _log_state() -> SyncState:
    return SyncState(Phase.LOG, {TABLE: SCHEMA}, position=AT)


def _reading(state: SyncState, request: Request) -> SyncState:
    """What a driver's machine does on a read again: the table is being read from now."""
    return replace(state, plans={**state.plans, request.table: TablePlan(request.table)})


def test_requests_are_taken_up_in_order_and_a_second_of_a_busy_table_waits() -> None:
    first, second = Request("r1", TABLE), Request("r2", TABLE, "id > 5")
    taken = take_up_requests(_log_state(), [first, second], True, _reading)
    assert taken.read == [first] and taken.waiting == [second]
    assert TABLE in taken.state.plans and taken.state.served == ()


def test_a_refused_request_is_recorded_served_without_a_read() -> None:
    uncaptured, filtered = Request("r1", OTHER), Request("r2", TABLE, "id > 5")
    taken = take_up_requests(_log_state(), [uncaptured, filtered], False, _reading)
    assert taken.read == [] and not taken.state.plans
    assert [(r.id, why) for r, why in taken.refused] == [
        ("r1", "table db.other is not captured"),
        ("r2", "the dialect cannot read the rows meeting a condition")]
    assert taken.state.served == ("r1", "r2")


def test_a_withdrawn_request_is_neither_read_nor_recorded() -> None:
    taken = take_up_requests(_log_state(), [Request("r1", TABLE)], True, _reading,
                             claim=lambda r: False)
    assert [r.id for r in taken.withdrawn] == ["r1"]
    assert taken.read == [] and taken.state.served == () and not taken.state.plans


def test_requests_wait_outside_the_log_phase_and_one_served_already_is_dropped() -> None:
    asked = [Request("r1", TABLE)]
    snapshot = SyncState(Phase.SNAPSHOT, {TABLE: SCHEMA})
    assert take_up_requests(snapshot, asked, True, _reading).waiting == asked
    done = replace(_log_state(), served=("r1",))
    taken = take_up_requests(done, asked, True, _reading)
    assert taken.waiting == [] and taken.read == [] and taken.state is done


def test_a_gained_column_asks_one_read_with_an_id_that_a_replanned_batch_asks_again() -> None:
    change = [SchemaChange(WIDER, AT)]
    state, asked = schema_change_rereads(_log_state(), change, SyncOptions(), [], 12)
    again = schema_change_rereads(_log_state(), change, SyncOptions(), [], 12)[1]
    assert state.tables[TABLE].column_names == ("id", "v", "w")
    assert asked == again == [Request(own_reread_id(SCHEMA_REQUEST, 12, TABLE), TABLE)]
    assert asked[0].id == f"{SCHEMA_REQUEST}{12:012d}-{table_digest(TABLE)}-0"
    waiting = [Request("mine", TABLE)]  # a whole read of the table waits already
    assert schema_change_rereads(_log_state(), change, SyncOptions(), waiting, 12)[1] == []


def test_the_digest_names_a_table_whatever_its_characters() -> None:
    odd = TableId("db", "a/b:c d")
    assert table_digest(odd) != table_digest(TABLE)
    assert len(table_digest(odd)) == 16
    assert all(c in "0123456789abcdef" for c in table_digest(odd))
    assert table_digest(TableId("db", "a/b:c d")) == table_digest(odd)
