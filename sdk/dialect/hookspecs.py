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

Each spec is marked with its :class:`Role`, in four groups: the four fetch tasks, the other
required hooks, the optional source hooks, and the target contract; a mark also names the
capability the hook gives and whether a target-only dialect needs it. Everything else is derived
from these marks: :data:`REQUIRED_HOOKS`, :data:`TARGET_ONLY_HOOKS`, the capabilities a dialect
has (:data:`CAPABILITY_HOOKS`: implementing the hooks of a capability is what gives it; the rest,
:data:`DECLARED_CAPABILITIES`, are declared in ``dialect_info``), the stubs of
``sdk new-dialect`` and the check of ``docs/hooks.md``.

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

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypeVar

import pluggy

from .types import Capability

if TYPE_CHECKING:
    import datetime as dt

    import pyarrow as pa

    from .checksum import Checksum
    from .config import ConnectionConfig
    from .types import (
        ChangeEvent,
        Connection,
        ConnectionSecurity,
        DialectInfo,
        Key,
        LogItem,
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

_F = TypeVar("_F", bound=Callable[..., Any])


class Role(StrEnum):
    """Where a hook stands in the contract, and so whether a dialect author must write it."""

    FETCH = "fetch"
    """One of the four fetch tasks of a change-data-capture source: required."""
    REQUIRED = "required"
    """What the fetch tasks need around them, with no generic answer: required."""
    OPTIONAL = "optional"
    """A source hook the engine has a default for, or does without."""
    TARGET = "target"
    """The dialect as a sync target: both hooks or neither."""

    @property
    def required(self) -> bool:
        """Whether every dialect must implement the hooks of this role."""
        return self in (Role.FETCH, Role.REQUIRED)

    @property
    def heading(self) -> str:
        """The heading of this role's section in docs/hooks.md and in ``sdk new-dialect``."""
        return _ROLE_HEADINGS[self]


_ROLE_HEADINGS = {
    Role.FETCH: "The four fetch tasks (required)",
    Role.REQUIRED: "Identity, connections, tables and splits (required)",
    Role.OPTIONAL: "Optional source hooks",
    Role.TARGET: "The dialect as a sync target (optional: both or neither)",
}


@dataclass(frozen=True)
class Contract:
    """A hook spec's mark: its role, the capability a dialect has once it implements every
    hook marked with that capability, and whether a target-only dialect needs it too."""

    role: Role
    capability: Capability | None = None
    of_targets: bool = False
    """A required hook a target-only dialect (:attr:`sdk.DialectInfo.target_only`) implements
    as well; it also implements the hooks of capability ``apply``."""


def _spec(role: Role, capability: Capability | None = None, *, of_targets: bool = False
          ) -> Callable[[_F], _F]:
    """Mark a function as a hook spec of ``role`` (the mark is its ``sdk_contract``)."""
    def mark(function: _F) -> _F:
        function.sdk_contract = Contract(  # type: ignore[attr-defined]
            role, capability, of_targets)
        return hookspec(function)
    return mark


fetch_task = _spec(Role.FETCH)
required = _spec(Role.REQUIRED)
required_of_targets_too = _spec(Role.REQUIRED, of_targets=True)
"""A required hook that a target-only dialect needs as well (who it is, a connection)."""
optional = _spec(Role.OPTIONAL)


def gives(capability: Capability) -> Callable[[_F], _F]:
    """Mark an optional source hook that, with the others marked so, gives ``capability``."""
    return _spec(Role.OPTIONAL, capability)


target = _spec(Role.TARGET, Capability.APPLY)

# ---------------------------------------------------------------------------------------------
# (a) The four fetch tasks: where the log is, a key range, the log between offsets, their order
# ---------------------------------------------------------------------------------------------


@fetch_task
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


@fetch_task
def read_range(conn: Connection, table: TableSchema, split: SnapshotSplit, fetch_size: int
               ) -> Iterator[Sequence[Row]]:
    """Yield the rows of ``split`` in batches of about ``fetch_size`` rows.

    A plain SELECT, no locks: every row committed before the call and still present, whose key
    ``k`` has ``split.start <= k < split.end`` (None bounds are open), is yielded exactly once,
    as a tuple in ``table.columns`` order. Rows need not be in key order. A value the driver
    or Python cannot hold comes as :class:`sdk.BadValue` (its text and why), here and
    in ``stream_log``: the engine names the row and applies ``errors.mode``.
    """


@fetch_task
def stream_log(conn: Connection, tables: Sequence[TableSchema], start: Offset,
               end: Offset | None) -> Iterator[LogItem]:
    """Yield the committed row changes of ``tables`` with ``start <= offset < end``, in log
    order, each once.

    ``end`` None reads forever: yield a :class:`sdk.Heartbeat` now and then while the log
    is idle so the reader can advance; the engine stops the stream by closing the generator.
    A bounded read stops by itself at ``end``, even if no change lies at or after it, and
    yields the same events every time it is repeated. Rolled-back work never appears. Raise
    :class:`sdk.OffsetExpiredError` when ``start`` is no longer in the log.
    Events carry ``key`` (and ``old_key`` when an update changed the key) on ``table.key``.
    Rows are shaped by the :class:`~sdk.TableSchema` given in ``tables``. With
    capability ``schema_changes``: when a table's rows in the log stop matching it (a column
    added, dropped, renamed or retyped), yield a :class:`sdk.SchemaChange` with the new
    schema (as ``describe_table`` gives it) before the first change in the new shape, and shape
    that table's later rows by it; a bounded read repeated yields the same items. Where the log
    removes all of a table's rows without a change per row (``TRUNCATE``, a ``DROP TABLE``),
    yield a :class:`sdk.TableTruncated` at that point: never skip it (the mirror would
    keep rows the source no longer has).
    """


@fetch_task
def compare_offset(a: Offset, b: Offset) -> int:
    """Return a negative number, zero or a positive number as ``a`` is before, equal to or
    after ``b`` in the log.

    A total order consistent with log order. Called on the hot path (per event), so keep it
    free of I/O. Required even where offsets look comparable: only the dialect knows its log's
    order, and a guessed one would lose or repeat changes.
    """


# ---------------------------------------------------------------------------------------------
# (b) The other required hooks: identity, connections, tables and splits
# ---------------------------------------------------------------------------------------------


@required_of_targets_too
def dialect_info() -> DialectInfo:
    """Say who the dialect is: its name, the driver modules it needs, the extra that installs
    them, and the capabilities no hook shows (``before_images``, ``schema_changes``,
    ``filtered_reads``: :data:`DECLARED_CAPABILITIES`).

    Called when plugins load, before any driver is imported, so it must not import the driver.
    The ``name`` must equal the entry-point name the plugin registers under. The other
    capabilities follow from the optional hooks implemented; declaring them too is harmless.
    Required: the manager checks the name, and names the missing driver and its extra, from it.
    """


@required_of_targets_too
def connect(config: ConnectionConfig) -> Connection:
    """Open one connection to the database described by ``config``.

    Import the driver here. A missing driver raises :class:`sdk.DriverMissingError`
    naming the extra to install; bad credentials or a missing database raise
    :class:`sdk.ConfigurationError`, a server that does not answer (refused, timed out,
    restarting) :class:`sdk.RetriableError`; never with the password in the message.
    Each Spark task opens its own connection; the engine closes it with ``close()``.
    Required: every other hook but ``compare_offset`` works on a connection.
    """


@required
def list_tables(conn: Connection) -> list[TableId]:
    """Return every user table the connection can capture, in a stable order.

    The engine matches include/exclude patterns against these names. Required: catalogues
    differ between databases, and a pattern must see every table, not a guess.
    """


@required
def describe_table(conn: Connection, table: TableId) -> TableSchema:
    """Return ``table``'s columns in table order, with logical types, primary key and the
    non-null unique keys.

    Column types must be chosen so every value fits exactly (see
    :class:`sdk.LogicalType`). Raise :class:`sdk.ConfigurationError` when the
    table does not exist. Required: the columns and keys shape every split, event and mirror.
    """


@required
def next_boundary(conn: Connection, table: TableSchema, start: Key | None, size: int
                  ) -> Key | None:
    """Return the key that lies ``size`` rows after ``start`` in key order, by an index seek.

    ``start`` None means the beginning of the table. Return None when fewer than ``size`` rows
    remain after ``start``, so the split from ``start`` is the last one. The returned key must
    be strictly greater than ``start``. Must not scan the whole table. Required: it is the one
    cut that fits every key (text, compound, skewed), and only the database can seek its index.
    """


# ---------------------------------------------------------------------------------------------
# (c) Optional source hooks: the engine has a default, does without, or gains a capability
# ---------------------------------------------------------------------------------------------


@optional
def table_stats(conn: Connection, table: TableSchema) -> TableStats:
    """Return the smallest and largest key of ``table`` (on ``table.key``) and an estimate of
    its row count, cheaply (index ends and catalogue statistics, not a full count).

    Both keys are None for an empty table. The planner cuts a single integer key dense enough
    arithmetically, with no query per split, and shows progress from the estimate. Optional:
    without it (keys None, 0 rows) every table is cut by ``next_boundary`` seeks, which is
    always correct, only slower on a dense integer key, and progress has no estimate.
    """


@optional
def is_retriable(error: BaseException) -> bool | None:
    """Say whether ``error``, raised by the driver in any hook, is a passing fault: a lost or
    refused connection, a server starting or shutting down, a deadlock or lock timeout.

    The engine turns such an error into :class:`sdk.RetriableError`, so ``sdk sync``
    restarts from its checkpoint instead of stopping (Debezium's per-connector error handler
    plays this part). Return False (or nothing) for the rest: bad SQL, missing privileges,
    purged logs. Optional; without it only the dialect's own ``RetriableError`` is retried.
    """


@optional
def preflight(conn: Connection, tables: Sequence[TableId]) -> list[Requirement]:
    """Check that the server is set up for change capture of ``tables``.

    Return one :class:`sdk.Requirement` per setting or privilege, each with the exact
    statement that fixes it when it is missing. The engine refuses to start while a required
    one is missing (``required=False`` marks advice: a warning) and ``sdk check`` prints them
    all. Name the privilege to read a table ``SELECT on <table>``, and give it only for a
    table that may exist: a table pattern that finds nothing shows its fix (listings hide
    tables the user may not read). Optional: without it nothing is checked.
    """


@optional
def prepare_capture(conn: Connection, tables: Sequence[TableSchema]) -> None:
    """Create, idempotently, the server-side objects capture needs for ``tables`` (triggers, a
    publication, a replication slot...). Called on the driver before the first offset is taken.
    Optional: without it nothing is created.
    """


@optional
def table_identities(conn: Connection, tables: Sequence[TableId]) -> dict[TableId, str]:
    """Return a token of each table's incarnation (PostgreSQL: its OID) that changes when the
    table is dropped and created again under its name; leave out tables that do not exist.

    A table dropped and created again leaves rows in a mirror that no change deletes, and
    rows written to the new one before the sync took it into its capture (a publication) may
    not be in the log at all. In its log phase the engine compares the tokens every
    ``tables.discovery-interval.ms`` (at once when a sync resumes) and reads such a table
    again, its capture prepared again first. Optional: without it such a table is not noticed.
    """


@optional
def server_identity(conn: Connection) -> dict[str, str]:
    """Return what identifies the source server and the log it keeps, as names and values
    (MySQL ``server_uuid``, PostgreSQL ``system_identifier``, timeline and database OID...).

    A sync records it in its checkpoint at its first start; at every later start the engine
    compares each name both have and stops with :class:`sdk.LogMismatchError`, naming
    both values, when one differs: a checkpoint's offsets mean nothing in another server's log.
    Give only what stays the same for the life of the log (not a host name, which a move
    changes). Optional: without it a resumed checkpoint is not checked against its server.
    """


@optional
def check_offset(conn: Connection, offset: Offset) -> None:
    """Raise :class:`sdk.LogMismatchError` when the server's log does not hold
    ``offset`` as a position it wrote (in a log file the server does not list, past that
    file's end, not where an event starts: a reset or restored log, another server), or
    :class:`sdk.OffsetExpiredError` when it held it once and no longer does (purged).

    Called at every start of a resumed sync with the position it resumes from, and by
    ``sdk check --checkpoint``. A position past ``current_offset`` the engine refuses by
    itself, at every start and poll. Optional: without it only that check is made.
    """


@optional
def locate_offset(conn: Connection, offset: Offset, source: Mapping[str, str]
                  ) -> Offset | None:
    """Return where this server's log holds the point ``offset`` names in the log of another
    server of its replication topology (the primary before a failover, whose
    ``server_identity`` was ``source``): the position of the first change that came after
    ``offset`` there, found by what the offset carries across servers (a MariaDB GTID
    position, ...).

    Called when a resumed sync finds another server than its checkpoint's (its
    ``server_identity`` changed), for every position the checkpoint keeps; the sync then goes
    on from the new server without a new snapshot. Return None when the offset carries
    nothing to find it by (the engine uses the nearest one below it that does, and reads the
    changes between again). Raise
    :class:`sdk.LogMismatchError` when this server lacks changes logged before
    ``offset`` (a lossy failover), naming them, or when it is not a server of ``source``'s
    topology as far as the dialect can tell. Optional: without it such a sync stops.
    """


@optional
def connection_security(conn: Connection) -> list[ConnectionSecurity]:
    """Return how each kind of connection the dialect opens to the server is protected (the
    queries' connection, and the log stream's where it opens its own): encrypted or not, the
    certificate verified or not, the TLS version and the server certificate's subject.

    ``sdk check`` shows each as ``[OK]`` when the certificate was verified and ``[WARN]``
    otherwise. Optional: without it ``sdk check`` says nothing of TLS.
    """


@optional
def same_transaction(a: Offset, b: Offset) -> bool:
    """Whether the changes at offsets ``a`` and ``b`` (``a`` not above ``b``) were committed
    by one source transaction. A log batch cut for size (``log.batch.changes``,
    ``log.batch.bytes``) is cut between two transactions, never inside one, so a target that
    applies a batch in one transaction moves from one source commit to another. Without it
    every change counts as a transaction of its own.
    """


@gives(Capability.ATOMIC_SNAPSHOT)
def begin_snapshot(conn: Connection, token: str | None) -> SnapshotView | None:
    """Open a consistent read view on ``conn`` and return its exact offset.

    Until ``end_snapshot``, ``read_range`` on ``conn`` must see exactly the changes below
    ``view.offset``, so the engine uses it as both watermarks and skips the backfill. With a
    ``token`` from an earlier view, join that view instead (a PostgreSQL exported snapshot);
    return None if the token is no longer valid. With ``end_snapshot``: capability
    ``atomic_snapshot``. Without them each split is read between two ``current_offset`` calls.
    It must work before ``prepare_capture`` ran: a batch read and a stream that snapshots and
    stops read no log, so the engine prepares no capture for them (no slot left behind).
    """


@gives(Capability.ATOMIC_SNAPSHOT)
def end_snapshot(conn: Connection) -> None:
    """Close the view ``begin_snapshot`` opened on ``conn``. With ``begin_snapshot``:
    capability ``atomic_snapshot``."""


@gives(Capability.ARROW_READS)
def read_range_arrow(conn: Connection, table: TableSchema, split: SnapshotSplit
                     ) -> pa.Table | None:
    """Read ``split`` as ``read_range`` does, into one Arrow table of ``table``'s columns in
    order, typed as :func:`sdk.dialect.arrow.arrow_type` gives, each value the one ``read_range``'s
    row would become through :mod:`sdk.dialect.arrow`; or return None, having read nothing or not,
    when it cannot for this table or one of its values (the engine then reads the split with
    ``read_range``, in the same view).

    The engine calls it only inside a ``begin_snapshot`` view (nothing to merge from the log)
    for a split read the first time, so a dialect may read the whole split at once (memory
    stays O(split), as with ``read_range``) in whatever form its server sends fastest and
    convert it a column at a time. Capability ``arrow_reads``; without it every split is
    read with ``read_range``.
    """


@gives(Capability.CHECKSUM)
def checksum_range(conn: Connection, table: TableSchema, split: SnapshotSplit
                   ) -> Checksum | None:
    """The checksum of the rows ``read_range`` would read for ``split`` (its ``where`` too),
    computed in the server: their count and the sum of their hashes, as
    :mod:`sdk.dialect.checksum` defines them (``Checksum.of_sum`` takes the server's sum); or
    None, having read nothing, when the server cannot write the canonical text of one of
    ``table``'s columns (the engine then hashes the rows ``read_range`` reads).

    ``sdk verify`` calls it on the source and on a database target alike (``table`` is then
    the target table, with the source's logical types). With ``row_hashes``: capability
    ``checksum``; without them ``sdk verify`` reads every row.
    """


@gives(Capability.CHECKSUM)
def row_hashes(conn: Connection, table: TableSchema, split: SnapshotSplit
               ) -> Iterator[tuple[Key, int]] | None:
    """Each row of ``split`` as its key (the values ``read_range`` gives) and its 64-bit hash
    (:func:`sdk.dialect.checksum.row_hash`), in key order, computed in the server; or None as
    :func:`checksum_range` (the same tables). ``sdk verify`` calls it to find which rows of a
    chunk differ. With ``checksum_range``: capability ``checksum``.
    """


@gives(Capability.EARLIEST)
def earliest_offset(conn: Connection) -> Offset | None:
    """Return the oldest offset still in the log (startup mode ``earliest``).
    Capability ``earliest``; without it that startup mode is refused."""


@gives(Capability.TIMESTAMP)
def offset_at_time(conn: Connection, timestamp: dt.datetime) -> Offset | None:
    """Return the offset of the first change committed at or after ``timestamp`` (an aware
    datetime) for startup mode ``timestamp``. Capability ``timestamp``; without it that
    startup mode is refused."""


@gives(Capability.ACKNOWLEDGE)
def acknowledge_offset(conn: Connection, offset: Offset) -> None:
    """Tell the server that every change below ``offset`` is committed downstream, so it may
    release that part of the log (advance a replication slot).

    Called only after the engine committed up to ``offset``, never beyond it. Must be
    idempotent and never move backwards. Capability ``acknowledge``; without it the engine
    tells the server nothing.
    """


# ---------------------------------------------------------------------------------------------
# (d) The target contract: the dialect as the mirror a sync writes to
# ---------------------------------------------------------------------------------------------


@target
def create_table(conn: Connection, table: TableSchema) -> None:
    """Create ``table`` in the target if it does not exist, with the same columns and key.

    Raise :class:`sdk.ConfigurationError` when a table of that name exists with other
    columns. With ``apply_changes``: capability ``apply``.
    """


@target
def apply_changes(conn: Connection, table: TableSchema, events: Sequence[ChangeEvent],
                  batch_id: str) -> bool:
    """Apply ``events`` (in order) to ``table`` idempotently, in one transaction that also
    records ``batch_id``.

    ``r``/``c``/``u`` upsert the after image, ``d`` deletes the key; an update with ``old_key``
    first deletes the old key. Return False, changing nothing, when ``batch_id`` was already
    applied to this table (a replayed batch). A value the target refuses raises the driver's
    DB-API ``DataError``/``IntegrityError`` (or :class:`sdk.DataError`) with nothing
    written: under ``errors.mode=skip`` the engine then applies the batch in halves to find
    it. With ``create_table``: capability ``apply``.
    """


@_spec(Role.TARGET, Capability.ALTER)
def alter_table(conn: Connection, old: TableSchema, new: TableSchema) -> None:
    """Alter target table ``old`` (made by ``create_table``) to ``new``'s columns, in place,
    keeping its rows: add the columns ``new`` adds (nullable), drop those it drops, change a
    column's type to a wider one. ``new`` keeps the key. Idempotent: called again when the
    table is already altered (a replayed batch), it changes nothing. Capability ``alter``;
    without it a sync stops at a schema change it would follow (``schema.changes=evolve``).
    """


@_spec(Role.TARGET, Capability.BULK_LOAD)
def load_snapshot(conn: Connection, table: TableSchema, rows: pa.Table, batch_id: str) -> bool:
    """Load one snapshot split's ``rows`` into ``table`` idempotently, in one transaction that
    also records ``batch_id``, with the outcome of :func:`apply_changes` given each row as an
    ``r`` event; return False, changing nothing, when ``batch_id`` was applied already.

    ``rows`` holds ``table``'s columns in order (names as the table's), typed as
    :func:`sdk.dialect.arrow.arrow_type` gives (dates and timestamps past Python's range as their
    days or microseconds); keys are distinct but may already be in the table (a table read again).
    :func:`sdk.dialect.arrow.python_values` turns a column back into the values ``apply_changes``
    takes, for what the dialect cannot load as it is. Capability ``bulk_load``; without it,
    snapshot rows go through ``apply_changes``.
    """


@_spec(Role.TARGET, Capability.TRANSACTIONS)
def apply_transaction(conn: Connection) -> AbstractContextManager[object]:
    """A context manager: one target transaction that the ``apply_changes``,
    ``load_snapshot`` and ``alter_table`` calls on ``conn`` inside its block join, committed
    when the block ends and rolled back when it raises.

    Each call inside stays all-or-nothing on its own (a savepoint: a batch applied in halves
    under ``errors.mode=skip`` rolls back only its half) and records its batch id as before,
    but nothing commits before the block does. The engine applies each log batch, every table
    of it, in one block: the mirror moves from one source commit to a later one. A target whose
    ``alter_table`` commits on its own (MySQL's DDL) commits there. Capability
    ``transactions``; without it each call commits by itself.
    """


@_spec(Role.TARGET)
def read_target_range(conn: Connection, table: TableSchema, split: SnapshotSplit,
                      fetch_size: int) -> Iterator[Sequence[Row]]:
    """Read the rows of target table ``table`` (made by ``create_table``) in ``split``'s key
    range as ``read_range`` would read them from the source: the values ``apply_changes`` was
    given. ``sdk verify`` compares them with the source's. Without it a target that implements
    ``read_range`` is read with it (its stored values are the source's); a target with
    neither cannot be verified.
    """


@_spec(Role.TARGET)
def applied_tables(conn: Connection, tables: Sequence[TableSchema]) -> dict[TableId, bool]:
    """Of target tables ``tables``, those that exist, each with whether the target's
    applied-batch ledger holds a batch of it (a target keeping its ledger in each table's
    history: whether that history holds one). A resumed sync asks it once per start, before
    it creates a table: a table the target lost (dropped; its database or the ledger dropped
    and created again) is read again whole. Without it the target is trusted.
    """


@_spec(Role.TARGET)
def target_preflight(conn: Connection, tables: Sequence[TableSchema]) -> list[Requirement]:
    """Check that this target user may mirror into ``tables`` (target tables, named as the
    sync writes them, its ``_sdk_position`` tables among them; the ledger is the dialect's
    own, checked in each of their schemas): one :class:`sdk.Requirement` per right, with the
    exact GRANT that gives it. A table that exists needs only the rights to read and write
    its rows; one that is missing, the right to create it (in its schema, or the schema
    itself), named as one the sync makes. Asked before anything is made at the source, so a
    refused sync leaves no slot behind; ``sdk check --target`` prints them. Without it the
    rights show when a table is made or written.
    """


@_spec(Role.TARGET)
def trim_ledger(conn: Connection, table: TableSchema, low: str, high: str) -> None:
    """Delete the applied-batch ledger's rows of target table ``table`` whose batch id is in
    ``[low, high)`` (compared as text): batches no replay can ask about any more. Called
    inside the ``apply_transaction`` block of a later batch of the table (whose own row
    stays), so the ledger holds O(tables) rows however long the sync runs, and a table keeps
    the rows of its latest batches (``applied_tables``). Without it the ledger grows by a row
    per table per batch.
    """


# ---------------------------------------------------------------------------------------------
# Derived from the marks above
# ---------------------------------------------------------------------------------------------

CONTRACT: dict[str, Contract] = {
    name: value.sdk_contract for name, value in list(globals().items())
    if isinstance(getattr(value, "sdk_contract", None), Contract)
}
"""Every hook spec's mark, by hook name, in the order of this module."""

REQUIRED_HOOKS = tuple(name for name, c in CONTRACT.items() if c.role.required)
"""Hooks every dialect must implement; the manager refuses a plugin that lacks one."""

OPTIONAL_HOOKS = tuple(name for name, c in CONTRACT.items() if not c.role.required)
"""Hooks a dialect may leave out (the target contract included)."""

CAPABILITY_HOOKS: dict[Capability, tuple[str, ...]] = {
    capability: tuple(name for name, c in CONTRACT.items() if c.capability is capability)
    for capability in Capability
    if any(c.capability is capability for c in CONTRACT.values())
}
"""The hooks whose implementation gives each capability; the others are declared."""

DECLARED_CAPABILITIES = tuple(c for c in Capability if c not in CAPABILITY_HOOKS)
"""The capabilities no hook gives (behaviours of required hooks): a dialect declares them in
``dialect_info``."""

TARGET_ONLY_HOOKS = tuple(name for name, c in CONTRACT.items()
                          if c.of_targets or name in CAPABILITY_HOOKS[Capability.APPLY])
"""What a target-only dialect (:attr:`sdk.DialectInfo.target_only`) must implement: the
required hooks marked ``of_targets`` and the hooks of capability ``apply``."""


def capabilities_of(hooks: Collection[str]) -> frozenset[Capability]:
    """The capabilities a plugin implementing ``hooks`` has: each one whose hooks are all
    among them."""
    return frozenset(capability for capability, needed in CAPABILITY_HOOKS.items()
                     if all(hook in hooks for hook in needed))


def half_implemented(hooks: Collection[str]) -> dict[Capability, tuple[str, ...]]:
    """The hooks missing from each capability that ``hooks`` implement only part of."""
    out = {}
    for capability, needed in CAPABILITY_HOOKS.items():
        missing = tuple(hook for hook in needed if hook not in hooks)
        if missing and len(missing) < len(needed):
            out[capability] = missing
    return out
