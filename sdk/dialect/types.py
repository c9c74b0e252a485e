"""The data that flows between the engine and a dialect: offsets, tables, splits, change events.

Every type here is plain data: it pickles (Spark ships it to executors) and round-trips through
JSON with ``to_json`` / ``from_json`` (checkpoints and offsets are JSON).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Literal, Protocol

from .codec import decode_key, encode_key
from .temporal import WideTemporal

_quote: Callable[[str], str] = json.encoder.encode_basestring_ascii

Key = tuple[Any, ...]
"""A row's key: the values of its key columns, in key order. Keys compare as Python tuples."""

Row = tuple[Any, ...]
"""A row's values in the order of :attr:`TableSchema.columns`."""

OffsetValue = str | int | None

Op = Literal["r", "c", "u", "d"]
"""``r`` snapshot read, ``c`` insert, ``u`` update, ``d`` delete."""


class Offset:
    """A position in one dialect's change log, opaque to the engine.

    Holds a dialect name and a small map of string/int fields (binlog file and position, an LSN,
    an SCN...). Only the dialect's ``compare_offset`` orders two offsets. Equal offsets have equal
    canonical JSON, so an offset can key a dict and be compared as text by Spark.
    """

    __slots__ = ("_items", "dialect")

    dialect: str
    _items: tuple[tuple[str, OffsetValue], ...]

    def __init__(self, dialect: str, fields: Mapping[str, OffsetValue] | None = None, /,
                 **kw: OffsetValue) -> None:
        merged = {**(fields or {}), **kw}
        for name, value in merged.items():
            if not (value is None or isinstance(value, (str, int))) or isinstance(value, bool):
                raise TypeError(f"offset field {name!r} must be str, int or None, got {value!r}")
        object.__setattr__(self, "dialect", dialect)
        object.__setattr__(self, "_items", tuple(sorted(merged.items())))

    @classmethod
    def from_sorted(cls, dialect: str, items: tuple[tuple[str, OffsetValue], ...]) -> Offset:
        """Build an offset from ``(name, value)`` pairs already sorted by name and checked, for
        per-change hot paths (it skips the checks ``Offset(...)`` makes)."""
        offset: Offset = _new(cls)
        _set_dialect(offset, dialect)
        _set_items(offset, items)
        return offset

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Offset is immutable")

    def __getitem__(self, name: str) -> OffsetValue:
        for key, value in self._items:
            if key == name:
                return value
        raise KeyError(name)

    def get(self, name: str, default: OffsetValue = None) -> OffsetValue:
        """The field ``name``, or ``default`` when the offset has no such field."""
        try:
            return self[name]
        except KeyError:
            return default

    @property
    def fields(self) -> dict[str, OffsetValue]:
        """The fields as a new dict."""
        return dict(self._items)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Offset):
            return NotImplemented
        return self.dialect == other.dialect and self._items == other._items

    def __hash__(self) -> int:
        return hash((self.dialect, self._items))

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._items)
        return f"Offset({self.dialect!r}, {inner})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Offset, (self.dialect, dict(self._items)))

    def to_json(self) -> dict[str, Any]:
        """``{"dialect": ..., "position": {...}}``."""
        return {"dialect": self.dialect, "position": dict(self._items)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Offset:
        """Invert :meth:`to_json`."""
        return cls(data["dialect"], data["position"])

    def json_text(self) -> str:
        """``sdk.dialect.codec.dumps(self.to_json())``, built directly: it is written once per
        change."""
        inner = ",".join(f"{_quote(k)}:{_scalar(v)}" for k, v in self._items)
        return f'{{"dialect":{_quote(self.dialect)},"position":{{{inner}}}}}'


# The slots' own setters: ``from_sorted`` runs per change, and ``object.__setattr__`` (needed
# because ``__setattr__`` refuses) costs twice as much as calling the descriptors directly.
_new = object.__new__
_set_dialect = Offset.__dict__["dialect"].__set__
_set_items = Offset.__dict__["_items"].__set__


def _scalar(value: OffsetValue) -> str:
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    return _quote(value)


@dataclass(frozen=True, order=True, slots=True)
class TableId:
    """A table's name within its database: ``schema`` is the MySQL database, the PostgreSQL,
    Oracle or SQL Server schema, or ``main`` for SQLite."""

    schema: str
    name: str

    def __str__(self) -> str:
        return f"{self.schema}.{self.name}"

    @classmethod
    def parse(cls, text: str, default_schema: str = "") -> TableId:
        """``"shop.orders"`` -> ``TableId("shop", "orders")``; a bare name gets
        ``default_schema``."""
        schema, dot, name = text.rpartition(".")
        return cls(schema if dot else default_schema, name)

    def to_json(self) -> list[str]:
        return [self.schema, self.name]

    @classmethod
    def from_json(cls, data: Sequence[str]) -> TableId:
        return cls(data[0], data[1])


class LogicalType(StrEnum):
    """Database-neutral column types; the engine maps them to Arrow and Spark types.

    A dialect picks the one that holds every value of the source type exactly (BIGINT UNSIGNED
    is a ``DECIMAL`` of precision 20; a decimal wider than 38 digits stays ``DECIMAL`` and the
    engine keeps it as a string).
    """

    BOOLEAN = "boolean"
    INT8 = "int8"
    INT16 = "int16"
    INT32 = "int32"
    INT64 = "int64"
    FLOAT32 = "float32"
    FLOAT64 = "float64"
    DECIMAL = "decimal"
    STRING = "string"
    BINARY = "binary"
    DATE = "date"
    TIME = "time"
    TIMESTAMP = "timestamp"
    """A wall-clock date and time with no zone (``datetime`` without tzinfo)."""
    TIMESTAMP_TZ = "timestamp_tz"
    """An instant (aware ``datetime`` in UTC)."""
    # DATE, TIME, TIMESTAMP and TIMESTAMP_TZ values beyond Python's datetime (infinity, BC,
    # years past 9999, 24:00:00) are ``sdk.dialect.temporal.WideTemporal``.
    INTERVAL = "interval"
    JSON = "json"
    """JSON document kept as its text."""


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a table as the dialect describes it."""

    name: str
    type: LogicalType
    source_type: str
    nullable: bool = True
    precision: int | None = None
    scale: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type.value, "source_type": self.source_type,
                "nullable": self.nullable, "precision": self.precision, "scale": self.scale}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Column:
        return cls(data["name"], LogicalType(data["type"]), data["source_type"],
                   data["nullable"], data["precision"], data["scale"])


@dataclass(frozen=True, slots=True)
class TableSchema:
    """A table's columns and keys.

    ``key`` names the columns that identify a row for splitting, merging and routing: the
    primary key unless the user chose a non-null unique key. It is empty when the table has
    neither, and such a table cannot be captured.
    """

    table: TableId
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...] = ()
    unique_keys: tuple[tuple[str, ...], ...] = ()
    key: tuple[str, ...] = ()
    key_index: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.key and self.primary_key:
            object.__setattr__(self, "key", self.primary_key)
        names = [c.name for c in self.columns]
        missing = [k for k in self.key if k not in names]
        if missing:
            raise ValueError(f"key column(s) {missing} not in table {self.table}")
        object.__setattr__(self, "key_index", tuple(names.index(k) for k in self.key))

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def key_columns(self) -> TableSchema:
        """This table with only its key columns (in table order): to read keys alone."""
        columns = tuple(c for c in self.columns if c.name in self.key)
        return TableSchema(self.table, columns, self.primary_key if set(self.primary_key) <=
                           set(self.key) else (), (), self.key)

    def key_row(self, key: Key) -> Row:
        """A row with only the key columns set (the others None): a delete's image where
        the log has no before image, or a key to delete by."""
        row: list[Any] = [None] * len(self.columns)
        for index, value in zip(self.key_index, key, strict=True):
            row[index] = value
        return tuple(row)

    def key_of(self, row: Row) -> Key:
        """The key of a row given in column order (called per change: no generator)."""
        index = self.key_index
        if len(index) == 1:
            return (row[index[0]],)
        return tuple([row[i] for i in index])

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table.to_json(), "columns": [c.to_json() for c in self.columns],
                "primary_key": list(self.primary_key),
                "unique_keys": [list(k) for k in self.unique_keys], "key": list(self.key)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TableSchema:
        return cls(TableId.from_json(data["table"]),
                   tuple(Column.from_json(c) for c in data["columns"]),
                   tuple(data["primary_key"]), tuple(tuple(k) for k in data["unique_keys"]),
                   tuple(data["key"]))


@dataclass(frozen=True, slots=True)
class TableStats:
    """What the planner needs to choose between arithmetic and index-seek cuts."""

    min_key: Key | None
    max_key: Key | None
    approx_rows: int


@dataclass(frozen=True, slots=True)
class SnapshotSplit:
    """The half-open key range ``[start, end)`` of one table; ``None`` means unbounded.

    The splits of a table are numbered from 0 and together cover every key exactly once.
    """

    table: TableId
    index: int
    start: Key | None
    end: Key | None
    where: str | None = None
    """A SQL condition on the table's columns that the rows read must also meet (a snapshot
    on demand of some rows); only dialects with :attr:`Capability.FILTERED_READS` get one."""
    since: Offset | None = None
    """For a table read again while its changes flow (a snapshot on demand): the log
    position up to which they were emitted. The engine's concern; dialects ignore it."""

    @property
    def split_id(self) -> str:
        return f"{self.table}:{self.index}"

    def contains(self, key: Key) -> bool:
        return (self.start is None or key >= self.start) and (self.end is None or key < self.end)

    def to_json(self) -> dict[str, Any]:
        out = {"table": self.table.to_json(), "index": self.index,
               "start": encode_key(self.start), "end": encode_key(self.end)}
        if self.where is not None:
            out["where"] = self.where
        if self.since is not None:
            out["since"] = self.since.to_json()
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SnapshotSplit:
        since = data.get("since")
        return cls(TableId.from_json(data["table"]), data["index"],
                   decode_key(data["start"]), decode_key(data["end"]), data.get("where"),
                   Offset.from_json(since) if since is not None else None)


@dataclass(frozen=True, slots=True)
class FinishedSplit:
    """A snapshot split that was read and emitted, with the watermark the log phase filters on:
    changes to its keys below ``watermark`` are already in what it emitted."""

    split: SnapshotSplit
    watermark: Offset
    rows: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"split": self.split.to_json(), "watermark": self.watermark.to_json(),
                "rows": self.rows}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FinishedSplit:
        return cls(SnapshotSplit.from_json(data["split"]), Offset.from_json(data["watermark"]),
                   data["rows"])


@dataclass(slots=True)
class ChangeEvent:
    """One row change.

    ``key`` is the row's key after the change (for a delete, the deleted key). An update that
    changed the key also carries ``old_key``; the engine routes it as a delete of ``old_key``
    and an insert of ``key``. ``before`` is set only where the log records a before image.
    ``commit_ts`` is the commit time in microseconds since the Unix epoch (UTC), when known.
    """

    table: TableId
    op: Op
    key: Key
    after: Row | None
    offset: Offset
    before: Row | None = None
    old_key: Key | None = None
    commit_ts: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table.to_json(), "op": self.op, "key": encode_key(self.key),
                "after": encode_key(self.after), "before": encode_key(self.before),
                "old_key": encode_key(self.old_key), "offset": self.offset.to_json(),
                "commit_ts": self.commit_ts}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ChangeEvent:
        key = decode_key(data["key"])
        assert key is not None
        return cls(TableId.from_json(data["table"]), data["op"], key, decode_key(data["after"]),
                   Offset.from_json(data["offset"]), decode_key(data["before"]),
                   decode_key(data["old_key"]), data["commit_ts"])


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Yielded by ``stream_log`` while the log is idle: every change below ``offset`` of the
    chosen tables has been yielded, so a reader may move its position there."""

    offset: Offset


@dataclass(frozen=True, slots=True)
class SchemaChange:
    """Yielded by ``stream_log`` (dialects with :attr:`Capability.SCHEMA_CHANGES`) before the
    first change of a table whose rows in the log no longer have the columns of the schema it
    was given: from ``offset`` on, that table's rows are shaped by ``schema`` (a column added,
    dropped, renamed or retyped)."""

    schema: TableSchema
    offset: Offset

    @property
    def table(self) -> TableId:
        return self.schema.table


@dataclass(frozen=True, slots=True)
class TableTruncated:
    """Yielded by ``stream_log`` where the log removes every row of a captured table at once
    without a change per row: ``TRUNCATE``, or the table dropped (or renamed away, replaced)
    when a table of its name may come back. Changes of the table after ``offset`` are its new
    rows. A sync with a target reads the table again whole to remove the rows it no longer
    has; one that streams changes stops at a truncation of rows naming the fix (it cannot
    express it as row changes) and goes on past a dropped table."""

    table: TableId
    offset: Offset
    statement: str = "TRUNCATE"
    """What the log did, for messages (``TRUNCATE``, ``DROP TABLE``, ``RENAME TABLE``...)."""
    dropped: bool = False
    """The table itself went away (dropped, renamed away, replaced), rather than its rows: a
    stream of changes then goes on (the table leaves the capture, or a new one of its name
    comes as new rows); a truncation of rows stops it."""

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table.to_json(), "offset": self.offset.to_json(),
                "statement": self.statement, "dropped": self.dropped}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TableTruncated:
        return cls(TableId.from_json(data["table"]), Offset.from_json(data["offset"]),
                   data["statement"], data.get("dropped", False))


LogItem = ChangeEvent | Heartbeat | SchemaChange | TableTruncated
"""What ``stream_log`` yields."""


@dataclass(frozen=True, slots=True)
class SnapshotView:
    """A consistent read view opened by ``begin_snapshot``: reads on that connection see exactly
    the changes below ``offset``. ``token`` lets other connections join the same view."""

    offset: Offset
    token: str | None = None


class Capability(StrEnum):
    """Optional abilities of a dialect (the conformance kit tests each one it has).

    A dialect has a capability when it implements the optional hooks that give it (marked in
    :mod:`sdk.dialect.hookspecs`); ``before_images``, ``schema_changes`` and ``filtered_reads``,
    which no hook shows, are declared in :class:`DialectInfo`. Declaring the others too is accepted
    (older plugins do).
    """

    ATOMIC_SNAPSHOT = "atomic_snapshot"
    """``begin_snapshot`` opens a view whose offset is exact: no backfill needed."""
    BEFORE_IMAGES = "before_images"
    """Update and delete events carry the full before image."""
    APPLY = "apply"
    """The dialect can be a sync target (``create_table`` and ``apply_changes``)."""
    ACKNOWLEDGE = "acknowledge"
    """The log must be told which offsets were committed downstream (a replication slot)."""
    EARLIEST = "earliest"
    """``earliest_offset`` works (startup mode ``earliest``)."""
    TIMESTAMP = "timestamp"
    """``offset_at_time`` works (startup mode ``timestamp``)."""
    ALTER = "alter"
    """A sync target that follows a source table's schema changes (``alter_table``)."""
    SCHEMA_CHANGES = "schema_changes"
    """``stream_log`` yields a :class:`SchemaChange` when a table's columns change in the log
    (then shapes its rows by the new schema), instead of failing; declared in
    :class:`DialectInfo`."""
    FILTERED_READS = "filtered_reads"
    """``read_range`` also applies a split's ``where`` condition (a snapshot on demand of the
    rows matching a predicate); declared in :class:`DialectInfo`."""
    ARROW_READS = "arrow_reads"
    """``read_range_arrow`` reads a split into an Arrow table, without a Python value per
    cell (used inside a snapshot view)."""
    CHECKSUM = "checksum"
    """``checksum_range`` and ``row_hashes`` hash a chunk's rows in the server (``sdk verify``
    sends two numbers a chunk, not its rows)."""
    BULK_LOAD = "bulk_load"
    """A sync target that loads a snapshot split's rows as one Arrow table
    (``load_snapshot``), without a Python value per cell."""
    TRANSACTIONS = "transactions"
    """A sync target that applies a whole log batch, every table of it, in one transaction
    (``apply_transaction``): a reader of the target never sees half a source transaction."""


@dataclass(frozen=True, slots=True)
class DialectInfo:
    """Who a dialect is and what it needs: returned by the ``dialect_info`` hook."""

    name: str
    title: str
    drivers: tuple[str, ...] = ()
    """Modules the dialect imports to talk to its database: checked without importing by
    ``sdk dialects``, imported ahead by the workers of a sync before their first connection."""
    extra: str | None = None
    """The ``pip install 'sdk[EXTRA]'`` that installs the drivers."""
    capabilities: frozenset[Capability] = frozenset()
    """The capabilities no hook shows (``before_images``, ``schema_changes``,
    ``filtered_reads``); the manager adds the ones the dialect's hooks give."""
    url_schemes: tuple[str, ...] = ()
    """URL schemes that select this dialect, besides its name."""
    url_options: tuple[tuple[str, str], ...] | None = None
    """The URL query options the dialect reads, as (name, what it does); any other option in a
    URL is an error naming the closest one (``password_env`` / ``password_file`` are always
    known). None: not declared, nothing is checked."""
    target_only: bool = False
    """A target and never a source (a table format, a warehouse): such a plugin implements
    ``dialect_info``, ``connect``, ``create_table`` and ``apply_changes`` (and may implement
    ``alter_table``, ``read_range``, ``is_retriable``); the source hooks are not required."""


@dataclass(frozen=True, slots=True)
class Requirement:
    """One preflight check: a setting or privilege the dialect needs, and how to fix it."""

    name: str
    ok: bool
    detail: str = ""
    fix: str = ""
    required: bool = True
    """False for advice: the engine warns instead of refusing to start."""

    def __str__(self) -> str:
        status = "OK" if self.ok else ("MISSING" if self.required else "WARN")
        text = f"[{status}] {self.name}"
        if self.detail:
            text += f": {self.detail}"
        if not self.ok and self.fix:
            text += f"\n    fix: {self.fix}"
        return text


@dataclass(frozen=True)
class ConnectionSecurity:
    """How one of a dialect's connections to a server is protected, as ``sdk check`` shows it:
    whether it is encrypted, whether the server's certificate was verified, with what."""

    connection: str
    """Which connection: ``queries``, ``binlog stream``, ``replication``..."""
    encrypted: bool
    verified: bool = False
    """The server's certificate chains to a trusted CA (a verifying TLS mode was asked)."""
    host_checked: bool = False
    """The certificate was also matched against the host name connected to."""
    version: str | None = None
    """The TLS version, e.g. ``TLSv1.3``."""
    cipher: str | None = None
    subject: str | None = None
    """The server certificate's subject, e.g. ``CN=db.example.com``, when it can be read."""
    fix: str = ""
    """The URL option that would encrypt or verify the connection, for the warning."""

    def requirement(self) -> Requirement:
        """This connection as a line of ``sdk check``: OK when verified, else a warning."""
        if not self.encrypted:
            detail = "not encrypted"
        else:
            detail = f"encrypted ({', '.join(filter(None, (self.version, self.cipher)))})"
            detail += ", certificate verified" if self.verified else \
                ", server certificate NOT verified"
            if self.verified:
                detail += ", host name checked" if self.host_checked else \
                    ", host name not checked"
            if self.subject:
                detail += f", server certificate {self.subject}"
        return Requirement(f"TLS on the {self.connection} connection", self.verified,
                           detail, self.fix, required=False)


class BadValue:
    """A value a dialect read that the sync cannot carry (beyond what Python or Spark holds):
    its text as the source gave it and why. A dialect's converter returns one instead of
    raising, so the engine can name the row (table, key, column) and apply ``errors.mode``:
    stop there, or set the change aside in the dead-letter table and go on."""

    __slots__ = ("reason", "text")
    made: ClassVar[int] = 0
    """How many were made in this process: the engine looks for them in what it read only
    when this moved (a scan of every value would cost every row)."""

    def __init__(self, text: str, reason: str) -> None:
        self.text, self.reason = text, reason
        BadValue.made += 1

    def __repr__(self) -> str:
        return f"BadValue({self.text!r}, {self.reason!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BadValue) and (self.text, self.reason) == \
            (other.text, other.reason)

    def __hash__(self) -> int:
        return hash((self.text, self.reason))


class Connection(Protocol):
    """What the engine needs of the object a dialect's ``connect`` returns: it can be closed.
    Everything else about it is the dialect's own business."""

    def close(self) -> None: ...




__all__ = [
    "BadValue",
    "Capability",
    "ChangeEvent",
    "Column",
    "Connection",
    "ConnectionSecurity",
    "DialectInfo",
    "FinishedSplit",
    "Heartbeat",
    "Key",
    "LogicalType",
    "Offset",
    "Op",
    "Requirement",
    "Row",
    "SnapshotSplit",
    "SnapshotView",
    "TableId",
    "TableSchema",
    "TableStats",
    "WideTemporal",
]
