"""Core types: offsets, schemas, splits and events survive JSON and pickling unchanged."""

from __future__ import annotations

import datetime as dt
import json
import pickle
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sdk import (
    ChangeEvent,
    Column,
    FinishedSplit,
    LogicalType,
    Offset,
    SnapshotSplit,
    TableId,
    TableSchema,
)
from sdk.dialect.codec import decode_value, dumps, encode_value
from sdk.dialect.temporal import INTERVAL_INFINITY, INTERVAL_MINUS_INFINITY, Interval

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.text(), st.binary(),
    st.floats(allow_nan=False), st.decimals(allow_nan=False, allow_infinity=False),
    st.dates(), st.times(), st.datetimes(), st.datetimes(timezones=st.just(dt.UTC)),
    st.builds(Interval, st.integers(-2**31, 2**31 - 1), st.integers(-2**31, 2**31 - 1),
              st.integers(-2**63, 2**63 - 1)),
    st.sampled_from([INTERVAL_INFINITY, INTERVAL_MINUS_INFINITY]),
)


def test_infinite_intervals_are_their_text_and_told_from_the_extremes() -> None:
    """PostgreSQL 17's infinite intervals read and print as ``infinity``; the largest and
    smallest finite ones (which 17 reserves for them, and earlier servers hold) stay finite."""
    largest, smallest = Interval(2**31 - 1, 2**31 - 1, 2**63 - 1), Interval(-2**31, -2**31, -2**63)
    assert Interval.parse("infinity") == INTERVAL_INFINITY and \
        INTERVAL_INFINITY.isoformat() == "infinity"
    assert Interval.parse("-infinity") == INTERVAL_MINUS_INFINITY and \
        str(INTERVAL_MINUS_INFINITY) == "-infinity"
    assert Interval.parse(smallest.isoformat()) == smallest != INTERVAL_MINUS_INFINITY
    assert smallest.isoformat() == "P-178956970Y-8M-2147483648DT-2562047788H-54.775808S"
    assert INTERVAL_MINUS_INFINITY < smallest < largest < INTERVAL_INFINITY


@given(st.lists(scalars, max_size=6))
def test_values_round_trip_through_json(values: list[object]) -> None:
    text = dumps(encode_value(values))
    back = decode_value(json.loads(text))
    assert back == values
    assert [type(v) for v in back] == [type(v) for v in values]


@given(st.timedeltas())
def test_a_timedelta_is_its_microseconds_and_old_checkpoints_still_read(value: dt.timedelta
                                                                         ) -> None:
    """A timedelta (a dialect of an earlier release) travels as the Interval of its
    microseconds, hours kept as hours; the ``$timedelta`` of an earlier release's checkpoints
    decodes to that Interval."""
    micros = value // dt.timedelta(microseconds=1)
    assert decode_value(json.loads(dumps(encode_value(value)))) == Interval(0, 0, micros)
    assert decode_value({"$timedelta": micros}) == Interval(0, 0, micros)


def test_non_finite_floats_round_trip() -> None:
    back = decode_value(json.loads(dumps(encode_value([float("inf"), float("-inf")]))))
    assert back == [float("inf"), float("-inf")]


def test_offset_is_canonical_hashable_and_immutable() -> None:
    a = Offset("mysql", {"file": "binlog.000002", "pos": 4})
    b = Offset("mysql", pos=4, file="binlog.000002")
    assert a == b and hash(a) == hash(b)
    assert dumps(a.to_json()) == dumps(b.to_json())
    assert Offset.from_json(json.loads(dumps(a.to_json()))) == a
    for offset in (a, Offset("pg", lsn=123, txid=None), Offset("x", name='q"ü\\')):
        assert offset.json_text() == dumps(offset.to_json())
    assert pickle.loads(pickle.dumps(a)) == a
    assert a["pos"] == 4 and a.get("gtid") is None
    with pytest.raises(AttributeError):
        a.dialect = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Offset("x", pos=1.5)  # type: ignore[arg-type]


def _schema() -> TableSchema:
    return TableSchema(
        TableId("shop", "orders"),
        (Column("region", LogicalType.STRING, "varchar(10)", False),
         Column("id", LogicalType.INT64, "bigint", False),
         Column("total", LogicalType.DECIMAL, "decimal(65,30)", True, 65, 30)),
        primary_key=("region", "id"))


def test_schema_key_defaults_to_primary_key_and_extracts_keys() -> None:
    schema = _schema()
    assert schema.key == ("region", "id")
    assert schema.key_of(("eu", 7, Decimal("1.5"))) == ("eu", 7)
    assert TableSchema.from_json(json.loads(dumps(schema.to_json()))) == schema
    with pytest.raises(ValueError, match="nope"):
        TableSchema(schema.table, schema.columns, key=("nope",))


def test_split_is_half_open_and_round_trips() -> None:
    split = SnapshotSplit(TableId("s", "t"), 3, ("b", 1), ("c", 0))
    assert split.contains(("b", 1)) and split.contains(("b", 99))
    assert not split.contains(("c", 0)) and not split.contains(("a", 5))
    assert SnapshotSplit(TableId("s", "t"), 0, None, None).contains(("anything",))
    done = FinishedSplit(split, Offset("x", seq=9), rows=12)
    assert FinishedSplit.from_json(json.loads(dumps(done.to_json()))) == done


def test_change_event_round_trips() -> None:
    event = ChangeEvent(TableId("s", "t"), "u", (2,), (2, b"\x00", Decimal("1e-30")),
                        Offset("x", seq=5), before=(1, b"", None), old_key=(1,),
                        commit_ts=1_700_000_000_000_000)
    assert ChangeEvent.from_json(json.loads(dumps(event.to_json()))) == event


def test_table_id_parse() -> None:
    assert TableId.parse("shop.orders") == TableId("shop", "orders")
    assert TableId.parse("orders", "main") == TableId("main", "orders")
    assert str(TableId("a.b", "c")) == "a.b.c"
