"""Inputs a person gets wrong end in one line naming the fix: a dialect whose driver is not
installed, a table the user may not read, a checkpoint path a file stands in the way of.
Each case checks the exact message, the exit code and that no password is in it."""

from __future__ import annotations

import secrets
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from sdk import ConfigurationError, ConnectionConfig
from sdk.app.cli import main

PASSWORD = "S3cret-pw-" + secrets.token_hex(4)

RUN_WITHOUT = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None  # as if not installed: import fails, find_spec gives None
from sdk.app.cli import main
print("dialects exit", main(["dialects"]), flush=True)
print("check exit", main(["check", "--source", sys.argv[2]]), flush=True)
"""
"""Lists the dialects, then checks a source, with some modules made uninstalled."""

DRIVERS = [  # (modules made missing, dialect, extra, a source URL naming the dialect)
    ("psycopg", "postgres", "postgres", f"postgresql://cdc:{PASSWORD}@127.0.0.1:5432/app"),
    ("pymysql", "mysql", "mysql", f"mysql://cdc:{PASSWORD}@127.0.0.1/shop"),
    ("pymysqlreplication", "mysql", "mysql", f"mariadb://cdc:{PASSWORD}@127.0.0.1/shop"),
    ("oracledb", "oracle", "oracle", f"oracle://cdc:{PASSWORD}@127.0.0.1:1521/FREEPDB1"),
    ("pymssql", "sqlserver", "sqlserver", f"mssql://cdc:{PASSWORD}@127.0.0.1/shop"),
    ("deltalake", "delta", "delta", "delta:///tmp/lake"),
    ("pyiceberg", "iceberg", "iceberg", "iceberg:///tmp/warehouse"),
]


def without(modules: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", RUN_WITHOUT, modules, url],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("modules", "dialect", "extra", "url"), DRIVERS,
                         ids=[d[0] for d in DRIVERS])
def test_a_dialect_without_its_driver_is_listed_and_named(
        modules: str, dialect: str, extra: str, url: str) -> None:
    """The plugin loads without its driver (no warning on any command): ``sdk dialects``
    lists it as unusable with the pip command, and a URL naming it ends in that one line."""
    run = without(modules, url)
    listing = run.stdout.splitlines()
    assert f"{dialect:<10} unusable  driver missing: pip install 'sdk[{extra}]'" in listing
    assert any(line.startswith(f"{'sqlite':<10} usable ") for line in listing)
    assert not any(line.startswith("failed") or "not loaded" in line for line in listing)
    assert listing[-2:] == ["dialects exit 0", "check exit 2"]
    assert run.stderr == (f"sdk: error: dialect {dialect!r} needs the driver module(s) "
                          f"{modules}: pip install 'sdk[{extra}]'\n")
    assert PASSWORD not in run.stdout + run.stderr


def test_every_plugin_loads_with_no_driver_installed(tmp_path: Path) -> None:
    """With every optional driver missing at once, every dialect is still listed."""
    sqlite3.connect(tmp_path / "s.db").execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    run = without(",".join(d[0] for d in DRIVERS), f"sqlite:///{tmp_path}/s.db")
    assert run.stderr == ""
    for _, dialect, extra, _ in DRIVERS:
        assert f"{dialect:<10} unusable  driver missing: pip install 'sdk[{extra}]'" \
            in run.stdout.splitlines()
    assert "dialects exit 0" in run.stdout.splitlines()
    assert "sqlite:///" in run.stdout  # sqlite, needing no driver, was checked


def mysql_as(mysql_url: str, user: str, password: str) -> str:
    config = ConnectionConfig.from_url(mysql_url)
    return f"mysql://{user}:{password}@{config.host}:{config.port or 3306}/{config.database}"


@pytest.mark.mysql
def test_mysql_table_without_select_names_the_grant(
        mysql_admin: Any, mysql_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A user without SELECT on a table does not see it listed: the pattern naming it says
    which privilege is missing and the GRANT that gives it, not 'matches no table'."""
    database = ConnectionConfig.from_url(mysql_url).database
    cur = mysql_admin.cursor()
    cur.execute("CREATE TABLE IF NOT EXISTS bad_inputs_items (id INT PRIMARY KEY)")
    cur.execute("CREATE TABLE IF NOT EXISTS bad_inputs_other (id INT PRIMARY KEY)")
    cur.execute("CREATE USER IF NOT EXISTS 'sdk_bad_inputs'@'%%' IDENTIFIED BY %s",
                (PASSWORD,))
    cur.execute("ALTER USER 'sdk_bad_inputs'@'%%' IDENTIFIED BY %s", (PASSWORD,))
    cur.execute(f"GRANT SELECT ON `{database}`.bad_inputs_other TO 'sdk_bad_inputs'@'%'")
    try:
        url = mysql_as(mysql_url, "sdk_bad_inputs", PASSWORD)
        assert main(["check", "--source", url, "--tables", f"{database}.bad_inputs_items"]) == 2
        err = capsys.readouterr().err
        assert err == (
            f"sdk: error: table pattern '{database}.bad_inputs_items' matches no table this "
            f"user may read: it lacks SELECT on {database}.bad_inputs_items; as an "
            f"administrator: GRANT SELECT ON `{database}`.`bad_inputs_items` TO "
            "'sdk_bad_inputs'@'%'\n")
        assert PASSWORD not in err
        # a glob is not one table: its message stays the listing's
        assert main(["check", "--source", url, "--tables", f"{database}.bad_inputs_i*"]) == 2
        err = capsys.readouterr().err
        assert err == (f"sdk: error: table pattern '{database}.bad_inputs_i*' matches no "
                       f"table; tables here: {database}.bad_inputs_other\n")
    finally:
        cur.execute("DROP USER IF EXISTS 'sdk_bad_inputs'@'%'")
        cur.execute("DROP TABLE IF EXISTS bad_inputs_items, bad_inputs_other")


@pytest.mark.postgres
def test_postgres_table_without_select_names_the_grant(
        postgres_admin: Any, postgres_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """As for MySQL; and a table that does not exist is not given a GRANT."""
    postgres_admin.execute("CREATE TABLE IF NOT EXISTS public.bad_inputs_items "
                           "(id int PRIMARY KEY)")
    postgres_admin.execute("CREATE TABLE IF NOT EXISTS public.bad_inputs_other "
                           "(id int PRIMARY KEY)")
    postgres_admin.execute("DO $$ BEGIN CREATE ROLE sdk_bad_inputs LOGIN; EXCEPTION WHEN "
                           "duplicate_object THEN NULL; END $$")
    postgres_admin.execute(f"ALTER ROLE sdk_bad_inputs PASSWORD '{PASSWORD}'")
    postgres_admin.execute("REVOKE ALL ON public.bad_inputs_items FROM sdk_bad_inputs")
    postgres_admin.execute("GRANT SELECT ON public.bad_inputs_other TO sdk_bad_inputs")
    parts = urlsplit(postgres_url)
    host = parts.netloc.rsplit("@", 1)[-1]
    url = urlunsplit(parts._replace(netloc=f"sdk_bad_inputs:{PASSWORD}@{host}"))
    try:
        # the catalog lists it: a [MISSING] line with the GRANT, not "no such table"
        assert main(["check", "--source", url, "--tables", "public.bad_inputs_items"]) == 1
        out = capsys.readouterr().out
        assert "[MISSING] SELECT on public.bad_inputs_items\n    fix: GRANT SELECT ON " \
            '"public"."bad_inputs_items" TO "sdk_bad_inputs"' in out, out
        assert PASSWORD not in out
        assert main(["check", "--source", url, "--tables", "public.bad_inputs_none"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("sdk: error: table pattern 'public.bad_inputs_none' matches no "
                              "table; tables here: ") and "GRANT" not in err
        assert err.count("\n") == 1 and PASSWORD not in err
    finally:
        postgres_admin.execute("DROP TABLE IF EXISTS public.bad_inputs_items, "
                               "public.bad_inputs_other")
        postgres_admin.execute("DROP ROLE IF EXISTS sdk_bad_inputs")


@pytest.mark.mysql
@pytest.mark.spark
@pytest.mark.slow
def test_a_mariadb_table_the_user_may_no_longer_read_stops_the_sync(
        mysql_admin: Any, mysql_url: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """MariaDB lists only the tables a user holds a privilege on: one whose SELECT was
    revoked vanishes from the listing. The resumed sync refuses, naming the GRANT, instead of
    marking it dropped and leaving its mirror stale; granted again, it resumes equal."""
    tag = secrets.token_hex(4)
    user, account = f"sdk_rv_{tag}", f"'sdk_rv_{tag}'@'127.0.0.1'"
    tables = [f"rv_{tag}_a", f"rv_{tag}_b"]

    def run(sql: str) -> None:
        with mysql_admin.cursor() as cur:
            cur.execute(sql)
    run(f"CREATE USER {account} IDENTIFIED BY 'rv'")
    run(f"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO {account}")
    for name in tables:
        run(f"CREATE TABLE sdk_test.{name} (id INT PRIMARY KEY, v INT)")
        run(f"INSERT INTO sdk_test.{name} VALUES (1, 1), (2, 2)")
        run(f"GRANT SELECT ON sdk_test.{name} TO {account}")
    config = ConnectionConfig.from_url(mysql_url)
    url = f"mysql://{user}:rv@{config.host}:{config.port or 3306}/sdk_test"
    mirror = tmp_path / "mirror.db"
    args = ["sync", "--source", url, "--target", f"sqlite:///{mirror}", "--tables",
            f"sdk_test.rv_{tag}_*", "--checkpoint", str(tmp_path / "ck"), "--until",
            "caught-up"]
    try:
        assert main(args) == 0
        run(f"REVOKE SELECT ON sdk_test.{tables[1]} FROM {account}")
        run(f"INSERT INTO sdk_test.{tables[1]} VALUES (3, 3)")
        capsys.readouterr()
        assert main(args) == 2
        err = capsys.readouterr().err
        assert f"captured table sdk_test.{tables[1]} is gone from what this user may list: " \
            f"it lacks SELECT on it (revoked?); as an administrator: GRANT SELECT ON " \
            f"`sdk_test`.`{tables[1]}` TO {account}" in err, err
        run(f"GRANT SELECT ON sdk_test.{tables[1]} TO {account}")
        assert main(args) == 0
        with sqlite3.connect(mirror) as conn:
            assert conn.execute(f"SELECT id FROM {tables[1]} ORDER BY id").fetchall() == \
                [(1,), (2,), (3,)]
    finally:
        run(f"DROP USER IF EXISTS {account}")
        run(f"DROP TABLE IF EXISTS sdk_test.{tables[0]}, sdk_test.{tables[1]}")


@pytest.mark.postgres
@pytest.mark.spark
@pytest.mark.slow
def test_a_postgres_table_the_user_may_no_longer_read_stops_the_sync(
        postgres_admin: Any, postgres_url: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Matched by a pattern and readable no more (SELECT revoked): ``sdk check`` says
    ``[MISSING]`` with the GRANT, and the resumed sync refuses, naming it, instead of leaving
    the table out or marking it dropped; granted again, it resumes equal."""
    tag = secrets.token_hex(4)
    schema = f"bi_{tag}"
    postgres_admin.execute(f"CREATE SCHEMA {schema} AUTHORIZATION sdk_cdc")
    for name in ("a", "b"):
        postgres_admin.execute(f"CREATE TABLE {schema}.{name} (id int PRIMARY KEY, v text)")
        postgres_admin.execute(f"ALTER TABLE {schema}.{name} OWNER TO sdk_cdc")
        postgres_admin.execute(f"INSERT INTO {schema}.{name} SELECT g, 'v' FROM "
                               "generate_series(1, 20) g")
    url = f"{postgres_url}{'&' if '?' in postgres_url else '?'}slot={schema}&publication={schema}"
    mirror = tmp_path / "mirror.db"
    args = ["sync", "--source", url, "--target", f"sqlite:///{mirror}", "--tables",
            f"{schema}.*", "--checkpoint", str(tmp_path / "ck"), "--until", "caught-up"]
    try:
        assert main(args) == 0
        postgres_admin.execute(f"REVOKE SELECT ON {schema}.b FROM sdk_cdc")
        postgres_admin.execute(f"INSERT INTO {schema}.b VALUES (21, 'new')")
        assert main(["check", "--source", url, "--tables", f"{schema}.*"]) == 1
        out = capsys.readouterr().out
        assert f'[MISSING] SELECT on {schema}.b\n    fix: GRANT SELECT ON "{schema}"."b" TO ' \
            '"sdk_cdc"' in out, out
        assert main(args) == 3
        err = capsys.readouterr().err
        assert f"[MISSING] SELECT on {schema}.b" in err and "GRANT SELECT" in err, err
        postgres_admin.execute(f"GRANT SELECT ON {schema}.b TO sdk_cdc")
        assert main(args) == 0
        with sqlite3.connect(mirror) as conn:
            assert conn.execute("SELECT count(*) FROM b").fetchone() == (21,)
    finally:
        postgres_admin.execute("SELECT pg_drop_replication_slot(slot_name) FROM "
                               "pg_replication_slots WHERE slot_name = %s", (schema,))
        postgres_admin.execute(f"DROP PUBLICATION IF EXISTS {schema}")
        postgres_admin.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture
def blocked(tmp_path: Path) -> dict[str, Path]:
    """A file, a path under it, a checkpoint whose state directory is a file, and a source."""
    (tmp_path / "file").write_text("not a directory")
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "state").write_text("not a directory")
    sqlite3.connect(tmp_path / "s.db").execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    return {"file": tmp_path / "file", "under": tmp_path / "file" / "sub",
            "state": tmp_path / "ck", "source": tmp_path / "s.db"}


@pytest.mark.parametrize("command", ["sync", "check", "status", "snapshot"])
def test_a_checkpoint_a_file_stands_in_the_way_of(
        blocked: dict[str, Path], command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A checkpoint that is a file, lies under one, or holds a file where its state goes:
    one line naming the file, exit 2, for every command taking a checkpoint."""
    source = f"sqlite:///{blocked['source']}"
    args = {"sync": ["sync", "--source", source, "--target", "sqlite:///:memory:"],
            "check": ["check", "--source", source], "status": ["status"],
            "snapshot": ["snapshot", "--table", "main.t"]}[command]
    file, under, state = blocked["file"], blocked["under"], blocked["state"]
    expected = {
        file: f"checkpoint {file} is a file, not a directory: give the path of a directory "
              "(a missing one is created)",
        under: f"checkpoint {under} cannot be used: {file} is a file, not a directory",
        state: f"checkpoint {state} cannot be used: {state}/state is a file, not a directory",
    }
    for checkpoint, message in expected.items():
        assert main([*args, "--checkpoint", str(checkpoint)]) == 2
        assert capsys.readouterr().err == f"sdk: error: {message}\n"


def test_a_state_directory_a_file_stands_in_the_way_of(blocked: dict[str, Path]) -> None:
    """The Spark source's ``state.dir`` (not through a checkpoint) says the same."""
    from sdk.spark.state.statestore import StateStore

    under = blocked["under"]
    with pytest.raises(ConfigurationError) as raised:
        StateStore(str(under))
    assert str(raised.value) == (f"state directory {under} cannot be made: {blocked['file']} "
                                 "is a file, not a directory")
