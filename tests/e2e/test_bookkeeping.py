"""What the sync keeps in the target stays O(tables), not O(time): each log batch deletes the
ledger rows of its tables' batches no replay can ask about, in its own transaction, and keeps
those of the latest (a resumed sync still finds every table's batches)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from sdk.app.cli import main

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _ledger(mirror: Path) -> dict[str, int]:
    with sqlite3.connect(mirror) as conn:
        return dict(conn.execute("SELECT tbl, COUNT(*) FROM _sdk_applied GROUP BY tbl"))


@pytest.mark.parametrize("changes", [False, True], ids=["chained", "mirror"])
def test_the_ledger_keeps_the_latest_batches_of_each_table(tmp_path: Path,
                                                          changes: bool) -> None:
    """The chained sync and the ``foreachBatch`` mirror (``--changes`` beside ``--target``)."""
    source, mirror = tmp_path / "src.db", tmp_path / "mirror.db"
    with sqlite3.connect(source) as conn:
        conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("CREATE TABLE quiet (id INTEGER PRIMARY KEY)")
        conn.executemany("INSERT INTO items VALUES (?, ?)", [(i, f"item {i}") for i in range(300)])
        conn.execute("INSERT INTO quiet VALUES (1)")
    args = ["sync", "--source", f"sqlite:///{source}", "--target", f"sqlite:///{mirror}",
            "--checkpoint", str(tmp_path / "ck"), "--until", "caught-up", "--option",
            "snapshot.split.size=100", "--option", "log.batch.changes=5",
            *(["--changes", str(tmp_path / "changes")] if changes else [])]
    assert main(args) == 0
    first = _ledger(mirror)
    assert first["items"] >= 1 and first["quiet"] == 1, first  # a row per split or batch
    batches = 0
    for run in range(3):
        with sqlite3.connect(source) as conn:
            for i in range(40):  # 40 transactions: 8 log batches of 5
                conn.execute("UPDATE items SET name = ? WHERE id = ?", (f"run {run}", i))
                conn.commit()
        assert main(args) == 0
        batches += 8
        held = _ledger(mirror)
        # the latest two batches' rows of each table it touched; the others as they were
        assert held["items"] <= 2 and held.get("_sdk_position", 0) <= 2, held
        assert held["quiet"] == 1, held  # untouched: its snapshot's row stays
    with sqlite3.connect(source) as a, sqlite3.connect(mirror) as b:
        assert a.execute("SELECT * FROM items ORDER BY id").fetchall() == \
            b.execute("SELECT * FROM items ORDER BY id").fetchall()
    assert batches == 24
