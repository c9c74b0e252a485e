"""Oracle column types as logical types, and the one value mapping both read paths share.

``read_range`` fetches with python-oracledb and ``stream_log`` parses LogMiner's ``SQL_REDO``
text; both end in :func:`from_fetch` / :func:`from_redo`, which give the same Python value for
the same stored value:

- NUMBER: ``int`` when the column's scale is 0 or negative and it fits 18 digits, else
  ``Decimal`` (fetched as Decimal, never float, so any precision is exact).
- BINARY_FLOAT / BINARY_DOUBLE: ``float`` (the float32 value for BINARY_FLOAT).
- DATE, TIMESTAMP: naive ``datetime`` (wall clock), nanoseconds truncated to microseconds as
  python-oracledb does.
- TIMESTAMP WITH (LOCAL) TIME ZONE: aware UTC ``datetime`` (the snapshot selects
  ``SYS_EXTRACT_UTC``).
- INTERVAL DAY TO SECOND: :class:`~sdk.dialect.temporal.Interval` of days and time; INTERVAL
  YEAR TO MONTH: ISO text ``P1Y2M``.
- text: ``str``; Oracle stores ``''`` as NULL, so an empty string is None on both paths.
- RAW, BLOB: ``bytes``.

The session formats these rely on are pinned by :data:`NLS_SESSION` (thin mode ignores the
``NLS_*`` environment variables).
"""

from __future__ import annotations

import datetime as dt
import re
import struct
import zoneinfo
from decimal import Decimal, InvalidOperation
from typing import Any

from sdk import Column, LogicalType
from sdk.dialect.temporal import DAY_MICROS, Interval

from ._redo import UNSUPPORTED, Bare, Call, RawValue, unistr

L = LogicalType

DATE_FORMAT = "YYYY-MM-DD HH24:MI:SS"
TIMESTAMP_FORMAT = "YYYY-MM-DD HH24:MI:SS.FF9"
TIMESTAMP_TZ_FORMAT = "YYYY-MM-DD HH24:MI:SS.FF9 TZH:TZM"

NLS_SESSION = (
    f"ALTER SESSION SET NLS_DATE_FORMAT = '{DATE_FORMAT}' "
    f"NLS_TIMESTAMP_FORMAT = '{TIMESTAMP_FORMAT}' "
    f"NLS_TIMESTAMP_TZ_FORMAT = '{TIMESTAMP_TZ_FORMAT}' "
    "NLS_NUMERIC_CHARACTERS = '.,' NLS_SORT = BINARY NLS_COMP = BINARY TIME_ZONE = '+00:00'")
"""One statement pinning every format ``SQL_REDO`` values are written in, and binary text
order for key ranges."""

_TEXT = {"VARCHAR2", "NVARCHAR2", "CHAR", "NCHAR", "CLOB", "NCLOB", "LONG", "ROWID", "UROWID",
         "VARCHAR", "XMLTYPE"}
_BINARY = {"RAW", "BLOB", "LONG RAW"}
LOB_TYPES = {"CLOB", "NCLOB", "BLOB", "LONG", "LONG RAW", "XMLTYPE", "BFILE"}
"""Types whose values LogMiner does not put in row changes (separate LOB operations, or none)."""


def base_type(data_type: str) -> str:
    """``TIMESTAMP(6) WITH TIME ZONE`` -> ``TIMESTAMP WITH TIME ZONE``."""
    return re.sub(r"\(\d+\)", "", data_type).strip().upper()


def logical_column(name: str, data_type: str, precision: int | None, scale: int | None,
                   nullable: bool) -> Column:
    """A column from ``ALL_TAB_COLS`` (``DATA_TYPE``, ``DATA_PRECISION``, ``DATA_SCALE``)."""
    kind = base_type(data_type)

    def col(logical: LogicalType, p: int | None = None, s: int | None = None) -> Column:
        return Column(name, logical, data_type, nullable, p, s)

    if kind == "NUMBER":
        if scale is None:  # NUMBER without precision: any value
            return col(L.DECIMAL)
        if scale <= 0:
            digits = (precision if precision is not None else 38) - scale
            for limit, logical in ((2, L.INT8), (4, L.INT16), (9, L.INT32), (18, L.INT64)):
                if digits <= limit:
                    return col(logical)
            return col(L.DECIMAL, digits, 0)
        return col(L.DECIMAL, precision, scale)
    if kind == "FLOAT":
        return col(L.DECIMAL)
    if kind == "BINARY_FLOAT":
        return col(L.FLOAT32)
    if kind == "BINARY_DOUBLE":
        return col(L.FLOAT64)
    if kind in ("DATE", "TIMESTAMP"):
        return col(L.TIMESTAMP)
    if kind in ("TIMESTAMP WITH TIME ZONE", "TIMESTAMP WITH LOCAL TIME ZONE"):
        return col(L.TIMESTAMP_TZ)
    if kind.startswith("INTERVAL DAY"):
        return col(L.INTERVAL)
    if kind == "JSON":
        return col(L.JSON)
    if kind == "BOOLEAN":
        return col(L.BOOLEAN)
    if kind in _BINARY:
        return col(L.BINARY)
    return col(L.STRING)  # text types, INTERVAL YEAR TO MONTH (ISO text), ROWID...


def select_expr(column: Column, quoted: str) -> str:
    """How the snapshot selects ``column`` so python-oracledb returns what :func:`from_fetch`
    expects."""
    kind = base_type(column.source_type)
    if kind in ("TIMESTAMP WITH TIME ZONE", "TIMESTAMP WITH LOCAL TIME ZONE"):
        return f"SYS_EXTRACT_UTC({quoted})"
    if kind.startswith("INTERVAL YEAR") or kind in ("ROWID", "UROWID"):
        return f"TO_CHAR({quoted})"
    if kind == "JSON":
        return f"JSON_SERIALIZE({quoted})"
    return quoted


def _int_kind(column: Column) -> bool:
    return column.type in (L.INT8, L.INT16, L.INT32, L.INT64)


def _float32(value: float) -> float:
    result: float = struct.unpack("<f", struct.pack("<f", value))[0]
    return result


def from_fetch(column: Column, value: Any) -> Any:
    """A value as python-oracledb fetched it (NUMBER as Decimal, LOBs as str/bytes)."""
    if value is None:
        return None
    logical = column.type
    if _int_kind(column):
        return int(value)
    if logical is L.DECIMAL:
        return value if isinstance(value, Decimal) else Decimal(str(value))
    if logical is L.FLOAT32:
        return _float32(float(value))
    if logical is L.FLOAT64:
        return float(value)
    if logical is L.TIMESTAMP_TZ:
        return value.replace(tzinfo=dt.UTC) if value.tzinfo is None \
            else value.astimezone(dt.UTC)
    if logical is L.TIMESTAMP and isinstance(value, dt.date) \
            and not isinstance(value, dt.datetime):
        return dt.datetime(value.year, value.month, value.day)
    if logical is L.STRING:
        if base_type(column.source_type).startswith("INTERVAL YEAR"):
            return ym_interval(value)
        return value if value != "" else None
    if logical is L.BINARY:
        return bytes(value) if value != b"" else None
    if logical is L.BOOLEAN:
        return bool(value)
    if logical is L.INTERVAL and isinstance(value, dt.timedelta):
        return day_interval(value)
    return value


class RedoValueError(ValueError):
    """A ``SQL_REDO`` value that cannot be turned into the column's type."""


def _text(raw: RawValue, column: Column) -> str:
    """The text inside a literal, a bare number, ``UNISTR`` or a ``||`` concatenation."""
    if isinstance(raw, str):
        return raw
    if isinstance(raw, Bare) and raw.text != "Unsupported Type":
        return raw.text
    if isinstance(raw, Call):
        if raw.name == "UNISTR" and len(raw.args) == 1:
            return unistr(_text(raw.args[0], column))
        if raw.name == "||":
            return "".join("" if a is None else _text(a, column) for a in raw.args)
        if raw.name in ("TO_CHAR", "TO_NCHAR", "TO_CLOB", "TO_NCLOB") and raw.args:
            return _text(raw.args[0], column)
    raise RedoValueError(f"column {column.name!r} ({column.source_type}): LogMiner gave "
                         f"{_show(raw)}, which is not a value this dialect can read")


def _show(raw: RawValue) -> str:
    if isinstance(raw, Call):
        return f"{raw.name}({', '.join(_show(a) for a in raw.args)})"
    if isinstance(raw, Bare):
        return raw.text
    return "NULL" if raw is None else repr(raw)


_STAMP = re.compile(
    r"\s*(?P<neg>-)?(?P<y>\d{1,4})-(?P<mo>\d{1,2})-(?P<d>\d{1,2})"
    r"(?:[ T](?P<h>\d{1,2}):(?P<mi>\d{1,2}):(?P<s>\d{1,2})(?:\.(?P<f>\d{0,9}))?)?"
    r"\s*(?P<tz>[-+]\d{1,2}:\d{2}|[A-Za-z][A-Za-z0-9_/+-]*(?:\s+[A-Z]{2,6})?)?\s*$")

_ISO_MASKS = {DATE_FORMAT, TIMESTAMP_FORMAT, TIMESTAMP_TZ_FORMAT, "YYYY-MM-DD HH24:MI:SS.FF",
              "YYYY-MM-DD HH24:MI:SS.FF TZH:TZM", "YYYY-MM-DD"}


def _stamp(text: str, mask: str | None, column: Column) -> dt.datetime:
    """Parse a date/time literal written in the pinned ISO-like NLS format."""
    if mask is not None and mask.upper() not in _ISO_MASKS and not re.fullmatch(
            r"YYYY-MM-DD( HH24:MI:SS(\.FF\d?)?( TZH:TZM| TZR)?)?", mask.upper()):
        raise RedoValueError(
            f"column {column.name!r}: SQL_REDO uses the date format {mask!r}, not the pinned "
            f"{DATE_FORMAT!r}: the mining session's NLS settings were not applied")
    m = _STAMP.match(text)
    if m is None or m.group("neg"):
        raise RedoValueError(f"column {column.name!r}: cannot read the date/time {text!r}")
    frac = (m.group("f") or "").ljust(9, "0")
    value = dt.datetime(int(m.group("y")), int(m.group("mo")), int(m.group("d")),
                        int(m.group("h") or 0), int(m.group("mi") or 0), int(m.group("s") or 0),
                        int(frac[:6]))
    zone = m.group("tz")
    if zone:
        if zone[0] in "+-":
            hours, minutes = zone[1:].split(":")
            delta = dt.timedelta(hours=int(hours), minutes=int(minutes))
            value = value.replace(tzinfo=dt.timezone(-delta if zone[0] == "-" else delta))
        else:
            name = zone.split()[0]
            tz: dt.tzinfo = dt.UTC if name.upper() in ("UTC", "GMT", "Z") \
                else zoneinfo.ZoneInfo(name)
            value = value.replace(tzinfo=tz)
    return value


_DS = re.compile(r"\s*(?P<sign>[-+])?(?P<d>\d+) (?P<h>\d+):(?P<m>\d+):(?P<s>\d+)"
                 r"(?:\.(?P<f>\d{0,9}))?\s*$")
_YM = re.compile(r"\s*(?P<sign>[-+])?(?P<y>\d+)-(?P<m>\d+)\s*$")


def ds_interval(text: str) -> Interval:
    """``+01 02:03:04.500000`` -> ``Interval(0, 1, 7_384_500_000)`` (nanoseconds truncated to
    microseconds)."""
    m = _DS.match(text)
    if m is None:
        raise RedoValueError(f"cannot read the day-to-second interval {text!r}")
    frac = (m.group("f") or "").ljust(9, "0")
    value = dt.timedelta(days=int(m.group("d")), hours=int(m.group("h")),
                         minutes=int(m.group("m")), seconds=int(m.group("s")),
                         microseconds=int(frac[:6]))
    return day_interval(-value if m.group("sign") == "-" else value)


def day_interval(value: dt.timedelta) -> Interval:
    """A day-to-second interval as Oracle holds it: its days, and the time within the day, of
    the interval's sign (a day is not 24 hours to a PostgreSQL target)."""
    micros = value // dt.timedelta(microseconds=1)
    days, rest = divmod(abs(micros), DAY_MICROS)
    sign = -1 if micros < 0 else 1
    return Interval(0, sign * days, sign * rest)


def ym_interval(text: str) -> str:
    """``+02-03`` (Oracle's text for INTERVAL YEAR TO MONTH) -> ``P2Y3M`` (``-P2Y3M``)."""
    m = _YM.match(text)
    if m is None:
        raise RedoValueError(f"cannot read the year-to-month interval {text!r}")
    sign = "-" if m.group("sign") == "-" else ""
    return f"{sign}P{int(m.group('y'))}Y{int(m.group('m'))}M"


def _number(text: str, column: Column) -> Decimal:
    try:
        return Decimal(text.strip())
    except InvalidOperation:
        raise RedoValueError(f"column {column.name!r}: {text!r} is not a number") from None


_SPECIAL_FLOATS = {"inf": float("inf"), "+inf": float("inf"), "-inf": float("-inf"),
                   "infinity": float("inf"), "-infinity": float("-inf"), "nan": float("nan"),
                   "binary_float_infinity": float("inf"), "binary_double_infinity": float("inf"),
                   "binary_float_nan": float("nan"), "binary_double_nan": float("nan")}


def _float(raw: RawValue, column: Column) -> float:
    if isinstance(raw, Call) and raw.name in ("TO_BINARY_FLOAT", "TO_BINARY_DOUBLE") \
            and raw.args:
        raw = raw.args[0]
    if isinstance(raw, Bare) and raw.text.lower() in _SPECIAL_FLOATS:
        return _SPECIAL_FLOATS[raw.text.lower()]
    text = _text(raw, column).strip()
    special = _SPECIAL_FLOATS.get(text.lower())
    return special if special is not None else float(text)


def _call_text(raw: RawValue, names: tuple[str, ...], column: Column
               ) -> tuple[str, str | None]:
    """The literal and format mask of ``TO_DATE('x', 'fmt')``-like calls (a bare literal is
    accepted too)."""
    if isinstance(raw, Call) and raw.name in names:
        text = _text(raw.args[0], column) if raw.args else ""
        mask = _text(raw.args[1], column) if len(raw.args) > 1 else None
        return text, mask
    return _text(raw, column), None


def from_redo(column: Column, raw: RawValue) -> Any:
    """The typed value of a ``SQL_REDO`` literal for ``column``."""
    if raw is None:
        return None
    if raw == UNSUPPORTED or (isinstance(raw, Call) and raw.name in (
            "EMPTY_CLOB", "EMPTY_BLOB")):
        raise RedoValueError(
            f"column {column.name!r} ({column.source_type}): LogMiner does not put this "
            "column's value in row changes (LOB, XMLType or object type); such columns "
            "cannot be captured")
    logical = column.type
    if _int_kind(column):
        number = _number(_text(raw, column), column)
        if number != number.to_integral_value():
            raise RedoValueError(f"column {column.name!r}: {number} is not an integer")
        return int(number)
    if logical is L.DECIMAL:
        return _number(_text(raw, column), column)
    if logical is L.FLOAT32:
        return _float32(_float(raw, column))
    if logical is L.FLOAT64:
        return _float(raw, column)
    if logical in (L.TIMESTAMP, L.TIMESTAMP_TZ):
        text, mask = _call_text(raw, ("TO_DATE", "TO_TIMESTAMP", "TO_TIMESTAMP_TZ"), column)
        value = _stamp(text, mask, column)
        if logical is L.TIMESTAMP:
            return value.replace(tzinfo=None)
        # TIMESTAMP WITH LOCAL TIME ZONE may come without a zone: the session's, pinned to UTC
        return value.replace(tzinfo=dt.UTC) if value.tzinfo is None \
            else value.astimezone(dt.UTC)
    if logical is L.INTERVAL:
        text, _ = _call_text(raw, ("TO_DSINTERVAL",), column)
        return ds_interval(text)
    if logical is L.BINARY:
        text, _ = _call_text(raw, ("HEXTORAW",), column)
        try:
            data = bytes.fromhex(text)
        except ValueError:
            raise RedoValueError(f"column {column.name!r}: {text!r} is not hex") from None
        return data or None
    if logical is L.BOOLEAN:
        text = _text(raw, column).strip().upper()
        if text in ("1", "TRUE", "Y", "YES"):
            return True
        if text in ("0", "FALSE", "N", "NO"):
            return False
        raise RedoValueError(f"column {column.name!r}: {text!r} is not a boolean")
    if base_type(column.source_type).startswith("INTERVAL YEAR"):
        text, _ = _call_text(raw, ("TO_YMINTERVAL",), column)
        return ym_interval(text)
    text = _text(raw, column)
    return text if text != "" else None
