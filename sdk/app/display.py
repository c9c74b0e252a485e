"""A running sync's progress on a terminal: one live display drawn with ``rich``, redrawn in
place at each report. A line per table with a bar of its splits, rows, rows per second, ETA
and state (snapshotting, streaming, re-snapshotting, schema version...), then one line for
the whole sync: phase, rows, rate, ETA, changes applied, lag and log position. Off a terminal
(a pipe, a file) ``sdk`` prints plain lines instead
(:func:`sdk.app.report.describe_progress`); both show the same parts of the report, worded by
:func:`sdk.app.report.part_text`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from ..algorithm.progress import ProgressReport, TableState
from .report import (
    DISPLAY,
    duration_label,
    request_lines,
    state_label,
    summary,
    tables_to_show,
)

SHOWN_TABLES = 12
"""Table rows the display draws at most; past them it counts the tables by state and draws
the ones furthest from done."""


class LiveProgress:
    """Call it with each progress report (or the dict ``sdk status --json`` prints); a report
    marked ``final`` leaves its display on the screen, and the next report starts a new one
    below (``sdk demo`` runs two syncs)."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console()
        self._live: Live | None = None
        self._rates: dict[str, tuple[float, int, float]] = {}
        """Per table: when its rows were last seen to change, how many, and its rate."""

    def __call__(self, progress: ProgressReport | Mapping[str, Any]) -> None:
        report = ProgressReport.of(progress)
        if self._live is None:
            self._live = Live(console=self.console, auto_refresh=False, transient=False,
                              redirect_stdout=False, redirect_stderr=False)
            self._live.start()
        self._live.update(self.render(report), refresh=True)
        if report.final:
            self._live.stop()
            self._live = None

    def close(self) -> None:
        """Leave the display as it is (a failure's summary then starts on a line of its
        own)."""
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _rate(self, name: str, rows: int) -> float:
        now = time.monotonic()
        seen = self._rates.get(name)
        if seen is None:
            self._rates[name] = (now, rows, 0.0)
            return 0.0
        at, before, rate = seen
        if rows != before and now > at:
            rate = (rows - before) / (now - at)
            self._rates[name] = (now, rows, rate)
        return rate

    def render(self, progress: ProgressReport | Mapping[str, Any]) -> Group:
        """The display of one report."""
        report = ProgressReport.of(progress)
        cells: list[tuple[Any, ...]] = []
        shown, counted = tables_to_show(report.tables, SHOWN_TABLES)
        for name in shown:
            table = report.tables[name]
            done, estimated = table.splits_done, max(table.splits_estimated, 1)
            rows = table.rows
            rate = self._rate(name, rows)
            snapshotting = not table.snapshot_done or table.state == TableState.RESNAPSHOTTING
            eta = ""
            if snapshotting and done and rate > 0:
                eta = duration_label((estimated - done) * rows / done / rate)
            bar = ProgressBar(total=estimated, completed=min(done, estimated), width=20,
                              complete_style="green" if not snapshotting else "cyan")
            cells.append((Text(name, style="bold"), bar, f"{done}/{estimated} splits",
                          f"{rows:,} rows", f"{rate:,.0f}/s" if snapshotting else "",
                          eta, Text(state_label(table), style="green" if table.state ==
                                    TableState.STREAMING else "")))
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True, overflow="ellipsis", max_width=40)  # the table
        grid.add_column(no_wrap=True, min_width=20)  # its bar
        for index in (2, 3, 4, 5):  # figures are never cut: the names and states give way
            grid.add_column(justify="right", no_wrap=True,
                            min_width=max((len(str(c[index])) for c in cells), default=0))
        grid.add_column(no_wrap=True, overflow="ellipsis")  # the state
        for row in cells:
            grid.add_row(*row)
        lines: list[Any] = [grid]
        if counted is not None:
            lines.append(Text(counted, overflow="ellipsis", no_wrap=True))
        lines.extend(Text(line, style="yellow") for line in request_lines(report))
        lines.append(Text(summary(report, DISPLAY), overflow="ellipsis", no_wrap=True))
        return Group(*lines)


__all__ = ["LiveProgress"]
