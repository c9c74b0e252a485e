"""Lossless JSON encoding of the values a key, a row or an offset may hold.

State files, offsets and the change envelope are JSON; database values are richer (Decimal,
bytes, dates, instants). Plain JSON values stay as they are; the others become a one-key object
whose key starts with ``$``, so a round trip gives back the same Python value and type. A
:class:`~sdk.dialect.temporal.WideTemporal` (a date or time Python cannot hold) takes its type's
tag with ISO 8601 text that Spark parses to the same value (``{"$date": "-0043-03-15"}``). An
:class:`~sdk.dialect.temporal.Interval` is ``{"$interval": "P1Y2M3DT4H"}`` (its ISO 8601 text); a
``timedelta`` is encoded as the Interval of its microseconds, and the ``$timedelta`` of an
earlier release's checkpoints (whole microseconds) still decodes, as that Interval.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from .temporal import DATE, TIME, TIMESTAMP, TIMESTAMP_TZ, Interval, WideTemporal

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def encode_value(value: Any) -> Any:
    """Return a JSON-ready form of ``value`` that :func:`decode_value` turns back into it."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, dt.datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"$date": value.isoformat()}
    if isinstance(value, dt.time):
        return {"$time": value.isoformat()}
    if isinstance(value, (Interval, dt.timedelta)):
        return {"$interval": Interval.of(value).isoformat()}
    if isinstance(value, WideTemporal):
        return {_WIDE_TAGS[value.type]: value.isoformat()}
    if isinstance(value, (list, tuple)):
        return [encode_value(v) for v in value]
    if isinstance(value, dict):
        return {"$object": {str(k): encode_value(v) for k, v in value.items()}}
    raise TypeError(f"cannot encode a value of type {type(value).__name__} as JSON: {value!r}")


_WIDE_TAGS = {DATE: "$date", TIMESTAMP: "$datetime", TIMESTAMP_TZ: "$datetime", TIME: "$time"}


def _date(text: str) -> dt.date | WideTemporal:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        return WideTemporal.parse(text, DATE)


def _datetime(text: str) -> dt.datetime | WideTemporal:
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:  # beyond Python's years: an instant has its UTC offset
        aware = text.endswith("Z") or text[-6:-5] in ("+", "-")
        return WideTemporal.parse(text, TIMESTAMP_TZ if aware else TIMESTAMP)


def _time(text: str) -> dt.time | WideTemporal:
    try:
        return dt.time.fromisoformat(text)
    except ValueError:
        return WideTemporal.parse(text, TIME)


_DECODERS: dict[str, Callable[[Any], Any]] = {
    "$float": float,
    "$decimal": Decimal,
    "$bytes": base64.b64decode,
    "$datetime": _datetime,
    "$date": _date,
    "$time": _time,
    "$interval": Interval.parse,
    "$timedelta": lambda us: Interval(0, 0, us),  # checkpoints of an earlier release
    "$object": lambda obj: {k: decode_value(v) for k, v in obj.items()},
}


def decode_value(value: Any) -> Any:
    """Invert :func:`encode_value`."""
    if isinstance(value, dict):
        ((tag, inner),) = value.items()
        return _DECODERS[tag](inner)
    if isinstance(value, list):
        return [decode_value(v) for v in value]
    return value


def encode_key(key: tuple[Any, ...] | None) -> list[Any] | None:
    """Encode a key tuple (or None for an open split end)."""
    return None if key is None else [encode_value(v) for v in key]


def decode_key(data: list[Any] | None) -> tuple[Any, ...] | None:
    """Invert :func:`encode_key`."""
    return None if data is None else tuple(decode_value(v) for v in data)


def dumps(data: Any) -> str:
    """Canonical JSON: sorted keys, no spaces, so equal data gives equal text."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)


def micros_to_datetime(micros: int) -> dt.datetime:
    """An epoch-microsecond instant as an aware UTC datetime."""
    return _EPOCH + dt.timedelta(microseconds=micros)


def position_label(position: str) -> str:
    """A log position as shown (``sdk status``, the live display, the logs): the fields of
    the offset (``file mysql-bin.000007 pos 245066236``, ``lsn 23456789``), not its JSON; a
    change's index within its transaction only when not the first."""
    try:
        data = json.loads(position)
    except ValueError:
        return position
    fields = data.get("position") if isinstance(data, dict) else None
    if not isinstance(fields, dict):
        return position if fields is None else str(fields)
    return " ".join(f"{name} {value}" for name, value in fields.items()
                    if not (name == "n" and value == 0))
