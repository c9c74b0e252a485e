"""The chunk comparison of ``sdk verify`` (:class:`sdk.job.verify.Verifier`) on real SQLite
databases, with the running sync played by the test: a mirror equal to its source is equal in
every chunk; each damage is found by key and kind, in chunks narrowed from 30,000 rows; a row
changed between the source's read and the target's settles once the "sync" applies it, while a
damaged row whose source holds still is a difference, and one changed at every read is
unsettled; what ``--repair`` asks the sync to read; the metrics of a verify."""

from __future__ import annotations

import datetime as dt
import decimal
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sdk import ConnectionConfig, SnapshotSplit, TableId, get_dialect
from sdk.dialect.types import ChangeEvent, Offset, TableSchema
from sdk.job.metrics import MetricsServer
from sdk.job.verify import Chunk, ChunkResult, Difference, Side, Verifier
from sdk.spark.verify import repair_condition

ROWS = 30_000


@pytest.fixture
def pair(request: pytest.FixtureRequest, tmp_path: Path
         ) -> Iterator[tuple[Side, Side, TableSchema, TableSchema]]:
    """A SQLite source table (capture prepared) and its SQLite mirror, made and filled by the
    dialect's target hooks: :data:`ROWS` rows, or as many as the test's parameter says."""
    count = int(getattr(request, "param", ROWS))
    sqlite = get_dialect("sqlite")
    source_path = tmp_path / "source.db"
    with sqlite3.connect(source_path) as conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, amount REAL, at TEXT, "
                     "data BLOB)")
        conn.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?)",
                         [(i, f"r{i}", i / 7, f"2026-01-01 10:00:{i % 60:02d}",
                           bytes([i % 256])) for i in range(count)])
    source = Side(sqlite, ConnectionConfig.from_url(f"sqlite:///{source_path}"), target=False)
    table = sqlite.describe_table(source.conn(), TableId("main", "t"))
    sqlite.prepare_capture(source.conn(), [table])
    target = Side(sqlite, ConnectionConfig.from_url(f"sqlite:///{tmp_path / 'mirror.db'}"),
                  target=True)
    mirror = TableSchema(TableId("main", "t"), table.columns, table.primary_key)
    sqlite.create_table(target.conn(), mirror)
    rows = [r for b in sqlite.read_range(source.conn(), table,
                                         SnapshotSplit(table.table, 0, None, None), 10_000)
            for r in b]
    events = [ChangeEvent(mirror.table, "r", (r[0],), r, Offset({"seq": 0})) for r in rows]
    sqlite.apply_changes(target.conn(), mirror, events, "fill")
    try:
        yield source, target, table, mirror
    finally:
        source.close()
        target.close()


def run(verifier: Verifier, table: TableSchema, mirror: TableSchema) -> ChunkResult:
    return verifier.check(Chunk(table, mirror, SnapshotSplit(table.table, 0, None, None)))


def kinds(result: ChunkResult) -> set[tuple[int, str]]:
    return {(d.key[0], d.kind) for d in result.differences}


def on(side: Side, sql: str, *args: object) -> None:
    conn = side.conn()
    with conn:
        conn.execute(sql, args)


def test_an_equal_mirror_is_equal_and_every_damage_is_found_by_key(pair: tuple) -> None:
    source, target, table, mirror = pair
    static = Verifier(source, target, None)
    result = run(static, table, mirror)
    assert (result.rows, result.differences, result.unsettled) == (ROWS, [], [])
    on(target, "UPDATE t SET name = 'damaged' WHERE id = 17")
    on(target, "UPDATE t SET amount = amount + 1e-9 WHERE id = 20001")
    on(target, "DELETE FROM t WHERE id = 300")
    on(target, "DELETE FROM t WHERE id >= 12000 AND id < 12100")
    on(target, "INSERT INTO t VALUES (99999, 'x', 1.5, '2026-01-01 00:00:00', x'00')")
    on(source, "UPDATE t SET data = x'ff' WHERE id = 25000")
    result = run(static, table, mirror)
    assert kinds(result) == {(17, "changed"), (20001, "changed"), (300, "missing"),
                             (25000, "changed"), (99999, "extra"),
                             *((k, "missing") for k in range(12000, 12100))}
    by_key = {d.key[0]: d for d in result.differences}
    assert by_key[17].source is not None and by_key[17].source[1] == "r17"
    assert by_key[17].target is not None and by_key[17].target[1] == "damaged"
    assert all((hi is None or lo is None or hi > lo) for lo, hi in result.ranges)
    assert len(result.ranges) < 10  # narrowed: parts of at most 10,000 rows, not the table


class FakeSync:
    """The running sync, played: ``pending`` statements reach the target at the next wait."""

    def __init__(self, target: Side) -> None:
        self.target = target
        self.pending: list[str] = []
        self.waits = 0
        self.each_wait: Callable[[int], None] = lambda n: None

    def wait_past(self, high: Offset) -> None:
        self.waits += 1
        for sql in self.pending:
            on(self.target, sql)
        self.pending.clear()
        self.each_wait(self.waits)


@pytest.mark.parametrize("pair", [2000], indirect=True)
def test_changes_in_flight_settle_and_real_damage_does_not(pair: tuple) -> None:
    source, target, table, mirror = pair
    sync = FakeSync(target)
    live = Verifier(source, target, sync.wait_past, pause=0.0)

    def writer(n: int) -> None:  # a change the sync has not applied when the target is read
        on(source, "UPDATE t SET name = ? WHERE id = 5", f"w{n}")
        sync.pending.append(f"UPDATE t SET name = 'w{n}' WHERE id = 5")
    sync.each_wait = writer
    on(target, "UPDATE t SET name = 'damaged' WHERE id = 7")
    result = run(live, table, mirror)
    assert kinds(result) == {(7, "changed")} and result.unsettled == []
    assert sync.waits >= 3  # the first read, the rows, a round


@pytest.mark.parametrize("pair", [2000], indirect=True)
def test_a_row_changed_at_every_read_is_unsettled_not_different(pair: tuple) -> None:
    source, target, table, mirror = pair
    sync = FakeSync(target)
    live = Verifier(source, target, sync.wait_past, rounds=3, pause=0.0)
    sync.each_wait = lambda n: on(source, "UPDATE t SET name = ? WHERE id = 9", f"hot{n}")
    on(target, "UPDATE t SET name = 'behind' WHERE id = 9")  # the sync never catches up
    result = run(live, table, mirror)
    assert result.differences == [] and [k[0] for k in result.unsettled] == [9]


def _result(table: TableSchema, *found: tuple[object, str]) -> ChunkResult:
    chunk = Chunk(table, table, SnapshotSplit(table.table, 0, (0,), (1000,)))
    return ChunkResult(chunk, differences=[Difference(str(table.table), (k,), kind, None, None)
                                           for k, kind in found], ranges=[((0,), (1000,))])


@pytest.mark.parametrize("pair", [10], indirect=True)
def test_repair_reads_the_keys_or_their_ranges_or_the_whole_table(pair: tuple) -> None:
    table = pair[2]
    assert repair_condition([_result(table, (3, "changed"), (5, "missing"))]) == "id IN (3, 5)"
    assert repair_condition([_result(table, ("o'k", "changed"))]) == "id IN ('o''k')"
    assert repair_condition([_result(table, (dt.date(2026, 1, 2), "changed"),
                                     (decimal.Decimal("1.50"), "changed"))]) == \
        "id IN ('2026-01-02', 1.50)"
    # a row only the target has: only a whole table's read deletes it
    assert repair_condition([_result(table, (3, "changed"), (4, "extra"))]) is None
    many = _result(table, *((k, "missing") for k in range(600)))
    assert repair_condition([many]) == "(id >= 0 AND id < 1000)"
    assert repair_condition([_result(table, (b"\x00", "changed"))]) is None


def test_the_metrics_of_a_verify() -> None:
    server = MetricsServer(0, "127.0.0.1", sync=False)
    try:
        server.update_verify({"state": "running", "chunks": 3, "chunks_total": 8, "rows": 900,
                              "differing": 2, "unsettled": 1, "updated_at": 1.0})
        import urllib.request

        text = urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics").read().decode()
    finally:
        server.close()
    assert "sdk_verify_differing_rows 2.0" in text and "sdk_verify_running 1.0" in text
    assert "sdk_verify_chunks 8.0" in text and "sdk_sync_phase" not in text
