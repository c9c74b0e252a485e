"""Truncations in the log (:class:`sdk.TableTruncated`) where the algorithm meets them: a
split's backfill window, a table read again, the in-process runner. The Spark engine's
answer (the table read again whole) runs against real servers in test_resume_edges.py."""

from __future__ import annotations

from typing import Any

import pytest
from helpers.sim import SCHEMA, TABLE, MemoryConnection, MemoryDatabase, memory_dialect, replay

from sdk import FatalSyncError, SnapshotSplit
from sdk.algorithm import SyncOptions, SyncRunner, read_split


def test_a_truncation_in_the_backfill_window_empties_the_split() -> None:
    """Rows read, then TRUNCATE and new rows before the high watermark: the split holds the
    table as at its watermark, the rows read before the TRUNCATE gone."""
    db = MemoryDatabase(rows={(k,): (k, k) for k in range(10)})
    dialect = memory_dialect()
    fired = []

    def writer() -> None:  # between the read's fetches: inside the window
        if not fired:
            fired.append(True)
            db.truncate()
            db.write("c", (3,), 33)
            db.write("c", (42,), 42)

    db.on_fetch = writer
    result = read_split(dialect, MemoryConnection(db), SCHEMA,
                        SnapshotSplit(TABLE, 0, None, None), SyncOptions(fetch_size=4))
    assert fired
    assert sorted(result.rows) == [(3, 33), (42, 42)] == sorted(db.rows.values())


def test_a_table_read_again_sends_keys_truncated_since_as_deletes() -> None:
    """A split read ``since`` an offset after which a key changed and the table was then
    truncated: the key is a delete at the watermark, the rows written after the TRUNCATE are
    the split's rows."""
    db = MemoryDatabase(rows={(k,): (k, k) for k in range(5)})
    dialect = memory_dialect()
    conn = MemoryConnection(db)
    since = dialect.current_offset(conn)
    db.write("u", (1,), 100)
    db.truncate()
    db.write("c", (7,), 7)
    split = SnapshotSplit(TABLE, 0, None, None, since=since)
    result = read_split(dialect, conn, SCHEMA, split, SyncOptions())
    assert sorted(result.rows) == [(7, 7)]
    assert (1,) in result.deleted and (7,) not in result.deleted


def test_the_in_process_runner_stops_at_a_truncation_naming_the_fix() -> None:
    db = MemoryDatabase(rows={(k,): (k, k) for k in range(5)})
    runner = SyncRunner(memory_dialect(), lambda: MemoryConnection(db), SyncOptions())
    state = runner.start([SCHEMA])
    while state.phase.value != "log":
        _, state = runner.step(state)
    db.truncate()
    with pytest.raises(FatalSyncError, match=r"TRUNCATE of db\.t at .*--target"):
        for _ in range(3):
            _, state = runner.step(state)


def test_a_staged_truncation_keeps_what_the_driver_needs(tmp_path: Any) -> None:
    """The driver reads a log batch's truncations back from its stage whole: ``dropped``
    decides whether a table gone without table discovery is read again."""
    from sdk import Offset, TableId, TableTruncated
    from sdk.spark.state.engine_state import TRUNCATED_STAGE, staged_truncations
    from sdk.spark.state.statestore import StateStore

    items = [TableTruncated(TableId("db", "t"), Offset("mem", seq=3)),
             TableTruncated(TableId("db", "u"), Offset("mem", seq=4), "DROP TABLE", True)]
    store = StateStore(str(tmp_path))
    store.write_json([i.to_json() for i in items], "batches", "s1", TRUNCATED_STAGE)
    assert staged_truncations(store, "s1") == items


def test_a_truncation_before_the_first_split_is_in_the_snapshot_already() -> None:
    """A TRUNCATE after the snapshot began but before the first split is read lies where the
    log phase starts (the snapshot's beginning), below every split's watermark: the runner
    goes on, and its output is the table as it is."""
    db = MemoryDatabase(rows={(k,): (k, k) for k in range(5)})
    runner = SyncRunner(memory_dialect(), lambda: MemoryConnection(db), SyncOptions())
    state = runner.start([SCHEMA])
    db.truncate()
    db.write("c", (9,), 9)
    events = []
    while state.phase.value != "log" or state.position != runner.dialect.current_offset(
            runner.conn):
        out, state = runner.step(state)
        events.extend(out)
    assert replay(events) == db.rows == {(9,): (9, 9)}
