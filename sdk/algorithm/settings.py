"""The user-facing options of a sync, with the names Flink CDC and SeaTunnel users know.

Declared once in :data:`OPTIONS` (see :mod:`sdk.dialect.options`): parsing, the suggestion for a
typo, the error for a bad value and the documentation's table all come from it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ..dialect.options import Option, OptionTable, boolean, choice, positive_float, positive_int


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

    split_size: int = 32768
    """Four times Flink CDC's 8096: each split has fixed costs (a watermark or view, a staged
    file, a target transaction) that an 8096-row split read as Arrow no longer hides;
    docs/operations.md has the figures."""
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
    snapshot_rows_per_second: float | None = None
    log_changes_per_second: float | None = None

    @classmethod
    def from_strings(cls, options: Mapping[str, str],
                     known: OptionTable | None = None) -> SyncOptions:
        """Parse the algorithm's string options. ``known`` is the table of every option the
        caller accepts (other layers' are skipped); a name in none of them, or a bad value,
        raises ConfigurationError naming the option."""
        return cls(**(known or OPTIONS).parse(options, LAYER))


def _mode(text: str) -> StartupMode:
    return StartupMode(_MODE_CHOICE(text))


_MODE_CHOICE = choice(*(m.value for m in StartupMode),
                      aliases={"latest-offset": "latest", "earliest-offset": "earliest"})


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


LAYER = "algorithm"
_DEFAULTS = SyncOptions()


def _option(name: str, attr: str, parse: Any, help: str, aliases: tuple[str, ...] = (),
            shown_default: str | None = None, deprecated: tuple[str, ...] = ()) -> Option:
    return Option(name, attr, parse, getattr(_DEFAULTS, attr), help, LAYER, aliases,
                  shown_default, deprecated)


OPTIONS = OptionTable(
    _option("snapshot.split.size", "split_size", positive_int, "rows per snapshot split",
            ("scan.incremental.snapshot.chunk.size",)),
    _option("snapshot.fetch.size", "fetch_size", positive_int,
            "rows per fetch inside a split", ("scan.snapshot.fetch.size",)),
    _option("exactly-once", "exactly_once", boolean,
            "merge each split with the log window read during it, so no change is emitted "
            "twice; false emits at least once", deprecated=("exactly_once",)),
    _option("startup.mode", "startup_mode", _mode,
            "`initial`, `snapshot`, `latest`, `earliest`, `specific-offset`, `timestamp` "
            "(Flink's `latest-offset`, `earliest-offset` too)", ("scan.startup.mode",)),
    _option("startup.specific-offset", "specific_offset", _offset_json,
            "the offset JSON to start from in `specific-offset` mode"),
    _option("startup.timestamp-millis", "timestamp_millis", int,
            "epoch milliseconds to start from in `timestamp` mode",
            ("scan.startup.timestamp-millis",)),
    _option("chunk-key.column", "chunk_key", _chunk_keys,
            "`TABLE:COL[,COL];...`: the key to split and merge on, for tables without a "
            "primary key or to override it: a non-null unique key, or NOT NULL columns whose "
            "values you assert are unique (nothing enforces it: rows sharing a value become "
            "one row, so exactly-once holds only while they are unique; PostgreSQL needs "
            "`REPLICA IDENTITY FULL` for them)", shown_default="primary key"),
    _option("chunk-key.even-distribution.factor.upper-bound", "even_factor_upper",
            positive_float, "cut an integer key arithmetically only when (max-min+1)/rows is "
            "at most this (the largest split is then at most this times the split size)"),
    _option("chunk-key.even-distribution.factor.lower-bound", "even_factor_lower",
            positive_float, "and at least this"),
    _option("snapshot.atomic", "atomic_snapshot", boolean,
            "use the dialect's consistent snapshot view where it has one"),
    _option("log.batch.max-events", "log_batch_max_events", positive_int,
            "most change events in one log batch of the in-process runner"),
    _option("snapshot.rows-per-second", "snapshot_rows_per_second", positive_float,
            "read the snapshot no faster than this many rows per second in all (shared by "
            "the tasks reading at once), to spare the source", shown_default="no limit"),
    _option("log.changes-per-second", "log_changes_per_second", positive_float,
            "read the log no faster than this many changes per second",
            shown_default="no limit"),
)
"""The algorithm's options (Flink CDC and SeaTunnel names; Flink CDC's ``scan.*`` accepted)."""
