"""A running sync's progress on a terminal: one live display drawn with ``rich``, redrawn in
place at each report. A line per table with a bar of its splits, rows, rows per second, ETA
and state (snapshotting, streaming, re-snapshotting, schema version...), then one line for
the whole sync: phase, rows, rate, ETA, changes applied, lag and log position. Off a terminal
(a pipe, a file) ``sdk`` prints plain lines instead
(:func:`sdk.algorithm.progress.describe_progress`).
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

from ..algorithm.progress import phase_label, position_label, state_label, tables_to_show

SHOWN_TABLES = 12
"""Table rows the display draws at most; past them it counts the tables by state and draws
the ones furthest from done."""


def _eta(seconds: float | None) -> str:
    if seconds is None or seconds != seconds or seconds < 0:
        return ""
    if seconds >= 3600:
        return f"{seconds // 3600:.0f} h {seconds % 3600 // 60:02.0f} min"
    if seconds >= 60:
        return f"{seconds // 60:.0f} min {seconds % 60:02.0f} s"
    return f"{seconds:.0f} s"


class LiveProgress:
    """Call it with each progress report (the dict ``sdk status --json`` prints); a report
    marked ``final`` leaves its display on the screen, and the next report starts a new one
    below (``sdk demo`` runs two syncs)."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console()
        self._live: Live | None = None
        self._rates: dict[str, tuple[float, int, float]] = {}
        """Per table: when its rows were last seen to change, how many, and its rate."""

    def __call__(self, progress: Mapping[str, Any]) -> None:
        if self._live is None:
            self._live = Live(console=self.console, auto_refresh=False, transient=False,
                              redirect_stdout=False, redirect_stderr=False)
            self._live.start()
        self._live.update(self.render(progress), refresh=True)
        if progress.get("final"):
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

    def render(self, progress: Mapping[str, Any]) -> Group:
        """The display of one report."""
        cells: list[tuple[Any, ...]] = []
        tables = progress.get("tables", {})
        shown, counted = tables_to_show(tables, SHOWN_TABLES)
        for name in shown:
            table = tables[name]
            done, estimated = table["splits_done"], max(table["splits_estimated"], 1)
            state = state_label(table)
            rows = int(table["rows"])
            rate = self._rate(name, rows)
            snapshotting = not table.get("snapshot_done") or \
                table.get("state") == "re-snapshotting"
            eta = ""
            if snapshotting and done and rate > 0:
                eta = _eta((estimated - done) * rows / done / rate)
            bar = ProgressBar(total=estimated, completed=min(done, estimated), width=20,
                              complete_style="green" if not snapshotting else "cyan")
            cells.append((Text(name, style="bold"), bar, f"{done}/{estimated} splits",
                          f"{rows:,} rows", f"{rate:,.0f}/s" if snapshotting else "",
                          eta, Text(state, style="green" if table.get("state") == "streaming"
                                    else "")))
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
        for request_id, request in progress.get("requests", {}).items():
            if request.get("state") == "refused":
                lines.append(Text(f"snapshot request {request_id} of {request['table']} "
                                  f"refused: {request.get('reason')}", style="yellow"))
        lines.append(Text(self._summary(progress), overflow="ellipsis", no_wrap=True))
        return Group(*lines)

    @staticmethod
    def _summary(progress: Mapping[str, Any]) -> str:
        phase = progress.get("phase", "starting")
        parts = [f"phase {phase_label(progress)}", f"{int(progress.get('rows', 0)):,} rows"]
        if phase == "snapshot":  # after it, the snapshot's rows over ever more time
            parts.append(f"{progress.get('rows_per_second', 0):,.0f} rows/s")
        tables = progress.get("tables", {}).values()
        done = sum(t["splits_done"] for t in tables)
        estimated = sum(t["splits_estimated"] for t in tables)
        if phase == "snapshot" and done and estimated > done:
            elapsed = progress.get("updated_at", 0) - progress.get("started_at", 0)
            parts.append(f"ETA {_eta(elapsed * (estimated - done) / done)}")
        if "applied" in progress:
            parts.append(f"applied {int(progress['applied']):,} "
                         f"({progress.get('applied_per_second', 0):,.0f}/s)")
        if progress.get("skipped"):
            parts.append(f"skipped {int(progress['skipped']):,} (sdk status lists them)")
        if progress.get("lag_seconds") is not None:
            parts.append(f"lag {progress['lag_seconds']:.1f} s")
        if "caught_up" in progress:
            parts.append("caught up" if progress["caught_up"] else "catching up")
        if progress.get("position"):
            parts.append(f"log at {position_label(progress['position'])}")
        return " | ".join(parts)


__all__ = ["LiveProgress"]
