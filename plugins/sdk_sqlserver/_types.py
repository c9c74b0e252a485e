"""SQL Server column types as logical types, and the one SELECT expression per column that both
``read_range`` (base table) and ``stream_log`` (change functions) use, so the two paths return
the same Python values.

pymssql drops what does not fit its own conversions (pymssql #608: DATETIME2 loses everything
below the millisecond; #649: DATETIMEOFFSET comes as raw bytes under TDS 7.3; #792: the largest
DATETIME2 raises ``ValueError``), so temporal, decimal and money columns are converted to text in
SQL (documented CONVERT styles) and parsed here. ``source_type`` is ``"<kind>|<declared type>"``.

Sub-microsecond digits: DATETIME2(7), TIME(7) and DATETIMEOFFSET(7) hold 100 ns; Python's
``datetime`` holds microseconds. By default the 7th digit is truncated (towards the past: never
overflows 9999-12-31, and keeps key order, since truncation is monotonic). With the URL option
``?exact_time=1`` those columns are STRING instead, carrying the server's text with every digit.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from sdk import Column, LogicalType

L = LogicalType
BIN = "Latin1_General_BIN2"

_NATIVE = {
    "bit": L.BOOLEAN, "tinyint": L.INT16, "smallint": L.INT16, "int": L.INT32,
    "bigint": L.INT64, "real": L.FLOAT32, "float": L.FLOAT64,
    "char": L.STRING, "varchar": L.STRING, "text": L.STRING, "nchar": L.STRING,
    "nvarchar": L.STRING, "ntext": L.STRING, "sysname": L.STRING,
    "binary": L.BINARY, "varbinary": L.BINARY, "image": L.BINARY, "timestamp": L.BINARY,
    "rowversion": L.BINARY,
}
_TEXT_KEYS = {"char", "varchar", "nchar", "nvarchar", "sysname"}
_TEMPORAL = {"datetime2": "timestamp", "datetime": "timestamp", "smalldatetime": "timestamp",
             "time": "time", "datetimeoffset": "timestamptz", "date": "date"}
_AS_TEXT = {"xml", "hierarchyid", "sql_variant"}
_AS_BINARY = {"geometry", "geography"}


def declared(type_name: str, max_length: int, precision: int, scale: int) -> str:
    """The column's type as it would be declared (``nvarchar(max)``, ``decimal(38,10)``)."""
    t = type_name.lower()
    if t in ("varchar", "char", "varbinary", "binary"):
        return f"{t}({'max' if max_length == -1 else max_length})"
    if t in ("nvarchar", "nchar"):
        return f"{t}({'max' if max_length == -1 else max_length // 2})"
    if t in ("decimal", "numeric"):
        return f"{t}({precision},{scale})"
    if t in ("datetime2", "time", "datetimeoffset"):
        return f"{t}({scale})"
    return t


def logical_column(name: str, type_name: str, max_length: int, precision: int, scale: int,
                   nullable: bool, exact_time: bool = False) -> Column:
    """A column from ``sys.columns`` joined with ``sys.types``."""
    t = type_name.lower()
    decl = declared(t, max_length, precision, scale)

    def col(kind: str, logical: LogicalType, p: int | None = None, s: int | None = None
            ) -> Column:
        return Column(name, logical, f"{kind}|{decl}", nullable, p, s)

    if t in _NATIVE:
        return col("text" if t in _TEXT_KEYS else "native", _NATIVE[t])
    if t in ("decimal", "numeric"):
        return col("decimal", L.DECIMAL, precision, scale)
    if t == "money":
        return col("money", L.DECIMAL, 19, 4)
    if t == "smallmoney":
        return col("money", L.DECIMAL, 10, 4)
    if t == "uniqueidentifier":
        return col("guid", L.STRING)
    if t in _TEMPORAL:
        kind = _TEMPORAL[t]
        if exact_time and scale == 7 and kind != "date":
            return col(kind + "_text", L.STRING)
        logical = {"timestamp": L.TIMESTAMP, "time": L.TIME, "timestamptz": L.TIMESTAMP_TZ,
                   "date": L.DATE}[kind]
        return col(kind, logical)
    if t in _AS_BINARY:
        return col("asbinary", L.BINARY)
    return col("astext", L.STRING)  # xml, hierarchyid, sql_variant and any other type


def kind_of(column: Column) -> str:
    return column.source_type.split("|", 1)[0]


def q(name: str) -> str:
    """Quote an identifier with brackets."""
    return "[" + name.replace("]", "]]") + "]"


_UTC = "CONVERT(datetime2(7), SWITCHOFFSET({c}, '+00:00'))"
_EXPRESSIONS = {
    "decimal": "CONVERT(varchar(50), {c})",
    "money": "CONVERT(varchar(30), {c}, 2)",  # style 2: four decimals, no commas
    "guid": "CONVERT(char(36), {c})",
    "date": "CONVERT(char(10), {c}, 23)",
    "timestamp": "CONVERT(varchar(27), {c}, 121)",
    "timestamp_text": "CONVERT(varchar(27), {c}, 121)",
    "time": "CONVERT(varchar(16), {c}, 121)",
    "time_text": "CONVERT(varchar(16), {c}, 121)",
    "timestamptz": "CONVERT(varchar(27), " + _UTC + ", 121)",
    "timestamptz_text": "CONVERT(varchar(27), " + _UTC + ", 121)",
    "astext": "CONVERT(nvarchar(max), {c})",
    "asbinary": "CONVERT(varbinary(max), {c})",
}


def select_expression(column: Column, source: str | None = None) -> str:
    """The SQL that selects ``column`` (from ``source``, default its quoted name) in the form
    :func:`converter` parses; the same in the snapshot and in the change functions."""
    c = source or q(column.name)
    template = _EXPRESSIONS.get(kind_of(column))
    return template.format(c=c) if template else c


def parse_timestamp(text: str) -> dt.datetime:
    """``yyyy-mm-dd hh:mi:ss[.fffffff]`` (style 121) as a naive datetime, digits past the
    microsecond truncated."""
    date, _, time = text.strip().partition(" ")
    return dt.datetime.combine(dt.date.fromisoformat(date), parse_time(time))


def parse_time(text: str) -> dt.time:
    """``hh:mi:ss[.fffffff]`` as a time, digits past the microsecond truncated."""
    clock, _, fraction = text.strip().partition(".")
    h, m, s = (int(p) for p in clock.split(":"))
    micros = int((fraction + "000000")[:6]) if fraction else 0
    return dt.time(h, m, s, micros)


def _timestamptz(text: str) -> dt.datetime:
    return parse_timestamp(text).replace(tzinfo=dt.UTC)


_PARSERS: dict[str, Callable[[Any], Any]] = {
    "decimal": lambda v: Decimal(v.strip()),
    "money": lambda v: Decimal(v.strip()),
    "guid": lambda v: v.strip().upper(),
    "date": lambda v: dt.date.fromisoformat(v.strip()),
    "timestamp": parse_timestamp,
    "time": parse_time,
    "timestamptz": _timestamptz,
    "timestamp_text": str.strip,
    "time_text": str.strip,
    "timestamptz_text": lambda v: v.strip() + "+00:00",
}


def converter(column: Column) -> Callable[[Any], Any] | None:
    """The function that turns the selected value into the column's Python value (None: the
    driver's value is already it)."""
    return _PARSERS.get(kind_of(column))


def row_converter(columns: tuple[Column, ...]) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    """One function that converts a whole selected row (NULLs stay None)."""
    plan = [(i, f) for i, c in enumerate(columns) if (f := converter(c)) is not None]

    def convert(row: tuple[Any, ...]) -> tuple[Any, ...]:
        if not plan:
            return tuple(row)
        values = list(row)
        for i, f in plan:
            if values[i] is not None:
                values[i] = f(values[i])
        return tuple(values)

    return convert


# --- key predicates ---------------------------------------------------------------------------

_KEY_MARKS = {
    "timestamp": "CONVERT(datetime2(7), %s, 121)",
    "time": "CONVERT(time(7), %s, 121)",
    "date": "CONVERT(date, %s, 23)",
    "timestamptz": "TODATETIMEOFFSET(CONVERT(datetime2(7), %s, 121), '+00:00')",
}


def key_sql(column: Column) -> tuple[str, str]:
    """``(expression, placeholder)`` to compare ``column`` with a key value in the order Python
    compares the values: text in a binary collation, GUIDs as their text, temporal columns in
    their own type against the value's exact text."""
    kind = kind_of(column)
    name = q(column.name)
    if kind == "text":
        return f"{name} COLLATE {BIN}", "%s"
    if kind == "guid" or kind.endswith("_text"):
        return f"{select_expression(column)} COLLATE {BIN}", "%s"
    if kind in _KEY_MARKS:
        return name, _KEY_MARKS[kind]
    return name, "%s"


def key_param(column: Column, value: Any) -> Any:
    """A key value as the placeholder of :func:`key_sql` expects it."""
    kind = kind_of(column)
    if kind == "timestamptz" and isinstance(value, dt.datetime):
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f") + "0"
    if isinstance(value, dt.time):
        return value.strftime("%H:%M:%S.%f") + "0"
    if isinstance(value, dt.date):
        return value.isoformat()
    return value


def key_range(columns: list[Column], start: tuple[Any, ...] | None,
              end: tuple[Any, ...] | None) -> tuple[str, list[Any]]:
    """``start <= key < end`` spelled out lexicographically (SQL Server has no row-value
    comparison), with per-column placeholders."""
    sql = [key_sql(c) for c in columns]
    clauses: list[str] = []
    args: list[Any] = []
    for bound, last_op, strict in ((start, ">=", ">"), (end, "<", "<")):
        if bound is None:
            continue
        alternatives = []
        for i in range(len(columns)):
            terms = [f"{sql[j][0]} = {sql[j][1]}" for j in range(i)]
            op = last_op if i == len(columns) - 1 else strict
            terms.append(f"{sql[i][0]} {op} {sql[i][1]}")
            alternatives.append("(" + " AND ".join(terms) + ")")
            args.extend(key_param(columns[j], bound[j]) for j in range(i + 1))
        clauses.append("(" + " OR ".join(alternatives) + ")")
    return (" AND ".join(clauses) or "1 = 1"), args
