"""The algorithm end to end through the reference SQLite dialect, with a real writer process
inserting, updating (moving keys too) and deleting during the snapshot and the log phase, a
crash in the middle, and a SQLite mirror kept with ``apply_changes``."""

from __future__ import annotations

import multiprocessing
import random
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sdk import ChangeEvent, ConfigurationError, ConnectionConfig, Dialect, Key, Offset, Row
from sdk.algorithm import (
    Phase,
    PhaseHooks,
    SyncOptions,
    SyncRunner,
    SyncState,
    caught_up,
)
from sdk.dialect.types import TableSchema
from sdk.testing.kit import LogIndex, check_exactly_once, key_histories
from sdk_sqlite import read_target

ROWS = 3000


def _writer(path: str, seed: int, ops: int) -> None:
    rng = random.Random(seed)
    conn = sqlite3.connect(path, timeout=60)
    for _ in range(ops):
        with conn:
            kind = rng.random()
            key = rng.randrange(ROWS * 2)
            if kind < 0.35:
                conn.execute("INSERT OR IGNORE INTO items VALUES (?, ?, ?)",
                             (key, f"new {key}", rng.random()))
            elif kind < 0.65:
                conn.execute("UPDATE items SET price = ? WHERE id = ?", (rng.random(), key))
            elif kind < 0.75:
                conn.execute("UPDATE OR IGNORE items SET id = ? WHERE id = ?",
                             (rng.randrange(ROWS * 2), key))
            elif kind < 0.85:
                conn.execute("DELETE FROM items WHERE id = ?", (key,))
            else:
                conn.execute("INSERT OR REPLACE INTO pairs VALUES (?, ?, ?)",
                             (rng.choice("abcde"), rng.randrange(50), str(rng.random())))
        time.sleep(0.0005)
    conn.close()


def source(tmp_path: Path) -> tuple[str, dict[str, dict[Key, Row]]]:
    path = tmp_path / "src.db"
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL)")
        conn.execute("CREATE TABLE pairs (a TEXT, b INTEGER, v TEXT, PRIMARY KEY (a, b))")
        conn.executemany("INSERT INTO items VALUES (?, ?, ?)",
                         [(i * 2, f"item {i}", i / 7) for i in range(ROWS)])
        conn.executemany("INSERT INTO pairs VALUES (?, ?, ?)",
                         [(a, b, "init") for a in "abc" for b in range(40)])
        initial = {
            "items": {(r[0],): tuple(r) for r in conn.execute("SELECT * FROM items")},
            "pairs": {(r[0], r[1]): tuple(r) for r in conn.execute("SELECT * FROM pairs")},
        }
    return f"sqlite:///{path}", initial


def sync(dialect: Dialect, url: str, target_url: str, options: SyncOptions,
         crash_at: set[int], writer: Callable[[], multiprocessing.process.BaseProcess]
         ) -> tuple[list[ChangeEvent], SyncState | None, dict[str, TableSchema]]:
    config = ConnectionConfig.from_url(url)
    setup = dialect.connect(config)
    schemas = {t.name: dialect.describe_table(setup, t) for t in dialect.list_tables(setup)}
    dialect.prepare_capture(setup, list(schemas.values()))
    target = dialect.connect(ConnectionConfig.from_url(target_url))
    for schema in schemas.values():
        dialect.create_table(target, schema)

    hooks = PhaseHooks(after_read=lambda split: time.sleep(0.002))

    def new_runner() -> SyncRunner:
        return SyncRunner(dialect, lambda: dialect.connect(config), options, hooks)

    process = writer()
    while dialect.compare_offset(dialect.current_offset(setup), Offset("sqlite", seq=50)) < 0:
        time.sleep(0.01)  # the writer is busy before the snapshot starts
    runner = new_runner()
    state = runner.start(list(schemas.values()))
    committed = state.dumps()
    emitted: list[ChangeEvent] = []
    first_log: SyncState | None = None
    step = 0
    while True:
        if not process.is_alive():
            head = dialect.current_offset(setup)
            if caught_up(runner, head)(state):
                break
        events, new_state = runner.step(state)
        step += 1
        if step in crash_at:
            runner.close()
            runner = new_runner()
            state = SyncState.loads(committed)
            continue
        for schema in schemas.values():
            mine = [e for e in events if e.table == schema.table]
            dialect.apply_changes(target, schema, mine, f"step-{step}")
        emitted.extend(events)
        committed = new_state.dumps()
        state = new_state
        if first_log is None and state.phase is Phase.LOG:
            first_log = state
    process.join()
    runner.close()
    # the mirror equals the source, table by table
    for schema in schemas.values():
        assert read_target(target, schema) == read_target(setup, schema), schema.table
    target.close()
    setup.close()
    return emitted, first_log, schemas


@pytest.mark.parametrize("exactly_once, atomic", [(True, False), (True, True), (False, False)])
def test_sync_under_a_concurrent_writer_with_a_crash(sqlite_dialect: Dialect, tmp_path: Path,
                                                      exactly_once: bool, atomic: bool) -> None:
    url, initial = source(tmp_path)
    options = SyncOptions(split_size=97, exactly_once=exactly_once, atomic_snapshot=atomic,
                          log_batch_max_events=200)

    def writer() -> multiprocessing.process.BaseProcess:
        process = multiprocessing.get_context("spawn").Process(
            target=_writer, args=(str(tmp_path / "src.db"), 42, 3000))
        process.start()
        return process

    emitted, first_log, schemas = sync(sqlite_dialect, url, f"sqlite:///{tmp_path}/dst.db",
                                       options, {5, 20, 40}, writer)
    assert any(e.op != "r" for e in emitted)
    # the writer was busy during the snapshot: the splits' watermarks differ
    assert len({e.offset for e in emitted if e.op == "r"}) > 10
    if not exactly_once:
        return
    conn = sqlite_dialect.connect(ConnectionConfig.from_url(url))
    log = [e for e in sqlite_dialect.stream_log(conn, list(schemas.values()),
                                                Offset("sqlite", seq=1),
                                                sqlite_dialect.current_offset(conn))
           if isinstance(e, ChangeEvent)]
    conn.close()
    assert first_log is not None
    for name, schema in schemas.items():
        mine = [e for e in log if e.table == schema.table]
        check_exactly_once([e for e in emitted if e.table == schema.table],
                           LogIndex(mine, sqlite_dialect.compare_offset),
                           key_histories(mine, initial[name]), first_log.finished[schema.table])

def test_startup_modes(sqlite_dialect: Dialect, tmp_path: Path) -> None:
    url, _ = source(tmp_path)
    config = ConnectionConfig.from_url(url)
    conn = sqlite_dialect.connect(config)
    schemas = [sqlite_dialect.describe_table(conn, t) for t in sqlite_dialect.list_tables(conn)]
    sqlite_dialect.prepare_capture(conn, schemas)
    conn.execute("INSERT INTO items VALUES (1, 'first change', 0)")
    middle = sqlite_dialect.current_offset(conn)
    conn.execute("INSERT INTO items VALUES (3, 'second change', 0)")

    def first_events(**options: str) -> list[tuple[str, Key]]:
        runner = SyncRunner(sqlite_dialect, lambda: sqlite_dialect.connect(config),
                            SyncOptions.from_strings(options))
        state = runner.start(schemas)
        assert state.phase is Phase.LOG
        events, _ = runner.step(state)
        runner.close()
        return [(e.op, e.key) for e in events]

    assert first_events(**{"startup.mode": "earliest"}) == [("c", (1,)), ("c", (3,))]
    offset = f'{{"dialect": "sqlite", "position": {{"seq": {middle["seq"]}}}}}'
    assert first_events(**{"startup.mode": "specific-offset",
                           "startup.specific-offset": offset}) == [("c", (3,))]
    assert first_events(**{"startup.mode": "latest"}) == []
    with pytest.raises(ConfigurationError, match=r"does not support startup.mode=timestamp"):
        first_events(**{"startup.mode": "timestamp", "startup.timestamp-millis": "0"})
    with pytest.raises(ConfigurationError, match=r"is a 'mysql' offset"):
        first_events(**{"startup.mode": "specific-offset",
                        "startup.specific-offset": '{"dialect": "mysql", "position": {}}'})
    conn.close()
