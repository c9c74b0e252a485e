"""Snapshots on demand (``sdk snapshot`` / ``sdk.spark.request_snapshot``): a captured table,
or the rows meeting a condition, read again while the sync streams; the request is durable
(made while the sync is stopped, served when it runs) and served once."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from helpers.cli import rows

from sdk.app.cli import main
from sdk.dialect.errors import ConfigurationError
from sdk.spark import request_snapshot
from sdk.spark.driver.requests import pending_requests
from sdk.spark.state.engine_state import latest
from sdk.spark.state.statestore import StateStore

pytestmark = pytest.mark.spark


def _shop(tmp_path: Path) -> str:
    source = tmp_path / "shop.db"
    with sqlite3.connect(source) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL)")
        conn.execute("CREATE TABLE audit (id INTEGER PRIMARY KEY, note TEXT)")
        conn.executemany("INSERT INTO orders VALUES (?, ?)", [(i, i * 1.5) for i in range(500)])
        conn.execute("INSERT INTO audit VALUES (1, 'x')")
    return f"sqlite:///{source}"


@pytest.mark.slow
@pytest.mark.parametrize("chained", [True, False], ids=["chained", "change-log"])
def test_a_table_and_a_predicate_read_again_repair_the_mirror(
        spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], chained: bool) -> None:
    src, mirror = _shop(tmp_path), tmp_path / "mirror.db"
    checkpoint = str(tmp_path / "ck")
    args = ["sync", "--source", src, "--target", f"sqlite:///{mirror}", "--checkpoint",
            checkpoint, "--until", "caught-up", "--option", "snapshot.split.size=100"]
    if not chained:
        args += ["--changes", str(tmp_path / "changes")]
    assert main(args) == 0
    with sqlite3.connect(mirror) as conn:  # a bad load: rows lost and rows wrong
        conn.execute("DELETE FROM orders WHERE id BETWEEN 100 AND 119")
        conn.execute("UPDATE orders SET total = 0 WHERE id < 30 OR id >= 450")
        if chained:  # rows the source never had: a whole table read again deletes them
            conn.execute("INSERT INTO orders VALUES (-5, 1), (5000, 2)")
    capsys.readouterr()
    assert main(["snapshot", "--checkpoint", checkpoint, "--table", "main.orders"]
                + ([] if chained else ["--where", "id < 300", "--source", src])) == 0
    assert "requested" in capsys.readouterr().out
    request_snapshot(f"{checkpoint}/state", "orders", "id >= 440")  # the API, a bare name
    store = StateStore(f"{checkpoint}/state")
    assert len(pending_requests(store)) == 2  # durable: the sync is not running
    with sqlite3.connect(tmp_path / "shop.db") as conn:  # and the source moves on
        conn.execute("UPDATE orders SET total = -1 WHERE id % 10 = 0")
        conn.execute("DELETE FROM orders WHERE id BETWEEN 200 AND 209")
        conn.execute("INSERT INTO orders VALUES (1000, 7)")
    assert main(args) == 0
    assert rows(f"sqlite:///{mirror}")["orders"] == rows(src)["orders"]
    state = latest(store)
    assert state is not None and len(state.sync.served) == 2 and not state.sync.rereads
    assert main(["status", "--checkpoint", checkpoint]) == 0
    assert "refused" not in capsys.readouterr().out
    assert main(args) == 0  # served once: nothing is read again
    assert not pending_requests(store)
    if not chained:
        log = [(r.op, json.loads(r.key)[0]) for r in
               spark.read.parquet(str(tmp_path / "changes")).collect() if r.table == "main.orders"]
        reads = [key for op, key in log if op == "r"]
        assert len(reads) >= 500 + 290 + 61  # the first snapshot, then the two requests
        deletes = sorted(key for op, key in log if op == "d")
        assert deletes == list(range(200, 210))  # each once: by the log or by a read


def test_a_request_names_a_captured_table(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with pytest.raises(ConfigurationError, match="no sync has started"):
        request_snapshot(str(state), "main.orders")
