"""The head start's record and Spark checkpoint reading (``sdk/spark/startup/headstart.py``): which
batches the stream steps over, which it runs, and when a driver may start a new head start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sdk.dialect.errors import ConfigurationError
from sdk.job.spec import sync_settings
from sdk.spark.startup.headworkers import ends_without_spark, local_cores, wanted
from sdk.spark.state.handoff import (
    next_step,
    resumed_state,
    skips,
    spark_position,
    taken_up,
    untouched,
)


def _offset(state: str) -> dict[str, object]:
    return {"v": 1, "phase": "snapshot", "state": state, "position": None}


S0, S1, S2, S3 = (_offset(f"00000000000{i}-x") for i in range(4))


def test_a_new_checkpoint_steps_to_the_last_completed_state_then_runs_the_planned_batch() -> None:
    record = {"start": None, "initial": S0, "done": S2, "planned": S3}
    assert next_step(record, S0) == S2 and skips(record, S0, S2)
    assert next_step(record, S2) == S3 and not skips(record, S2, S3)  # replayed with tasks
    assert next_step(record, S3) is None  # the stream's own batches from there
    assert not taken_up(record, None) and not taken_up(record, S0)
    assert not taken_up(record, S2) and taken_up(record, S3)


def test_a_resumed_checkpoint_starts_where_spark_committed() -> None:
    record = {"start": S1["state"], "initial": None, "done": None, "planned": S2}
    assert next_step(record, S1) == S2 and not skips(record, S1, S2)
    assert next_step(record, S0) is None and not taken_up(record, S1)
    assert taken_up(record, S2)
    done = {"start": S1["state"], "initial": None, "done": S2, "planned": None}
    assert skips(done, S1, S2) and taken_up(done, S2) and not taken_up(done, S1)


def test_a_stream_resumes_past_what_the_driver_committed_for_it() -> None:
    new = {"start": None, "initial": S0, "done": S2, "planned": S3}
    assert resumed_state(new, None) == S2["state"]  # Spark never committed a batch
    assert resumed_state(new, S0["state"]) == S2["state"]
    assert resumed_state(new, S3["state"]) == S3["state"]  # Spark took it up and went on
    resumed = {"start": S1["state"], "initial": None, "done": S2, "planned": None}
    assert resumed_state(resumed, S1["state"]) == S2["state"]
    assert resumed_state(resumed, None) is None  # not this record's checkpoint
    planned = {"start": S1["state"], "initial": None, "done": None, "planned": S2}
    assert resumed_state(planned, S1["state"]) == S1["state"]  # nothing completed
    assert resumed_state(None, S1["state"]) == S1["state"]


def test_no_record_or_an_empty_one_is_taken_up() -> None:
    assert taken_up(None, None) and taken_up(None, S1)
    assert taken_up({"start": None, "initial": S0, "done": None, "planned": None}, None)
    assert next_step(None, S0) is None and not skips(None, S0, S1)


def _batch(checkpoint: Path, number: int, offset: object, committed: bool) -> None:
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "commits").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(number)).write_text(
        f'v1\n{{"batchWatermarkMs":0}}\n{json.dumps(offset)}')
    if committed:
        (checkpoint / "commits" / str(number)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_spark_position_reads_the_last_committed_batch(tmp_path: Path) -> None:
    assert spark_position(str(tmp_path / "none")) == (True, None)
    _batch(tmp_path, 0, S1, True)
    _batch(tmp_path, 1, S2, True)
    (tmp_path / "offsets" / ".1.crc").write_text("")
    assert spark_position(str(tmp_path)) == (True, S2)
    _batch(tmp_path, 2, S3, False)  # not committed: Spark replays it first
    assert spark_position(str(tmp_path)) == (False, None)
    _batch(tmp_path, 2, "not ours", True)
    assert spark_position(str(tmp_path)) == (False, None)


def test_local_cores_of_a_master() -> None:
    assert local_cores("local") == 1 and local_cores("local[3]") == 3
    assert local_cores("local[2,4]") == 2
    assert local_cores("local[*]") == len(os.sched_getaffinity(0))
    assert local_cores("spark://127.0.0.1:7077") is None and local_cores("yarn") is None


def test_a_head_start_goes_on_only_from_a_record_the_stream_took_nothing_of() -> None:
    new = {"start": None, "initial": S0, "done": S2, "planned": S3}
    assert untouched(new, None)  # Spark never started: the driver may go on from S2
    assert not untouched(new, S2) and not untouched(new, S3)  # Spark took some or all up
    resumed = {"start": S1["state"], "initial": None, "done": S2, "planned": None}
    assert untouched(resumed, S1) and not untouched(resumed, S2)
    assert not untouched(None, None) and not untouched(new, S0 | {"state": "other"})


def test_the_head_start_is_auto_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SDK_HEAD_START", raising=False)
    assert sync_settings({"source": "sqlite:///x.db"}, {}).head_start is None
    assert wanted(None, "snapshot") and wanted(None, "caught-up") and not wanted(None, "never")
    assert wanted("auto", "snapshot") and wanted("auto", "caught-up")
    assert not wanted("auto", "never") and wanted("on", "never")
    assert not wanted("off", "snapshot")
    assert sync_settings({"source": "x", "head-start": False}, {}).head_start == "off"
    assert ends_without_spark("auto", "local[2]", "caught-up", chained=True)
    assert not ends_without_spark("auto", "local[2]", "caught-up", chained=False)
    assert not ends_without_spark("auto", "spark://127.0.0.1:7077", "snapshot", chained=True)
    assert not ends_without_spark("on", "local[2]", "never", chained=True)  # Spark follows
    monkeypatch.setenv("SDK_HEAD_START", "off")  # stands in for an unset setting only
    assert not wanted(None, "snapshot") and wanted("auto", "snapshot")
    monkeypatch.setenv("SDK_HEAD_START", "1")
    assert wanted(None, "never")
    monkeypatch.setenv("SDK_HEAD_START", "sometimes")
    with pytest.raises(ConfigurationError, match="SDK_HEAD_START takes auto, on or off"):
        wanted(None, "snapshot")


_FORK_PROBE = """
import os, sys, time
from sdk.app.cli import _sync_settings, build_parser
from sdk.spark.startup.headworkers import NAME, _Forked, _may_fork, start_workers

args = build_parser().parse_args(["sync", "--source", "mysql://u@127.0.0.1/db", "--target",
                                  "postgresql://u@127.0.0.1/db", "--checkpoint", sys.argv[1]])
_sync_settings(args)
print("may fork:", _may_fork())  # what `sdk sync` has imported by its workers' start
workers = start_workers(2)
print("forked:", all(isinstance(w.process, _Forked) for w in workers))
time.sleep(0.2)
with open(f"/proc/{workers[1].process.pid}/comm", "rb") as comm:
    print("named:", comm.read().strip() == NAME)
workers[0]._send.close()  # its input ends: it exits, though the second worker was forked after
deadline = time.monotonic() + 60
while os.waitpid(workers[0].process.pid, os.WNOHANG) == (0, 0):
    assert time.monotonic() < deadline, "the first worker never saw its input end"
    time.sleep(0.05)
print("ended at its input's end")
workers[1].close()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers are forked on Linux")
def test_sdk_sync_forks_its_workers_and_each_ends_with_its_own_input(tmp_path: Path) -> None:
    """``sdk sync`` imports nothing that runs threads before its head start's workers start,
    so they are forked (named for ``ps``); a worker forked after another holds none of that
    one's pipes, so closing one's input ends it."""
    probe = subprocess.run([sys.executable, "-c", _FORK_PROBE, str(tmp_path / "ck")],
                           capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split("\n")[:4] == ["may fork: True", "forked: True", "named: True",
                                            "ended at its input's end"], probe.stdout
