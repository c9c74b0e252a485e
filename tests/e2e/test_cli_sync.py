"""``sdk sync`` and ``sdk status``: the main job from the command line, resumable."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from helpers.cli import rows

from sdk.app.cli import main

pytestmark = pytest.mark.spark


@pytest.mark.slow
def test_sync_resumes_from_its_checkpoint(spark: Any, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "shop.db"
    with sqlite3.connect(source) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL)")
        conn.execute("CREATE TABLE audit (id INTEGER PRIMARY KEY, note TEXT)")
        conn.executemany("INSERT INTO orders VALUES (?, ?)", [(i, i * 1.5) for i in range(500)])
    src, dst = f"sqlite:///{source}", f"sqlite:///{tmp_path}/mirror.db"
    args = ["sync", "--source", src, "--target", dst, "--tables", "*,!audit",
            "--checkpoint", str(tmp_path / "ck"), "--until", "caught-up",
            "--option", "snapshot.split.size=100", "--changes", str(tmp_path / "changes")]
    assert main(args) == 0
    assert "applied 500 rows" in capsys.readouterr().out
    with sqlite3.connect(source) as conn:
        conn.execute("UPDATE orders SET total = -1 WHERE id < 10")
        conn.execute("DELETE FROM orders WHERE id >= 490")
        conn.execute("INSERT INTO orders VALUES (1000, 7)")
    assert main(args) == 0
    assert "applied 21 rows" in capsys.readouterr().out  # only the 21 changes, once
    mirrored = rows(dst)
    assert mirrored["orders"] == rows(src)["orders"] and "audit" not in mirrored
    log = spark.read.parquet(str(tmp_path / "changes")).collect()
    assert sum(r._op == "r" for r in log) == 500
    changes = [(r._offset, r._op, r.id) for r in log if r._op != "r"]
    assert len(changes) == len(set(changes)) == 21
    assert main(["status", "--checkpoint", str(tmp_path / "ck")]) == 0
    status = capsys.readouterr().out
    assert "main.orders: 5/5 splits, 500 rows, streaming" in status
    assert "caught up" in status


def test_sync_reports_bad_input_clearly(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "s.db"
    sqlite3.connect(source).execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    base = ["sync", "--source", f"sqlite:///{source}", "--checkpoint", str(tmp_path / "ck")]
    assert main([*base, "--option", "snapshot.split.sise=5"]) == 2
    assert "did you mean 'snapshot.split.size'" in capsys.readouterr().err
    assert main([*base, "--tables", "nothing_like_this"]) == 2
    assert "matches no table" in capsys.readouterr().err
    pytest.importorskip("pymysql", reason="the last case needs the mysql extra's driver")
    # nobody listens there: the source refused (exit 3), not a bad input
    assert main(["sync", "--source", "mysql://u:secret@127.0.0.1:1/db"]) == 3
    err = capsys.readouterr().err
    assert "secret" not in err and "cannot connect" in err


def test_a_sync_whose_checks_fail_ends_at_once_with_its_output(tmp_path: Path) -> None:
    """``sdk sync`` starts its driver JVM while it checks the source: a check that fails ends
    the command at once with the error, its output ends with it (the JVM left starting writes
    through the command, holding none of its output open), and that JVM ends by itself."""
    import os
    import select
    import subprocess
    import sys
    import time
    import uuid

    source = tmp_path / "shop.db"
    with sqlite3.connect(source) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
    marker = uuid.uuid4().hex
    process = subprocess.Popen(
        [sys.executable, "-m", "sdk.app.cli", "sync", "--source", f"sqlite:///{source}",
         "--tables", "nosuch", "--target", f"sqlite:///{tmp_path}/mirror.db",
         "--checkpoint", str(tmp_path / "ck")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "SDK_MARK": marker})
    assert process.wait(timeout=60) == 2
    assert process.stdout is not None
    out = b""
    while select.select([process.stdout], [], [], 1.0)[0]:  # at its end within a second
        chunk = os.read(process.stdout.fileno(), 65536)
        if not chunk:
            break
        out += chunk
    else:
        raise AssertionError(f"the command's output is still open after it ended: {out!r}")
    assert b"matches no table" in out

    def left() -> list[int]:  # processes the command started (its environment is theirs)
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if f"SDK_MARK={marker}".encode() in Path(f"/proc/{pid}/environ").read_bytes():
                    found.append(int(pid))
            except OSError:
                continue
        return found

    deadline = time.monotonic() + 60
    while left():
        assert time.monotonic() < deadline, f"processes left running: {left()}"
        time.sleep(0.2)


@pytest.mark.slow
def test_sync_from_a_yaml_config(spark: Any, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "shop.db"
    with sqlite3.connect(source) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL)")
        conn.executemany("INSERT INTO orders VALUES (?, ?)", [(i, i / 2) for i in range(300)])
    config = tmp_path / "sync.yaml"
    config.write_text(f"""
source: sqlite:///{source}
target: sqlite:///{tmp_path}/mirror.db
tables: [orders]
checkpoint: {tmp_path}/ck
until: never
retry.seconds: 60
options:
  snapshot.split.size: 50
""")
    assert main(["sync", "--config", str(config), "--until", "caught-up"]) == 0
    out = capsys.readouterr().out
    assert "applied 300 rows" in out and "6/6 splits" in out
    assert rows(f"sqlite:///{tmp_path}/mirror.db")["orders"] == rows(f"sqlite:///{source}")[
        "orders"]
    config.write_text("source: x\nsurce: y\n")
    assert main(["sync", "--config", str(config)]) == 2
    assert "unknown option 'surce'; did you mean 'source'?" in capsys.readouterr().err
    config.write_text("source: x\nuntil: later\n")
    assert main(["sync", "--config", str(config)]) == 2
    assert "option 'until': must be one of snapshot, caught-up, never" in \
        capsys.readouterr().err


def test_progress_lines_show_the_lag_in_the_log_phase() -> None:
    from sdk.app.report import describe_progress

    lines = describe_progress({"phase": "log", "tables": {}, "rows": 10, "rows_per_second": 5,
                               "position": '{"seq": 3}', "caught_up": False,
                               "applied": 4, "applied_per_second": 2.0, "lag_seconds": 2.46})
    # the display's order: the position last (a long one is cut there, not the lag)
    assert lines[-1].endswith('catching up, lag 2.5 s, log at {"seq": 3}')
    assert "lag" not in describe_progress({"phase": "snapshot", "tables": {}})[-1]


def test_progress_lines_name_the_log_position_and_a_report_of_the_last_run() -> None:
    """The position as the offset's fields, not its JSON (a change's index only when not the
    first); a resumed sync shows the last run's report as ``resuming``, without the caught-up
    and lag figures that were true then."""
    from sdk.app.report import describe_progress
    from sdk.dialect.codec import position_label

    mysql = '{"dialect":"mysql","position":{"file":"mysql-bin.000007","n":0,"pos":2450}}'
    assert position_label(mysql) == "file mysql-bin.000007 pos 2450"
    assert position_label('{"dialect":"postgres","position":{"lsn":77,"n":3}}') == "lsn 77 n 3"
    line = describe_progress({"phase": "log", "tables": {}, "position": mysql,
                              "resuming": True})[-1]
    assert line.startswith("phase log (resuming),") and "caught up" not in line
    assert line.endswith("log at file mysql-bin.000007 pos 2450")


def test_progress_counts_the_splits_a_running_batch_has_staged(tmp_path: Any) -> None:
    """A snapshot batch runs for many seconds before the next report: ``sdk status`` and the
    sync's progress lines count its splits as they are staged, once, and not after the report
    that folded them in."""
    from sdk import FinishedSplit, Offset, SnapshotSplit, TableId
    from sdk.spark import progress
    from sdk.spark.state.engine_state import stage_name
    from sdk.spark.state.statestore import StateStore

    store = StateStore(str(tmp_path))
    table = TableId("shop", "orders")
    store.write_json({"phase": "snapshot", "counted": 0, "rows": 100, "started_at": 0,
                      "tables": {"shop.orders": {"splits_done": 1, "splits_estimated": 4,
                                                 "rows": 100, "snapshot_done": False},
                                 "shop.done": {"splits_done": 2, "splits_estimated": 2,
                                               "rows": 5, "snapshot_done": True}}},
                     "progress.json")
    batch = "000000000001-abc"
    store.write_json({}, "states", f"{batch}.json")
    for index, count in ((1, 30), (2, 40)):
        split = SnapshotSplit(table, index, None, None)
        store.write_json(FinishedSplit(split, Offset("test"), count).to_json(),
                         "batches", batch, f"{stage_name(split)}.json")
        store.write_bytes(b"rows", "batches", batch, f"{stage_name(split)}.arrow")
    live = progress(str(tmp_path))
    assert live is not None
    assert live["tables"]["shop.orders"] == {"splits_done": 3, "splits_estimated": 4,
                                             "rows": 170, "snapshot_done": False}
    assert live["tables"]["shop.done"]["splits_done"] == 2 and live["rows"] == 175
    folded = {**store.read_json("progress.json"), "counted": 1}  # the report that folded them
    store.write_json(folded, "progress.json")
    assert progress(str(tmp_path)) == folded

    # polled (sdk sync): each staged split read once, and only the newest batch's kept
    from sdk.spark.state.engine_state import live_progress

    seen: dict[str, Any] = {}
    store.write_json({**folded, "counted": 0}, "progress.json")
    assert live_progress(store, seen)["tables"]["shop.orders"]["rows"] == 170
    assert len(seen) == 2
    later = "000000000002-def"
    store.write_json({**folded, "counted": 1}, "progress.json")
    store.write_json({}, "states", f"{later}.json")
    split = SnapshotSplit(table, 3, None, None)
    store.write_json(FinishedSplit(split, Offset("test"), 7).to_json(),
                     "batches", later, f"{stage_name(split)}.json")
    assert live_progress(store, seen)["tables"]["shop.orders"]["rows"] == 107
    assert list(seen) == [f"{later}/{stage_name(split)}.json"]

    # the batch's stage removed while it is listed (cleaned up once the batch committed): the
    # display counts what it read before, and the sync goes on (it once ended with exit 1)
    real = store.fs

    class Vanishing:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def get_file_info(self, selector: Any) -> Any:
            if "batches" in str(getattr(selector, "base_dir", "")):
                raise FileNotFoundError(f"[Errno 2] Cannot list directory "
                                        f"'{selector.base_dir}'")
            return real.get_file_info(selector)

    store.fs = Vanishing()
    assert live_progress(store, seen)["tables"]["shop.orders"]["rows"] == 107


@pytest.mark.slow
def test_a_second_signal_stops_the_sync_in_the_middle_of_a_batch(tmp_path: Path) -> None:
    """The first SIGINT stops the sync once the batch in flight commits (a snapshot batch may
    run for many seconds); a second one stops it at once, mid-batch, and a restart completes
    it exactly: the mirror equals the source."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    source = tmp_path / "big.db"
    with sqlite3.connect(source) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        conn.executemany("INSERT INTO t VALUES (?, ?)",
                         ((i, f"row {i} " + "x" * 40) for i in range(600_000)))
    src, dst = f"sqlite:///{source}", f"sqlite:///{tmp_path}/mirror.db"
    checkpoint = tmp_path / "ck"
    args = [sys.executable, "-m", "sdk.app.cli", "sync", "--source", src, "--target", dst,
            "--checkpoint", str(checkpoint), "--until", "snapshot", "--master", "local[2]",
            "--option", "snapshot.split.size=2000"]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    batch = checkpoint / "state" / "batches"
    deadline = time.monotonic() + 120
    while not (batch.exists() and any(batch.rglob("*.json"))):  # the batch is running
        assert process.poll() is None and time.monotonic() < deadline, process.stdout.read()
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 0, out
    assert "signal again to stop now" in out
    # the JVM's logging is quiet unless asked (--verbose)
    for notice in ("log4j profile", "WARN Utils", "NativeCodeLoader", "Setting default log",
                   "Using incubator modules"):
        assert notice not in out, out[:2000]
    report = json.loads((checkpoint / "state" / "progress.json").read_text())
    assert report["phase"] == "snapshot", "the batch committed: the stop did not cut it"
    assert subprocess.run(args, capture_output=True, text=True, timeout=300).returncode == 0
    assert rows(dst)["t"] == rows(src)["t"]


@pytest.mark.slow
def test_sigterm_to_the_process_group_stops_the_sync_cleanly(tmp_path: Path) -> None:
    """SIGTERM to the whole process group (a supervisor's stop, ``kill -TERM -<pgid>``)
    reaches the driver alone: Spark's JVM and workers run in a session of their own, so the
    sync stops after its batch with exit 0, no traceback, and leaves no process behind."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    source = tmp_path / "src.db"
    with sqlite3.connect(source) as conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        conn.executemany("INSERT INTO t VALUES (?, ?)", ((i, "x") for i in range(1000)))
    process = subprocess.Popen(
        [sys.executable, "-m", "sdk.app.cli", "sync", "--source", f"sqlite:///{source}",
         "--target", f"sqlite:///{tmp_path}/mirror.db", "--checkpoint", str(tmp_path / "ck"),
         "--until", "never"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        # no JVM class archive: on a machine without one yet, its detached builder waits for
        # the sync to end and then works for a minute, by design (sdk/spark/startup/jvmcache.py)
        env={**os.environ, "PYTHONUNBUFFERED": "1", "SDK_JVM_ARCHIVE": "0"},
        start_new_session=True)
    assert process.stdout is not None
    seen = []
    for line in process.stdout:
        seen.append(line)
        if "phase log" in line:
            break
    tree = psutil.Process(process.pid).children(recursive=True)
    assert any("java" in p.name() for p in tree), seen
    os.killpg(process.pid, signal.SIGTERM)
    out = "".join(seen) + process.communicate(timeout=60)[0]
    assert process.returncode == 0, out
    assert "stopping once the batch in flight commits" in out and "Traceback" not in out, out
    deadline = time.monotonic() + 30  # a loaded machine (the suite on two workers) is slow
    while any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in tree):
        assert time.monotonic() < deadline, [(p, p.cmdline()) for p in tree if p.is_running()]
        time.sleep(0.1)
    assert rows(f"sqlite:///{tmp_path}/mirror.db")["t"] == rows(f"sqlite:///{source}")["t"]


def test_the_live_display_fits_the_terminal_and_keeps_what_follows_a_finished_sync(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On a terminal the progress is one live display (rich) redrawn in place: its lines fit
    the width (a wrapped line would leave part of the old display behind), a table's line
    has its bar, splits, rows and state, and after a sync's last report the next display
    starts below what was printed meanwhile (sdk demo runs two syncs)."""
    import io
    import re
    import sys

    from sdk.app.cli import _reporter
    from sdk.app.display import LiveProgress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True
    screen = Terminal()
    monkeypatch.setattr(sys, "stdout", screen)
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setenv("TERM", "xterm-256color")
    report = _reporter()
    assert isinstance(report, LiveProgress)
    progress = {"phase": "log", "rows": 5, "rows_per_second": 1.0, "tables": {
        "shop.orders": {"splits_done": 3, "splits_estimated": 4, "rows": 5000,
                        "state": "re-snapshotting", "schema_version": 2}},
        "position": '{"a": "' + "x" * 80 + '"}', "lag_seconds": 0.5, "caught_up": True}
    report(progress)
    drawn = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue())
    assert "shop.orders" in drawn and "3/4 splits" in drawn and "5,000 rows" in drawn
    assert "re-snapshotting, schema version 2" in drawn and "lag 0.5 s" in drawn
    assert all(len(line) <= 100 for line in drawn.splitlines())
    report(progress)
    assert "\x1b[1A" in screen.getvalue()  # redrawn over the lines above
    report({**progress, "final": True})
    print("writer stopped")
    before = len(screen.getvalue())
    report(progress)
    assert "\x1b[1A" not in screen.getvalue()[before:]  # below "writer stopped", not over it
    assert "writer stopped" in screen.getvalue()


def test_off_a_terminal_each_report_is_one_plain_line(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    from sdk.app.cli import _reporter

    report = _reporter()
    report({"phase": "snapshot", "rows": 10, "rows_per_second": 2.0, "tables": {
        "shop.orders": {"splits_done": 1, "splits_estimated": 2, "rows": 10}}})
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "\x1b" not in out
    assert out.startswith("shop.orders: 1/2 splits, 10 rows")
