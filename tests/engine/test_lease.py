"""One sync per checkpoint: a second ``sdk sync`` on a checkpoint in use stops at once naming
the owner; a dead owner's lease is taken over (by the kernel's flock on local disk, by expiry
on shared storage)."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sdk.app.cli import main
from sdk.spark.state.lease import CheckpointInUseError, CheckpointLease
from sdk.spark.state.statestore import StateStore

HOLD = """
import sys, time
from sdk.spark.state.lease import CheckpointLease
from sdk.spark.state.statestore import StateStore
CheckpointLease(StateStore(sys.argv[1])).acquire()
print("held", flush=True)
time.sleep(120)
"""


def test_a_second_sync_on_a_checkpoint_in_use_stops_at_once_naming_the_owner(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "src.db"
    with sqlite3.connect(source) as conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    checkpoint = tmp_path / "ck"
    (checkpoint / "state").mkdir(parents=True)
    owner = subprocess.Popen([sys.executable, "-c", HOLD, str(checkpoint / "state")],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == "held"
        started = time.monotonic()
        code = main(["sync", "--source", f"sqlite:///{source}", "--target",
                     f"sqlite:///{tmp_path / 'mirror.db'}", "--checkpoint", str(checkpoint),
                     "--until", "snapshot"])
        err = capsys.readouterr().err
        assert code != 0 and time.monotonic() - started < 10
        assert f"in use by the sync of pid {owner.pid} on {socket.gethostname()}" in err
        assert "another --checkpoint" in err
        assert not (tmp_path / "mirror.db").exists()  # refused before any side effect
    finally:
        owner.kill()
        owner.wait()
    lease = CheckpointLease(StateStore(str(checkpoint / "state")))
    lease.acquire()  # the kernel released the dead owner's lock
    assert lease.owner()["pid"] == os.getpid()  # type: ignore[index]
    lease.release()
    assert lease.owner() is None


def test_on_shared_storage_a_lease_expires_and_the_stalled_owner_learns_it(
        tmp_path: Path) -> None:
    store = StateStore(str(tmp_path / "state"))
    first = CheckpointLease(store, seconds=0.6, local_lock=False)
    first.acquire(settle_seconds=0.05)
    second = CheckpointLease(store, seconds=0.6, local_lock=False)
    with pytest.raises(CheckpointInUseError, match=f"pid {os.getpid()}.*taken over"):
        second.acquire(settle_seconds=0.05)
    time.sleep(0.5)  # renewed meanwhile: still refused
    with pytest.raises(CheckpointInUseError):
        second.acquire(settle_seconds=0.05)
    first._stop.set()  # the owner stalls: no more renewals
    assert first._renewer is not None
    first._renewer.join()
    time.sleep(0.8)
    second.acquire(settle_seconds=0.05)
    assert store.read_json("owner.json")["token"] == second.token
    first._stop.clear()
    first._renew_once()
    assert first.lost
    second.release()
    assert store.read_json("owner.json") is None


def test_verify_tells_a_running_sync_by_its_owner_record(tmp_path: Path) -> None:
    """``sdk verify`` reads the owner's record, never the lock (a sync starting then would
    find it taken): a live process of this host holds it, a dead one does not, another
    host's is trusted; on shared storage, a lease renewed lately."""
    from sdk.spark.verify import running_owner

    store = StateStore(str(tmp_path / "state"))
    assert running_owner(store) is None
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "state")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        owner = running_owner(store)
        assert owner is not None and owner["pid"] == holder.pid
    finally:
        holder.kill()
        holder.wait()
    assert running_owner(store) is None  # its record stays; its process is gone
    record = {"host": "elsewhere.example", "pid": 1, "since": 0.0, "renewed": 0.0}
    store.write_json(record, "owner.json")
    assert running_owner(store) == record
    store.write_json({**record, "host": socket.gethostname(), "pid": 0}, "owner.json")
    assert running_owner(store) is None
