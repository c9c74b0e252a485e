"""The state directory on object storage: a local S3-compatible server (moto's, from PyPI, on a
loopback port) read and written through ``pyarrow.fs`` as a sync's state directory is, the
lease and the progress file included, with the endpoint given in the checkpoint's URI reaching
what is pickled for the executors; and a Spark stream keeping its state there."""

from __future__ import annotations

import importlib.util
import pickle
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from helpers.instances import free_port
from helpers.sources import make_source

from sdk import ConnectionConfig, get_dialect
from sdk.job.spec import checkpoint_paths
from sdk.spark import Mirror
from sdk.spark.state.lease import CheckpointInUseError, CheckpointLease
from sdk.spark.state.statestore import StateStore
from sdk_sqlite import read_target


@pytest.fixture(scope="module")
def s3() -> Iterator[str]:
    """The options of a checkpoint URI on a moto S3 server started for the module (whose
    credentials, ``test:test@``, the URIs give)."""
    if importlib.util.find_spec("moto") is None:
        pytest.skip("moto's server is not installed (pip install 'moto[server]')")
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                                "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        # credentials in the URIs, not the environment: Spark's Python workers, started
        # before this fixture, would not see it
        yield (f"endpoint_override=127.0.0.1:{port}&scheme=http&region=us-east-1"
               "&allow_bucket_creation=true")
    finally:
        process.terminate()
        process.wait(30)


def test_a_checkpoint_uri_keeps_its_options_after_each_part() -> None:
    assert checkpoint_paths("s3://bucket/syncs/shop/?endpoint_override=h:9000&scheme=http") == (
        "s3://bucket/syncs/shop/state?endpoint_override=h:9000&scheme=http",
        "s3://bucket/syncs/shop/checkpoint")  # Hadoop's paths take no pyarrow options
    assert checkpoint_paths("hdfs://nn/cdc") == ("hdfs://nn/cdc/state", "hdfs://nn/cdc/checkpoint")


def test_the_state_directory_on_s3(s3: str) -> None:
    state, _ = checkpoint_paths(f"s3://test:test@sdk-state/shop?{s3}")
    store = StateStore(state)
    assert store.uri == "s3://sdk-state/shop/state"  # what messages name: no options
    store.write_json({"phase": "snapshot", "rows": 3}, "progress.json")
    assert store.read_json("progress.json") == {"phase": "snapshot", "rows": 3}
    table = pa.table({"id": [1, 2, 3], "v": ["a", "b", None]})
    store.write_arrow(table, "staged", "t", "split-0.arrow")
    assert store.read_arrow("staged", "t", "split-0.arrow") == table
    digest = store.put_content({"columns": ["id", "v"]}, "schemas")
    assert store.read_json("schemas", f"{digest}.json") == {"columns": ["id", "v"]}
    # an executor's copy reaches the same server, not AWS: the endpoint travels with it
    copy = pickle.loads(pickle.dumps(store))
    assert copy.read_json("progress.json") == {"phase": "snapshot", "rows": 3}
    assert store.read_json("missing.json") is None
    # Hadoop's scheme, as a checkpoint that Spark's S3A connector also writes is given
    hadoop = StateStore(checkpoint_paths(f"s3a://test:test@sdk-state/shop?{s3}")[0])
    assert hadoop.read_json("progress.json") == {"phase": "snapshot", "rows": 3}


def test_the_lease_on_s3_refuses_a_second_sync_and_is_taken_over_once_stale(s3: str) -> None:
    state, _ = checkpoint_paths(f"s3://test:test@sdk-state/leased?{s3}")
    first = CheckpointLease(StateStore(state), seconds=2)
    assert not first.local
    first.acquire(settle_seconds=0.2)
    try:
        second = CheckpointLease(StateStore(state), seconds=2)
        with pytest.raises(CheckpointInUseError, match="is in use by the sync of pid"):
            second.acquire(settle_seconds=0.2)
    finally:
        first.release()
    second.acquire(settle_seconds=0.2)  # released: free
    second._stop.set()  # a sync that hangs: its lease is no longer renewed
    assert second._renewer is not None
    second._renewer.join()
    time.sleep(2.5)
    third = CheckpointLease(StateStore(state), seconds=2)
    third.acquire(settle_seconds=0.2)
    assert third.owner() is not None and third.owner()["token"] == third.token  # type: ignore[index]
    third.release()


@pytest.mark.spark
@pytest.mark.slow
def test_a_stream_keeps_its_state_on_s3(spark: Any, s3: str, tmp_path: Path) -> None:
    """``format("cdc")`` with ``state.dir`` on S3 (Spark's checkpoint on local disk): the
    snapshot, then the log in a second run that resumes from the states it left there."""
    url = make_source(tmp_path, rows=600)
    dialect = get_dialect("sqlite")
    conn = dialect.connect(ConnectionConfig.from_url(url))
    schemas = [dialect.describe_table(conn, t) for t in dialect.list_tables(conn)]
    dialect.prepare_capture(conn, schemas)
    mirror = Mirror(f"sqlite:///{tmp_path}/mirror.db", schemas)
    state = f"s3://test:test@sdk-state/stream-{tmp_path.name}?{s3}"

    def run() -> None:
        query = (spark.readStream.format("cdc").option("url", url).option("tables", "*")
                 .option("state.dir", state).option("snapshot.split.size", "200").load()
                 .writeStream.foreachBatch(mirror)
                 .option("checkpointLocation", str(tmp_path / "ck"))
                 .trigger(availableNow=True).start())
        query.awaitTermination(300)
        assert query.exception() is None, query.exception()
    run()
    with sqlite3.connect(tmp_path / "src.db") as source:
        source.execute("UPDATE items SET name = 'changed' WHERE id < 50")
        source.execute("DELETE FROM items WHERE id >= 550")
    run()
    target = dialect.connect(ConnectionConfig.from_url(f"sqlite:///{tmp_path}/mirror.db"))
    for schema in schemas:
        assert read_target(target, schema) == read_target(conn, schema)
    target.close()
    conn.close()
    assert StateStore(state).list_dir("states")  # the stream's states are on S3
