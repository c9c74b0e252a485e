"""Progress of a sync, per table and overall, from its state: the report ``sdk status``, the
live display, the pipe lines, ``sdk status --json``, the metrics and the streaming query's
progress show (:class:`ProgressReport`), and the parts it is shown as (:class:`Part`). How
each part reads is the application's (:mod:`sdk.app.report`) and the metrics' business
(:mod:`sdk.job.metrics`); here it is built from the state only."""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum, StrEnum
from typing import Any

from ..dialect.codec import dumps
from ..dialect.types import FinishedSplit, SnapshotSplit, TableId
from .state import Phase, SyncState

STARTING = "starting"
"""The phase a report shows before the sync wrote its first one (no :class:`Phase` yet)."""


class TableState(StrEnum):
    """A table's state in a progress report: no split of it handed out yet, its snapshot is
    being read (in the log phase too, for a table added there), read (the log phase is still
    to start, or the sync stops there), its changes are followed, it is read again while they
    are (a snapshot on demand), it leaves the capture at a log offset (gone from the source or
    the patterns), or it left."""

    WAITING = "waiting"
    SNAPSHOTTING = "snapshotting"
    SNAPSHOT_DONE = "snapshot done"
    STREAMING = "streaming"
    RESNAPSHOTTING = "re-snapshotting"
    LEAVING = "leaving"
    DROPPED = "dropped"


class Part(Enum):
    """The parts of a progress report, in the order a line shows them. Every reader handles
    each one (``match`` over it, checked by mypy): the lines and the live display
    (:mod:`sdk.app.report`, :mod:`sdk.app.display`: ``sdk sync``, ``sdk status``), the
    metrics (:mod:`sdk.job.metrics`); ``sdk status --json`` is :meth:`ProgressReport.to_json`,
    which holds them all."""

    TABLES = "per table: splits done and estimated, rows, state, schema version"
    REQUESTS = "snapshot requests refused"
    PHASE = "the phase (resuming: the last run's report)"
    ROWS = "rows the snapshot read"
    RATE = "the snapshot's rows per second"
    ETA = "the snapshot's time left"
    APPLIED = "changes applied by this run, and their rate"
    SKIPPED = "changes set aside in the dead-letter table"
    CAUGHT_UP = "whether what was applied reached the log head"
    LAG = "now minus the commit time of the newest change applied"
    POSITION = "the log position applied"
    CONSISTENT = "the source commit the target reflects, and since when it is consistent"
    AGE = "how old the report is"


_TABLE_KEYS = frozenset(("splits_done", "splits_estimated", "rows", "snapshot_done", "state",
                         "schema_version", "dropped_at"))


@dataclass(slots=True)
class TableProgress:
    """One table's figures in a report. ``state`` and ``schema_version`` are None in a report
    written by an early version (shown by ``snapshot_done``; version 1); ``dropped_at``: the
    log position where a dropped table left; ``extra``: fields this version does not know,
    kept as read.

    Treated as immutable (reports share the entries of unchanged tables: change one with
    :func:`dataclasses.replace`); not frozen, which would make building thousands of them
    at every batch several times slower."""

    splits_done: int = 0
    splits_estimated: int = 0
    rows: int = 0
    snapshot_done: bool = False
    state: str | None = None
    """A :class:`TableState` (a plain string read from a later version's report)."""
    schema_version: int | None = None
    dropped_at: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def version(self) -> int:
        """The version of the table's columns: 1 as first captured."""
        return 1 if self.schema_version is None else self.schema_version

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {**self.extra, "splits_done": self.splits_done,
                               "splits_estimated": self.splits_estimated, "rows": self.rows,
                               "snapshot_done": self.snapshot_done}
        if self.state is not None:
            out["state"] = str(self.state)
        if self.schema_version is not None:
            out["schema_version"] = self.schema_version
        if self.dropped_at is not None or self.state == TableState.DROPPED:
            out["dropped_at"] = self.dropped_at
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TableProgress:
        state = data.get("state")
        if state is not None:
            state = _STATES.get(state) or str(state)  # a later version's: as it is
        version = data.get("schema_version")
        return cls(int(data.get("splits_done", 0)), int(data.get("splits_estimated", 0)),
                   int(data.get("rows", 0)), bool(data.get("snapshot_done", False)), state,
                   None if version is None else int(version), data.get("dropped_at"),
                   {} if data.keys() <= _TABLE_KEYS else
                   {k: v for k, v in data.items() if k not in _TABLE_KEYS})


_STATES = {s.value: s for s in TableState}

_REPORT_KEYS = frozenset(("phase", "tables", "rows", "rows_per_second", "started_at",
                          "updated_at", "position", "head", "caught_up", "counted", "requests",
                          "applied", "applied_per_second", "skipped", "lag_seconds",
                          "source_commit", "consistent_since", "per_table_commits",
                          "resuming", "final"))


@dataclass(frozen=True, slots=True)
class ProgressReport:
    """A sync's progress: what the driver reports at each batch (from the state,
    :func:`progress_of`; in ``progress.json`` and ``progress-tables.json``) and what the
    running ``sdk sync`` adds (``applied``, ``skipped``, ``lag_seconds``, ``source_commit``,
    ``consistent_since``, ``resuming``, ``final``). :meth:`to_json` and :meth:`from_json`
    keep the files' format: a report written by an earlier version reads, and an earlier
    version reads this one's. Optional figures are None when not known (and left out of the
    JSON)."""

    phase: Phase | None = None
    """None before the sync's first report (:data:`STARTING`)."""
    tables: Mapping[str, TableProgress] = field(default_factory=dict)
    rows: int = 0
    rows_per_second: float | None = None
    started_at: float | None = None
    updated_at: float | None = None
    position: str | None = None
    """The log position applied (canonical JSON of the offset)."""
    head: str | None = None
    """The log head the driver compared it with."""
    reached_head: bool | None = None
    """What the driver found comparing the two (None: not compared); :attr:`caught_up`
    says what a reader shows."""
    counted: int | None = None
    """The number of the newest state whose splits the report counts."""
    requests: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """The last snapshot requests taken up, by id: ``table``, ``state``, ``reason``..."""
    applied: int | None = None
    applied_per_second: float | None = None
    skipped: int | None = None
    lag_seconds: float | None = None
    source_commit: float | None = None
    """When the newest source transaction the target reflects committed (seconds since the
    epoch): what the target's ``_sdk_position`` table says too."""
    consistent_since: float | None = None
    """Since when a reader of the target sees only states the source had (every table
    streams, each log batch one target transaction); None while it does not."""
    per_table_commits: bool = False
    """The target commits each table's changes by itself (``apply.consistency=table``, or a
    target without transactions: a lakehouse table format): it is never consistent across
    tables, and a reader is told so rather than to wait."""
    resuming: bool = False
    """The last run's report, shown until this run writes its own."""
    final: bool = False
    """The last report of a sync (the live display leaves it on the screen)."""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def caught_up(self) -> bool | None:
        """Whether what was applied reached the log head: the one answer every reader shows
        (None: nothing to say; before the log phase, before the driver compared, or in the
        last run's report, whose answer was true then)."""
        if self.reached_head is None or self.resuming or self.phase not in (Phase.LOG,
                                                                            Phase.DONE):
            return None
        return self.reached_head

    @property
    def phase_name(self) -> str:
        return STARTING if self.phase is None else self.phase.value

    @property
    def splits(self) -> tuple[int, int]:
        """Snapshot splits read and estimated, over all tables."""
        return (sum(t.splits_done for t in self.tables.values()),
                sum(t.splits_estimated for t in self.tables.values()))

    @property
    def eta_seconds(self) -> float | None:
        """The snapshot's time left at its pace so far; None outside it or before a split."""
        if self.phase is not Phase.SNAPSHOT:
            return None
        done, estimated = self.splits
        if not done or estimated <= done:
            return None
        elapsed = (self.updated_at or 0) - (self.started_at or 0)
        return elapsed * (estimated - done) / done

    def refused(self) -> list[tuple[str, str, Any]]:
        """The snapshot requests refused: their id, table and reason."""
        return [(rid, str(r.get("table")), r.get("reason")) for rid, r in self.requests.items()
                if r.get("state") == "refused"]

    def to_json(self, tables: bool = True) -> dict[str, Any]:
        """The report as ``sdk status --json`` prints it and ``progress.json`` holds it
        (without the tables when ``tables`` is false: they have a file of their own)."""
        out: dict[str, Any] = {**self.extra}
        if self.phase is not None:
            out["phase"] = self.phase.value
        if tables:
            out["tables"] = {name: t.to_json() for name, t in self.tables.items()}
        out["rows"] = self.rows
        for key in ("rows_per_second", "started_at", "updated_at", "position", "head"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.caught_up is not None:
            out["caught_up"] = self.caught_up
        for key in ("counted", "applied", "applied_per_second", "skipped", "lag_seconds",
                    "source_commit", "consistent_since"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.requests:
            out["requests"] = {k: dict(v) for k, v in self.requests.items()}
        if self.per_table_commits:
            out["per_table_commits"] = True
        if self.resuming:
            out["resuming"] = True
        if self.final:
            out["final"] = True
        return out

    @classmethod
    def of(cls, progress: ProgressReport | Mapping[str, Any]) -> ProgressReport:
        """``progress`` as a report: a report as it is, a dict (``progress.json``, what ``sdk
        sync`` passes its reporter and its metrics) read with :meth:`from_json`."""
        return progress if isinstance(progress, ProgressReport) else cls.from_json(progress)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProgressReport:
        """A report as :meth:`to_json` (or an earlier version) wrote it; a malformed one
        raises ValueError, TypeError or KeyError."""
        phase = data.get("phase")
        extra = {k: v for k, v in data.items() if k not in _REPORT_KEYS}
        skipped = data.get("skipped")
        if skipped is not None and not isinstance(skipped, (int, float)):
            extra["skipped"] = skipped  # sdk status --json: the dead letters by table
            skipped = None
        caught_up = data.get("caught_up")
        return cls(
            None if phase in (None, STARTING) else Phase(phase),
            {str(name): TableProgress.from_json(t)
             for name, t in (data.get("tables") or {}).items()},
            int(data.get("rows") or 0), _number(data.get("rows_per_second")),
            _number(data.get("started_at")), _number(data.get("updated_at")),
            data.get("position"), data.get("head"),
            None if caught_up is None else bool(caught_up),
            None if data.get("counted") is None else int(data["counted"]),
            dict(data.get("requests") or {}),
            None if data.get("applied") is None else int(data["applied"]),
            _number(data.get("applied_per_second")),
            None if skipped is None else int(skipped), _number(data.get("lag_seconds")),
            _number(data.get("source_commit")), _number(data.get("consistent_since")),
            bool(data.get("per_table_commits", False)), bool(data.get("resuming", False)),
            bool(data.get("final", False)), extra)


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def progress_of(state: SyncState, split_size: int, previous: ProgressReport | None = None,
                head: Any = None, caught_up: bool | None = None,
                inflight: Sequence[SnapshotSplit] = ()) -> ProgressReport:
    """The progress report of ``state``. ``previous`` (the last report) keeps the figures of
    tables whose splits were already forgotten (pure-log phase) and the start time for rates;
    a table whose figures did not change keeps its entry (the same object: comparing the
    tables with those written last is then quick). ``inflight``: the splits handed out and not
    yet folded in: their tables are still being read (a table whose last split is out is not
    done until that split is read). ``caught_up``: whether ``head`` was reached."""
    out = Counter(split.table for split in inflight)
    now = time.time()
    tables: dict[str, TableProgress] = dict(previous.tables) if previous else {}
    position = dumps(state.position.to_json()) if state.position else None
    captured = {str(t) for t in state.tables}
    for name, entry in list(tables.items()):
        if name not in captured and entry.state != TableState.DROPPED:
            tables[name] = replace(entry, state=TableState.DROPPED, dropped_at=position)
    # at thousands of tables in the log phase, most of these are empty: not looked up then
    all_finished, plans, versions = state.finished, state.plans, state.versions
    for table in state.tables:
        name = str(table)
        finished = all_finished.get(table, ()) if all_finished else ()
        plan = plans.get(table) if plans else None
        reading = out.get(table, 0) if out else 0
        version = state.version(table) if versions else 1
        known = tables.get(name)
        if not finished and plan is None and not reading and known is not None and \
                known.state != TableState.DROPPED:
            table_state = _table_state(state, table, True)
            if not (known.snapshot_done and known.state == table_state and
                    known.schema_version == version):
                tables[name] = replace(known, snapshot_done=True, state=table_state,
                                       schema_version=version)
            continue
        done = len(finished)
        rows = sum(f.rows for f in finished)
        if plan is not None:
            estimate = max(done + reading + 1, math.ceil(plan.approx_rows / split_size))
        else:
            estimate = done + reading
        snapshot_done = plan is None and not reading
        waiting = plan is not None and not done and not reading
        table_state = _table_state(state, table, snapshot_done, waiting)
        if known is None or known.splits_done != done or known.splits_estimated != estimate \
                or known.rows != rows or known.snapshot_done != snapshot_done or \
                known.state != table_state or known.schema_version != version or \
                known.dropped_at is not None or known.extra:
            tables[name] = TableProgress(done, estimate, rows, snapshot_done, table_state,
                                         version)
    started = previous.started_at if previous and previous.started_at is not None else now
    rows_total = sum(t.rows for t in tables.values())
    elapsed = max(now - started, 1e-9)
    return ProgressReport(state.phase, tables, rows_total, round(rows_total / elapsed, 1),
                          started, now, position,
                          None if head is None else dumps(head.to_json()), caught_up)


def _table_state(state: SyncState, table: TableId, snapshot_done: bool,
                 waiting: bool = False) -> TableState:
    if state.leaving and table in state.leaving:
        return TableState.LEAVING
    if state.rereads and table in state.rereads:
        return TableState.RESNAPSHOTTING
    if waiting:
        return TableState.WAITING
    if not snapshot_done:
        return TableState.SNAPSHOTTING
    return TableState.STREAMING if state.phase is Phase.LOG else TableState.SNAPSHOT_DONE


def with_staged(report: ProgressReport, staged: Sequence[FinishedSplit]) -> ProgressReport:
    """``report`` with the splits of the batch in flight that are ``staged`` already counted
    in: a snapshot batch may run for many seconds before its report is written."""
    tables = dict(report.tables)
    for finished in staged:
        name = str(finished.split.table)
        table = tables.get(name)
        if table is None or table.snapshot_done:
            continue
        done = table.splits_done + 1
        tables[name] = replace(
            table, splits_done=done, rows=table.rows + finished.rows,
            # the report counts the batch's splits in its estimate already
            splits_estimated=max(table.splits_estimated, done),
            state=TableState.SNAPSHOTTING if table.state == TableState.WAITING
            else table.state)
    now = time.time()
    rows = sum(t.rows for t in tables.values())
    elapsed = max(now - (report.started_at if report.started_at is not None else now), 1e-9)
    return replace(report, tables=tables, rows=rows, rows_per_second=round(rows / elapsed, 1),
                   updated_at=now)
