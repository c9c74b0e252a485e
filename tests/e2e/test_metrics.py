"""Operating figures: ``sdk sync --metrics-port`` (Prometheus text over HTTP) and ``sdk status
--json`` carry the phase, rows, applied changes, lag, restarts and per-table splits."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from helpers.metrics import samples

from sdk.app.cli import main
from sdk.job.metrics import MetricsServer, render
from sdk.spark.state.lease import CheckpointLease
from sdk.spark.state.statestore import StateStore

REPORT = {"phase": "log", "rows": 1200, "applied": 1500, "applied_per_second": 250.5,
          "lag_seconds": 0.4, "caught_up": True, "updated_at": time.time(),
          "tables": {"shop.orders": {"splits_done": 3, "splits_estimated": 3, "rows": 1000},
                     'odd"name': {"splits_done": 1, "splits_estimated": 2, "rows": 200}}}


def test_the_report_renders_as_prometheus_text() -> None:
    text = render(REPORT, retries=2)
    got = samples(text)
    assert got['sdk_sync_phase{phase="log"}'] == 1 and got['sdk_sync_phase{phase="snapshot"}'] == 0
    assert got["sdk_sync_applied_total"] == 1500 and got["sdk_sync_retries_total"] == 2
    assert got["sdk_sync_lag_seconds"] == 0.4 and got["sdk_sync_caught_up"] == 1
    assert got['sdk_table_splits_estimated{table="odd\\"name"}'] == 2
    assert got['sdk_table_state{state="streaming",table="shop.orders"}'] == 0
    assert got['sdk_table_schema_version{table="shop.orders"}'] == 1
    assert "# TYPE sdk_sync_applied_total counter" in text.splitlines()


def test_the_server_serves_the_last_report() -> None:
    server = MetricsServer(0, "127.0.0.1")
    try:
        server.update(REPORT)
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics") as response:
            assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert samples(response.read().decode())["sdk_sync_snapshot_rows_total"] == 1200
        server.update({**REPORT, "rows": 1300})  # each scrape shows the last report
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics") as response:
            assert samples(response.read().decode())["sdk_sync_snapshot_rows_total"] == 1300
    finally:
        server.close()


def test_status_json_carries_the_report_and_the_owner(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    store = StateStore(str(tmp_path / "ck" / "state"))
    store.write_json({**REPORT, "counted": 0}, "progress.json")
    lease = CheckpointLease(store)
    lease.acquire()
    try:
        assert main(["status", "--checkpoint", str(tmp_path / "ck"), "--json"]) == 0
    finally:
        lease.release()
    shown = json.loads(capsys.readouterr().out)
    assert shown["phase"] == "log" and shown["tables"]["shop.orders"]["rows"] == 1000
    assert shown["owner"]["pid"] > 0


def test_a_bad_metrics_port_is_refused_before_anything_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sync", "--source", "sqlite:///nowhere.db", "--metrics-port", "99999",
                 "--checkpoint", str(tmp_path / "ck")]) == 2
    assert "a TCP port is 1..65535" in capsys.readouterr().err
    assert not (tmp_path / "ck").exists()


@pytest.mark.slow
@pytest.mark.spark
def test_a_running_sync_serves_its_figures(tmp_path: Path) -> None:
    """``curl localhost:N/metrics`` during ``sdk sync``: the phase, the rows and the table's
    state, as the sync reports them."""
    import socket
    import sqlite3
    import subprocess
    import sys

    source = tmp_path / "src.db"
    with sqlite3.connect(source) as db:
        db.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, v TEXT)")
        db.executemany("INSERT INTO items VALUES (?, ?)", [(i, f"v{i}") for i in range(700)])
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sync = subprocess.Popen(
        [sys.executable, "-m", "sdk.app.cli", "sync", "--source", f"sqlite:///{source}",
         "--target", f"sqlite:///{tmp_path / 'dst.db'}", "--checkpoint", str(tmp_path / "ck"),
         "--until", "never", "--metrics-port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen: dict[str, float] = {}
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and seen.get('sdk_sync_phase{phase="log"}') != 1:
            time.sleep(0.5)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as response:
                    seen = samples(response.read().decode())
            except OSError:
                continue  # not serving yet
    finally:
        sync.terminate()
        sync.wait(60)
    assert seen.get('sdk_sync_phase{phase="log"}') == 1, seen
    assert seen['sdk_table_snapshot_rows{table="main.items"}'] == 700
    assert seen['sdk_table_state{state="streaming",table="main.items"}'] == 1
    assert seen["sdk_sync_retries_total"] == 0 and "sdk_sync_report_age_seconds" in seen
