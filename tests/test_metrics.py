"""Operating figures: ``sdk sync --metrics-port`` (Prometheus text over HTTP) and ``sdk status
--json`` carry the phase, rows, applied changes, lag, restarts and per-table splits."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from sdk.cli import main
from sdk.metrics import MetricsServer, render
from sdk.spark.lease import CheckpointLease
from sdk.spark.statestore import StateStore

REPORT = {"phase": "log", "rows": 1200, "applied": 1500, "applied_per_second": 250.5,
          "lag_seconds": 0.4, "caught_up": True, "updated_at": time.time(),
          "tables": {"shop.orders": {"splits_done": 3, "splits_estimated": 3, "rows": 1000},
                     'odd"name': {"splits_done": 1, "splits_estimated": 2, "rows": 200}}}


def test_the_report_renders_as_prometheus_text() -> None:
    text = render(REPORT, retries=2)
    lines = text.splitlines()
    assert 'sdk_sync_phase{phase="log"} 1' in lines
    assert 'sdk_sync_phase{phase="snapshot"} 0' in lines
    assert "sdk_sync_applied_total 1500" in lines and "sdk_sync_retries_total 2" in lines
    assert "sdk_sync_lag_seconds 0.4" in lines and "sdk_sync_caught_up 1" in lines
    assert 'sdk_table_splits_estimated{table="odd\\"name"} 2' in lines
    assert "# TYPE sdk_sync_applied_total counter" in lines
    for line in lines:  # every sample line: name{labels} value
        assert line.startswith("#") or len(line.rsplit(" ", 1)) == 2


def test_the_server_serves_the_last_report() -> None:
    server = MetricsServer(0, "127.0.0.1")
    try:
        server.update(REPORT)
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics") as response:
            assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert "sdk_sync_snapshot_rows_total 1200" in response.read().decode()
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/other")
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
