"""Chained writes (option ``target``): a task applies the splits it reads to the target itself,
exactly once: a replayed batch re-applies its staged rows, and the ledger makes a replay of an
applied split write nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from helpers.sources import chained_spec, make_source

from sdk import ConnectionConfig, get_dialect
from sdk.algorithm import Phase, PhaseMachine, SyncState
from sdk.dialect.errors import ConfigurationError
from sdk.job.spec import resolve
from sdk.spark.executor.reads import SplitPartition, read_splits
from sdk.spark.state.engine_state import EngineState
from sdk.spark.state.statestore import StateStore
from sdk_sqlite import read_target

pytestmark = pytest.mark.spark


def applied_of(batches: list[pa.RecordBatch]) -> dict[str, int]:
    report = pa.Table.from_batches(batches).to_pylist()
    return {row["table"]: row["applied"] for row in report}


def test_a_replayed_split_applies_its_staged_rows_once(tmp_path: Path) -> None:
    spec, target_url = chained_spec(tmp_path, rows=500, **{"snapshot.split.size": "100"})
    dialect = get_dialect("sqlite")
    source = dialect.connect(spec.config)
    splits = PhaseMachine(dialect, spec.options).all_splits(source, spec.tables)
    partition = SplitPartition(splits[:3], stage="4-test")
    table = spec.tables[0]

    assert applied_of(list(read_splits(spec, partition))) == {"main.items": 300}
    target = dialect.connect(ConnectionConfig.from_url(target_url))
    first = read_target(target, table)
    assert len(first) == 300

    # the same batch again (a task retry, or a restart before Spark committed it): nothing new
    assert applied_of(list(read_splits(spec, partition))) == {"main.items": 0}
    assert read_target(target, table) == first

    # staged, but the target's transaction never committed: the replay applies the rows
    # staged the first time, not what the source holds now
    with sqlite3.connect(tmp_path / "src.db") as raw:
        raw.execute("UPDATE items SET name = 'changed since'")
    with sqlite3.connect(tmp_path / "target.db") as raw:
        raw.execute("DELETE FROM items")
        raw.execute("DELETE FROM _sdk_applied")
    assert applied_of(list(read_splits(spec, partition))) == {"main.items": 300}
    assert read_target(target, table) == first
    target.close()
    source.close()


def test_a_target_needs_a_stream(tmp_path: Path) -> None:
    url = make_source(tmp_path, rows=10)
    spec = resolve({"url": url, "tables": "items", "target": f"sqlite:///{tmp_path}/t.db"})
    with pytest.raises(ConfigurationError, match=r"state\.dir"):
        list(read_splits(spec, SplitPartition([])))


def test_a_target_must_be_able_to_apply(tmp_path: Path) -> None:
    url = make_source(tmp_path, rows=10)
    with pytest.raises(ConfigurationError, match="cannot be a sync target"):
        resolve({"url": url, "target": "oracle://u@127.0.0.1:1/x"})


def test_a_log_batch_is_applied_in_chunks_once(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A chained log batch holds one chunk of changes at a time; a replay (the same bounded
    range, cut into the same chunks) writes nothing."""
    from sdk import ChangeEvent, Offset
    from sdk.job.target import Applier
    from sdk.spark.executor import reads

    spec, target_url = chained_spec(tmp_path, rows=10)
    table = spec.tables[0]
    changes = [ChangeEvent(table.table, "c", (i,), (i, f"v{i}", 1.0, b"x"), Offset("sqlite", n=i))
               for i in range(7)]
    changes += [ChangeEvent(table.table, "d", (2,), None, Offset("sqlite", n=7)),
                ChangeEvent(table.table, "u", (3,), (3, "moved on", 2.0, b"y"),
                            Offset("sqlite", n=8))]
    monkeypatch.setattr(reads, "_log_events", lambda *_: iter(changes))
    monkeypatch.setattr(reads, "BATCH_ROWS", 3)
    sizes: list[int] = []
    apply = Applier.apply

    def counting(self: Applier, table_id: object, events: list[object], batch: str,
                 **more: Any) -> None:
        sizes.append(len(events))
        apply(self, table_id, events, batch, **more)  # type: ignore[arg-type]

    monkeypatch.setattr(Applier, "apply", counting)
    sync = SyncState(Phase.LOG, {table.table: table}, position=Offset("sqlite", n=9))
    state = EngineState(sync, log_from=Offset("sqlite", n=0), seq=9)
    partition = reads.LogPartition(state.save(StateStore(str(tmp_path / "state"))))
    assert applied_of(list(reads.read_log(spec, partition))) == {"main.items": 9}
    assert sizes == [3, 3, 3]
    target = get_dialect("sqlite").connect(ConnectionConfig.from_url(target_url))
    expected = {(i,): (i, f"v{i}", 1.0, b"x") for i in (0, 1, 4, 5, 6)}
    expected[(3,)] = (3, "moved on", 2.0, b"y")
    assert read_target(target, table) == expected
    assert applied_of(list(reads.read_log(spec, partition))) == {"main.items": 0}
    assert read_target(target, table) == expected
    target.close()


def test_the_writer_thread_applies_in_order_and_raises_a_failure_at_the_next_step() -> None:
    """Chained log chunks are applied on one writer thread while the next is read: in order,
    one at a time, and a failed apply stops the task at its next chunk or at its end."""
    import threading
    import time

    from sdk.job.target import Pipeline

    done: list[int] = []
    running = threading.Semaphore(1)

    def job(n: int) -> Any:
        def run() -> None:
            assert running.acquire(blocking=False), "two jobs at once"
            time.sleep(0.01)
            done.append(n)
            running.release()
            if n == 3:
                raise RuntimeError("target refused chunk 3")
        return run

    writer = Pipeline()
    for n in range(3):
        writer.submit(job(n))
    writer.wait()
    assert done == [0, 1, 2]
    writer.submit(job(3))
    with pytest.raises(RuntimeError, match="chunk 3"):
        writer.submit(job(4))  # waits for chunk 3 first, and raises its failure
    assert done == [0, 1, 2, 3]
    writer.shutdown()


def test_first_reads_are_loaded_on_the_writer_thread_in_order(tmp_path: Path,
                                                               monkeypatch: Any) -> None:
    """A target that loads Arrow (``load_snapshot``) gets each first-read split on the writer
    thread while the task reads the next one: in split order, all of them before the task
    reports, and a failed load fails the task."""
    import threading

    from sdk.job.target import Applier

    url = make_source(tmp_path, rows=500)
    spec = resolve({"url": url, "tables": "items", "state.dir": str(tmp_path / "state"),
                    "target": f"sqlite:///{tmp_path}/target.db", "snapshot.split.size": "100"})
    dialect = get_dialect("sqlite")
    source = dialect.connect(spec.config)
    splits = PhaseMachine(dialect, spec.options).all_splits(source, spec.tables)
    source.close()
    loaded: list[tuple[str, int, bool]] = []

    def load(self: Applier, table: object, rows: pa.Table, batch_id: str, *more: Any) -> None:
        loaded.append((batch_id, rows.num_rows,
                       threading.current_thread() is not threading.main_thread()))
        if batch_id.endswith("/fail"):
            raise RuntimeError("target refused the split")
        self.applied[spec.tables[0].table] = self.applied.get(spec.tables[0].table, 0) + \
            rows.num_rows

    monkeypatch.setattr(Applier, "loads", property(lambda self: True))
    monkeypatch.setattr(Applier, "load", load)
    assert applied_of(list(read_splits(spec, SplitPartition(splits, stage="5-load")))) == \
        {"main.items": 500}
    assert [b for b, _, _ in loaded] == [f"5-load/{s.split_id}" for s in splits]
    assert sum(n for _, n, _ in loaded) == 500 and all(t for _, _, t in loaded)

    monkeypatch.setattr("sdk.spark.executor.reads.split_ledger_id",
                        lambda stage, split: f"{stage}/fail" if split.index == 1 else stage)
    with pytest.raises(RuntimeError, match="refused the split"):
        list(read_splits(spec, SplitPartition(splits, stage="6-load")))


def test_a_log_batch_past_its_limit_is_cut_and_the_next_reads_on(tmp_path: Path) -> None:
    """``log.batch.changes=4`` over 9 changes: the batch applies 4 and records its cut, which
    its state (loaded again) ends at; a replay applies nothing and cuts at the same change;
    the batches after it read on from the cut, and the target ends equal."""
    from sdk.spark.executor.reads import LogPartition, read_log

    spec, target_url = chained_spec(tmp_path, rows=10, **{"log.batch.changes": "4"})
    table, dialect = spec.tables[0], get_dialect("sqlite")
    conn = dialect.connect(spec.config)
    store = StateStore(str(tmp_path / "state"))
    start = dialect.current_offset(conn)
    with sqlite3.connect(tmp_path / "src.db") as raw:
        for i in range(9):
            raw.execute("UPDATE items SET name = ? WHERE id = ?", (f"changed {i}", i))
            raw.commit()
    end = dialect.current_offset(conn)
    target = dialect.connect(ConnectionConfig.from_url(target_url))
    position, applied = start, []
    for seq in range(1, 10):
        name = EngineState(SyncState(Phase.LOG, {table.table: table}, position=end),
                           log_from=position, seq=seq).save(store)
        applied.append(applied_of(list(read_log(spec, LogPartition(name))))["main.items"])
        cut = EngineState.load(store, name).sync.position
        assert cut is not None
        if seq == 1:  # a replay: nothing twice, the same cut
            assert applied_of(list(read_log(spec, LogPartition(name)))) == {"main.items": 0}
            assert EngineState.load(store, name).sync.position == cut
            assert dialect.compare_offset(start, cut) < 0 < dialect.compare_offset(end, cut)
        position = cut
        if dialect.compare_offset(position, end) >= 0:
            break
    assert applied == [4, 4, 1]
    rows = read_target(target, table)
    assert [rows[(i,)][1] for i in range(9)] == [f"changed {i}" for i in range(9)]
    target.close()
    conn.close()


def test_a_log_batch_past_its_bytes_is_cut_where_a_replay_cuts_it(tmp_path: Path) -> None:
    """``log.batch.bytes`` of about 64 changes of 1,000-character rows: the batch is cut
    where its estimate (every 64th change sampled) passes the limit, the same on a replay."""
    from sdk.spark.executor.reads import BatchSize, LogPartition, read_log

    spec, _ = chained_spec(tmp_path, rows=300, **{"log.batch.bytes": str(100 * 1040)})
    table, dialect = spec.tables[0], get_dialect("sqlite")
    conn = dialect.connect(spec.config)
    start = dialect.current_offset(conn)
    with sqlite3.connect(tmp_path / "src.db") as raw:
        raw.executemany("UPDATE items SET name = ? WHERE id = ?",
                        [("x" * 1000, i) for i in range(300)])
    end = dialect.current_offset(conn)
    store = StateStore(str(tmp_path / "state"))
    name = EngineState(SyncState(Phase.LOG, {table.table: table}, position=end),
                       log_from=start, seq=1).save(store)
    applied = applied_of(list(read_log(spec, LogPartition(name))))["main.items"]
    assert applied == 2 * BatchSize.EVERY - 1  # the estimate passes 104,000 at change 128
    cut = EngineState.load(store, name).sync.position
    assert applied_of(list(read_log(spec, LogPartition(name)))) == {"main.items": 0}
    assert EngineState.load(store, name).sync.position == cut
    conn.close()
