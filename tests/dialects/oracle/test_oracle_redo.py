"""The Oracle dialect's SQL_REDO parser and its value mapping, on statements shaped as LogMiner
writes them (DICT_FROM_ONLINE_CATALOG, NO_ROWID_IN_STMT or not, the pinned NLS formats)."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from typing import Any

import pytest

from sdk import Column, FatalSyncError, Offset, TableId, TableSchema
from sdk.dialect.temporal import Interval
from sdk_oracle._miner import Miner, Session, event, make_offset
from sdk_oracle._redo import UNSUPPORTED, Bare, Call, RedoSyntaxError, parse, unistr
from sdk_oracle._types import RedoValueError, from_fetch, from_redo, logical_column

UTC = dt.UTC


def col(name: str, data_type: str, precision: int | None = None, scale: int | None = None
        ) -> Column:
    return logical_column(name, data_type, precision, scale, True)


# --- the statement grammar ---------------------------------------------------------------------


def test_insert_with_every_literal_form() -> None:
    redo = parse(
        'insert into "SHOP"."ORDERS"("ID","NAME","TS","UT","D","R","N","E") values '
        "('1','it''s',TO_TIMESTAMP('2020-02-01 00:00:00.'),Unsupported Type,"
        "TO_DATE('2020-02-01 00:00:00', 'YYYY-MM-DD HH24:MI:SS'),HEXTORAW('00ff'),NULL,'');")
    assert (redo.op, redo.owner, redo.table) == ("c", "SHOP", "ORDERS")
    assert redo.new == {
        "ID": "1", "NAME": "it's", "TS": Call("TO_TIMESTAMP", ("2020-02-01 00:00:00.",)),
        "UT": UNSUPPORTED,
        "D": Call("TO_DATE", ("2020-02-01 00:00:00", "YYYY-MM-DD HH24:MI:SS")),
        "R": Call("HEXTORAW", ("00ff",)), "N": None, "E": ""}
    assert redo.old == {}


def test_update_set_and_full_where_clause() -> None:
    redo = parse(
        'update "SHOP"."ORDERS" set "NAME" = \'Bob\', "NOTE" = NULL where "ID" = \'1\' and '
        '"NAME" = \'Acme\' and "NOTE" = \'x\' and "GONE" IS NULL and "ALSO" = NULL;')
    assert redo.op == "u"
    assert redo.new == {"NAME": "Bob", "NOTE": None}
    assert redo.old == {"ID": "1", "NAME": "Acme", "NOTE": "x", "GONE": None, "ALSO": None}


def test_rowid_condition_is_dropped() -> None:
    redo = parse('delete from "S"."T" where "ID" = \'7\' and ROWID = \'AAAR3sAAEAAAACXAAA\';')
    assert redo.op == "d" and redo.old == {"ID": "7"}


def test_statements_without_where_clause() -> None:
    assert parse('delete from "S"."T";').old == {}
    redo = parse('update "S"."T" set "A" = \'1\', "B" = TO_DATE(\'2021-03-17 10:18:55\', '
                 "'YYYY-MM-DD HH24:MI:SS');")
    assert redo.old == {} and set(redo.new) == {"A", "B"}


@pytest.mark.parametrize(("sql", "owner", "table", "columns"), [
    ('insert into "lower"."Mixed Case"("a b","C#1") values (\'1\',\'2\');',
     "lower", "Mixed Case", ["a b", "C#1"]),
    ('insert into "S"."T"("say ""hi""","values") values (\'1\',\'2\');',
     "S", "T", ['say "hi"', "values"]),
    ('insert into "S"."OBJ# 74858" ("COL 1","where") values (1,\'x\');',
     "S", "OBJ# 74858", ["COL 1", "where"]),
    ('insert into "S"."T$X"("SET","AND") values (\'set\',\'and\');', "S", "T$X", ["SET", "AND"]),
])
def test_quoted_identifiers(sql: str, owner: str, table: str, columns: list[str]) -> None:
    redo = parse(sql)
    assert (redo.owner, redo.table, list(redo.new)) == (owner, table, columns)


@pytest.mark.parametrize("text", [
    "it's", "''", "a ' b '' c", 'double "quotes"', "where \"X\" = 'y' and", "(a, b);",
    "line1\nline2\r\n", "semi;colon", "pipes || here", "NULL", "Unsupported Type",
    "tab\tseparated", "ünïcödé 😀", "\\00E9 not unistr", "  padded  ",
])
def test_string_literals_survive_quoting(text: str) -> None:
    literal = "'" + text.replace("'", "''") + "'"
    redo = parse(f'update "S"."T" set "V" = {literal} where "ID" = \'1\' and "V" = {literal};')
    assert redo.new["V"] == text and redo.old["V"] == text


def test_whitespace_and_case_variants() -> None:
    redo = parse('INSERT INTO "S"."T" ( "A" , "B" )\nVALUES\n( \'1\' ,\n NULL ) ;')
    assert redo.new == {"A": "1", "B": None}
    redo = parse('UPDATE "S"."T" SET "A" = \'2\' WHERE "A" = \'1\' AND "B" IS NULL')
    assert redo.old == {"A": "1", "B": None}


def test_concatenated_and_unistr_values() -> None:
    redo = parse('insert into "S"."T"("A","B") values (\'ab\' || \'cd\','
                 "UNISTR('\\963F\\72F8(\\60CA)'));")
    assert redo.new["A"] == Call("||", ("ab", "cd"))
    assert redo.new["B"] == Call("UNISTR", ("\\963F\\72F8(\\60CA)",))


def test_unquoted_numbers_and_keywords() -> None:
    redo = parse('insert into "S"."T"("A","B","C","D") values (1,-2.5,1.5E+10,EMPTY_CLOB());')
    assert redo.new == {"A": Bare("1"), "B": Bare("-2.5"), "C": Bare("1.5E+10"),
                        "D": Call("EMPTY_CLOB", ())}


@pytest.mark.parametrize("sql", [
    'insert into "S"."T"("A","B") values (\'1\');',
    'insert into "S"."T"("A") values (\'1\'',
    'merge into "S"."T" using dual on (1 = 1)',
    'update "S"."T" set "A" = where "B" = \'1\';',
    'delete from "S"."T" where "A" = \'1\' or "B" = \'2\';',
    'insert into "S"."T"("A") values (\'unterminated);',
    'update "S"."T" set "A" = \'1\' where "B" = \'2\'; trailing',
])
def test_malformed_statements_raise(sql: str) -> None:
    with pytest.raises(RedoSyntaxError):
        parse(sql)


@pytest.mark.parametrize(("escaped", "text"), [
    ("\\00E9t\\00E9", "été"),
    ("\\D83D\\DE00!", "😀!"),
    ("a\\\\b", "a\\b"),
    ("plain", "plain"),
    ("\\963F\\72F8(\\60CA)", "阿狸(惊)"),
])
def test_unistr(escaped: str, text: str) -> None:
    assert unistr(escaped) == text


# --- typed values ------------------------------------------------------------------------------

CASES: list[tuple[Column, Any, Any]] = [
    (col("N", "NUMBER", 10, 0), "42", 42),
    (col("N", "NUMBER", 2, 0), "-99", -99),
    (col("N", "NUMBER", 18, 0), "999999999999999999", 999999999999999999),
    (col("N", "NUMBER", 38, 0), "12345678901234567890123456789012345678",
     Decimal("12345678901234567890123456789012345678")),
    (col("N", "NUMBER", 5, -2), "12300", 12300),
    (col("N", "NUMBER", 10, 2), "-12.5", Decimal("-12.50")),
    (col("N", "NUMBER", 10, 2), "-.5", Decimal("-0.5")),
    (col("N", "NUMBER"), "1.0E+125", Decimal("1E+125")),
    (col("N", "NUMBER"), "0.000000000000000000000000000000000000001", Decimal("1E-39")),
    (col("N", "NUMBER"), Bare("3.25"), Decimal("3.25")),
    (col("N", "FLOAT", 126), "1.5", Decimal("1.5")),
    (col("F", "BINARY_FLOAT"), "1.10000002E+000", 1.100000023841858),
    (col("F", "BINARY_FLOAT"), "-Inf", -math.inf),
    (col("F", "BINARY_DOUBLE"), "3.1415926535897931E+000", math.pi),
    (col("F", "BINARY_DOUBLE"), Bare("Inf"), math.inf),
    (col("S", "VARCHAR2"), "it's", "it's"),
    (col("S", "VARCHAR2"), "", None),
    (col("S", "CHAR"), "ab   ", "ab   "),
    (col("S", "NVARCHAR2"), Call("UNISTR", ("\\00E9t\\00E9 \\D83D\\DE00",)), "été 😀"),
    (col("S", "VARCHAR2"), Call("||", ("ab", Call("UNISTR", ("\\00E9",)))), "abé"),
    (col("S", "CLOB"), "short clob text", "short clob text"),
    (col("D", "DATE"), Call("TO_DATE", ("2024-02-29 13:45:07", "YYYY-MM-DD HH24:MI:SS")),
     dt.datetime(2024, 2, 29, 13, 45, 7)),
    (col("T", "TIMESTAMP(9)"), Call("TO_TIMESTAMP", ("2024-02-29 13:45:07.123456789",)),
     dt.datetime(2024, 2, 29, 13, 45, 7, 123456)),
    (col("T", "TIMESTAMP(0)"), Call("TO_TIMESTAMP", ("2020-02-01 00:00:00.",)),
     dt.datetime(2020, 2, 1)),
    (col("T", "TIMESTAMP(6)"), Call("TO_TIMESTAMP", ("0001-01-01 00:00:00.000001",)),
     dt.datetime(1, 1, 1, 0, 0, 0, 1)),
    (col("Z", "TIMESTAMP(9) WITH TIME ZONE"),
     Call("TO_TIMESTAMP_TZ", ("2024-02-29 13:45:07.500000000 +05:30",)),
     dt.datetime(2024, 2, 29, 8, 15, 7, 500000, tzinfo=UTC)),
    (col("Z", "TIMESTAMP(6) WITH TIME ZONE"),
     Call("TO_TIMESTAMP_TZ", ("2024-01-01 00:30:00.000000 -08:00",)),
     dt.datetime(2024, 1, 1, 8, 30, tzinfo=UTC)),
    (col("Z", "TIMESTAMP(6) WITH TIME ZONE"),
     Call("TO_TIMESTAMP_TZ", ("2024-07-01 12:00:00.000000 Europe/Paris",)),
     dt.datetime(2024, 7, 1, 10, 0, tzinfo=UTC)),
    (col("Z", "TIMESTAMP(6) WITH LOCAL TIME ZONE"),
     Call("TO_TIMESTAMP", ("2024-07-01 12:00:00.000000",)),
     dt.datetime(2024, 7, 1, 12, 0, tzinfo=UTC)),
    (col("I", "INTERVAL DAY(2) TO SECOND(6)"), Call("TO_DSINTERVAL", ("-01 02:03:04.500000",)),
     Interval(0, -1, -7_384_500_000)),
    (col("I", "INTERVAL DAY(9) TO SECOND(9)"),
     Call("TO_DSINTERVAL", ("+000000003 00:00:00.000000999",)), Interval(0, 3, 0)),
    (col("Y", "INTERVAL YEAR(2) TO MONTH"), Call("TO_YMINTERVAL", ("+02-03",)), "P2Y3M"),
    (col("Y", "INTERVAL YEAR(4) TO MONTH"), Call("TO_YMINTERVAL", ("-0010-11",)), "-P10Y11M"),
    (col("R", "RAW"), Call("HEXTORAW", ("00ff10",)), b"\x00\xff\x10"),
    (col("R", "RAW"), Call("HEXTORAW", ("",)), None),
    (col("B", "BOOLEAN"), "TRUE", True),
    (col("B", "BOOLEAN"), "0", False),
    (col("X", "ROWID"), "AAAR3sAAEAAAACXAAA", "AAAR3sAAEAAAACXAAA"),
    (col("N", "NUMBER", 10, 0), None, None),
]


@pytest.mark.parametrize(("column", "raw", "value"), CASES,
                         ids=[f"{c.source_type}-{i}" for i, (c, _, _) in enumerate(CASES)])
def test_typed_values(column: Column, raw: Any, value: Any) -> None:
    got = from_redo(column, raw)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize(("column", "raw"), [
    (col("C", "CLOB"), UNSUPPORTED),
    (col("C", "CLOB"), Call("EMPTY_CLOB", ())),
    (col("B", "BLOB"), Call("EMPTY_BLOB", ())),
    (col("N", "NUMBER", 10, 0), "1.5"),
    (col("N", "NUMBER", 10, 2), "abc"),
    (col("D", "DATE"), Call("TO_DATE", ("29-FEB-24", "DD-MON-RR"))),
    (col("T", "TIMESTAMP(6)"), Call("TO_TIMESTAMP", ("29-FEB-24 01.02.03.000000 PM",))),
    (col("R", "RAW"), Call("HEXTORAW", ("zz",))),
    (col("I", "INTERVAL DAY(2) TO SECOND(6)"), Call("TO_DSINTERVAL", ("P1D",))),
])
def test_values_that_cannot_be_read_raise(column: Column, raw: Any) -> None:
    with pytest.raises(RedoValueError):
        from_redo(column, raw)


# One stored value, as python-oracledb fetches it (with the dialect's output type handler and
# select expressions) and as LogMiner writes it: both must give the same Python value.
PARITY: list[tuple[Column, Any, Any]] = [
    (col("N", "NUMBER", 10, 0), Decimal("42"), "42"),
    (col("N", "NUMBER", 38, 0), Decimal("12345678901234567890123456789"),
     "12345678901234567890123456789"),
    (col("N", "NUMBER", 12, 4), Decimal("-0.0001"), "-.0001"),
    (col("N", "NUMBER"), Decimal("1E+125"), "1.0E+125"),
    (col("F", "BINARY_FLOAT"), 0.10000000149011612, "1.00000001E-001"),
    (col("F", "BINARY_DOUBLE"), 0.1, "1.0000000000000001E-001"),
    (col("S", "VARCHAR2"), None, ""),
    (col("S", "NVARCHAR2"), "été", Call("UNISTR", ("\\00E9t\\00E9",))),
    (col("S", "CHAR"), "x  ", "x  "),
    (col("D", "DATE"), dt.datetime(1999, 12, 31, 23, 59, 59),
     Call("TO_DATE", ("1999-12-31 23:59:59", "YYYY-MM-DD HH24:MI:SS"))),
    (col("T", "TIMESTAMP(9)"), dt.datetime(2024, 1, 2, 3, 4, 5, 123456),
     Call("TO_TIMESTAMP", ("2024-01-02 03:04:05.123456789",))),
    # SYS_EXTRACT_UTC gives a naive UTC datetime
    (col("Z", "TIMESTAMP(6) WITH TIME ZONE"), dt.datetime(2024, 1, 1, 22, 0),
     Call("TO_TIMESTAMP_TZ", ("2024-01-02 00:00:00.000000 +02:00",))),
    (col("I", "INTERVAL DAY(2) TO SECOND(6)"), dt.timedelta(hours=-1, microseconds=1),
     Call("TO_DSINTERVAL", ("-00 00:59:59.999999",))),
    # the snapshot selects TO_CHAR(col) for year-to-month intervals
    (col("Y", "INTERVAL YEAR(2) TO MONTH"), "+01-06", Call("TO_YMINTERVAL", ("+01-06",))),
    (col("R", "RAW"), b"\x00\x01", Call("HEXTORAW", ("0001",))),
    (col("C", "CLOB"), "text", "text"),
]


@pytest.mark.parametrize(("column", "fetched", "raw"), PARITY,
                         ids=[f"{c.source_type}-{i}" for i, (c, _, _) in enumerate(PARITY)])
def test_snapshot_and_log_give_the_same_value(column: Column, fetched: Any, raw: Any) -> None:
    snapshot, logged = from_fetch(column, fetched), from_redo(column, raw)
    assert snapshot == logged and type(snapshot) is type(logged)


def test_logical_types() -> None:
    kinds = [logical_column("C", t, p, s, True) for t, p, s in [
        ("NUMBER", 3, 0), ("NUMBER", 9, 0), ("NUMBER", 19, 0), ("NUMBER", None, 0),
        ("NUMBER", 10, 3), ("NUMBER", None, None), ("DATE", None, None),
        ("TIMESTAMP(3) WITH LOCAL TIME ZONE", None, None), ("INTERVAL DAY(3) TO SECOND(2)",
                                                            None, None)]]
    assert [(c.type.value, c.precision, c.scale) for c in kinds] == [
        ("int16", None, None), ("int32", None, None), ("decimal", 19, 0), ("decimal", 38, 0),
        ("decimal", 10, 3), ("decimal", None, None), ("timestamp", None, None),
        ("timestamp_tz", None, None), ("interval", None, None)]


# --- statements to change events -----------------------------------------------------------------

ORDERS = TableSchema(TableId("SHOP", "ORDERS"), (
    col("ID", "NUMBER", 10, 0), col("NAME", "VARCHAR2"), col("PRICE", "NUMBER", 10, 2),
    col("AT", "TIMESTAMP(6) WITH TIME ZONE")), primary_key=("ID",))
OFF = make_offset(100, "00000001.00000002.0010", 0, 90)


def test_insert_event() -> None:
    ev = event(ORDERS, 'insert into "SHOP"."ORDERS"("ID","NAME","PRICE","AT") values '
               "('1','a''b','9.99',TO_TIMESTAMP_TZ('2024-01-01 00:00:00.000000 +01:00'));",
               OFF, 5)
    assert (ev.op, ev.key, ev.offset, ev.commit_ts) == ("c", (1,), OFF, 5)
    assert ev.after == (1, "a'b", Decimal("9.99"), dt.datetime(2023, 12, 31, 23, tzinfo=UTC))


def test_insert_leaves_unlisted_columns_null() -> None:
    ev = event(ORDERS, 'insert into "SHOP"."ORDERS"("ID","NAME") values (\'2\',\'x\');', OFF,
               None)
    assert ev.after == (2, "x", None, None)


def test_update_after_image_is_before_image_overridden_by_set() -> None:
    ev = event(ORDERS, 'update "SHOP"."ORDERS" set "PRICE" = \'10\' where "ID" = \'1\' and '
               '"NAME" = \'a\' and "PRICE" = \'9.99\' and "AT" IS NULL;', OFF, None)
    assert ev.op == "u" and ev.key == (1,) and ev.old_key is None
    assert ev.after == (1, "a", Decimal("10"), None)
    assert ev.before == (1, "a", Decimal("9.99"), None)


def test_update_that_moves_the_key() -> None:
    ev = event(ORDERS, 'update "SHOP"."ORDERS" set "ID" = \'5\' where "ID" = \'1\' and '
               '"NAME" = \'a\' and "PRICE" IS NULL and "AT" IS NULL;', OFF, None)
    assert (ev.key, ev.old_key, ev.after) == ((5,), (1,), (5, "a", None, None))


def test_delete_event_keeps_the_before_image() -> None:
    ev = event(ORDERS, 'delete from "SHOP"."ORDERS" where "ID" = \'3\' and "NAME" = \'z\' and '
               '"PRICE" = \'1\' and "AT" IS NULL;', OFF, None)
    assert (ev.op, ev.key, ev.after, ev.before) == ("d", (3,), None, (3, "z", Decimal(1), None))


def test_update_without_full_supplemental_logging_is_refused() -> None:
    with pytest.raises(FatalSyncError, match="SUPPLEMENTAL LOG DATA \\(ALL\\) COLUMNS"):
        event(ORDERS, 'update "SHOP"."ORDERS" set "PRICE" = \'10\' where "ID" = \'1\';', OFF,
              None)
    with pytest.raises(FatalSyncError, match="key column"):
        event(ORDERS, 'delete from "SHOP"."ORDERS" where "NAME" = \'x\';', OFF, None)


def test_columns_unknown_to_the_schema_are_refused() -> None:
    with pytest.raises(FatalSyncError, match="NEW_COL"):
        event(ORDERS, 'insert into "SHOP"."ORDERS"("ID","NEW_COL") values (\'1\',\'x\');', OFF,
              None)


def test_unreadable_values_name_table_and_offset() -> None:
    with pytest.raises(FatalSyncError, match=r"SHOP\.ORDERS"):
        event(ORDERS, 'insert into "SHOP"."ORDERS"("ID","NAME") values (\'1\',Unsupported Type);',
              OFF, None)


# --- CSF: one statement over several rows ------------------------------------------------------


def _split(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


@pytest.mark.parametrize("size", [1, 7, 64, 4000])
def test_csf_rows_join_into_one_statement(size: int) -> None:
    long_name = ("x'y" * 3000) + "ü"
    literal = long_name.replace("'", "''")
    sql = (f'insert into "SHOP"."ORDERS"("ID","NAME","PRICE","AT") values '
           f"('7','{literal}','1.5',NULL);")
    pieces = _split(sql, size)
    miner = Miner(Session(raw=None), {("SHOP", "ORDERS"): ORDERS}, (0, "", 0, 0), None)
    xid = bytes.fromhex("0A001B0012340000")
    for i, piece in enumerate(pieces):
        list(miner.row(50 + i // 100, 1, xid, 1 if i < len(pieces) - 1 else 0, 0, "SHOP",
                       "ORDERS", "AAAR3sAAEAAAACXAAA", " 0x000001.00000002.0010 ", None, piece))
    # another transaction's rows in between do not disturb the joined statement
    list(miner.row(60, 7, bytes.fromhex("0B00000000000000"), 0, 0, None, None, None,
                   " 0x000001.00000003.0010 ", None, "commit;"))
    events = list(miner.row(99, 7, xid, 0, 0, None, None, None, " 0x000001.00000009.0010 ",
                            None, "commit;"))
    assert len(events) == 1
    ev = events[0]
    assert ev.after == (7, long_name, Decimal("1.5"), None)
    assert ev.offset == Offset("oracle", scn=99, rba="00000001.00000009.0010", n=0, mine=50)
