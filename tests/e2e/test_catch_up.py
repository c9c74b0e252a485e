"""What a sync resumed far behind reports while it catches up: not caught up, a lag above
zero that falls, changes applied rising batch by batch (``log.batch.changes``); then caught
up with a lag near zero. Read from ``/metrics`` of a real ``sdk sync`` (PostgreSQL source,
SQLite target) as Prometheus would, and the lag alert of docs/operations.md evaluated on
those samples: it fires during the catch-up and clears after."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from helpers.metrics import samples
from helpers.paths import ROOT
from helpers.servers import drop_capture

from sdk.app.cli import main

pytestmark = [pytest.mark.postgres, pytest.mark.spark, pytest.mark.slow]

BACKLOG = 200_000
TRANSACTIONS = 20
DOCS = ROOT / "docs" / "operations.md"


def lag_alert() -> tuple[str, float]:
    """The metric and threshold of the lag alert in docs/operations.md (``expr: M > N``)."""
    text = DOCS.read_text()
    found = re.search(r"alert: SdkSyncLagging.*?\n\s*expr: (\w+) > (\d+)", text, re.S)
    assert found, "docs/operations.md has no SdkSyncLagging alert"
    return found.group(1), float(found.group(2))


@pytest.fixture
def lagging(postgres_admin: Any, postgres_url: str) -> Any:
    admin = postgres_admin
    admin.execute("DROP TABLE IF EXISTS lagging")
    admin.execute("CREATE TABLE lagging (id int PRIMARY KEY, v text)")
    admin.execute("INSERT INTO lagging VALUES (0, 'first')")
    admin.execute("ALTER TABLE lagging OWNER TO sdk_cdc")
    source = f"{postgres_url}{'&' if '?' in postgres_url else '?'}slot=lagging&" \
             "publication=lagging"
    try:
        yield source
    finally:
        drop_capture(admin, "lagging")
        admin.execute("DROP TABLE IF EXISTS lagging")


def test_a_resumed_sync_far_behind_reports_its_catch_up_truthfully(
        spark: Any, postgres_admin: Any, lagging: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    metric, threshold = lag_alert()
    mirror = tmp_path / "mirror.db"
    args = ["sync", "--source", lagging, "--target", f"sqlite:///{mirror}", "--tables",
            "public.lagging", "--checkpoint", str(tmp_path / "ck")]
    assert main([*args, "--until", "caught-up"]) == 0
    capsys.readouterr()

    # the backlog, committed over TRANSACTIONS seconds while the sync is stopped
    first_commit = time.time()
    per = BACKLOG // TRANSACTIONS
    for t in range(TRANSACTIONS):
        postgres_admin.execute(
            f"INSERT INTO lagging SELECT g, 'v' || g FROM generate_series({1 + t * per}, "
            f"{(t + 1) * per}) g")
        time.sleep(1.0)
    backlog_end = int(postgres_admin.execute("SELECT pg_current_wal_lsn() - '0/0'")
                      .fetchone()[0])
    # its first changes are older than the alert's threshold when the sync resumes
    time.sleep(max(0.0, first_commit + threshold + 3 - time.time()))

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sync = subprocess.Popen(
        [sys.executable, "-m", "sdk.app.cli", *args, "--until", "never", "--metrics-port",
         str(port), "--option", "log.batch.changes=20000",
         # paced, so the catch-up spans several of the sync's 2 s reports on any machine
         "--option", "log.changes-per-second=20000"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    seen: list[dict[str, float]] = []
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            time.sleep(0.25)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as response:
                    sample = samples(response.read().decode())
            except OSError:
                assert sync.poll() is None, sync.communicate()[0][-3000:]
                continue
            seen.append(sample)
            if sample.get("sdk_sync_caught_up") == 1 and \
                    sample.get("sdk_sync_applied_total", 0) >= BACKLOG and \
                    sample.get(metric, threshold) < 2:
                break
    finally:
        sync.send_signal(signal.SIGTERM)
        output = sync.communicate(timeout=120)[0]
    assert seen and seen[-1].get("sdk_sync_caught_up") == 1, (seen[-3:], output[-3000:])

    print("catch-up samples (applied, lag, caught up):", [
        (s.get("sdk_sync_applied_total"), round(s.get(metric, -1), 1),
         s.get("sdk_sync_caught_up")) for s in seen[::4]])
    behind = [s for s in seen if s.get("sdk_sync_applied_total", 0) < BACKLOG]
    # never "caught up" with changes still to apply (the old report did, for the whole backlog)
    assert not [s for s in behind if s.get("sdk_sync_caught_up") == 1], behind
    applied = sorted({s["sdk_sync_applied_total"] for s in behind if "sdk_sync_applied_total"
                      in s})
    assert len([a for a in applied if 0 < a < BACKLOG]) >= 3, applied  # several batches
    lags = [s[metric] for s in behind if metric in s]
    assert lags and min(lags) > 0, lags
    fires = [lag > threshold for lag in lags]
    assert any(fires), lags  # the alert fires during the catch-up ...
    assert seen[-1][metric] < 2 and not seen[-1][metric] > threshold  # ... and clears after
    assert any(later < earlier for earlier, later in itertools.pairwise(lags)), lags

    # the pipe lines say the same: no "caught up" before the backlog is applied
    said = [(int(found.group(1).replace(",", "")), "caught up" in line.replace(
        "catching up", "")) for line in output.splitlines()
        if (found := re.search(r"applied ([\d,]+) ", line))]
    assert said and not [n for n, caught_up in said if caught_up and n < BACKLOG], said
    with sqlite3.connect(mirror) as conn:
        assert conn.execute("SELECT count(*) FROM lagging").fetchone()[0] == BACKLOG + 1
    # sdk status says the same as the metrics did last
    capsys.readouterr()
    assert main(["status", "--checkpoint", str(tmp_path / "ck"), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["last_run"]["applied"] >= BACKLOG
    applied_to = json.loads(status["position"])["position"]["lsn"]
    assert applied_to >= backlog_end, status  # the whole backlog, by position too
    if status["caught_up"] is not True:  # WAL another test wrote since, not yet passed over:
        # behind that head, yet no lag of its tables' past the time it was last reached
        assert json.loads(status["head"])["position"]["lsn"] > applied_to, status
    assert status["lag_seconds"] < (2 if status["caught_up"] else threshold), status
    assert status["tables"]["public.lagging"]["state"] == "streaming"
