"""Progress of a sync, per table and overall, from its state: what ``sdk status`` and the
streaming query's progress show."""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ..dialect.codec import dumps
from ..dialect.types import FinishedSplit, SnapshotSplit, TableId
from .state import Phase, SyncState


def progress_of(state: SyncState, split_size: int, previous: dict[str, Any] | None = None,
                head: Any = None, caught_up: bool | None = None,
                inflight: Sequence[SnapshotSplit] = ()) -> dict[str, Any]:
    """A JSON-ready progress report. ``previous`` (the last report) keeps the figures of tables
    whose splits were already forgotten (pure-log phase) and the start time for rates.
    ``inflight``: the splits handed out and not yet folded in: their tables are still being
    read (a table whose last split is out is not done until that split is read)."""
    out = Counter(split.table for split in inflight)
    now = time.time()
    previous = previous or {}
    tables: dict[str, dict[str, Any]] = dict(previous.get("tables", {}))
    position = dumps(state.position.to_json()) if state.position else None
    captured = {str(t) for t in state.tables}
    for name, entry in list(tables.items()):
        if name not in captured and entry.get("state") != "dropped":
            tables[name] = {**entry, "state": "dropped", "dropped_at": position}
    for table in state.tables:
        name = str(table)
        finished = state.finished.get(table, ())
        plan = state.plans.get(table)
        reading = out.get(table, 0)
        if not finished and plan is None and not reading and name in tables and \
                tables[name].get("state") != "dropped":
            tables[name] = {**tables[name], "snapshot_done": True,
                            "state": _table_state(state, table, True),
                            "schema_version": state.version(table)}
            continue
        done = len(finished)
        rows = sum(f.rows for f in finished)
        if plan is not None:
            estimate = max(done + reading + 1, math.ceil(plan.approx_rows / split_size))
        else:
            estimate = done + reading
        snapshot_done = plan is None and not reading
        waiting = plan is not None and not done and not reading
        tables[name] = {"splits_done": done, "splits_estimated": estimate, "rows": rows,
                        "snapshot_done": snapshot_done,
                        "state": _table_state(state, table, snapshot_done, waiting),
                        "schema_version": state.version(table)}
    started = previous.get("started_at", now)
    rows_total = sum(t["rows"] for t in tables.values())
    elapsed = max(now - started, 1e-9)
    report: dict[str, Any] = {
        "phase": state.phase.value,
        "tables": tables,
        "rows": rows_total,
        "rows_per_second": round(rows_total / elapsed, 1),
        "started_at": started,
        "updated_at": now,
        "position": position,
    }
    if head is not None:
        report["head"] = dumps(head.to_json())
    if caught_up is not None:
        report["caught_up"] = caught_up
    return report


TABLE_STATES = ("waiting", "snapshotting", "snapshot done", "streaming", "re-snapshotting",
                "leaving", "dropped")
"""A table's state in a progress report: no split of it handed out yet, its snapshot is being
read (in the log phase too, for a table added there), read (the log phase is still to start,
or the sync stops there),
its changes are followed, it is read again while they are (a snapshot on demand), it leaves
the capture at a log offset (gone from the source or the patterns), or it left."""


def _table_state(state: SyncState, table: TableId, snapshot_done: bool,
                 waiting: bool = False) -> str:
    if table in state.leaving:
        return "leaving"
    if table in state.rereads:
        return "re-snapshotting"
    if waiting:
        return "waiting"
    if not snapshot_done:
        return "snapshotting"
    return "streaming" if state.phase is Phase.LOG else "snapshot done"


def with_staged(report: Mapping[str, Any], staged: Sequence[FinishedSplit]) -> dict[str, Any]:
    """``report`` with the splits of the batch in flight that are ``staged`` already counted
    in: a snapshot batch may run for many seconds before its report is written."""
    tables = {name: dict(table) for name, table in report.get("tables", {}).items()}
    for finished in staged:
        table = tables.get(str(finished.split.table))
        if table is None or table["snapshot_done"]:
            continue
        table["splits_done"] += 1
        table["rows"] += finished.rows
        # the report counts the batch's splits in its estimate already
        table["splits_estimated"] = max(table["splits_estimated"], table["splits_done"])
        if table.get("state") == "waiting":
            table["state"] = "snapshotting"
    now = time.time()
    rows = sum(t["rows"] for t in tables.values())
    elapsed = max(now - report.get("started_at", now), 1e-9)
    return {**report, "tables": tables, "rows": rows,
            "rows_per_second": round(rows / elapsed, 1), "updated_at": now}


def _cut_name(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[:width - 3] + "..."


def state_label(table: Mapping[str, Any]) -> str:
    """A table's state as shown (``sdk status``, the live display): where it dropped out,
    and its schema version once its columns changed."""
    state = str(table.get("state") or ("snapshot done" if table.get("snapshot_done")
                                       else "snapshot"))
    if state == "dropped" and table.get("dropped_at"):
        state += f" at {table['dropped_at']}"
    if table.get("schema_version", 1) > 1:
        state += f", schema version {table['schema_version']}"
    return state


def position_label(position: str) -> str:
    """A log position as shown (``sdk status``, the live display): the fields of the offset
    (``file mysql-bin.000007 pos 245066236``, ``lsn 23456789``), not its JSON; a change's
    index within its transaction only when not the first."""
    try:
        data = json.loads(position)
    except ValueError:
        return position
    fields = data.get("position") if isinstance(data, dict) else None
    if not isinstance(fields, dict):
        return position if fields is None else str(fields)
    return " ".join(f"{name} {value}" for name, value in fields.items()
                    if not (name == "n" and value == 0))


def phase_label(progress: Mapping[str, Any]) -> str:
    """The phase as shown: ``resuming`` marks the last run's report, shown until this run
    writes its own."""
    phase = str(progress.get("phase", "starting"))
    return f"{phase} (resuming)" if progress.get("resuming") else phase


QUIET_STATES = ("streaming", "snapshot done", "dropped")
"""Table states with nothing to watch: a report with many tables counts them, and lists the
others (:func:`tables_to_show`)."""


def tables_to_show(tables: Mapping[str, Mapping[str, Any]], limit: int | None
                   ) -> tuple[list[str], str | None]:
    """The names of the tables a report shows one by one, and a line counting the tables by
    state when not all are shown: all of them up to ``limit`` (None: no limit); past it, the
    ``limit`` furthest from done of those being read, waiting or leaving."""
    names = sorted(tables)
    if limit is None or len(names) <= limit:
        return names, None
    busy = [n for n in names if tables[n].get("state") not in QUIET_STATES]

    def done_share(name: str) -> float:
        table = tables[name]
        return float(table["splits_done"]) / max(int(table["splits_estimated"]), 1)

    shown = sorted(sorted(busy, key=done_share)[:limit])
    counts = Counter(str(tables[n].get("state") or "snapshot") for n in names)
    by_state = ", ".join(f"{counts[state]:,} {state}" for state in sorted(counts))
    more = f"; {len(names) - len(shown):,} not shown" if len(shown) < len(names) else ""
    return shown, f"{len(names):,} tables: {by_state}{more} (sdk status --json lists them all)"


def describe_progress(progress: Mapping[str, Any], limit: int | None = None) -> list[str]:
    """Progress as plain lines: per table splits, rows and state (past ``limit`` tables, a
    count by state and the few furthest from done: :func:`tables_to_show`); then the log
    position."""
    lines = []
    tables = progress.get("tables", {})
    shown, counted = tables_to_show(tables, limit)
    if counted is not None:
        lines.append(counted)
    for name in shown:
        table = tables[name]
        lines.append(f"{_cut_name(name)}: {table['splits_done']}/{table['splits_estimated']} "
                      f"splits, {table['rows']} rows, {state_label(table)}")
    for request_id, request in progress.get("requests", {}).items():
        if request.get("state") == "refused":
            lines.append(f"snapshot request {request_id} of {request['table']} refused: "
                         f"{request.get('reason')}")
    phase = progress.get("phase", "starting")
    summary = f"phase {phase_label(progress)}, {progress.get('rows', 0)} rows"
    if phase == "snapshot":  # after it, the snapshot's rows over ever more time
        summary += f", {progress.get('rows_per_second', 0):,.0f} rows/s"
    tables = progress.get("tables", {}).values()
    done = sum(t["splits_done"] for t in tables)
    estimated = sum(t["splits_estimated"] for t in tables)
    if phase == "snapshot" and done and estimated > done:
        elapsed = progress.get("updated_at", 0) - progress.get("started_at", 0)
        summary += f", ETA {elapsed * (estimated - done) / done:.0f} s"
    if "applied" in progress:
        summary += f", applied {progress['applied']} ({progress['applied_per_second']:,.0f}/s)"
    if progress.get("position"):
        summary += f", log at {position_label(progress['position'])}"
        if "caught_up" in progress:
            summary += ", caught up" if progress["caught_up"] else ", catching up"
    if progress.get("lag_seconds") is not None:
        summary += f", lag {progress['lag_seconds']:.1f} s"
    lines.append(summary)
    return lines
