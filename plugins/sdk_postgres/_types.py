"""PostgreSQL column types as logical types.

A column's ``source_type`` is ``"<kind>|<format_type>"``: ``kind`` is the type name when
psycopg's loader gives the value the engine wants (numbers, bytea, dates and times, text), and
``astext`` for every other type (uuid, json, jsonb, arrays, enums, domains, network and
geometric types...), which both the snapshot (:func:`output_text`) and the log carry as the
type's output function writes it, so the two paths always agree.

Dates, timestamps and times Python cannot hold (``infinity``, BC, years past 9999,
``24:00:00``), on which psycopg's loaders fail, load as :class:`sdk.dialect.temporal.WideTemporal`
(loaders registered on each of the dialect's connections by :func:`register_wide_temporals`,
so the snapshot's cursors and the slot's decoding use them alike, and no other psycopg
connection of the process is touched), and a WideTemporal is sent back in
PostgreSQL's own text (``infinity``, ``0044-03-15 BC``).

An interval loads as :class:`sdk.dialect.temporal.Interval`, its months, days and microseconds
as PostgreSQL holds them (psycopg's own loader makes a month 30 days and folds hours into days),
read from the server's text (``IntervalStyle=postgres``: ``1 year -2 mons +3 days -04:05:06``),
and is sent as its ISO 8601 text, which PostgreSQL reads back to the same three parts
(:func:`register_intervals`); a ``timedelta`` is sent as the Interval of its microseconds.

Text arrives in UTF-8 whatever the database's encoding: each of the dialect's sessions asks
for ``client_encoding=UTF8`` and the server converts (LATIN1, WIN1252, EUC_JP...), in a
SELECT's rows and in the log's pgoutput text alike. A ``SQL_ASCII`` database converts nothing,
and checks what it sends a UTF8 session: one value that is not UTF-8 would fail the whole
split or log read. So its text is read as the bytes it stored (the snapshot selects them with
``convert_to(..., 'SQL_ASCII')``, the log is decoded in a ``SQL_ASCII`` session) and
:func:`decode_text` reads them as UTF-8, bytes that are not a :class:`~sdk.BadValue`.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from sdk import BadValue, Column, LogicalType
from sdk.dialect.temporal import DATE, TIME, TIMESTAMP, TIMESTAMP_TZ, Interval, WideTemporal

L = LogicalType
TEXT_TYPES = {"astext"}

_LOADED = {
    "bool": L.BOOLEAN, "int2": L.INT16, "int4": L.INT32, "int8": L.INT64, "oid": L.INT64,
    "float4": L.FLOAT32, "float8": L.FLOAT64, "numeric": L.DECIMAL, "bytea": L.BINARY,
    "date": L.DATE, "time": L.TIME, "timestamp": L.TIMESTAMP, "timestamptz": L.TIMESTAMP_TZ,
    "interval": L.INTERVAL, "text": L.STRING, "varchar": L.STRING, "bpchar": L.STRING,
    "name": L.STRING,
}
_JSON = {"json", "jsonb"}


def output_text(ref: str) -> str:
    """SQL of ``ref``'s text as its type's output function writes it (what psql shows and
    the log carries), NULL for a NULL: ``concat`` writes that, where a cast to text differs
    for a few types (an ``inet`` host keeps its ``/32`` or ``/128``, a ``char(n)`` loses its
    padding, a domain over ``bool`` spells ``true``). ``IS DISTINCT FROM`` keeps a composite
    whose fields are all NULL (which ``IS NOT NULL`` calls NULL)."""
    return f"CASE WHEN {ref} IS DISTINCT FROM NULL THEN concat({ref}) END"


def kind_of(column: Column) -> str:
    """The ``kind`` part of a column's source type."""
    return column.source_type.split("|", 1)[0]


def logical_column(name: str, typname: str, typtype: str, formatted: str, nullable: bool,
                   typmod: int, base: str | None) -> Column:
    """A column from ``pg_attribute`` joined with ``pg_type``."""
    if typtype == "b" and typname in _LOADED:
        logical = _LOADED[typname]
        precision = scale = None
        if typname == "numeric" and typmod >= 4:
            precision, scale = ((typmod - 4) >> 16) & 0xFFFF, (typmod - 4) & 0xFFFF
        return Column(name, logical, f"{typname}|{formatted}", nullable, precision, scale)
    logical = L.JSON if typname in _JSON else L.STRING
    return Column(name, logical, f"astext|{formatted}", nullable)


_PG_TEXT = re.compile(r"(\d{4,})-(\d\d)-(\d\d)(?: (\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?)?"
                      r"(?:([+-])(\d\d)(?::(\d\d)(?::(\d\d))?)?)?( BC)?")


def wide_value(text: str, logical: str) -> WideTemporal:
    """A date, timestamp or time in PostgreSQL's ISO output (``DateStyle=ISO``) that Python
    cannot hold: ``infinity``, a BC or past-9999 date, ``24:00:00``."""
    if text in ("infinity", "-infinity") or logical == TIME:
        return WideTemporal.parse(text, logical)
    match = _PG_TEXT.fullmatch(text)
    if match is None:
        raise ValueError(f"not a PostgreSQL {logical}: {text!r}")
    y, mo, d, h, mi, s, frac, sign, oh, om, os, bc = match.groups()
    year = 1 - int(y) if bc else int(y)
    offset = 0
    if sign:
        offset = (int(oh) * 3600 + int(om or 0) * 60 + int(os or 0)) * (1 if sign == "+" else -1)
    value = WideTemporal.of(logical, year, int(mo), int(d), int(h or 0), int(mi or 0),
                            int(s or 0), int((frac or "0").ljust(6, "0")), offset)
    if value.infinite:  # the one finite value at Spark's limit would read as infinity
        raise ValueError(f"{text}: beyond what Spark's timestamp types hold")
    return value


def pg_text(value: WideTemporal) -> str:
    """A WideTemporal as PostgreSQL reads it back exactly (UTC for an instant)."""
    if value.infinite or value.type == TIME:
        return str(value)
    year, month, day, hour, minute, second, micro = value.fields()
    text = f"{year if year > 0 else 1 - year:04d}-{month:02d}-{day:02d}"
    if value.type != DATE:
        text += f" {hour:02d}:{minute:02d}:{second:02d}.{micro:06d}"
        text += "+00" if value.type == TIMESTAMP_TZ else ""
    return text + (" BC" if year <= 0 else "")


UNCHECKED_ENCODING = "SQL_ASCII"
"""The server encoding whose text is neither converted nor checked: its bytes as stored."""
STRING_KINDS = frozenset({"text", "varchar", "bpchar", "name"})
"""The kinds read as text that psycopg's own loaders decode (the others are ``astext``)."""


def decode_text(data: Any) -> str | BadValue:
    """A text value a ``SQL_ASCII`` database holds, as it stored it: as UTF-8, or a BadValue
    of its text (the bytes that are not UTF-8 written ``\\xfc``) saying which byte is not."""
    try:
        return str(data, "utf-8")
    except UnicodeDecodeError as why:
        raw = bytes(data)
        return BadValue(raw.decode("utf-8", "backslashreplace"),
                        f"is not valid UTF-8 (byte {raw[why.start]:#04x} at offset {why.start}): "
                        "the database's encoding is SQL_ASCII, which stores text unchecked")


def register_wide_temporals(adapters: Any) -> None:
    """On a connection's ``adapters``: wrap psycopg's text loaders of date, time, timestamp and
    timestamptz so a value they refuse loads as a WideTemporal, and dump WideTemporal as
    PostgreSQL text.

    The classes are made once per process (:func:`_wide_loader`, :func:`_wide_dumper`), not
    per connection: psycopg keeps every dumper and loader class ever registered, on any
    connection, in a class-level map (``AdaptersMap._optimised``) for good, and a worker
    connects at every log batch."""
    from psycopg.pq import Format

    for name, logical in (("date", DATE), ("time", TIME), ("timestamp", TIMESTAMP),
                          ("timestamptz", TIMESTAMP_TZ)):
        oid = adapters.types[name].oid
        base = adapters.get_loader(oid, Format.TEXT)
        if base is None or getattr(base, "wide", False):
            continue
        adapters.register_loader(oid, _wide_loader(base, logical))
    adapters.register_dumper(WideTemporal, _wide_dumper())


@functools.cache
def _wide_dumper() -> type:
    from psycopg.adapt import Dumper

    class WideDumper(Dumper):
        """A WideTemporal as untyped text: the statement's cast or column gives its type."""

        def dump(self, obj: Any) -> bytes:
            return pg_text(obj).encode()

    return WideDumper


@functools.cache
def _wide_loader(base: type, logical: Any) -> type:
    """The loader wrapping psycopg's ``base`` loader for the ``logical`` type: one class per
    (base, type) in a process, however many connections register it."""
    import psycopg
    from psycopg.adapt import Loader

    class WideLoader(Loader):
        """psycopg's loader, then :func:`wide_value` for what it refuses; what that
        refuses too, a :class:`~sdk.BadValue`."""

        wide = True
        inner: Any = base
        kind = logical

        def __init__(self, oid: int, context: Any = None) -> None:
            super().__init__(oid, context)
            self._inner = self.inner(oid, context)

        def load(self, data: Any) -> Any:
            try:
                return self._inner.load(data)
            except psycopg.DataError:
                text = bytes(data).decode()
                try:
                    return wide_value(text, self.kind)
                except ValueError as why:  # the engine names the row, applies errors.mode
                    head, colon, reason = str(why).partition(": ")
                    return BadValue(text, reason if colon and head in text else str(why))

    return WideLoader


_PG_INTERVAL = re.compile(r"(?:([+-]?\d+) years? ?)?(?:([+-]?\d+) mons? ?)?(?:([+-]?\d+) days? ?)?"
                          r"(?:([+-]?)(\d+):(\d\d):(\d\d)(?:\.(\d{1,6}))?)?")


def interval_value(text: str) -> Interval:
    """An interval in PostgreSQL's output under ``IntervalStyle=postgres`` (each part with its
    sign: ``-1 years -2 mons +3 days -04:05:06.5``, ``838:59:59``) as its three parts;
    PostgreSQL 17's ``infinity`` and ``-infinity`` as :meth:`Interval.parse` reads them."""
    if text.endswith("infinity"):
        return Interval.parse(text)
    match = _PG_INTERVAL.fullmatch(text)
    if match is None or not text:
        raise ValueError(f"not a PostgreSQL interval: {text!r}")
    years, months, days, sign, hours, minutes, seconds, fraction = match.groups()
    micros = ((int(hours or 0) * 60 + int(minutes or 0)) * 60 + int(seconds or 0)) * 1_000_000
    micros += int((fraction or "0").ljust(6, "0"))
    return Interval(int(years or 0) * 12 + int(months or 0), int(days or 0),
                    -micros if sign == "-" else micros)


def register_intervals(adapters: Any) -> None:
    """On a connection's ``adapters``: load interval text as an :class:`Interval` (a text it
    cannot read as a :class:`~sdk.BadValue`), and dump an Interval or a ``timedelta`` as ISO
    8601 text (classes made once per process: see :func:`register_wide_temporals`)."""
    import datetime as dt

    loader, dumper = _interval_adapters()
    adapters.register_loader(adapters.types["interval"].oid, loader)
    adapters.register_dumper(Interval, dumper)
    adapters.register_dumper(dt.timedelta, dumper)


@functools.cache
def _interval_adapters() -> tuple[type, type]:
    """The interval loader and dumper classes, made once per process."""
    from psycopg.adapt import Dumper, Loader

    class IntervalDumper(Dumper):
        """An interval as untyped ISO 8601 text: the statement's cast or column types it."""

        def dump(self, obj: Any) -> bytes:
            return Interval.of(obj).isoformat().encode()

    class IntervalLoader(Loader):
        """The server's text of an interval as its months, days and microseconds."""

        def load(self, data: Any) -> Any:
            text = bytes(data).decode()
            try:
                return interval_value(text)
            except ValueError as why:  # the engine names the row, applies errors.mode
                return BadValue(text, str(why))

    return IntervalLoader, IntervalDumper
