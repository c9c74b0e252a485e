"""Resuming a stream when the world moved: tables that newly match the patterns, tables that
went away, and checkpoints given as URIs."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from sdk import ConfigurationError
from sdk.app.cli import main
from sdk.job.spec import checkpoint_paths, resolve
from sdk.spark.driver.source import CdcStreamReader
from sdk.spark.state.engine_state import EngineState, checkpointed, latest
from sdk.spark.state.statestore import StateStore

pytestmark = pytest.mark.spark


def make_source(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)")
        conn.executemany("INSERT INTO items VALUES (?, ?)",
                         [(i, f"item {i}") for i in range(300)])
    return f"sqlite:///{path}"


def options(url: str, state: Path) -> dict[str, str]:
    return {"url": url, "tables": "*", "state.dir": str(state),
            "snapshot.split.size": "50", "snapshot.splits-per-batch": "2"}


def read_batch(reader: CdcStreamReader, start: dict[str, Any], end: dict[str, Any]
               ) -> pa.Table:
    batches = [b for p in reader.partitions(start, end) for b in reader.read(p)]
    return pa.Table.from_batches(batches)


def test_a_new_matching_table_does_not_change_a_replayed_batch(tmp_path: Path) -> None:
    """An in-flight batch replayed after a restart in which a new table (sorting first) matches
    the patterns serves byte for byte what it served before, and the sync keeps its tables."""
    url, state = make_source(tmp_path / "src.db"), tmp_path / "state"
    reader = CdcStreamReader(resolve(options(url, state)))
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    first = read_batch(reader, start, end)
    assert first.num_rows == 100
    reader.stop()  # the driver dies before the batch commits
    with sqlite3.connect(tmp_path / "src.db") as conn:
        conn.execute("CREATE TABLE aaa (id INTEGER PRIMARY KEY, name TEXT)")
        conn.executemany("INSERT INTO aaa VALUES (?, ?)", [(i, "new") for i in range(300)])
    spec = checkpointed(resolve(options(url, state)))
    assert [str(t.table) for t in spec.tables] == ["main.items"] and not spec.envelope
    again = CdcStreamReader(spec)
    replayed = read_batch(again, start, end)
    assert replayed.equals(first)
    assert replayed.schema == first.schema
    nxt = again.latestOffset(end, None)
    engine = EngineState.load(StateStore(str(state)), nxt["state"])
    assert list(engine.sync.tables) == [spec.tables[0].table]
    assert all(s.table == spec.tables[0].table for s in engine.inflight)
    again.stop()


def test_a_synced_table_that_is_gone_stops_the_resume(tmp_path: Path) -> None:
    url, state = make_source(tmp_path / "src.db"), tmp_path / "state"
    reader = CdcStreamReader(resolve(options(url, state)))
    reader.latestOffset(reader.initialOffset(), None)
    reader.stop()
    with sqlite3.connect(tmp_path / "src.db") as conn:
        conn.execute("CREATE TABLE other (id INTEGER PRIMARY KEY)")
    with pytest.raises(ConfigurationError, match=r"captures main.items, which the source no "
                                                 "longer has or the table patterns no longer"):
        checkpointed(resolve({**options(url, state), "tables": "*,!items"}))


def test_states_stored_with_table_positions_still_load(tmp_path: Path) -> None:
    """In-flight splits stored as [table position, split] (before tables were named by
    identity) load as their splits."""
    url, state = make_source(tmp_path / "src.db"), tmp_path / "state"
    reader = CdcStreamReader(resolve(options(url, state)))
    end = reader.latestOffset(reader.initialOffset(), None)
    reader.stop()
    store = StateStore(str(state))
    pointer = store.read_json("states", f"{end['state']}.json")
    content = store.read_json("content", f"{pointer['content']}.json")
    splits = EngineState.load(store, end["state"]).inflight
    content["inflight"] = [[7, s] for s in content["inflight"]]
    store.write_json(content, "content", f"{pointer['content']}.json")
    assert EngineState.load(store, end["state"]).inflight == splits


def test_checkpoint_paths_keep_uris() -> None:
    assert checkpoint_paths("s3a://bucket/syncs/shop/") == (
        "s3a://bucket/syncs/shop/state", "s3a://bucket/syncs/shop/checkpoint")
    state, spark = checkpoint_paths("ck")
    assert Path(state).is_absolute() and state.endswith("/ck/state")
    assert spark.endswith("/ck/checkpoint")


@pytest.mark.slow
def test_sync_and_status_with_a_file_uri_checkpoint(spark: Any, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    url = make_source(tmp_path / "src.db")
    checkpoint = f"file://{tmp_path}/ck"
    args = ["sync", "--source", url, "--target", f"sqlite:///{tmp_path}/mirror.db",
            "--checkpoint", checkpoint, "--until", "caught-up"]
    assert main(args) == 0
    assert "applied 300 rows" in capsys.readouterr().out
    assert (tmp_path / "ck" / "state" / "progress.json").exists()
    assert (tmp_path / "ck" / "checkpoint").is_dir()
    assert not (Path.cwd() / "file:").exists()
    assert main(["status", "--checkpoint", checkpoint]) == 0
    assert "main.items: 1/1 splits, 300 rows, streaming" in capsys.readouterr().out
    with sqlite3.connect(tmp_path / "src.db") as conn:
        conn.execute("DELETE FROM items WHERE id < 5")
    assert main(args) == 0  # resumes from the URI checkpoint
    assert "applied 5 rows" in capsys.readouterr().out


@dataclass
class PgResume:
    """A PostgreSQL source schema, its mirror schema on the same server, and the arguments
    of an ``sdk sync --until caught-up`` between them (slot and publication of its own)."""

    source: Any
    schema: str
    mirror: str
    args: list[str]

    def rows(self, where: str, table: str) -> list[tuple[Any, ...]]:
        return self.source.execute(f"SELECT * FROM {where}.{table} ORDER BY id").fetchall()


@pytest.fixture
def pg_resume(postgres_url: str, postgres_admin: Any, tmp_path: Path) -> Iterator[PgResume]:
    import uuid

    import psycopg

    tag = f"rs_{uuid.uuid4().hex[:8]}"
    schema, mirror = tag, f"{tag}_m"
    for name in (schema, mirror):
        postgres_admin.execute(f"CREATE SCHEMA {name} AUTHORIZATION sdk_cdc")
    source = psycopg.connect(postgres_url, autocommit=True)
    url = f"{postgres_url}{'&' if '?' in postgres_url else '?'}slot={tag}&publication={tag}"
    args = ["sync", "--source", url, "--target", postgres_url, "--tables", f"{schema}.*",
            "--target-schema", mirror, "--checkpoint", str(tmp_path / "ck"),
            "--until", "caught-up"]
    try:
        yield PgResume(source, schema, mirror, args)
    finally:
        source.close()
        postgres_admin.execute("SELECT pg_drop_replication_slot(slot_name) FROM "
                               "pg_replication_slots WHERE slot_name = %s", (tag,))
        postgres_admin.execute(f"DROP PUBLICATION IF EXISTS {tag}")
        for name in (schema, mirror):
            postgres_admin.execute(f"DROP SCHEMA {name} CASCADE")


@pytest.mark.slow
@pytest.mark.postgres
def test_a_table_dropped_and_created_again_while_stopped_is_read_again(
        pg_resume: PgResume, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A table dropped and created again under its name while the sync was stopped (new
    rows, some keys shared, none of them in the log: the new table was in no publication)
    is noticed by its new OID and read again whole when the sync resumes: the mirror loses
    the old rows and gets the new ones; the other table only gets its changes. Created again
    with other columns, it stops the sync naming the fix."""
    source, schema, mirror, args = (pg_resume.source, pg_resume.schema, pg_resume.mirror,
                                    pg_resume.args)
    rows = pg_resume.rows
    for table in ("t0", "t1"):
        source.execute(f"CREATE TABLE {schema}.{table} (id int PRIMARY KEY, v text)")
        source.execute(f"INSERT INTO {schema}.{table} SELECT g, 'v' || g FROM "
                       "generate_series(1, 100) g")
    assert main(args) == 0
    source.execute(f"DROP TABLE {schema}.t0")
    source.execute(f"CREATE TABLE {schema}.t0 (id int PRIMARY KEY, v text)")
    source.execute(f"INSERT INTO {schema}.t0 SELECT g, 'new' || g FROM "
                   "generate_series(50, 150) g")
    source.execute(f"UPDATE {schema}.t1 SET v = 'changed' WHERE id <= 10")
    assert main(args) == 0
    for table in ("t0", "t1"):
        assert rows(mirror, table) == rows(schema, table)

    def rereads() -> list[str]:
        state = latest(StateStore(str(tmp_path / "ck" / "state")))
        assert state is not None
        return [r for r in state.sync.served if r.startswith("recreated/")]

    assert [r.rsplit("/", 1)[-1] for r in rereads()] == [f"{schema}.t0"]
    assert main(args) == 0  # read again once, not at each resume
    assert len(rereads()) == 1
    source.execute(f"DROP TABLE {schema}.t0")
    source.execute(f"CREATE TABLE {schema}.t0 (id int PRIMARY KEY, v text, extra int)")
    assert main(args) != 0
    assert "dropped and created again with other columns" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.postgres
def test_partitions_truncated_or_detached_outside_the_log_are_read_again(
        pg_resume: PgResume) -> None:
    """pgoutput says nothing of a TRUNCATE of one partition (published through its root) nor
    of a partition detached or attached: rows leave and join the partitioned table outside
    the log. Its incarnation token covers its partitions, so the sync notices at resume and
    reads it again whole; the mirror ends equal to the source."""
    source, schema, mirror, args = (pg_resume.source, pg_resume.schema, pg_resume.mirror,
                                    pg_resume.args)

    def rows(where: str) -> list[tuple[Any, ...]]:
        return pg_resume.rows(where, "t")

    source.execute(f"CREATE TABLE {schema}.t (id int PRIMARY KEY, v text) "
                   "PARTITION BY RANGE (id)")
    for k in range(3):
        source.execute(f"CREATE TABLE {schema}.t_{k} PARTITION OF {schema}.t FOR VALUES "
                       f"FROM ({k * 100}) TO ({k * 100 + 100})")
    source.execute(f"INSERT INTO {schema}.t SELECT g, 'v' || g FROM generate_series(0, 299) g")
    assert main(args) == 0
    assert rows(mirror) == rows(schema)
    source.execute(f"TRUNCATE {schema}.t_0")
    source.execute(f"ALTER TABLE {schema}.t DETACH PARTITION {schema}.t_1")
    source.execute(f"UPDATE {schema}.t SET v = 'changed' WHERE id = 250")
    assert main(args) == 0
    assert rows(mirror) == rows(schema) == [
        (g, "changed" if g == 250 else f"v{g}") for g in range(200, 300)]
    source.execute(f"ALTER TABLE {schema}.t ATTACH PARTITION {schema}.t_1 FOR VALUES "
                   "FROM (100) TO (200)")
    assert main(args) == 0
    assert len(rows(mirror)) == 200 and rows(mirror) == rows(schema)


@pytest.mark.slow
@pytest.mark.mysql
@pytest.mark.postgres
@pytest.mark.parametrize("kind", ["mysql", "postgres"])
def test_tables_truncated_or_dropped_and_created_again_in_the_log_are_read_again(
        kind: str, request: pytest.FixtureRequest, postgres_url: str, postgres_admin: Any,
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """While the sync was stopped: a TRUNCATE of t0 then new rows (some keys it had before),
    and on MySQL/MariaDB t1 dropped, created again and given other rows (the binlog holds
    the new rows, no deletes of the old). The log phase meets them as truncations and reads
    each table again whole: the mirror holds exactly the source's rows; a resume reads
    nothing again. A stream of changes (no target) stops at a TRUNCATE naming the fix, and
    goes on past a table dropped."""
    import uuid

    import psycopg

    tag = uuid.uuid4().hex[:8]
    mirror = f"tr_m_{tag}"
    postgres_admin.execute(f"CREATE SCHEMA {mirror} AUTHORIZATION sdk_cdc")
    target = psycopg.connect(postgres_url, autocommit=True)
    if kind == "mysql":
        admin = request.getfixturevalue("mysql_admin")
        url, schema = request.getfixturevalue("mysql_url"), "sdk_test"

        def run(sql: str) -> None:
            with admin.cursor() as cur:
                cur.execute(sql)

        def source_rows(table: str) -> list[tuple[Any, ...]]:
            with admin.cursor() as cur:
                cur.execute(f"SELECT id, v FROM {schema}.{table} ORDER BY id")
                return [tuple(r) for r in cur.fetchall()]
        numbers = "WITH RECURSIVE g(n) AS (SELECT {lo} UNION ALL SELECT n + 1 FROM g " \
                  "WHERE n < {hi}) SELECT n, CONCAT('{v}', n) FROM g"
    else:
        schema = f"tr_{tag}"
        postgres_admin.execute(f"CREATE SCHEMA {schema} AUTHORIZATION sdk_cdc")
        url = (f"{postgres_url}{'&' if '?' in postgres_url else '?'}slot=tr_{tag}"
               f"&publication=tr_{tag}")
        source = psycopg.connect(postgres_url, autocommit=True)

        def run(sql: str) -> None:
            source.execute(sql)

        def source_rows(table: str) -> list[tuple[Any, ...]]:
            return source.execute(f"SELECT id, v FROM {schema}.{table} ORDER BY id").fetchall()
        numbers = "SELECT g, '{v}' || g FROM generate_series({lo}, {hi}) g"
    t0, t1 = f"tr_{tag}_t0", f"tr_{tag}_t1"
    args = ["sync", "--source", url, "--target", postgres_url, "--tables",
            f"{schema}.tr_{tag}_*",
            "--target-schema", mirror, "--checkpoint", str(tmp_path / "ck"),
            "--until", "caught-up"]

    def rereads() -> list[str]:
        state = latest(StateStore(str(tmp_path / "ck" / "state")))
        assert state is not None
        return sorted(r for r in state.sync.served if r.startswith("truncated-"))

    try:
        for table in (t0, t1):
            run(f"CREATE TABLE {schema}.{table} (id int PRIMARY KEY, v varchar(20))")
            run(f"INSERT INTO {schema}.{table} (id, v) " + numbers.format(lo=1, hi=100, v="v"))
        assert main(args) == 0
        run(f"TRUNCATE TABLE {schema}.{t0}")
        run(f"INSERT INTO {schema}.{t0} (id, v) " + numbers.format(lo=90, hi=120, v="new"))
        if kind == "mysql":
            run(f"DROP TABLE {schema}.{t1}")
            run(f"CREATE TABLE {schema}.{t1} (id int PRIMARY KEY, v varchar(20))")
            run(f"INSERT INTO {schema}.{t1} (id, v) " + numbers.format(lo=50, hi=60, v="re"))
        else:
            run(f"UPDATE {schema}.{t1} SET v = 'changed' WHERE id <= 10")
        assert main(args) == 0
        for table in (t0, t1):
            mirrored = target.execute(f"SELECT id, v FROM {mirror}.{table} ORDER BY id")
            assert mirrored.fetchall() == source_rows(table), table
        done = rereads()
        assert len(done) == (2 if kind == "mysql" else 1)
        assert main(args) == 0  # read again once, not at each resume
        assert rereads() == done
        run(f"TRUNCATE TABLE {schema}.{t0}")
        changes = ["sync", "--source", url, "--target", "none",
                   "--changes", str(tmp_path / "changes"),
                   "--tables", f"{schema}.tr_{tag}_*", "--checkpoint", str(tmp_path / "ck2"),
                   "--until", "caught-up"]
        assert main(changes) == 0
        if kind == "mysql":  # a table dropped: the stream goes on, the table leaves
            run(f"DROP TABLE {schema}.{t0}")
            assert main(changes) == 0
        run(f"TRUNCATE TABLE {schema}.{t1}")
        assert main(changes) != 0
        assert f"TRUNCATE of {schema}.{t1}" in capsys.readouterr().err
    finally:
        target.close()
        if kind == "mysql":
            for table in (t0, t1):
                run(f"DROP TABLE IF EXISTS {schema}.{table}")
        else:
            source.close()
            for slot in (f"tr_{tag}", ):
                postgres_admin.execute("SELECT pg_drop_replication_slot(slot_name) FROM "
                                       "pg_replication_slots WHERE slot_name = %s", (slot,))
            postgres_admin.execute(f"DROP PUBLICATION IF EXISTS tr_{tag}")
            postgres_admin.execute(f"DROP SCHEMA {schema} CASCADE")
        postgres_admin.execute(f"DROP SCHEMA {mirror} CASCADE")


def test_the_query_takes_the_tables_sdk_sync_resolved(tmp_path: Path) -> None:
    """With option ``resolved`` naming the recorded token, the query's data source takes the
    tables ``sdk sync`` resolved (and made in the target) instead of discovering them again;
    another token, or none, discovers."""
    from sdk.spark.driver.source import CdcDataSource, save_resolved

    url, state = make_source(tmp_path / "src.db"), tmp_path / "state"
    given = {**options(url, state), "tables": "items"}
    spec = resolve(given)
    token = save_resolved(str(state), spec.tables)
    with sqlite3.connect(tmp_path / "src.db") as conn:
        conn.execute("ALTER TABLE items RENAME TO gone")  # discovering again would fail
    taken = CdcDataSource({**given, "resolved": token})._spec()
    assert taken.tables == spec.tables
    for other in ({**given, "resolved": "stale"}, given):
        with pytest.raises(ConfigurationError, match="matches no table"):
            CdcDataSource(other)._spec()
