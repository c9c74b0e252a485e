"""Progress reports that stay readable at thousands of tables, and never report work not
done: a table is ``waiting`` until a split of it is handed out, and a table whose last split
is out is still being read until that split is folded in."""

from __future__ import annotations

import io
import time
from typing import Any

from rich.console import Console

from sdk import Column, LogicalType, SnapshotSplit, TableId, TableSchema
from sdk.algorithm import Phase, SyncState
from sdk.algorithm.assigner import TablePlan
from sdk.algorithm.progress import ProgressReport, TableState, progress_of, with_staged
from sdk.app.cli import PIPE_TABLES
from sdk.app.display import SHOWN_TABLES, LiveProgress
from sdk.app.report import describe_progress
from sdk.dialect.types import FinishedSplit, Offset


def _tables(count: int, streaming: int) -> dict[str, dict[str, Any]]:
    out = {}
    for i in range(count):
        name = f"shop_{i:04d}.orders_with_a_rather_long_table_name_{i:04d}"
        done = i >= count - streaming
        out[name] = {"splits_done": 4 if done else i % 4, "splits_estimated": 4,
                     "rows": 4000 if done else 1000 * (i % 4), "snapshot_done": done,
                     "state": "streaming" if done else "snapshotting", "schema_version": 1}
    return out


def _report(tables: dict[str, dict[str, Any]]) -> dict[str, Any]:
    now = time.time()
    return {"phase": "log", "tables": tables, "rows": 1, "rows_per_second": 1.0,
            "started_at": now - 60, "updated_at": now, "applied": 5, "applied_per_second": 1.0,
            "position": '{"dialect":"postgres","position":{"lsn":123456789,"n":0}}',
            "caught_up": False, "lag_seconds": 3.5}


def test_a_pipe_line_stays_under_1_kb_at_3000_tables() -> None:
    report = _report(_tables(3000, streaming=2990))
    line = " | ".join(describe_progress(report, PIPE_TABLES))
    assert len(line.encode()) < 1024, len(line)
    assert line.startswith("3,000 tables: 10 snapshotting, 2,990 streaming; 2,995 not shown")
    assert line.count(" splits, ") == PIPE_TABLES  # the five furthest from done
    assert "shop_0000." in line and "applied 5" in line and "lag 3.5 s" in line
    # a few tables: each named, as before
    few = " | ".join(describe_progress(_report(_tables(3, streaming=1)), PIPE_TABLES))
    assert few.count(" splits, ") == 3 and "tables:" not in few


def test_the_live_display_draws_a_bounded_number_of_rows() -> None:
    out = io.StringIO()
    display = LiveProgress(Console(file=out, width=160, force_terminal=False))
    rendered = Console(file=io.StringIO(), width=160)
    with rendered.capture() as captured:
        rendered.print(display.render(_report(_tables(1000, streaming=990))))
    text = captured.get()
    assert len(text.splitlines()) <= SHOWN_TABLES + 3, text
    assert "1,000 tables: 10 snapshotting, 990 streaming" in text


def test_a_table_is_waiting_until_a_split_of_it_is_out_and_read_until_it_is_folded() -> None:
    schema = TableSchema(TableId("db", "t"), (Column("id", LogicalType.INT64, "bigint"),),
                         ("id",))
    plan = TablePlan(schema.table, approx_rows=10)
    state = SyncState(Phase.SNAPSHOT, {schema.table: schema}, plans={schema.table: plan},
                      position=Offset("x", n=1))
    report = progress_of(state, 100)
    assert report.tables["db.t"].state == TableState.WAITING
    assert not report.tables["db.t"].snapshot_done
    # its one split handed out (the plan is done and gone): still being read, 0 of 1
    split = SnapshotSplit(schema.table, 0, None, None)
    out = SyncState(Phase.SNAPSHOT, {schema.table: schema}, position=Offset("x", n=1))
    report = progress_of(out, 100, report, inflight=[split])
    table = report.tables["db.t"]
    assert (table.state, table.splits_done, table.splits_estimated,
            table.snapshot_done) == ("snapshotting", 0, 1, False)
    staged = with_staged(report, [FinishedSplit(split, Offset("x", n=2), 10)])
    assert (staged.tables["db.t"].splits_done,
            staged.tables["db.t"].splits_estimated) == (1, 1)  # never 1/2


def test_a_log_batch_writes_o_of_its_changes_not_o_of_the_tables(tmp_path: Any) -> None:
    """3,000 captured tables in the log phase: the state and progress files a log batch
    writes come to under 50 KB (the schemas and the per-table figures are written again
    only when they change)."""
    from sdk.spark.state.engine_state import EngineState, write_progress
    from sdk.spark.state.statestore import StateStore

    store = StateStore(str(tmp_path / "state"))
    schemas = {TableId("shop", f"t{i:04d}"): TableSchema(
        TableId("shop", f"t{i:04d}"), tuple(Column(f"c{j}", LogicalType.STRING, "text")
                                            for j in range(8)), ("c0",)) for i in range(3000)}
    cache: dict[Any, Any] = {}
    written = None

    def batch(n: int) -> int:
        """Save the state ending at log position ``n`` and its report; the bytes written."""
        nonlocal written
        before = _sizes(tmp_path / "state")
        sync = SyncState(Phase.LOG, schemas, position=Offset("x", n=n))
        EngineState(sync, log_from=Offset("x", n=n - 1), seq=n).save(store, cache)
        report = progress_of(sync, 100, ProgressReport(tables=dict(written or {})))
        written = write_progress(store, report, written)
        after = _sizes(tmp_path / "state")
        return sum(size for path, size in after.items() if before.get(path) != size)

    first = batch(1)
    assert first > 500_000  # the schemas and per-table figures, once
    assert batch(2) < 50_000 and batch(3) < 50_000
    loaded = EngineState.load(store, sorted(p.stem for p in (tmp_path / "state" / "states")
                                            .glob("*.json"))[-1])
    assert loaded.sync.tables == schemas and loaded.sync.position == Offset("x", n=3)


def _sizes(root: Any) -> dict[str, int]:
    return {str(p): p.stat().st_size for p in root.rglob("*") if p.is_file()}
