"""What a sync does when the source changes under it: a table's columns change, its rows are
removed outside the row log (a truncation), a snapshot of it is asked for, or it is dropped and
created again. Pure functions of the sync's state, called by both drivers (the sequential
:class:`~.runner.SyncRunner` and the Spark stream reader), which do only the I/O around them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from enum import Enum

from ..dialect.errors import ConfigurationError, FatalSyncError
from ..dialect.types import Offset, SchemaChange, TableId, TableSchema, TableTruncated
from .assigner import choose_key
from .schema import diff
from .settings import SyncOptions
from .state import Phase, SyncState

log = logging.getLogger(__name__)

SCHEMA_REQUEST = "schema-"
"""How the id of a read asked for by a schema change starts (the sync's own request)."""
TRUNCATED_REQUEST = "truncated-"
"""How the id of a read asked for by a truncation starts."""


def busy(state: SyncState, table: TableId) -> bool:
    """Whether ``table`` is being read (or read again) or leaving: a new read of it waits."""
    return table in state.plans or table in state.finished or table in state.leaving


def applied_tables(sync: SyncState) -> list[TableId]:
    """The tables whose rows (all or some) state ``sync`` says were applied to the target,
    which a resumed sync reads again whole when its target lost them: in the snapshot, those
    with a split read; then every table but those leaving and those added whose first read
    has not read a split yet."""
    if sync.phase is Phase.SNAPSHOT:
        return [t for t in sync.tables if sync.finished.get(t)]
    return [t for t in sync.tables if t not in sync.leaving and
            (t not in sync.plans or t in sync.rereads or sync.finished.get(t))]


@dataclass(frozen=True)
class SchemaVerdict:
    """What a log batch does with one schema change met: ``schema`` is the table's columns from
    there on (None: the change is ignored, the rows read as the sync's columns)."""

    schema: TableSchema | None
    quiet: bool
    """Nothing the output carries changed (a column's nullability, say)."""
    described: str


def judge_schema_change(current: TableSchema, change: SchemaChange, policy: str,
                        options: SyncOptions) -> SchemaVerdict:
    """The verdict on ``change`` of a table whose columns are ``current``, under the
    ``schema.changes`` ``policy`` (``evolve``, ``stop``, ``ignore``). Raises
    :class:`ConfigurationError` naming the way out for a change the sync cannot follow: one
    that could lose values (a narrowed type, a new key), or any that shows under ``stop``."""
    new = choose_key(change.schema, options)
    found = diff(current, new)
    if policy == "ignore" and not found.key_changed:
        return SchemaVerdict(None, found.quiet, found.describe())
    refusal = None if found.quiet else found.refusal()
    if refusal is None and policy == "stop" and not found.quiet:
        refusal = "schema.changes=stop"
    if refusal is not None:
        raise ConfigurationError(
            f"table {change.table} changed in the log at {change.offset} "
            f"({found.describe()}), and this sync cannot follow it: {refusal}. Take a new "
            "snapshot (a new checkpoint), or for a change that loses nothing use the envelope "
            "or a target with schema.changes=evolve (or =ignore to keep the old columns)")
    return SchemaVerdict(new, found.quiet, found.describe())


def fold_schema_changes(state: SyncState, changes: Sequence[SchemaChange],
                        options: SyncOptions, waiting: Iterable[TableId] = ()
                        ) -> tuple[SyncState, list[TableId]]:
    """``state`` with the schema changes a log batch followed, and the tables to read again
    whole: each that gained columns (the rows the log did not touch get their values, a
    default or a renamed column's), unless a whole read of it is ``waiting`` already."""
    tables, versions = dict(state.tables), dict(state.versions)
    queued, rereads = set(waiting), []
    for change in changes:
        old = tables.get(change.table)
        if old is None:
            continue
        new = choose_key(change.schema, options)
        tables[change.table] = new
        found = diff(old, new)
        if not found.quiet:
            versions[change.table] = versions.get(change.table, 1) + 1
        log.warning("table %s: columns changed at %s (%s): followed", change.table,
                    change.offset, found.describe())
        if found.needs_reread and change.table not in queued:
            queued.add(change.table)
            rereads.append(change.table)
    return replace(state, tables=tables, versions=versions), rereads


def truncation_error(item: TableTruncated) -> FatalSyncError:
    """The error of a sync that emits row changes (no target to read the table into again)
    meeting a truncation: no row change expresses it."""
    return FatalSyncError(
        f"{item.statement} of {item.table} at {item.offset}: it removes every row without "
        "logging them, which a stream of row changes (a --changes path, the cdc source "
        "without option target) cannot express, so downstream would keep rows the source no "
        "longer has. A sync with --target alone reads the table again whole; or take a new "
        "snapshot (restart with a new --checkpoint directory)")


def read_after(state: SyncState, item: TableTruncated,
               compare: Callable[[Offset, Offset], int]) -> bool:
    """Whether every split of ``item``'s table read so far in its first snapshot was read
    after it (each holds the rows as at a watermark above it), so the truncation is in them
    already: the log phase may begin below the splits' watermarks, where the snapshot began.
    Not for a table read again, whose splits send only the keys changed since a position."""
    splits = state.finished.get(item.table, ())
    return bool(splits) and item.table not in state.rereads and \
        all(f.split.since is None and compare(item.offset, f.watermark) < 0 for f in splits)


def follow_truncation(state: SyncState, item: TableTruncated, has_target: bool,
                      compare: Callable[[Offset, Offset], int] | None = None) -> bool:
    """Whether a log batch passes ``item`` on to be read again whole (a target deletes the
    rows the new read lacks). A stream of row changes cannot carry it: it stops, unless the
    table was dropped (it leaves the capture at the next look, or comes back as new rows).
    One every split read already holds (``compare`` given) is passed over."""
    if item.table not in state.tables:
        return False
    if compare is not None and read_after(state, item, compare):
        return False
    if has_target:
        return True
    if not item.dropped:
        raise truncation_error(item)
    log.warning("table %s: %s at %s: a stream of changes carries no deletes of its rows; it "
                "leaves the capture at the next look, or a table created again under its "
                "name comes as new rows", item.table, item.statement, item.offset)
    return False


def truncations_to_reread(state: SyncState, items: Sequence[TableTruncated],
                          waiting: Iterable[TableId],
                          exists: Callable[[TableId], bool] | None,
                          compare: Callable[[Offset, Offset], int] | None = None
                          ) -> list[TableTruncated]:
    """The truncations a batch met whose table is read again whole: captured, not waiting
    for a whole read already. ``exists`` (None when the sync looks at the tables itself, and
    a dropped table then leaves) says whether a dropped table is back: one gone for good
    stays captured, with a warning."""
    queued, out = set(waiting), []
    for item in items:
        if item.table not in state.tables or item.table in queued or \
                (compare is not None and read_after(state, item, compare)):
            continue
        if exists is not None and item.dropped and not exists(item.table):
            log.warning("table %s: %s at %s, and it is gone (tables.discovery-interval.ms is "
                        "0, so it stays captured)", item.table, item.statement, item.offset)
            continue
        queued.add(item.table)
        out.append(item)
        log.warning("table %s: %s at %s removed its rows: it is read again whole",
                    item.table, item.statement, item.offset)
    return out


class RequestStep(Enum):
    """What a snapshot request waiting in the log phase gets."""

    DONE = "done"
    """The state holds its read already (a committed state): forget it."""
    LEFT = "left"
    """The sync's own request of a table that left the capture: recorded as served."""
    REFUSED = "refused"
    WAIT = "wait"
    """Its table is being read or leaving: looked at again at the next batch."""
    SERVE = "serve"


def judge_request(state: SyncState, request_id: str, table: TableId, where: str | None,
                  filtered_reads: bool) -> tuple[RequestStep, str | None]:
    """The step for one snapshot request, and the reason of a refusal."""
    if request_id in state.served:
        return RequestStep.DONE, None
    refusal = None
    if table not in state.tables:
        if request_id.startswith(TRUNCATED_REQUEST):  # the table was dropped and left
            return RequestStep.LEFT, None
        refusal = f"table {table} is not captured"
    elif where is not None and not filtered_reads:
        refusal = "the dialect cannot read the rows meeting a condition"
    if refusal is not None:
        return RequestStep.REFUSED, refusal
    if busy(state, table):
        return RequestStep.WAIT, None
    return RequestStep.SERVE, None


def served(state: SyncState, request_id: str) -> SyncState:
    """``state`` with ``request_id`` recorded as served (refused, or its table left)."""
    return replace(state, served=(*state.served, request_id))


def check_recreated(table: TableId, captured: TableSchema, live: TableSchema,
                    options: SyncOptions) -> None:
    """Refuse to read again as ``captured`` a table dropped and created again whose columns
    or key differ (``live``, as the source describes it now)."""
    live = choose_key(live, options)
    found = diff(captured, live)
    if found.refusal() is not None or \
            [c.name for c in live.columns] != list(captured.column_names):
        raise ConfigurationError(
            f"table {table} was dropped and created again with other columns or key "
            f"({found.describe()}): the sync cannot read it again as the table it captured. "
            "Take a new snapshot (restart with a new --checkpoint directory)")


def recreated_request(met: str, table: TableId) -> str:
    """The id of the read of ``table`` met with another incarnation token ``met``."""
    return f"recreated/{met}/{table}"


def own_request_id(prefix: str, batch: int, digest: str) -> str:
    """The id of a read the sync asks for itself: it names the batch (``batch``) and the
    table (``digest``), so a batch planned again asks for the same one."""
    return f"{prefix}{batch:012d}-{digest}"
