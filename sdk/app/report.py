"""A progress report as text: the lines ``sdk status`` prints and ``sdk sync`` prints in a
pipe or a file (:func:`describe_progress`), and the words of the live display
(:mod:`sdk.app.display`). Both show the parts of :class:`~sdk.algorithm.progress.Part` in its
order, each as :func:`part_text` words it, in a :class:`Style` of their own (plain figures, or
thousands separated)."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, assert_never

from ..algorithm.progress import Part, ProgressReport, TableProgress, TableState
from ..algorithm.state import Phase
from ..dialect.codec import position_label


@dataclass(frozen=True)
class Style:
    """How figures read: ``count`` a number of rows or changes, ``duration`` seconds left."""

    separator: str
    count: Callable[[int], str]
    duration: Callable[[float], str]


def duration_label(seconds: float) -> str:
    """Seconds as the live display shows a time left (``3 min 05 s``); "" for none."""
    if seconds != seconds or seconds < 0:
        return ""
    if seconds >= 3600:
        return f"{seconds // 3600:.0f} h {seconds % 3600 // 60:02.0f} min"
    if seconds >= 60:
        return f"{seconds // 60:.0f} min {seconds % 60:02.0f} s"
    return f"{seconds:.0f} s"


def time_label(seconds: float, digits: int = 3) -> str:
    """A time (seconds since the epoch) as UTC, to the millisecond by default."""
    stamp = dt.datetime.fromtimestamp(seconds, dt.UTC)
    text = stamp.strftime("%Y-%m-%d %H:%M:%S")
    if digits:
        text += f"{stamp.microsecond / 1e6:.{digits}f}"[1:]
    return f"{text} UTC"


PLAIN = Style(", ", str, lambda seconds: f"{seconds:.0f} s")
"""Lines in a pipe, a file and ``sdk status``: figures as they are (scripts read them)."""
DISPLAY = Style(" | ", lambda n: f"{n:,}", duration_label)
"""The live display's summary line."""


def _cut_name(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[:width - 3] + "..."


def state_label(table: TableProgress) -> str:
    """A table's state as shown (``sdk status``, the live display): where it dropped out,
    and its schema version once its columns changed."""
    state = str(table.state or ("snapshot done" if table.snapshot_done else "snapshot"))
    if table.state == TableState.DROPPED and table.dropped_at:
        state += f" at {table.dropped_at}"
    if table.version > 1:
        state += f", schema version {table.version}"
    return state


def phase_label(report: ProgressReport) -> str:
    """The phase as shown: ``resuming`` marks the last run's report, shown until this run
    writes its own."""
    return f"{report.phase_name} (resuming)" if report.resuming else report.phase_name


def part_text(part: Part, report: ProgressReport, style: Style) -> str | None:
    """The words of one part of the summary line, None when it shows nothing (the tables
    and the requests have lines of their own: :func:`table_line`, :func:`request_lines`)."""
    match part:
        case Part.TABLES | Part.REQUESTS | Part.AGE:
            return None
        case Part.PHASE:
            return f"phase {phase_label(report)}"
        case Part.ROWS:
            return f"{style.count(report.rows)} rows"
        case Part.RATE:  # after the snapshot, its rows over ever more time: not shown
            if report.phase is not Phase.SNAPSHOT:
                return None
            return f"{report.rows_per_second or 0:,.0f} rows/s"
        case Part.ETA:
            eta = report.eta_seconds
            return None if eta is None else f"ETA {style.duration(eta)}"
        case Part.APPLIED:
            if report.applied is None:
                return None
            return (f"applied {style.count(report.applied)} "
                    f"({report.applied_per_second or 0:,.0f}/s)")
        case Part.SKIPPED:
            if not report.skipped:
                return None
            return f"skipped {style.count(report.skipped)} (sdk status lists them)"
        case Part.CAUGHT_UP:
            caught_up = report.caught_up
            if caught_up is None:
                return None
            return "caught up" if caught_up else "catching up"
        case Part.LAG:
            return None if report.lag_seconds is None else f"lag {report.lag_seconds:.1f} s"
        case Part.POSITION:
            return None if not report.position else \
                f"log at {position_label(report.position)}"
        case Part.CONSISTENT:
            if report.source_commit is None:
                return None
            since = "each table commits by itself" if report.per_table_commits else \
                "not consistent yet" if report.consistent_since is None else \
                f"consistent since {time_label(report.consistent_since, 0)}"
            return f"target as of source commit {time_label(report.source_commit)} ({since})"
        case _:
            assert_never(part)


def summary(report: ProgressReport, style: Style) -> str:
    """The line that sums the whole sync up: every part that shows something, in order."""
    return style.separator.join(text for part in Part
                                if (text := part_text(part, report, style)) is not None)


def table_line(name: str, table: TableProgress) -> str:
    """One table as a plain line shows it: splits, rows, state."""
    return (f"{_cut_name(name)}: {table.splits_done}/{table.splits_estimated} splits, "
            f"{table.rows} rows, {state_label(table)}")


def request_lines(report: ProgressReport) -> list[str]:
    """The snapshot requests refused, one line each."""
    return [f"snapshot request {request_id} of {table} refused: {reason}"
            for request_id, table, reason in report.refused()]


QUIET_STATES = (TableState.STREAMING, TableState.SNAPSHOT_DONE, TableState.DROPPED)
"""Table states with nothing to watch: a report with many tables counts them, and lists the
others (:func:`tables_to_show`)."""


def tables_to_show(tables: Mapping[str, TableProgress], limit: int | None
                   ) -> tuple[list[str], str | None]:
    """The names of the tables a report shows one by one, and a line counting the tables by
    state when not all are shown: all of them up to ``limit`` (None: no limit); past it, the
    ``limit`` furthest from done of those being read, waiting or leaving."""
    names = sorted(tables)
    if limit is None or len(names) <= limit:
        return names, None
    busy = [n for n in names if tables[n].state not in QUIET_STATES]

    def done_share(name: str) -> float:
        table = tables[name]
        return float(table.splits_done) / max(table.splits_estimated, 1)

    shown = sorted(sorted(busy, key=done_share)[:limit])
    counts = Counter(str(tables[n].state or "snapshot") for n in names)
    by_state = ", ".join(f"{counts[state]:,} {state}" for state in sorted(counts))
    more = f"; {len(names) - len(shown):,} not shown" if len(shown) < len(names) else ""
    return shown, f"{len(names):,} tables: {by_state}{more} (sdk status --json lists them all)"


def describe_progress(progress: ProgressReport | Mapping[str, Any],
                      limit: int | None = None) -> list[str]:
    """Progress as plain lines: per table splits, rows and state (past ``limit`` tables, a
    count by state and the few furthest from done: :func:`tables_to_show`), the snapshot
    requests refused, then the :func:`summary` line."""
    report = ProgressReport.of(progress)
    lines = []
    shown, counted = tables_to_show(report.tables, limit)
    if counted is not None:
        lines.append(counted)
    lines.extend(table_line(name, report.tables[name]) for name in shown)
    lines.extend(request_lines(report))
    lines.append(summary(report, PLAIN))
    return lines
