"""The user-facing options of a sync, with the names Flink CDC and SeaTunnel users know.

Options arrive as strings (Spark's ``.option(k, v)``, the CLI's ``--option k=v``); a typo gets
the closest known name suggested, a bad value names the option and what it takes.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ..errors import ConfigurationError


class StartupMode(StrEnum):
    """Where a new sync starts (``startup.mode``)."""

    INITIAL = "initial"
    """Snapshot every table, then follow the log (the default)."""
    SNAPSHOT = "snapshot"
    """Snapshot every table and stop."""
    LATEST = "latest"
    """No snapshot: changes from now on."""
    EARLIEST = "earliest"
    """No snapshot: every change the log still holds."""
    SPECIFIC_OFFSET = "specific-offset"
    """No snapshot: changes from ``startup.specific-offset`` (an offset's JSON)."""
    TIMESTAMP = "timestamp"
    """No snapshot: changes committed at or after ``startup.timestamp-millis``."""


@dataclass(frozen=True)
class SyncOptions:
    """Parsed options; see :data:`OPTIONS` for each one's meaning."""

    split_size: int = 8096
    fetch_size: int = 1024
    exactly_once: bool = True
    startup_mode: StartupMode = StartupMode.INITIAL
    specific_offset: dict[str, Any] | None = None
    timestamp_millis: int | None = None
    chunk_key: dict[str, tuple[str, ...]] = field(default_factory=dict)
    even_factor_upper: float = 1.25
    even_factor_lower: float = 0.95
    atomic_snapshot: bool = True
    log_batch_max_events: int = 100_000

    @classmethod
    def from_strings(cls, options: Mapping[str, str]) -> SyncOptions:
        """Parse string options; unknown names and bad values raise ConfigurationError."""
        values: dict[str, Any] = {}
        known = {name.lower(): name for name in OPTIONS}
        for raw_name, raw in options.items():
            name = known.get(raw_name.lower())
            if name is None:
                if raw_name.lower() in PASSTHROUGH:
                    continue
                close = difflib.get_close_matches(raw_name.lower(), list(known), n=1)
                hint = f"; did you mean {known[close[0]]!r}?" if close else ""
                raise ConfigurationError(f"unknown option {raw_name!r}{hint}")
            attr, parse, _ = OPTIONS[name]
            try:
                values[attr] = parse(raw)
            except (ValueError, TypeError) as exc:
                raise ConfigurationError(f"option {name!r}: {exc}") from None
        return cls(**values)


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise ValueError(f"must be a positive integer, got {text!r}")
    return value


def _bool(text: str) -> bool:
    lowered = str(text).strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"must be true or false, got {text!r}")


def _mode(text: str) -> StartupMode:
    try:
        return StartupMode(text.strip().lower())
    except ValueError:
        choices = ", ".join(m.value for m in StartupMode)
        raise ValueError(f"must be one of {choices}, got {text!r}") from None


def _offset_json(text: str) -> dict[str, Any]:
    data = json.loads(text)
    if not isinstance(data, dict) or "dialect" not in data or "position" not in data:
        raise ValueError('must be an offset\'s JSON: {"dialect": ..., "position": {...}}')
    return data


def _chunk_keys(text: str) -> dict[str, tuple[str, ...]]:
    """``shop.orders:region,id;shop.users:email`` -> {table: columns}."""
    out: dict[str, tuple[str, ...]] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        table, sep, columns = part.rpartition(":")
        if not sep or not table or not columns:
            raise ValueError(f"expected TABLE:COL[,COL...][;TABLE:...], got {part!r}")
        out[table] = tuple(c.strip() for c in columns.split(","))
    return out


def _factor(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise ValueError(f"must be a positive number, got {text!r}")
    return value


OPTIONS: dict[str, tuple[str, Any, str]] = {
    "snapshot.split.size": ("split_size", _positive_int,
                            "rows per snapshot split (default 8096)"),
    "snapshot.fetch.size": ("fetch_size", _positive_int,
                            "rows per fetch inside a split (default 1024)"),
    "exactly_once": ("exactly_once", _bool,
                     "merge each split with the log window read during it, so no change is "
                     "emitted twice (default true); false emits at least once"),
    "startup.mode": ("startup_mode", _mode,
                     "initial | snapshot | latest | earliest | specific-offset | timestamp"),
    "startup.specific-offset": ("specific_offset", _offset_json,
                                "the offset JSON to start from in specific-offset mode"),
    "startup.timestamp-millis": ("timestamp_millis", int,
                                 "epoch milliseconds to start from in timestamp mode"),
    "chunk-key.column": ("chunk_key", _chunk_keys,
                         "TABLE:COL[,COL];...: a non-null unique key to split and merge on, "
                         "for tables without a primary key or to override it"),
    "chunk-key.even-distribution.factor.upper-bound": (
        "even_factor_upper", _factor,
        "cut an integer key arithmetically only when (max-min+1)/rows is at most this "
        "(default 1.25: the largest split is then at most 1.25x the split size)"),
    "chunk-key.even-distribution.factor.lower-bound": (
        "even_factor_lower", _factor, "and at least this (default 0.95)"),
    "snapshot.atomic": ("atomic_snapshot", _bool,
                        "use the dialect's consistent snapshot view where it has one "
                        "(default true)"),
    "log.batch.max-events": ("log_batch_max_events", _positive_int,
                             "most change events in one log batch (default 100000)"),
}

#: Options read by other layers (the URL, table patterns, Spark); accepted and ignored here.
PASSTHROUGH = {"url", "tables", "statedir", "path", "checkpointlocation", "table",
               "heartbeat.interval.ms", "parallelism", "target", "source"}
