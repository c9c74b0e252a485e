"""SQL text and value conversions of the SQLite dialect."""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from sdk import Column, LogicalType, Row, TableSchema
from sdk.dialect.temporal import Interval, time_from_text
from sdk.dialect.types import WideTemporal

if TYPE_CHECKING:
    import pyarrow as pa

CHANGES = "_sdk_changes"
META = "_sdk_meta"
_NOW_MICROS = "CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)"


def q(name: str) -> str:
    """Quote an identifier."""
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _encoded(ref: str) -> str:
    """A column value as a JSON array element that keeps reals and blobs exact."""
    return (f"CASE typeof({ref}) WHEN 'real' THEN json_object('r', printf('%!.17g', {ref})) "
            f"WHEN 'blob' THEN json_object('b', hex({ref})) ELSE {ref} END")


def trigger_sql(table: TableSchema) -> list[str]:
    """Statements that (re)create the three capture triggers of ``table``."""
    name = table.table.name
    def image(alias: str) -> str:
        return "json_array(" + ", ".join(_encoded(f"{alias}.{q(c)}")
                                         for c in table.column_names) + ")"
    statements = []
    for event, op, old, new in (("INSERT", "c", "NULL", image("NEW")),
                                ("UPDATE", "u", image("OLD"), image("NEW")),
                                ("DELETE", "d", image("OLD"), "NULL")):
        trigger = q(f"_sdk_{name}_{op}")
        statements.append(f"DROP TRIGGER IF EXISTS {trigger}")
        statements.append(
            f"CREATE TRIGGER {trigger} AFTER {event} ON {q(name)} BEGIN "
            f"INSERT INTO {CHANGES} (tbl, op, old_row, new_row, ts) VALUES "
            f"({_literal(name)}, '{op}', {old}, {new}, {_NOW_MICROS}); END")
    return statements


def _decode_value(value: Any) -> Any:
    if isinstance(value, dict):
        if "r" in value:
            return float(value["r"])
        return bytes.fromhex(value["b"])
    return value


def decode_row(text: str | None) -> Row | None:
    """Invert the trigger's JSON row image."""
    if text is None:
        return None
    values = json.loads(text)
    for index, value in enumerate(values):
        if type(value) is dict:
            values[index] = _decode_value(value)
    return tuple(values)


_TARGET_TYPES = {LogicalType.BOOLEAN: "INTEGER", LogicalType.INT8: "INTEGER",
                 LogicalType.INT16: "INTEGER", LogicalType.INT32: "INTEGER",
                 LogicalType.INT64: "INTEGER",
                 LogicalType.FLOAT32: "REAL", LogicalType.FLOAT64: "REAL",
                 LogicalType.BINARY: "BLOB"}


def target_type(column: Column) -> str:
    """The SQLite column type that stores ``column``'s values without loss."""
    return _TARGET_TYPES.get(column.type, "TEXT")


_STORED_AS_IS = frozenset({int, str, bytes, type(None)})


def to_target_value(value: Any) -> Any:
    """A Python value as something sqlite3 stores exactly (decimals and times as text). NaN
    is stored as the text ``NaN`` (SQLite would make it NULL); a decimal in positional
    notation with its scale (``0.000000``, never ``0E-6``), as its source prints it; dates
    and times beyond Python's as their ISO text, or ``infinity`` / ``-infinity``; intervals
    as their ISO 8601 text (months, days and microseconds each kept)."""
    if type(value) in _STORED_AS_IS:  # most values: one set lookup
        return value
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if value is None or isinstance(value, (int, float, str, bytes)):
        return int(value) if isinstance(value, bool) else value
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, WideTemporal):
        return str(value)
    if isinstance(value, (Interval, dt.timedelta)):
        return Interval.of(value).isoformat()
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    raise TypeError(f"cannot store a {type(value).__name__} in SQLite: {value!r}")


_AS_IS = frozenset({LogicalType.INT8, LogicalType.INT16, LogicalType.INT32, LogicalType.INT64,
                    LogicalType.STRING, LogicalType.BINARY, LogicalType.JSON,
                    LogicalType.BOOLEAN})  # sqlite3 stores a bool as 0 or 1


def float32_double(value: float) -> float:
    """The double that the shortest text of float32 ``value`` parses to: what PostgreSQL
    prints for a ``real`` (and a log's text gives), where the float32 widened would be
    another double (``3.4028235e+38``, not ``3.4028234663852886e+38``)."""
    import numpy as np

    with np.errstate(over="ignore"):  # a double past float32's range is its infinity
        return float(str(np.float32(value)))


def positional(value: str) -> str:
    """A decimal's text in positional notation, its scale kept (``-1E-30`` ->
    ``-0.000000000000000000000000000001``, ``1E+5`` -> ``100000``), as its source prints it."""
    return format(Decimal(value), "f") if "E" in value or "e" in value else value


def one_form(row: Row | None, forms: Sequence[tuple[int, Callable[[Any], Any]]]
             ) -> Row | None:
    """``row`` with the value at each position of ``forms`` put in its one stored form (see
    :func:`float32_double`, :func:`positional`)."""
    if row is None:
        return None
    values = list(row)
    for i, form in forms:
        values[i] = form(values[i])
    return tuple(values)


def form_of(column: Column) -> Callable[[Any], Any] | None:
    """How a change's value of ``column`` is put in the form ``load_snapshot`` stores (None:
    as it is): a float32 as :func:`float32_double`, a decimal carried as text positional."""
    if column.type is LogicalType.FLOAT32:
        return lambda v: float32_double(v) if isinstance(v, float) else v
    if column.type is LogicalType.DECIMAL:
        return lambda v: positional(v) if isinstance(v, str) else v
    return None


def target_column(values: pa.ChunkedArray | pa.Array, column: Column) -> list[Any]:
    """A snapshot split's column (typed as :func:`sdk.dialect.arrow.arrow_type` gives) as the
    values :func:`to_target_value` makes of it, built by Arrow where the text is the same:
    integers, text, bytes and booleans as they are, floats with NaN as ``NaN`` (a float32 as
    :func:`float32_double`, from Arrow's shortest text of it), decimals as text (Arrow's, or
    a wide one's, in positional notation: :func:`_positional`), and dates and timestamps of
    years 1-9999 in ``isoformat``'s text. Anything else goes value by value."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from sdk.dialect.arrow import python_values

    kind, logical = values.type, column.type
    if logical in _AS_IS and (pa.types.is_integer(kind) or pa.types.is_string(kind)
                              or pa.types.is_binary(kind) or pa.types.is_boolean(kind)):
        return values.to_pylist()  # type: ignore[no-any-return]
    if logical in (LogicalType.FLOAT32, LogicalType.FLOAT64) and pa.types.is_floating(kind):
        if logical is LogicalType.FLOAT32:
            values = values.cast(pa.float32()).cast(pa.string()).cast(pa.float64())
        floats = values.to_pylist()
        if pc.any(pc.is_nan(values)).as_py():
            return [v if v == v else "NaN" for v in floats]
        return floats  # type: ignore[no-any-return]
    if logical is LogicalType.DECIMAL and (pa.types.is_decimal(kind)
                                           or pa.types.is_string(kind)):
        return _positional(values.cast(pa.string()))
    text = _iso_text(values, logical)
    if text is not None:
        return text
    return [to_target_value(v) for v in python_values(values, logical)]


def _positional(text: pa.ChunkedArray | pa.Array) -> list[Any]:
    """Decimals' text (Arrow's, or a wide decimal's ``str``) with any in scientific form
    (``-1E-30``, ``0E-10``) written in positional notation, its scale kept."""
    import pyarrow.compute as pc

    if not pc.any(pc.match_substring(text, "E")).as_py():
        return text.to_pylist()  # type: ignore[no-any-return]
    return [v if v is None else positional(v) for v in text.to_pylist()]


def _iso_text(values: pa.ChunkedArray | pa.Array, logical: LogicalType) -> list[Any] | None:
    """Dates and timestamps as ``isoformat`` writes them, when all lie in years 1-9999 (else
    None): Arrow's text with a ``T``, no ``.000000``, and ``+00:00`` for an instant."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from sdk.dialect.arrow import python_units

    units = python_units(values, logical)
    if units is None:
        return None
    if logical is LogicalType.DATE:
        return units.cast(pa.date32()).cast(pa.string()).to_pylist()  # type: ignore[no-any-return]
    text = units.cast(pa.timestamp("us")).cast(pa.string())  # 2024-01-02 03:04:05.000000
    text = pc.replace_substring(text, " ", "T", max_replacements=1)
    text = pc.replace_substring_regex(text, r"\.000000$", "")
    if logical is LogicalType.TIMESTAMP_TZ:
        text = pc.binary_join_element_wise(text, "+00:00", "")
    return text.to_pylist()  # type: ignore[no-any-return]


def _temporal(parse: Callable[[str], Any], logical: LogicalType) -> Callable[[str], Any]:
    def load(text: str) -> Any:
        try:
            return parse(text)
        except ValueError:
            return WideTemporal.parse(text, logical)
    return load


_FROM_TARGET: dict[LogicalType, Callable[[Any], Any]] = {
    LogicalType.BOOLEAN: bool,
    LogicalType.FLOAT32: float,
    LogicalType.FLOAT64: float,
    LogicalType.DECIMAL: Decimal,
    LogicalType.DATE: _temporal(dt.date.fromisoformat, LogicalType.DATE),
    LogicalType.TIME: time_from_text,
    LogicalType.TIMESTAMP: _temporal(dt.datetime.fromisoformat, LogicalType.TIMESTAMP),
    LogicalType.TIMESTAMP_TZ: _temporal(dt.datetime.fromisoformat, LogicalType.TIMESTAMP_TZ),
    LogicalType.INTERVAL: lambda v: Interval.parse(v) if isinstance(v, str)
    else Interval(0, 0, v),
}
"""How a stored value reads back (an interval an earlier release stored as microseconds too)."""


def from_target_value(value: Any, logical: LogicalType) -> Any:
    """Invert :func:`to_target_value` for a column of type ``logical``."""
    if value is None or logical not in _FROM_TARGET:
        return value
    return _FROM_TARGET[logical](value)
