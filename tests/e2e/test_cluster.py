"""``sdk sync`` on a standalone Spark cluster (a master and two one-core workers on this
machine, :mod:`helpers.cluster`), snapshot and log phase under a writer: MariaDB -> PostgreSQL
with the worker running a task SIGKILLed (with its executor) during the snapshot and again
during the log phase, and PostgreSQL -> Delta. Spark runs the lost tasks again; the mirror
equals the source, and the change log shows every snapshot row and change delivered once."""

from __future__ import annotations

import json
import os
import re
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from helpers.changes import assert_once, snapshot_keys
from helpers.cluster import SparkCluster, start_cluster
from helpers.instances import server_dir
from helpers.kill import mid_snapshot, paced, sync_process
from helpers.lakehouse import commits
from helpers.writers import Writer, mysql_table, postgres_table, removed_keys

from sdk import SnapshotSplit, TableId, TableSchema
from sdk.dialect.manager import default_manager

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROWS = 10000
MARK = 9_999_999
"""The key of the row written last: once the mirror holds it, it holds every change before."""


@pytest.fixture(scope="module")
def cluster() -> Iterator[SparkCluster]:
    made = start_cluster(server_dir() / "spark")
    # the syncs' drivers bound to loopback too, their Spark events logged (spark-submit reads
    # spark-defaults.conf in SPARK_CONF_DIR, as a user's cluster settings would be given)
    conf, events = made.root / "conf", made.root / "events"
    conf.mkdir()
    events.mkdir()
    (conf / "spark-defaults.conf").write_text(
        f"spark.eventLog.enabled true\nspark.eventLog.compress false\n"
        f"spark.eventLog.dir file://{events}\n")
    env = {"SPARK_LOCAL_IP": "127.0.0.1", "SPARK_CONF_DIR": str(conf)}
    before = {name: os.environ.get(name) for name in [*env, "PYSPARK_PYTHON"]}
    os.environ.update(env)
    os.environ.pop("PYSPARK_PYTHON", None)  # the executors' Python as the sync chooses it
    try:
        yield made
    finally:
        made.stop()
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _tasks_lost(cluster: SparkCluster) -> int:
    """Tasks the syncs' Spark applications lost with an executor, from their event logs."""
    lost = 0
    for path in (cluster.root / "events").rglob("events_*"):  # rolling logs, in folders
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if event.get("Event") == "SparkListenerTaskEnd" and \
                    event.get("Task End Reason", {}).get("Reason") == "ExecutorLostFailure":
                lost += 1
    return lost


def _applied(line: str) -> int:
    found = re.search(r"applied (\d+)", line)
    return int(found.group(1)) if found else -1


CONFIRM_SECONDS = 25.0
"""How long a lost task may take to show in the event log: Spark writes its end at once but
flushes the log only at events such as a stage's end or an executor's (re)registration."""


@dataclass
class _Losses:
    """A worker running a task killed (with its executor, and started again) in each of
    ``phases`` in turn. A kill counts once the event log shows one more task lost; one that
    missed (the task ended between the choice and the kill) is made again while the phase
    lasts."""

    cluster: SparkCluster
    source_port: int
    """The source's port: a worker whose executor holds a connection to it runs a task."""
    phases: list[str]
    done: list[str] = field(default_factory=list)
    tried: list[str] = field(default_factory=list)  # each kill made: its phase and outcome
    lost: int = 0  # tasks lost in the event log before the kill waiting to show
    at: float | None = None  # when that kill was made

    def see(self, phase: str | None) -> None:
        """At a progress line of ``phase`` (None: one to kill in no phase)."""
        if self.at is not None:  # a kill waiting to show, whatever the phase now
            if _tasks_lost(self.cluster) > self.lost:
                self.done.append(self.phases.pop(0))
                self.tried[-1] += " lost a task"
                self.at = None
            elif time.monotonic() - self.at > CONFIRM_SECONDS:
                self.tried[-1] += " missed"
                self.at = None
        if self.at is None and self.phases and phase == self.phases[0]:
            lost = _tasks_lost(self.cluster)
            running = self.cluster.worker_connected(self.source_port)
            if running is not None:
                self.cluster.kill_worker(running)
                self.cluster.start_worker(running)
                self.lost, self.at = lost, time.monotonic()
                self.tried.append(f"{phase}: worker {running}")


def _rows(url: str, table: TableId, schema: TableSchema | None = None
          ) -> tuple[TableSchema, dict[Any, Any]]:
    """``table``'s columns (``schema``, else described) and rows by key, at ``url`` (a source
    or a mirror)."""
    dialect, config = default_manager().dialect_for_url(url)
    conn = dialect.connect(config)
    try:
        schema = schema or dialect.describe_table(conn, table)
        return schema, {r[0]: r for b in dialect.read_range(
            conn, schema, SnapshotSplit(table, 0, None, None), 10000) for r in b}
    finally:
        conn.close()


def _sync_under_writer(cluster: SparkCluster, args: list[str], tmp_path: Path,
                       write_once: Callable[[int], None], mark: Callable[[], None],
                       arrived: Callable[[], bool], lose_workers: bool) -> int:
    """``sdk sync --until never`` on ``cluster`` while ``write_once`` runs, with (if
    ``lose_workers``) the worker running a snapshot task SIGKILLed and later the one running
    a log batch (:class:`_Losses`).
    When the log batches go on (past the losses) the writer stops, ``mark`` writes the row
    :data:`MARK`, and the sync is stopped (SIGINT) once ``arrived``: the mirror has it.
    Returns how many writes the writer began."""
    writer = Writer(write_once, 0.01)
    # to be killed in: a snapshot paced to about 8 s, log batches paced to twice the writer's
    # rate (~300 changes/s), each reading the source about half the time; else as fast as
    # they go
    pace = [*paced(ROWS), "--option", "log.changes-per-second=600"] if lose_workers else []
    sync = sync_process([*args, *pace, "--until", "never"])
    losses = _Losses(cluster, urlsplit(args[args.index("--source") + 1]).port or 0,
                     ["snapshot", "log"] if lose_workers else [])
    try:
        assert sync.stdout is not None
        log_start = -1  # applied at the log phase's first line
        marked = False  # the last row written
        deadline = time.monotonic() + 200
        seen: list[str] = []
        for line in sync.stdout:
            seen = [*seen[-5:], line]
            if time.monotonic() > deadline:
                raise AssertionError(f"no end after 200 s: kills {losses.tried}, {seen}")
            now = _applied(line)
            if marked:
                if arrived():
                    break
            elif mid_snapshot(line):
                losses.see("snapshot")
            elif "phase log" not in line:
                losses.see(None)
            elif log_start < 0:
                log_start = now
            elif now > log_start:  # log batches apply
                losses.see("log")
                if not losses.phases and losses.at is None:  # and go on after the losses
                    writer.stop()  # its last change, then the mark
                    mark()
                    marked = True
            if losses.phases and losses.phases[0] == "snapshot" and "phase log" in line \
                    and losses.at is None:
                raise AssertionError(f"the snapshot ended before a task of it was lost: "
                                     f"{losses.tried}")
        else:
            raise AssertionError(f"the sync ended (exit {sync.wait()}) having lost tasks in "
                                 f"{losses.done} ({losses.tried}): "
                                 f"{(tmp_path / 'sync-errors.txt').read_text()[-3000:]}")
        sync.send_signal(signal.SIGINT)  # stops after the batch in flight
        assert sync.wait(timeout=120) == 0
    finally:
        writer.stop()
        if sync.poll() is None:
            sync.kill()
    return writer.started


@pytest.mark.mysql
@pytest.mark.postgres
def test_mariadb_to_postgres_on_a_cluster_losing_a_worker_in_each_phase(
        cluster: SparkCluster, mysql_admin: Any, mysql_url: str, postgres_admin: Any,
        postgres_url: str, tmp_path: Path) -> None:
    schema_name = f"sdk_cl_{uuid.uuid4().hex[:8]}"
    postgres_admin.execute(f"CREATE SCHEMA {schema_name} AUTHORIZATION sdk_cdc")
    try:
        with mysql_table(mysql_admin, ROWS) as (table, write_once, run):
            mirror = TableId(schema_name, table.name)

            def arrived() -> bool:
                return bool(postgres_admin.execute(
                    f"SELECT 1 FROM {mirror} WHERE id = {MARK}").fetchall())

            args = ["sync", "--source", mysql_url, "--target", postgres_url, "--tables",
                    str(table), "--target-schema", schema_name, "--checkpoint",
                    str(tmp_path / "ck"), "--changes", str(tmp_path / "changes"), "--master",
                    cluster.url, "--option", "snapshot.split.size=2500",
                    "--option", "snapshot.splits-per-batch=4"]
            writes = _sync_under_writer(
                cluster, args, tmp_path, write_once,
                lambda: run(f"INSERT INTO `{table.name}` VALUES ({MARK}, 'last', 0, NOW(6))"),
                arrived, lose_workers=True)
            assert _rows(postgres_url, mirror)[1] == _rows(mysql_url, table)[1]
        assert _tasks_lost(cluster) >= 2  # a task in each phase, run again
        said = (tmp_path / "sync-errors.txt").read_text()
        assert f"checkpoint {tmp_path / 'ck'} is a path of this machine" in said
        # the mirror upserts, so it would look right with a change applied twice: count them
        _, changes = assert_once(tmp_path / "changes", "mysql", key="id")
        # each row there all along was delivered when its split was read (the writer's deletes
        # and inserts make the count of snapshot rows depend on the order splits are read in)
        missing = set(range(1, ROWS + 1)) - removed_keys(ROWS, writes) - \
            snapshot_keys(tmp_path / "changes", "id")
        assert not missing and changes > 0, sorted(missing)[:20]
    finally:
        postgres_admin.execute(f"DROP SCHEMA {schema_name} CASCADE")


@pytest.mark.postgres
def test_postgres_to_delta_on_a_cluster(cluster: SparkCluster, postgres_admin: Any,
                                        postgres_url: str, tmp_path: Path) -> None:
    url = f"{postgres_url}?slot=sdk_cl_slot&publication=sdk_cl_pub"
    lake = f"delta://{tmp_path}/lake"
    with postgres_table(postgres_admin, ROWS, "sdk_cl_slot", "sdk_cl_pub") as \
            (table, write_once, run):
        args = ["sync", "--source", url, "--target", lake, "--tables", str(table),
                "--checkpoint", str(tmp_path / "ck"), "--master", cluster.url,
                "--option", "snapshot.split.size=2500",
                "--option", "snapshot.splits-per-batch=2"]
        schema, _ = _rows(url, table)
        _sync_under_writer(
            cluster, args, tmp_path, write_once,
            lambda: run(f"INSERT INTO \"{table.name}\" VALUES ({MARK}, 'last', 0, now())"),
            lambda: MARK in _rows(lake, table, schema)[1], lose_workers=False)
        assert _rows(lake, table, schema)[1] == _rows(url, table)[1]
        target, config = default_manager().dialect_for_url(lake)
        tables = target.connect(config)
        applied = commits(target, tables, schema)
        tables.close()
        assert applied and len(applied) == len(set(applied))  # no batch committed twice
