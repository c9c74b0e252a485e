"""The dialect contract: every hook a dialect plugin may implement.

A dialect plugin is a module (or object) with functions decorated ``@sdk.hookimpl`` whose
names match the specs below. It registers under its dialect name in the ``sdk.dialects``
entry-point group::

    [project.entry-points."sdk.dialects"]
    mydb = "sdk_mydb"

The engine calls the hooks of the chosen dialect only (never of every installed one), so a
dialect never sees another's calls. An implementation may accept a subset of a spec's
arguments. The reference implementation is ``plugins/sdk_sqlite``; the full reference with
examples is ``docs/hooks.md``.

Required hooks: ``dialect_info``, ``connect``, ``list_tables``, ``describe_table``,
``table_stats``, ``next_boundary``, ``current_offset``, ``read_range``, ``stream_log``,
``compare_offset``. The others are optional; a dialect that implements one declares the matching
:class:`sdk.types.Capability` in its ``dialect_info``.

Rules for every hook:

- Offsets are positions in the change log, "half-open": a change belongs to ``[low, high)``
  when ``low <= change.offset < high``.
- Keys compare as Python tuples. ``read_range`` must select exactly the rows whose key tuple
  ``k`` has ``start <= k < end`` in that order (use a binary collation for text keys).
- Values from ``read_range`` and from ``stream_log`` are the same Python values for the same
  data (one type mapping; instants as aware UTC datetimes).
- Drivers are imported inside the hooks, never at module import, so the plugin loads and can be
  listed without its driver.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    import datetime as dt

    from .config import ConnectionConfig
    from .types import (
        ChangeEvent,
        Connection,
        DialectInfo,
        Heartbeat,
        Key,
        Offset,
        Requirement,
        Row,
        SnapshotSplit,
        SnapshotView,
        TableId,
        TableSchema,
        TableStats,
    )

PROJECT = "sdk"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

# ---------------------------------------------------------------------------------------------
# Identity and connections
# ---------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def dialect_info() -> DialectInfo:
    """Say who the dialect is: its name, the driver modules it needs, the extra that installs
    them, and its optional capabilities.

    Called when plugins load, before any driver is imported, so it must not import the driver.
    The ``name`` must equal the entry-point name the plugin registers under.
    """


@hookspec(firstresult=True)
def connect(config: ConnectionConfig) -> Connection:
    """Open one connection to the database described by ``config``.

    Import the driver here. A missing driver raises :class:`sdk.errors.DriverMissingError`
    naming the extra to install; bad credentials or a missing database raise
    :class:`sdk.errors.ConfigurationError`, a server that does not answer (refused, timed out,
    restarting) :class:`sdk.errors.RetriableError`; never with the password in the message.
    Each Spark task opens its own connection; the engine closes it with ``close()``.
    """


@hookspec(firstresult=True)
def is_retriable(error: BaseException) -> bool | None:
    """Say whether ``error``, raised by the driver in any hook, is a passing fault: a lost or
    refused connection, a server starting or shutting down, a deadlock or lock timeout.

    The engine turns such an error into :class:`sdk.errors.RetriableError`, so ``sdk sync``
    restarts from its checkpoint instead of stopping (Debezium's per-connector error handler
    plays this part). Return False (or nothing) for the rest: bad SQL, missing privileges,
    purged logs. Optional; without it only the dialect's own ``RetriableError`` is retried.
    """


@hookspec(firstresult=True)
def preflight(conn: Connection, tables: Sequence[TableId]) -> list[Requirement]:
    """Check that the server is set up for change capture of ``tables``.

    Return one :class:`sdk.types.Requirement` per setting or privilege, each with the exact
    statement that fixes it when it is missing. The engine refuses to start while a required
    one is missing (``required=False`` marks advice: a warning) and ``sdk check`` prints them
    all. Optional: without it nothing is checked.
    """


@hookspec(firstresult=True)
def prepare_capture(conn: Connection, tables: Sequence[TableSchema]) -> None:
    """Create, idempotently, the server-side objects capture needs for ``tables`` (triggers, a
    publication, a replication slot...). Called on the driver before the first offset is taken.
    Optional.
    """


# ---------------------------------------------------------------------------------------------
# Tables and splits
# ---------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def list_tables(conn: Connection) -> list[TableId]:
    """Return every user table the connection can capture, in a stable order.

    The engine matches include/exclude patterns against these names.
    """


@hookspec(firstresult=True)
def describe_table(conn: Connection, table: TableId) -> TableSchema:
    """Return ``table``'s columns in table order, with logical types, primary key and the
    non-null unique keys.

    Column types must be chosen so every value fits exactly (see
    :class:`sdk.types.LogicalType`). Raise :class:`sdk.errors.ConfigurationError` when the
    table does not exist.
    """


@hookspec(firstresult=True)
def table_stats(conn: Connection, table: TableSchema) -> TableStats:
    """Return the smallest and largest key of ``table`` (on ``table.key``) and an estimate of
    its row count, cheaply (index ends and catalogue statistics, not a full count).

    Both keys are None for an empty table. The planner uses these to decide whether a numeric
    key is dense enough to cut arithmetically.
    """


@hookspec(firstresult=True)
def next_boundary(conn: Connection, table: TableSchema, start: Key | None, size: int
                  ) -> Key | None:
    """Return the key that lies ``size`` rows after ``start`` in key order, by an index seek.

    ``start`` None means the beginning of the table. Return None when fewer than ``size`` rows
    remain after ``start``, so the split from ``start`` is the last one. The returned key must
    be strictly greater than ``start``. Must not scan the whole table.
    """


# ---------------------------------------------------------------------------------------------
# The four fetch tasks
# ---------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def current_offset(conn: Connection) -> Offset:
    """Return the position the next change will get.

    Implementations must guarantee: monotonic across calls; strictly above every change
    visible to any reader before the call; and *visibility*: every change below the returned
    offset is visible to a SELECT that starts after this call returns. If the database's raw
    log position does not promise that (MySQL binlog, PostgreSQL WAL), close the window here by
    waiting until the changes in flight below the head are visible, or use
    ``begin_snapshot``. Returning the oldest in-flight position instead is not enough: the
    offset is also a split's high watermark, and must lie above what its read saw.
    """


@hookspec(firstresult=True)
def read_range(conn: Connection, table: TableSchema, split: SnapshotSplit, fetch_size: int
               ) -> Iterator[Sequence[Row]]:
    """Yield the rows of ``split`` in batches of about ``fetch_size`` rows.

    A plain SELECT, no locks: every row committed before the call and still present, whose key
    ``k`` has ``split.start <= k < split.end`` (None bounds are open), is yielded exactly once,
    as a tuple in ``table.columns`` order. Rows need not be in key order.
    """


@hookspec(firstresult=True)
def stream_log(conn: Connection, tables: Sequence[TableSchema], start: Offset,
               end: Offset | None) -> Iterator[ChangeEvent | Heartbeat]:
    """Yield the committed row changes of ``tables`` with ``start <= offset < end``, in log
    order, each once.

    ``end`` None reads forever: yield a :class:`sdk.types.Heartbeat` now and then while the log
    is idle so the reader can advance; the engine stops the stream by closing the generator.
    A bounded read stops by itself at ``end``, even if no change lies at or after it, and
    yields the same events every time it is repeated. Rolled-back work never appears. Raise
    :class:`sdk.errors.OffsetExpiredError` when ``start`` is no longer in the log.
    Events carry ``key`` (and ``old_key`` when an update changed the key) on ``table.key``.
    """


@hookspec(firstresult=True)
def compare_offset(a: Offset, b: Offset) -> int:
    """Return a negative number, zero or a positive number as ``a`` is before, equal to or
    after ``b`` in the log.

    A total order consistent with log order. Called on the hot path (per event), so keep it
    free of I/O.
    """


# ---------------------------------------------------------------------------------------------
# Optional: consistent snapshots, startup positions, acknowledgement
# ---------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def begin_snapshot(conn: Connection, token: str | None) -> SnapshotView | None:
    """Open a consistent read view on ``conn`` and return its exact offset.

    Until ``end_snapshot``, ``read_range`` on ``conn`` must see exactly the changes below
    ``view.offset``, so the engine uses it as both watermarks and skips the backfill. With a
    ``token`` from an earlier view, join that view instead (a PostgreSQL exported snapshot);
    return None if the token is no longer valid. Capability ``atomic_snapshot``.
    """


@hookspec(firstresult=True)
def end_snapshot(conn: Connection) -> None:
    """Close the view ``begin_snapshot`` opened on ``conn``."""


@hookspec(firstresult=True)
def earliest_offset(conn: Connection) -> Offset | None:
    """Return the oldest offset still in the log (startup mode ``earliest``).
    Capability ``earliest``."""


@hookspec(firstresult=True)
def offset_at_time(conn: Connection, timestamp: dt.datetime) -> Offset | None:
    """Return the offset of the first change committed at or after ``timestamp`` (an aware
    datetime) for startup mode ``timestamp``. Capability ``timestamp``."""


@hookspec(firstresult=True)
def acknowledge_offset(conn: Connection, offset: Offset) -> None:
    """Tell the server that every change below ``offset`` is committed downstream, so it may
    release that part of the log (advance a replication slot).

    Called only after the engine committed up to ``offset``, never beyond it. Must be
    idempotent and never move backwards. Capability ``acknowledge``.
    """


# ---------------------------------------------------------------------------------------------
# Optional: the dialect as a sync target
# ---------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def create_table(conn: Connection, table: TableSchema) -> None:
    """Create ``table`` in the target if it does not exist, with the same columns and key.

    Raise :class:`sdk.errors.ConfigurationError` when a table of that name exists with other
    columns. Capability ``apply``.
    """


@hookspec(firstresult=True)
def apply_changes(conn: Connection, table: TableSchema, events: Sequence[ChangeEvent],
                  batch_id: str) -> bool:
    """Apply ``events`` (in order) to ``table`` idempotently, in one transaction that also
    records ``batch_id``.

    ``r``/``c``/``u`` upsert the after image, ``d`` deletes the key; an update with ``old_key``
    first deletes the old key. Return False, changing nothing, when ``batch_id`` was already
    applied to this table (a replayed batch). Capability ``apply``.
    """


REQUIRED_HOOKS = (
    "dialect_info",
    "connect",
    "list_tables",
    "describe_table",
    "table_stats",
    "next_boundary",
    "current_offset",
    "read_range",
    "stream_log",
    "compare_offset",
)
"""Hooks every dialect must implement; the manager refuses a plugin that lacks one."""
