"""Progress of a sync, per table and overall, from its state: what ``sdk status`` and the
streaming query's progress show."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..codec import dumps
from ..types import FinishedSplit
from .state import SyncState


def progress_of(state: SyncState, split_size: int, previous: dict[str, Any] | None = None,
                head: Any = None, caught_up: bool | None = None) -> dict[str, Any]:
    """A JSON-ready progress report. ``previous`` (the last report) keeps the figures of tables
    whose splits were already forgotten (pure-log phase) and the start time for rates."""
    now = time.time()
    previous = previous or {}
    tables: dict[str, dict[str, Any]] = dict(previous.get("tables", {}))
    for table in state.tables:
        name = str(table)
        finished = state.finished.get(table, ())
        plan = state.plans.get(table)
        if not finished and plan is None and name in tables:
            tables[name]["snapshot_done"] = True
            continue
        done = len(finished)
        rows = sum(f.rows for f in finished)
        if plan is not None:
            estimate = max(done + 1, math.ceil(plan.approx_rows / split_size))
        else:
            estimate = done
        tables[name] = {"splits_done": done, "splits_estimated": estimate, "rows": rows,
                        "snapshot_done": plan is None}
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
        "position": dumps(state.position.to_json()) if state.position else None,
    }
    if head is not None:
        report["head"] = dumps(head.to_json())
    if caught_up is not None:
        report["caught_up"] = caught_up
    return report


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
        table["splits_estimated"] = max(table["splits_estimated"], table["splits_done"] + 1)
    now = time.time()
    rows = sum(t["rows"] for t in tables.values())
    elapsed = max(now - report.get("started_at", now), 1e-9)
    return {**report, "tables": tables, "rows": rows,
            "rows_per_second": round(rows / elapsed, 1), "updated_at": now}


def describe_progress(progress: Mapping[str, Any]) -> list[str]:
    """Progress as plain lines: per table splits, rows and state; then the log position."""
    lines = []
    for name, table in sorted(progress.get("tables", {}).items()):
        state = "snapshot done" if table.get("snapshot_done") else "snapshot"
        lines.append(f"{name}: {table['splits_done']}/{table['splits_estimated']} splits, "
                     f"{table['rows']} rows, {state}")
    phase = progress.get("phase", "starting")
    summary = f"phase {phase}, {progress.get('rows', 0)} rows, " \
              f"{progress.get('rows_per_second', 0):,.0f} rows/s"
    tables = progress.get("tables", {}).values()
    done = sum(t["splits_done"] for t in tables)
    estimated = sum(t["splits_estimated"] for t in tables)
    if phase == "snapshot" and done and estimated > done:
        elapsed = progress.get("updated_at", 0) - progress.get("started_at", 0)
        summary += f", ETA {elapsed * (estimated - done) / done:.0f} s"
    if "applied" in progress:
        summary += f", applied {progress['applied']} ({progress['applied_per_second']:,.0f}/s)"
    if progress.get("position"):
        summary += f", log at {progress['position']}"
        if "caught_up" in progress:
            summary += ", caught up" if progress["caught_up"] else ", catching up"
    if progress.get("lag_seconds") is not None:
        summary += f", lag {progress['lag_seconds']:.1f} s"
    lines.append(summary)
    return lines
