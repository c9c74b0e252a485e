"""Tables at the edges, on the real servers: PostgreSQL partitioned tables captured as one
table (key moves across partitions included), tables without a primary key captured on a
chosen NOT NULL chunk key (PostgreSQL and MariaDB), and ``sdk check`` reporting what ``sdk
sync`` would do with the publication. Each end-to-end test mirrors into SQLite under changes
and ends with the mirror equal to the source."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.servers import with_query

from sdk import (
    ChangeEvent,
    ConfigurationError,
    ConnectionConfig,
    Dialect,
    FatalSyncError,
    PreflightError,
    SnapshotSplit,
    TableId,
    TableSchema,
    get_dialect,
)
from sdk.algorithm import Phase, SyncOptions, SyncRunner, caught_up, choose_key
from sdk.app.cli import main
from sdk.dialect.types import Column, LogicalType
from sdk.job.spec import discover
from sdk_sqlite import read_target


def mirror_under_changes(dialect: Dialect, url: str, schemas: list[TableSchema],
                         options: SyncOptions, write: Callable[[int], None], rounds: int,
                         tmp_path: Path) -> None:
    """Sync ``schemas`` into a SQLite mirror with the runner, calling ``write(step)`` after
    each of the first ``rounds`` steps (snapshot steps included), catch up, and assert the
    mirror equals the source."""
    config = ConnectionConfig.from_url(url)
    runner = SyncRunner(dialect, lambda: dialect.connect(config), options)
    sqlite = get_dialect("sqlite")
    target = sqlite.connect(ConnectionConfig.from_url(f"sqlite:///{tmp_path}/mirror.db"))
    source = dialect.connect(config)
    step = 0

    def apply(events: list[ChangeEvent]) -> None:
        nonlocal step
        step += 1
        for schema in schemas:
            sqlite.apply_changes(target, schema, [e for e in events if e.table == schema.table],
                                 str(step))

    try:
        state = runner.start(schemas)
        for schema in schemas:
            sqlite.create_table(target, schema)
        while state.phase is Phase.SNAPSHOT or step <= rounds:
            events, state = runner.step(state)
            apply(events)
            if step <= rounds:
                write(step)
        head = dialect.current_offset(source)
        while not caught_up(runner, head)(state):
            events, state = runner.step(state)
            apply(events)
        for schema in schemas:
            whole = SnapshotSplit(schema.table, 0, None, None)
            expected = {schema.key_of(r): r for b in dialect.read_range(source, schema, whole,
                                                                           1000) for r in b}
            assert read_target(target, schema) == expected, schema.table
    finally:
        runner.close()
        source.close()
        target.close()


# --- PostgreSQL ---------------------------------------------------------------------------


@pytest.fixture
def pg_env(postgres_url: str, postgres_admin: Any) -> Iterator[dict[str, Any]]:
    """A slot and publication of this test's own, the CDC role's name, and ``make(ddl)`` to
    create a uniquely named table as the administrator (``{name}`` in the DDL; partitions may
    use ``{name}_suffix``). Everything is dropped afterwards."""
    tag = uuid.uuid4().hex[:10]
    slot, publication = f"sdk_s_{tag}", f"sdk_p_{tag}"
    made: list[str] = []

    def make(ddl: str) -> str:
        name = f"t_{uuid.uuid4().hex[:10]}"
        for statement in ddl.split(";"):
            if statement.strip():
                postgres_admin.execute(statement.replace("{name}", name))
        made.append(name)
        return name

    yield {"url": with_query(postgres_url, slot=slot, publication=publication), "slot": slot,
           "publication": publication, "make": make,
           "role": ConnectionConfig.from_url(postgres_url).user}
    postgres_admin.execute("SELECT pg_drop_replication_slot(slot_name) FROM "
                           "pg_replication_slots WHERE slot_name = %s", (slot,))
    postgres_admin.execute(f"DROP PUBLICATION IF EXISTS {publication}")
    for name in made:
        postgres_admin.execute(f'DROP TABLE IF EXISTS "{name}" CASCADE')


def _slot_exists(admin: Any, slot: str) -> bool:
    return bool(admin.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s",
                              (slot,)).fetchall())


PARTITIONED = """CREATE TABLE {name} (region text NOT NULL, id int NOT NULL, v text,
    PRIMARY KEY (region, id)) PARTITION BY LIST (region);
CREATE TABLE {name}_eu PARTITION OF {name} FOR VALUES IN ('eu');
CREATE TABLE {name}_us PARTITION OF {name} FOR VALUES IN ('us');
CREATE TABLE {name}_rest PARTITION OF {name} DEFAULT;
INSERT INTO {name} SELECT (ARRAY['eu', 'us', 'asia'])[i % 3 + 1], i, 'v' || i
    FROM generate_series(1, 600) i"""


@pytest.mark.postgres
@pytest.mark.parametrize("atomic", [True, False])
def test_partitioned_table_is_one_table_with_moves_across_partitions(
        pg_env: dict[str, Any], postgres_admin: Any, tmp_path: Path, atomic: bool) -> None:
    """The sync's role owns the parent: discovery lists only the parent, sync publishes it
    through its root, and updates that move rows between partitions (a delete in one and an
    insert in another in the WAL) reach the mirror as a delete and an insert of the root."""
    name = pg_env["make"](PARTITIONED)
    postgres_admin.execute(f'ALTER TABLE "{name}" OWNER TO "{pg_env["role"]}"')
    pg = get_dialect("postgres")
    options = SyncOptions(split_size=97, atomic_snapshot=atomic)
    schemas = discover(pg, ConnectionConfig.from_url(pg_env["url"]), f"public.{name}*",
                       options)
    assert [s.table for s in schemas] == [TableId("public", name)]  # partitions hidden
    (via_root,) = postgres_admin.execute(
        "SELECT pubviaroot FROM pg_publication WHERE pubname = %s",
        (pg_env["publication"],)).fetchone()
    assert via_root

    def write(step: int) -> None:
        table = f'"{name}"'
        postgres_admin.execute(f"UPDATE {table} SET region = 'us' WHERE region = 'eu' AND "
                               "id %% 7 = %s", (step % 7,))  # moves eu -> us
        postgres_admin.execute(f"UPDATE {table} SET region = 'eu', id = id + 10000 WHERE "
                               "region = 'asia' AND id %% 11 = %s", (step % 11,))  # and key
        postgres_admin.execute(f"UPDATE {table} SET v = 'u{step}' WHERE id %% 13 = %s",
                               (step % 13,))
        postgres_admin.execute(f"DELETE FROM {table} WHERE id = %s", (step * 5,))
        postgres_admin.execute(f"INSERT INTO {table} VALUES ('asia', %s, 'new')",
                               (20000 + step,))

    mirror_under_changes(pg, pg_env["url"], schemas, options, write, 12, tmp_path)


@pytest.mark.postgres
def test_preflight_advice_for_many_tables_is_summed_up_or_kept_quiet(
        pg_env: dict[str, Any], caplog: Any) -> None:
    """Advice per table (a TOAST-able column without REPLICA IDENTITY FULL) is logged in full
    for the first ``ADVICE_SHOWN`` tables and counted for the rest, not a screenful per table;
    ``preflight.advice=quiet`` (what ``sdk sync`` gives its query, having logged it) logs
    none."""
    from sdk.job.spec import ADVICE_SHOWN, resolve

    names = [pg_env["make"]("CREATE TABLE {name} (id int PRIMARY KEY, v text); ALTER TABLE "
                            "{name} OWNER TO " + pg_env["role"]) for _ in range(ADVICE_SHOWN + 3)]
    patterns = ",".join(f"public.{n}" for n in names)
    pg = get_dialect("postgres")
    with caplog.at_level(logging.WARNING, logger="sdk.job.spec"):
        discover(pg, ConnectionConfig.from_url(pg_env["url"]), patterns, SyncOptions())
    warned = [r.getMessage() for r in caplog.records if r.name == "sdk.job.spec"]
    assert len(warned) == ADVICE_SHOWN + 1
    assert all("TOAST-able columns of public.t_" in w for w in warned[:-1])
    assert "3 more preflight warnings like these: `sdk check" in warned[-1]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="sdk.job.spec"):
        resolve({"url": pg_env["url"], "tables": patterns, "preflight.advice": "quiet"})
    assert not [r for r in caplog.records if r.name == "sdk.job.spec"]


def test_a_publication_without_root_publishing_is_refused_and_leaves_no_slot(
        pg_env: dict[str, Any], postgres_admin: Any, capsys: Any) -> None:
    """The parent is in an administrator's publication that publishes partitions under their
    own names: the parent counts as published (no 'ALTER PUBLICATION ... ADD TABLE', which
    would fail as 'already member'), the refusal names the fix, and no slot is left behind."""
    name = pg_env["make"](PARTITIONED)
    postgres_admin.execute(f'CREATE PUBLICATION {pg_env["publication"]} FOR TABLE "{name}"')
    pg = get_dialect("postgres")
    config = ConnectionConfig.from_url(pg_env["url"])
    with pytest.raises(PreflightError) as info:
        discover(pg, config, f"public.{name}", SyncOptions())
    message = str(info.value)
    assert "publish_via_partition_root = true" in message
    assert f"public.{name} in publication" not in message
    assert not _slot_exists(postgres_admin, pg_env["slot"])
    assert main(["check", "--source", pg_env["url"], "--tables", f"public.{name}*"]) == 1
    out = capsys.readouterr().out
    assert f"[OK] public.{name} in publication" in out and f"key of public.{name}:" in out
    assert f"key of public.{name}_eu" not in out  # partitions are not listed as tables
    postgres_admin.execute(f"ALTER PUBLICATION {pg_env['publication']} SET "
                           "(publish_via_partition_root = true)")
    assert [s.table.name for s in discover(pg, config, f"public.{name}", SyncOptions())] \
        == [name]
    assert _slot_exists(postgres_admin, pg_env["slot"])


@pytest.mark.postgres
def test_partitions_must_share_the_roots_full_identity(pg_env: dict[str, Any],
                                                       postgres_admin: Any) -> None:
    """A partition does not take its parent's REPLICA IDENTITY FULL, and pgoutput would label
    its key-only old rows as whole rows: preflight names each partition to fix."""
    name = pg_env["make"](PARTITIONED + ";ALTER TABLE {name} REPLICA IDENTITY FULL;"
                                        "ALTER TABLE {name}_eu REPLICA IDENTITY FULL")
    pg = get_dialect("postgres")
    conn = pg.connect(ConnectionConfig.from_url(pg_env["url"]))
    try:
        checks = {c.name: c for c in pg.preflight(conn, [TableId("public", name)])}
    finally:
        conn.close()
    identity = checks[f"replica identity of public.{name}"]
    assert not identity.ok and f"{name}_us" in identity.detail and f"{name}_eu" not in \
        identity.detail
    assert identity.fix == (f'ALTER TABLE "public"."{name}_rest" REPLICA IDENTITY FULL; '
                            f'ALTER TABLE "public"."{name}_us" REPLICA IDENTITY FULL '
                            "(and for each partition added later)")


@pytest.mark.postgres
def test_check_says_which_tables_sync_adds_itself(pg_env: dict[str, Any], postgres_admin: Any,
                                                  capsys: Any) -> None:
    """No publication yet: a table the sync's role owns is OK ('will be added by sdk sync');
    one it does not own is MISSING, with the statement its owner must run."""
    mine = pg_env["make"]("CREATE TABLE {name} (id int PRIMARY KEY, v text)")
    postgres_admin.execute(f'ALTER TABLE "{mine}" OWNER TO "{pg_env["role"]}"')
    assert main(["check", "--source", pg_env["url"], "--tables", f"public.{mine}"]) == 0
    out = capsys.readouterr().out
    assert f"[OK] public.{mine} in publication {pg_env['publication']}: will be added by " \
        "sdk sync" in out
    theirs = pg_env["make"]("CREATE TABLE {name} (id int PRIMARY KEY, v text)")
    assert main(["check", "--source", pg_env["url"], "--tables", f"public.{theirs}"]) == 1
    out = capsys.readouterr().out
    assert f"[MISSING] public.{theirs} in publication" in out
    assert (f'fix: CREATE PUBLICATION "{pg_env["publication"]}" FOR TABLE "public"."{theirs}", '
            "as the table's owner") in out
    # two of them: one statement for both, pasted once (a CREATE each would fail the second)
    other = pg_env["make"]("CREATE TABLE {name} (id int PRIMARY KEY, v text)")
    assert main(["check", "--source", pg_env["url"], "--tables",
                 f"public.{theirs},public.{other}"]) == 1
    out = capsys.readouterr().out
    first, second = sorted([theirs, other])
    assert (f'fix: CREATE PUBLICATION "{pg_env["publication"]}" FOR TABLE "public"."{first}", '
            f'"public"."{second}", as the tables\' owner') in out, out
    assert f"fix: the statement shown for public.{first} adds it too" in out, out


@pytest.mark.postgres
def test_an_owner_without_create_on_the_database_is_told_the_grant(
        pg_env: dict[str, Any], postgres_admin: Any, postgres_url: str, capsys: Any) -> None:
    """The role owns the table but may not create the publication: the grant it lacks is
    named, not 'create it as the table's owner' (it is the owner)."""
    role = f"sdk_nc_{uuid.uuid4().hex[:8]}"
    postgres_admin.execute(f"CREATE ROLE {role} LOGIN REPLICATION")
    try:
        mine = pg_env["make"]("CREATE TABLE {name} (id int PRIMARY KEY, v text)")
        postgres_admin.execute(f'ALTER TABLE "{mine}" OWNER TO {role}')
        config = ConnectionConfig.from_url(postgres_url)
        url = with_query(f"postgresql://{role}@{config.host}:{config.port}/{config.database}",
                         slot=pg_env["slot"], publication=pg_env["publication"])
        assert main(["check", "--source", url, "--tables", f"public.{mine}"]) == 1
        out = capsys.readouterr().out
        assert f"[MISSING] may create publication {pg_env['publication']}" in out, out
        assert (f'fix: GRANT CREATE ON DATABASE "{config.database}" TO "{role}", as the '
                "database's owner") in out, out
        postgres_admin.execute(f'GRANT CREATE ON DATABASE "{config.database}" TO {role}')
        assert main(["check", "--source", url, "--tables", f"public.{mine}"]) == 0, \
            capsys.readouterr().out
    finally:
        postgres_admin.execute(f"DROP OWNED BY {role}")
        postgres_admin.execute(f"DROP ROLE {role}")


@pytest.mark.postgres
def test_table_without_primary_key_on_a_chosen_column(pg_env: dict[str, Any],
                                                      postgres_admin: Any,
                                                      tmp_path: Path) -> None:
    """No primary key, REPLICA IDENTITY FULL and a NOT NULL column named as chunk key: the
    snapshot splits on it and updates and deletes find their rows by the whole old row."""
    name = pg_env["make"](
        "CREATE TABLE {name} (code text NOT NULL, n int, note text);"
        "ALTER TABLE {name} REPLICA IDENTITY FULL;"
        "INSERT INTO {name} SELECT 'c' || i, i, repeat('x', i % 50) "
        "FROM generate_series(1, 500) i")
    postgres_admin.execute(f'ALTER TABLE "{name}" OWNER TO "{pg_env["role"]}"')
    pg = get_dialect("postgres")
    options = SyncOptions.from_strings({"chunk-key.column": f"{name}:code",
                                        "snapshot.split.size": "61"})
    schemas = discover(pg, ConnectionConfig.from_url(pg_env["url"]), f"public.{name}", options)
    assert schemas[0].key == ("code",) and not schemas[0].primary_key

    def write(step: int) -> None:
        table = f'"{name}"'
        postgres_admin.execute(f"UPDATE {table} SET n = -n, note = 's{step}' WHERE n %% 9 = %s",
                               (step % 9,))
        postgres_admin.execute(f"UPDATE {table} SET code = code || 'm' WHERE n = %s",
                               (step * 3,))  # the chosen key changes
        postgres_admin.execute(f"DELETE FROM {table} WHERE n = %s", (step * 7,))
        postgres_admin.execute(f"INSERT INTO {table} VALUES (%s, %s, NULL)",
                               (f"new{step}", 1000 + step))

    mirror_under_changes(pg, pg_env["url"], schemas, options, write, 10, tmp_path)


@pytest.mark.postgres
def test_chosen_keys_the_log_cannot_identify_are_refused_without_a_slot(
        pg_env: dict[str, Any], postgres_admin: Any) -> None:
    """A chosen column the log's old rows do not carry (identity DEFAULT) is refused before
    anything is created; so is a table with no key and no identity."""
    pg = get_dialect("postgres")
    config = ConnectionConfig.from_url(pg_env["url"])
    keyed = pg_env["make"]("CREATE TABLE {name} (id int PRIMARY KEY, code text NOT NULL)")
    options = SyncOptions.from_strings({"chunk-key.column": f"{keyed}:code"})
    with pytest.raises(PreflightError, match=f'ALTER TABLE "public"."{keyed}" REPLICA '
                                             "IDENTITY FULL"):
        discover(pg, config, f"public.{keyed}", options)
    bare = pg_env["make"]("CREATE TABLE {name} (code text NOT NULL, v int)")
    options = SyncOptions.from_strings({"chunk-key.column": f"{bare}:code"})
    with pytest.raises(PreflightError, match=f"replica identity of public.{bare}"):
        discover(pg, config, f"public.{bare}", options)
    assert not _slot_exists(postgres_admin, pg_env["slot"])


# --- MariaDB ------------------------------------------------------------------------------


@pytest.mark.mysql
def test_mariadb_table_without_primary_key_on_a_chosen_column(mysql_admin: Any,
                                                              mysql_url: str,
                                                              tmp_path: Path) -> None:
    """binlog_row_image=FULL logs whole rows, so a chosen NOT NULL column identifies the rows
    of a table without a primary key in the snapshot and in the log."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    with mysql_admin.cursor() as cur:
        cur.execute(f"CREATE TABLE `{name}` (code VARCHAR(20) NOT NULL, n INT, note TEXT)")
        cur.executemany(f"INSERT INTO `{name}` VALUES (%s, %s, %s)",
                        [(f"c{i}", i, "x" * (i % 40)) for i in range(1, 500)])
    mysql = get_dialect("mysql")
    options = SyncOptions.from_strings({"chunk-key.column": f"{name}:code",
                                        "snapshot.split.size": "61"})
    try:
        schemas = discover(mysql, ConnectionConfig.from_url(mysql_url), f"sdk_test.{name}",
                           options)
        assert schemas[0].key == ("code",) and not schemas[0].primary_key

        def write(step: int) -> None:
            with mysql_admin.cursor() as cur:
                cur.execute(f"UPDATE `{name}` SET n = -n, note = %s WHERE n %% 9 = %s",
                            (f"s{step}", step % 9))
                cur.execute(f"UPDATE `{name}` SET code = CONCAT(code, 'm') WHERE n = %s",
                            (step * 3,))
                cur.execute(f"DELETE FROM `{name}` WHERE n = %s", (step * 7,))
                cur.execute(f"INSERT INTO `{name}` VALUES (%s, %s, NULL)",
                            (f"new{step}", 1000 + step))

        mirror_under_changes(mysql, mysql_url, schemas, options, write, 10, tmp_path)
    finally:
        with mysql_admin.cursor() as cur:
            cur.execute(f"DROP TABLE `{name}`")


# --- choosing the key ----------------------------------------------------------------------


def _schema(*columns: tuple[str, bool]) -> TableSchema:
    return TableSchema(TableId("s", "t"), tuple(Column(n, LogicalType.STRING, "text", nullable)
                                                for n, nullable in columns))


def test_a_chosen_key_must_be_not_null_and_is_trusted_with_a_warning(caplog: Any) -> None:
    schema = _schema(("code", False), ("note", True))
    with caplog.at_level(logging.WARNING):
        chosen = choose_key(schema, SyncOptions.from_strings({"chunk-key.column": "s.t:code"}))
    assert chosen.key == ("code",)
    assert "trusted to be unique" in caplog.text and "exactly-once" in caplog.text
    with pytest.raises(ConfigurationError, match="note may be NULL"):
        choose_key(schema, SyncOptions.from_strings({"chunk-key.column": "t:note"}))
    with pytest.raises(ConfigurationError, match="no column 'nope'"):
        choose_key(schema, SyncOptions.from_strings({"chunk-key.column": "t:nope"}))


@pytest.mark.postgres
def test_a_late_partition_without_full_identity_stops_rather_than_write_null(
        pg_env: dict[str, Any], postgres_admin: Any) -> None:
    """A partition added after the sync started has identity DEFAULT under a FULL root: its
    key-only old row comes labelled whole, so an update that moves the key and keeps a TOASTed
    value finds NULL in place of that value, and the sync stops instead of writing NULL."""
    name = pg_env["make"](
        "CREATE TABLE {name} (region text NOT NULL, id int NOT NULL, doc text, "
        "PRIMARY KEY (region, id)) PARTITION BY LIST (region);"
        "CREATE TABLE {name}_eu PARTITION OF {name} FOR VALUES IN ('eu');"
        "ALTER TABLE {name} REPLICA IDENTITY FULL; ALTER TABLE {name}_eu REPLICA IDENTITY FULL")
    postgres_admin.execute(f'ALTER TABLE "{name}" OWNER TO "{pg_env["role"]}"')
    pg = get_dialect("postgres")
    config = ConnectionConfig.from_url(pg_env["url"])
    (schema,) = discover(pg, config, f"public.{name}", SyncOptions())
    postgres_admin.execute(f'CREATE TABLE "{name}_us" PARTITION OF "{name}" FOR VALUES IN '
                           "('us')")  # identity DEFAULT: partitions do not inherit FULL
    conn = pg.connect(config)
    try:
        start = pg.current_offset(conn)
        postgres_admin.execute(f"""INSERT INTO "{name}" SELECT 'us', 1, string_agg(md5(i::text
            || random()::text), '') FROM generate_series(1, 4000) i""")  # ~128 kB: TOASTed
        postgres_admin.execute(f'UPDATE "{name}" SET id = 2 WHERE id = 1')
        end = pg.current_offset(conn)
        with pytest.raises(FatalSyncError, match="REPLICA IDENTITY FULL"):
            list(pg.stream_log(conn, [schema], start, end))
    finally:
        conn.close()


@pytest.mark.postgres
def test_a_slot_of_another_database_is_refused_and_the_default_is_this_databases(
        pg_env: dict[str, Any], postgres_admin: Any, postgres_url: str, capsys: Any) -> None:
    """Slot names are the cluster's: a slot another database's sync made is never reported
    as fine, and the default name carries the database's (two databases, two slots)."""
    import psycopg

    table = pg_env["make"]("CREATE TABLE {name} (id int PRIMARY KEY)")
    postgres_admin.execute(f'ALTER TABLE "{table}" OWNER TO "{pg_env["role"]}"')
    admin = ConnectionConfig.from_url(os.environ.get("SDK_TEST_POSTGRES_ADMIN_URL")
                                      or postgres_url)
    elsewhere = psycopg.connect(host=admin.host, port=admin.port, user=admin.user,
                                dbname="postgres", autocommit=True)
    slot = pg_env["slot"]
    elsewhere.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    try:
        assert main(["check", "--source", pg_env["url"], "--tables", f"public.{table}"]) == 1
        out = capsys.readouterr().out
        assert f"[MISSING] slot {slot} is this database's: it belongs to database postgres" \
            in out, out
    finally:
        elsewhere.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        elsewhere.close()
    pg = get_dialect("postgres")
    conn = pg.connect(ConnectionConfig.from_url(postgres_url))
    try:
        database = conn.raw.info.dbname
        expected = "sdk_slot" if postgres_admin.execute(
            "SELECT 1 FROM pg_replication_slots WHERE slot_name = 'sdk_slot' AND database = "
            "current_database()").fetchall() else f"sdk_slot_{database}"
        assert conn.slot == expected
    finally:
        conn.close()
