"""One typed progress report, one list of the parts it shows: the live display, the pipe
lines and ``sdk status`` say the same of the same report (caught up above all), the metrics
take the phases and the table states from their enums, and the JSON reads both ways (a
report an earlier version wrote loads, and writes back as it was)."""

from __future__ import annotations

import io
import json
import time
from typing import Any

import pytest
from helpers.metrics import samples
from rich.console import Console

from sdk.algorithm.progress import Part, ProgressReport, TableProgress, TableState
from sdk.algorithm.state import Phase
from sdk.app.display import LiveProgress
from sdk.app.report import DISPLAY, PLAIN, describe_progress, part_text, summary
from sdk.job.metrics import render

NOW = time.time()
POSITION = '{"dialect":"postgres","position":{"lsn":77,"n":0}}'
BASE: dict[str, Any] = {"rows": 500, "rows_per_second": 50.0, "started_at": NOW - 10,
                        "updated_at": NOW, "position": POSITION, "counted": 3}
REPORTS = {
    "caught up": {**BASE, "phase": "log", "caught_up": True, "applied": 9,
                  "applied_per_second": 1.0, "lag_seconds": 0.0,
                  "tables": {"a.t": {"splits_done": 2, "splits_estimated": 2, "rows": 500,
                                     "snapshot_done": True, "state": "streaming"}}},
    "behind": {**BASE, "phase": "log", "caught_up": False, "applied": 3,
               "applied_per_second": 1.0, "lag_seconds": 75.0,
               "tables": {"a.t": {"splits_done": 2, "splits_estimated": 2, "rows": 500,
                                  "snapshot_done": True, "state": "streaming"}}},
    # the driver compared the snapshot's start with the head: no answer before the log phase
    "snapshot": {**BASE, "phase": "snapshot", "caught_up": True,
                 "tables": {"a.t": {"splits_done": 1, "splits_estimated": 4, "rows": 250,
                                    "snapshot_done": False, "state": "snapshotting"}}},
    "done": {**BASE, "phase": "done", "caught_up": True,
             "tables": {"a.t": {"splits_done": 2, "splits_estimated": 2, "rows": 500,
                                "snapshot_done": True, "state": "snapshot done"}}},
    "resuming": {**BASE, "phase": "log", "resuming": True, "tables": {}},
}
SAYS = {"caught up": True, "behind": False, "snapshot": None, "done": True, "resuming": None}


def _drawn(report: ProgressReport) -> list[str]:
    """The lines the live display draws for ``report``."""
    console = Console(file=io.StringIO(), width=300)
    with console.capture() as captured:
        console.print(LiveProgress(console).render(report))
    return [line.rstrip() for line in captured.get().splitlines()]


def _said(line: str, separator: str) -> bool | None:
    parts = line.split(separator)
    if "caught up" in parts:
        return True
    return False if "catching up" in parts else None


@pytest.mark.parametrize("case", sorted(REPORTS))
def test_the_display_sdk_status_and_the_metrics_agree_on_caught_up(case: str) -> None:
    data = REPORTS[case]
    report = ProgressReport.from_json(data)
    assert report.caught_up is SAYS[case]
    display = _drawn(report)[-1]
    status = describe_progress(report)[-1]  # sdk status and the pipe lines
    assert _said(display, " | ") is _said(status, ", ") is SAYS[case], (display, status)
    assert samples(render(data))["sdk_sync_caught_up"] == (1 if SAYS[case] else 0)
    assert json.loads(json.dumps(report.to_json())).get("caught_up") is SAYS[case]
    # the same parts, in the same order, in both: only the figures' style differs
    assert [p for p in Part if part_text(p, report, DISPLAY) is not None] == \
        [p for p in Part if part_text(p, report, PLAIN) is not None]


def test_a_report_an_earlier_version_wrote_loads_and_writes_back_as_it_was() -> None:
    old = {"phase": "log", "rows": 7, "rows_per_second": 0.5, "started_at": 1.0,
           "updated_at": 2.0, "position": POSITION, "head": POSITION, "caught_up": True,
           "counted": 4, "requests": {"r1": {"table": "a.t", "state": "refused",
                                             "reason": "no such table"}},
           "tables": {"a.t": {"splits_done": 1, "splits_estimated": 1, "rows": 7,
                              "snapshot_done": True}},  # before states and versions
           "from_a_later_version": [1, 2]}
    report = ProgressReport.from_json(old)
    assert report.to_json() == old
    table = report.tables["a.t"]
    assert (table.state, table.version) == (None, 1)
    lines = describe_progress(report)
    assert lines[0] == "a.t: 1/1 splits, 7 rows, snapshot done"
    assert lines[1] == "snapshot request r1 of a.t refused: no such table"
    assert lines[2] == "phase log, 7 rows, caught up, log at lsn 77"
    # the report as the driver writes it now, read as an earlier version read it
    now = ProgressReport(Phase.LOG, {"a.t": TableProgress(1, 1, 7, True, TableState.STREAMING,
                                                          2)}, 7, position=POSITION,
                         reached_head=False).to_json()
    assert now["tables"]["a.t"] == {"splits_done": 1, "splits_estimated": 1, "rows": 7,
                                    "snapshot_done": True, "state": "streaming",
                                    "schema_version": 2}
    assert now["phase"] == "log" and now["caught_up"] is False and now["rows"] == 7


def test_the_metrics_show_every_phase_and_table_state_of_their_enums() -> None:
    got = samples(render({"phase": "snapshot", "tables": {"a.t": {"state": "waiting"}}}))
    assert got['sdk_sync_phase{phase="snapshot"}'] == 1
    assert {k for k in got if k.startswith("sdk_sync_phase")} == \
        {f'sdk_sync_phase{{phase="{p}"}}' for p in ("starting", *Phase)}
    assert {k for k, v in got.items() if k.startswith("sdk_table_state")} == \
        {f'sdk_table_state{{state="{s}",table="a.t"}}' for s in TableState}
    assert got['sdk_table_state{state="waiting",table="a.t"}'] == 1
    assert samples(render({}))['sdk_sync_phase{phase="starting"}'] == 1


def test_the_summary_shows_what_the_run_adds_in_each_style() -> None:
    report = ProgressReport.from_json({**REPORTS["behind"], "applied": 12345, "skipped": 2})
    assert summary(report, PLAIN) == ("phase log, 500 rows, applied 12345 (1/s), skipped 2 "
                                      "(sdk status lists them), catching up, lag 75.0 s, "
                                      "log at lsn 77")
    assert summary(report, DISPLAY).startswith("phase log | 500 rows | applied 12,345 (1/s)")


def test_the_source_commit_the_target_reflects_reads_the_same_everywhere() -> None:
    """``source_commit`` and ``consistent_since``: the line, the JSON both ways, the gauges."""
    commit, since = 1_796_000_000.25, 1_795_999_000.0
    data = {**REPORTS["caught up"], "source_commit": commit, "consistent_since": since}
    report = ProgressReport.from_json(data)
    assert report.to_json() == data
    words = part_text(Part.CONSISTENT, report, PLAIN)
    assert words == ("target as of source commit 2026-11-30 00:53:20.250 UTC (consistent "
                     "since 2026-11-30 00:36:40 UTC)")
    assert summary(report, PLAIN).endswith(f"log at lsn 77, {words}")
    got = samples(render(data))
    assert got["sdk_sync_source_commit_timestamp_seconds"] == commit
    assert got["sdk_sync_consistent"] == 1
    assert got["sdk_sync_consistent_since_timestamp_seconds"] == since
    # in the snapshot the target holds rows of several moments: not consistent yet
    snapshot = ProgressReport.from_json({**REPORTS["snapshot"], "source_commit": commit})
    assert part_text(Part.CONSISTENT, snapshot, PLAIN).endswith("(not consistent yet)")
    assert samples(render(snapshot.to_json()))["sdk_sync_consistent"] == 0
    # a target whose tables commit each by itself never becomes consistent: said so
    per_table = {**REPORTS["caught up"], "source_commit": commit, "per_table_commits": True}
    report = ProgressReport.from_json(per_table)
    assert report.to_json() == per_table
    assert part_text(Part.CONSISTENT, report, PLAIN).endswith("(each table commits by itself)")
    assert samples(render(per_table))["sdk_sync_consistent"] == 0
    assert part_text(Part.CONSISTENT, ProgressReport.from_json(REPORTS["done"]), PLAIN) is None
