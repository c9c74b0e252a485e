"""Dates, timestamps and times of day that Python's ``datetime`` cannot hold.

Python's dates end at years 1 and 9999 and its times at 23:59:59.999999, while PostgreSQL keeps
``infinity``, BC dates, years up to 294276 (dates to 5874897) and ``24:00:00``. Such a value is
a :class:`WideTemporal`: its logical type and its count of units since the Unix epoch, the
very number Spark stores (days for ``DateType``, microseconds for the timestamp types), so it
crosses Arrow and Spark exactly. Infinity is the type's largest (or smallest) number, as
Debezium and the PostgreSQL JDBC driver carry it; no finite value of any source reaches it.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

DAY_MICROS = 86_400_000_000
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
_EPOCH = dt.datetime(1970, 1, 1)
_US = dt.timedelta(microseconds=1)

# The logical types (sdk.dialect.types.LogicalType values) a WideTemporal can have.
DATE, TIME, TIMESTAMP, TIMESTAMP_TZ = "date", "time", "timestamp", "timestamp_tz"
_LIMIT = {DATE: INT32_MAX, TIMESTAMP: INT64_MAX, TIMESTAMP_TZ: INT64_MAX}

_ISO = re.compile(r"([+-]?\d{4,})-(\d\d)-(\d\d)(?:[T ](\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?)?"
                  r"(Z|[+-]\d\d:\d\d)?")
_TIME = re.compile(r"(\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?")


def days_from_civil(year: int, month: int, day: int) -> int:
    """Days from 1970-01-01 to a proleptic Gregorian date of any (astronomical) year."""
    year -= month <= 2
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * ((month + 9) % 12) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146097 + day_of_era - 719468


def civil_from_days(days: int) -> tuple[int, int, int]:
    """Invert :func:`days_from_civil`: ``(year, month, day)``, year 0 being 1 BC."""
    days += 719468
    era = days // 146097
    day_of_era = days - era * 146097
    year_of_era = (day_of_era - day_of_era // 1460 + day_of_era // 36524
                   - day_of_era // 146096) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    shifted = (5 * day_of_year + 2) // 153
    day = day_of_year - (153 * shifted + 2) // 5 + 1
    month = shifted + 3 if shifted < 10 else shifted - 9
    return year_of_era + era * 400 + (month <= 2), month, day


@dataclass(frozen=True, slots=True)
class WideTemporal:
    """A date, timestamp or time of day beyond Python's ``datetime``.

    ``units`` counts days (``date``) or microseconds (``timestamp``: wall clock,
    ``timestamp_tz``: UTC) since 1970-01-01, or microseconds since midnight (``time``:
    ``24:00:00``). Infinity is the type's limit (``INT32_MAX`` days, ``INT64_MAX`` micros).
    Values compare with each other and with the ``date``/``datetime`` of the same type, so
    keys holding them still order as the database does.
    """

    type: str
    units: int

    @property
    def infinite(self) -> int:
        """1 for infinity, -1 for -infinity, 0 for a finite value."""
        limit = _LIMIT.get(self.type)
        if limit is None:
            return 0
        return 1 if self.units >= limit else -1 if self.units <= -limit - 1 else 0

    def fields(self) -> tuple[int, int, int, int, int, int, int]:
        """``(year, month, day, hour, minute, second, microsecond)`` (year 0 is 1 BC; a time
        has year, month and day 0)."""
        if self.type == DATE:
            return (*civil_from_days(self.units), 0, 0, 0, 0)
        days, micros = divmod(self.units, DAY_MICROS) if self.type != TIME else (0, self.units)
        seconds, micro = divmod(micros, 1_000_000)
        date = civil_from_days(days) if self.type != TIME else (0, 0, 0)
        return (*date, seconds // 3600, seconds // 60 % 60, seconds % 60, micro)

    def isoformat(self) -> str:
        """ISO 8601 text, years beyond 0..9999 signed (``+10000-01-01``, ``-0043-03-15``), as
        Spark writes and parses them; infinity as the type's limit."""
        year, month, day, hour, minute, second, micro = self.fields()
        clock = f"{hour:02d}:{minute:02d}:{second:02d}" + (f".{micro:06d}" if micro else "")
        if self.type == TIME:
            return clock
        text = (f"{year:04d}" if 0 <= year <= 9999 else f"{year:+05d}") + f"-{month:02d}-{day:02d}"
        if self.type == DATE:
            return text
        return f"{text}T{clock}" + ("+00:00" if self.type == TIMESTAMP_TZ else "")

    def __str__(self) -> str:
        """``infinity`` / ``-infinity``, else :meth:`isoformat`."""
        sign = self.infinite
        return "infinity" if sign > 0 else "-infinity" if sign < 0 else self.isoformat()

    @classmethod
    def infinity(cls, logical: str, sign: int = 1) -> WideTemporal:
        """``infinity`` (``sign`` 1) or ``-infinity`` (-1) of a date or timestamp type."""
        limit = _LIMIT[logical]
        return cls(logical, limit if sign > 0 else -limit - 1)

    @classmethod
    def of(cls, logical: str, year: int, month: int, day: int, hour: int = 0, minute: int = 0,
           second: int = 0, micro: int = 0, offset_seconds: int = 0) -> WideTemporal:
        """A value from its fields (``offset_seconds`` east of UTC, for an instant); the type's
        limit is its infinity. ValueError when Spark's type cannot hold it (a timestamp after
        294247-01-10)."""
        clock = ((hour * 60 + minute) * 60 + second - offset_seconds) * 1_000_000 + micro
        if logical == TIME:
            return cls(TIME, clock)
        days = days_from_civil(year, month, day)
        units = days if logical == DATE else days * DAY_MICROS + clock
        limit = _LIMIT[logical]
        if not -limit - 1 <= units <= limit:
            kind = "DateType" if logical == DATE else "TimestampType (years -290308 to 294247)"
            raise ValueError(f"{year:04d}-{month:02d}-{day:02d}: beyond what Spark's {kind} "
                             "holds")
        return cls(logical, units)

    @classmethod
    def parse(cls, text: str, logical: str) -> WideTemporal:
        """Invert ``str`` and :meth:`isoformat` for a value of type ``logical``."""
        if text in ("infinity", "-infinity"):
            return cls.infinity(logical, -1 if text[0] == "-" else 1)
        if logical == TIME:
            match = _TIME.fullmatch(text)
            if match is None:
                raise ValueError(f"not a time of day: {text!r}")
            h, m, s, frac = match.groups()
            return cls.of(TIME, 0, 0, 0, int(h), int(m), int(s), int((frac or "0").ljust(6, "0")))
        match = _ISO.fullmatch(text)
        if match is None:
            raise ValueError(f"not an ISO 8601 {logical}: {text!r}")
        y, mo, d, h, mi, s, frac, zone = match.groups()
        offset = 0
        if zone and zone != "Z":
            offset = (1 if zone[0] == "+" else -1) * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
        return cls.of(logical, int(y), int(mo), int(d), int(h or 0), int(mi or 0), int(s or 0),
                      int((frac or "0").ljust(6, "0")), offset)

    def _other(self, other: Any) -> int | None:
        if isinstance(other, WideTemporal):
            return other.units if other.type == self.type else None
        return units_of(other, self.type)

    def __lt__(self, other: Any) -> bool:
        units = self._other(other)
        return NotImplemented if units is None else self.units < units

    def __le__(self, other: Any) -> bool:
        units = self._other(other)
        return NotImplemented if units is None else self.units <= units

    def __gt__(self, other: Any) -> bool:
        units = self._other(other)
        return NotImplemented if units is None else self.units > units

    def __ge__(self, other: Any) -> bool:
        units = self._other(other)
        return NotImplemented if units is None else self.units >= units


def units_of(value: Any, logical: str) -> int | None:
    """A ``date``/``datetime``/``time`` of type ``logical`` as the units of a WideTemporal of
    that type (None for any other value)."""
    if logical == DATE and type(value) is dt.date:
        return value.toordinal() - _EPOCH_ORDINAL
    if logical in (TIMESTAMP, TIMESTAMP_TZ) and isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return int((value - _EPOCH) // _US)
    if logical == TIME and isinstance(value, dt.time):
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 \
            + value.microsecond
    if isinstance(value, WideTemporal) and value.type == logical:
        return int(value.units)
    return None


DATE_DAYS = (1 - _EPOCH_ORDINAL, dt.date.max.toordinal() - _EPOCH_ORDINAL)
"""The first and last day Python's ``date`` holds (0001-01-01, 9999-12-31), in days since
1970-01-01: the dates :func:`date_from_days` makes, and those Arrow writes as Python does."""
DATETIME_MICROS = ((dt.datetime.min - _EPOCH) // _US, (dt.datetime.max - _EPOCH) // _US)
"""The first and last microsecond Python's ``datetime`` holds (years 1-9999), since the
epoch: the timestamps :func:`datetime_from_micros` makes, and those Arrow writes as Python
(and PostgreSQL) do."""


def date_from_days(days: int) -> dt.date | WideTemporal:
    """Days since 1970-01-01 (Spark's ``DateType``) as a date, or a WideTemporal beyond it."""
    if DATE_DAYS[0] <= days <= DATE_DAYS[1]:
        return dt.date.fromordinal(days + _EPOCH_ORDINAL)
    return WideTemporal(DATE, days)


_MIN_MICROS, _MAX_MICROS = DATETIME_MICROS


def datetime_from_micros(micros: int, aware: bool) -> dt.datetime | WideTemporal:
    """Microseconds since the epoch (Spark's timestamp types) as a datetime (aware UTC when
    ``aware``), or a WideTemporal beyond it."""
    if _MIN_MICROS <= micros <= _MAX_MICROS:
        value = _EPOCH + dt.timedelta(microseconds=micros)
        return value.replace(tzinfo=dt.UTC) if aware else value
    return WideTemporal(TIMESTAMP_TZ if aware else TIMESTAMP, micros)


_ISO_INTERVAL = re.compile(r"P(?:([+-]?\d+)Y)?(?:([+-]?\d+)M)?(?:([+-]?\d+)W)?(?:([+-]?\d+)D)?"
                           r"(?:T(?:([+-]?\d+)H)?(?:([+-]?\d+)M)?(?:([+-]?)(\d+)(?:\.(\d{1,6}))?S)?)?")
_SECOND, _MINUTE, _HOUR = 1_000_000, 60_000_000, 3_600_000_000


@dataclass(frozen=True, slots=True)
class Interval:
    """An interval as PostgreSQL holds it: months, days and microseconds, each with its own sign
    and none a multiple of another (a month is not 30 days, a day not 24 hours across a
    daylight-saving change), so ``1 mon``, ``30 days`` and ``720:00:00`` are three values.

    The value of every ``interval`` column. A ``datetime.timedelta`` (what a dialect or a
    checkpoint of an earlier release may still give) is a duration of microseconds:
    :meth:`of` reads it as ``Interval(0, 0, micros)``, so hours stay hours. Its text
    (:meth:`isoformat`, ``str``) is ISO 8601 as PostgreSQL's ``IntervalStyle=iso_8601`` prints
    it: what Arrow, Spark and the targets without an interval type carry.
    """

    months: int = 0
    days: int = 0
    micros: int = 0

    @classmethod
    def of(cls, value: Interval | dt.timedelta) -> Interval:
        """``value`` as an Interval (a timedelta as its microseconds: no days)."""
        if isinstance(value, Interval):
            return value
        return cls(0, 0, value // _US)

    @classmethod
    def parse(cls, text: str) -> Interval:
        """Invert :meth:`isoformat` (also reads weeks, and signs PostgreSQL would not print)."""
        if text in _INFINITE:
            return _INFINITE[text]
        match = _ISO_INTERVAL.fullmatch(text)
        if match is None or text in ("P", "PT") or text.endswith("T"):
            raise ValueError(f"not an ISO 8601 interval: {text!r}")
        y, mo, w, d, h, mi, sign, s, frac = (g or "0" for g in match.groups())
        micros = int(h) * _HOUR + int(mi) * _MINUTE
        seconds = int(s) * _SECOND + int(frac.ljust(6, "0"))
        return cls(int(y) * 12 + int(mo), int(w) * 7 + int(d),
                   micros - seconds if sign == "-" else micros + seconds)

    def isoformat(self) -> str:
        """ISO 8601 text, each part with its sign, as PostgreSQL prints it under
        ``IntervalStyle=iso_8601`` (``P1Y2M3DT4H5M6.789S``, ``P-3DT-4H-0.5S``, ``PT0S``); PostgreSQL
        reads it back to the same months, days and microseconds, its extremes too."""
        if not (self.months or self.days or self.micros):
            return "PT0S"
        if self in _INFINITE_TEXT:
            return _INFINITE_TEXT[self]
        years, months = _truncated(self.months, 12)
        hours, rest = _truncated(self.micros, _HOUR)
        minutes, rest = _truncated(rest, _MINUTE)
        date = "".join(f"{n}{unit}" for n, unit in ((years, "Y"), (months, "M"),
                                                    (self.days, "D")) if n)
        time = "".join(f"{n}{unit}" for n, unit in ((hours, "H"), (minutes, "M")) if n)
        if rest:
            whole, fraction = divmod(abs(rest), _SECOND)
            digits = f".{fraction:06d}".rstrip("0") if fraction else ""
            time += f"{'-' if rest < 0 else ''}{whole}{digits}S"
        return f"P{date}" + (f"T{time}" if time else "")

    def __str__(self) -> str:
        return self.isoformat()

    def __lt__(self, other: Interval) -> bool:
        """PostgreSQL's order (a month as 30 days, a day as 24 hours), for keys that hold one."""
        return self.span() < other.span()

    def span(self) -> int:
        """Microseconds, a month as 30 days and a day as 24 hours: how PostgreSQL orders (and
        compares with ``=``) intervals; not the value."""
        return (self.months * 30 + self.days) * DAY_MICROS + self.micros


INTERVAL_INFINITY = Interval(2**32, 2**32, 2**64)
"""PostgreSQL's (17 and later) ``infinity`` interval, its text ``infinity`` in every style (ISO
8601's too): parts past any finite interval's (PostgreSQL 17 stores it as the largest ones,
which before 17 are a finite value), so it orders above all and is told from them."""
INTERVAL_MINUS_INFINITY = Interval(-(2**32), -(2**32), -(2**64))
"""PostgreSQL's ``-infinity`` interval, below all."""
_INFINITE = {"infinity": INTERVAL_INFINITY, "+infinity": INTERVAL_INFINITY,
             "-infinity": INTERVAL_MINUS_INFINITY}
_INFINITE_TEXT = {INTERVAL_INFINITY: "infinity", INTERVAL_MINUS_INFINITY: "-infinity"}


def _truncated(value: int, unit: int) -> tuple[int, int]:
    """``value`` divided by ``unit`` toward zero, and the rest (of ``value``'s sign), as C does."""
    whole = abs(value) // unit * (1 if value >= 0 else -1)
    return whole, value - whole * unit


def time_from_text(text: str) -> dt.time | WideTemporal:
    """A time of day as :mod:`sdk.spark.executor.batches` carries it (ISO text; ``24:00:00``
    too)."""
    try:
        return dt.time.fromisoformat(text)
    except ValueError:
        return WideTemporal.parse(text, TIME)


__all__ = ["DATETIME_MICROS", "DATE_DAYS", "INTERVAL_INFINITY", "INTERVAL_MINUS_INFINITY",
           "Interval", "WideTemporal", "civil_from_days",
           "date_from_days", "datetime_from_micros", "days_from_civil", "time_from_text",
           "units_of"]
