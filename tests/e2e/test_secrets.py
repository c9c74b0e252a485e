"""A password given to ``sdk sync`` never leaks: not into its output (``--verbose`` too, and an
error's), the checkpoint, ``sdk status``, the metrics, Spark's event log, any file the runs
write, the target's tables, nor the command line or environment of any process the sync starts.

A MariaDB user and a PostgreSQL role get a long random password each (a hit can only be a
leak); real ``sdk sync`` commands run MariaDB -> PostgreSQL and PostgreSQL -> MariaDB with
the passwords inline in the URL (the worst case), through ``password_env`` and through
``password_file`` (and a TLS key passphrase, ``sslpassword``, inline), then one run fails in
the middle of its stream (the target refuses its writes) and one before it starts (no such
table), so the error paths print too. Every byte they wrote is searched for each password,
for its URL-quoted form and for its random core.
Spark's UI is not searched: ``sdk sync`` turns it off (``spark.ui.enabled=false``)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import psutil
import pytest
from helpers.servers import MYSQL_ADMIN_URL

from sdk import ConnectionConfig
from sdk.app.cli import main
from sdk.spark.startup.headworkers import NAME

pytestmark = [pytest.mark.mysql, pytest.mark.postgres, pytest.mark.spark, pytest.mark.slow]


@dataclass(frozen=True)
class Secret:
    """A password and the forms a leak of it could take."""

    password: str

    @property
    def forms(self) -> tuple[str, ...]:
        """As given, URL-quoted, and its random core (any transformation that keeps it)."""
        core = self.password.split("-")[1]
        return self.password, quote(self.password, safe=""), core

    def found_in(self, data: bytes) -> str | None:
        """The first form of the password ``data`` holds, if any."""
        return next((f for f in self.forms if f.encode() in data), None)


@dataclass
class Accounts:
    """The secret-password login on each server, and the objects the test made there."""

    tag: str
    mysql_user: str
    mysql: Secret
    pg_role: str
    pg: Secret
    pg_location: str
    """``host:port/database?query`` of the PostgreSQL server (a socket in the query, maybe)."""
    tls: Secret
    """A TLS key's passphrase (``sslpassword``: libpq needs it only with an ``sslkey``)."""

    @property
    def secrets(self) -> tuple[Secret, Secret, Secret]:
        return self.mysql, self.pg, self.tls

    def mysql_url(self, login: str, database: str = "sdk_test") -> str:
        """The MariaDB URL with the password given ``inline``, by ``env`` or by ``file:PATH``."""
        return _url("mysql", self.mysql_user, self.mysql, login,
                    f"127.0.0.1:{_mysql_port()}/{database}")

    def pg_url(self, login: str, **options: str) -> str:
        """The PostgreSQL URL with the password given as :meth:`mysql_url` says, and the
        :attr:`tls` passphrase inline."""
        url = _url("postgresql", self.pg_role, self.pg, login, self.pg_location)
        options["sslpassword"] = quote(self.tls.password, safe="")
        extra = "&".join(f"{k}={v}" for k, v in options.items())
        return f"{url}{'&' if '?' in url else '?'}{extra}" if extra else url


MYSQL_ENV, PG_ENV = "SDK_SECRET_TEST_MYSQL", "SDK_SECRET_TEST_PG"


def _mysql_port() -> int:
    return ConnectionConfig.from_url(MYSQL_ADMIN_URL).port or 3306


def _url(scheme: str, user: str, secret: Secret, login: str, location: str) -> str:
    if login == "inline":
        return f"{scheme}://{user}:{quote(secret.password, safe='')}@{location}"
    base = f"{scheme}://{user}@{location}"
    joiner = "&" if "?" in base else "?"
    if login == "env":
        return f"{base}{joiner}password_env={MYSQL_ENV if scheme == 'mysql' else PG_ENV}"
    assert login.startswith("file:")
    return f"{base}{joiner}password_file={login[5:]}"


@pytest.fixture
def accounts(mysql_admin: Any, postgres_admin: Any, postgres_admin_url: str
             ) -> Iterator[Accounts]:
    """A MariaDB user and a PostgreSQL role with random passwords and what a sync needs: a
    source table on each, a MariaDB database and a PostgreSQL schema to mirror into; all
    dropped afterwards."""
    tag = uuid.uuid4().hex[:8]
    name = f"sdk_sec_{tag}"
    # '+' and '/' are quoted in a URL: the quoted form is another string to look for
    mysql, pg, tls = (Secret(f"pw-{uuid.uuid4().hex}{uuid.uuid4().hex[:8]}-+/x")
                      for _ in "abc")
    admin = urlsplit(postgres_admin_url)
    location = f"{admin.netloc.rpartition('@')[2]}{admin.path}" + \
        (f"?{admin.query}" if admin.query else "")
    found = Accounts(tag, name, mysql, name, pg, location, tls)
    cursor = mysql_admin.cursor()
    pg_db = postgres_admin.execute("SELECT current_database()").fetchone()[0]
    try:
        cursor.execute(f"CREATE USER '{name}'@'%' IDENTIFIED BY '{mysql.password}'")
        cursor.execute("GRANT SELECT, RELOAD, REPLICATION SLAVE, REPLICATION CLIENT ON *.* "
                       f"TO '{name}'@'%'")
        cursor.execute(f"CREATE DATABASE `{name}`")
        cursor.execute(f"GRANT ALL ON `{name}`.* TO '{name}'@'%'")
        cursor.execute(f"CREATE TABLE sdk_test.`{name}` (id INT PRIMARY KEY, note "
                       "VARCHAR(40))")
        cursor.execute(f"INSERT INTO sdk_test.`{name}` VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        postgres_admin.execute(f"CREATE ROLE {name} LOGIN REPLICATION PASSWORD "
                               f"'{pg.password}'")
        postgres_admin.execute(f'GRANT CONNECT, CREATE ON DATABASE "{pg_db}" TO {name}')
        for schema in (name, f"{name}_m"):  # the source's, and the mirror of MariaDB's
            postgres_admin.execute(f"CREATE SCHEMA {schema} AUTHORIZATION {name}")
        postgres_admin.execute(f"CREATE SCHEMA {name}_r")  # a mirror refusing the role's rows
        postgres_admin.execute(f"GRANT USAGE, CREATE ON SCHEMA {name}_r TO {name}")
        postgres_admin.execute(f"CREATE TABLE {name}.items (id INT PRIMARY KEY, note TEXT)")
        postgres_admin.execute(f"INSERT INTO {name}.items VALUES (1, 'x'), (2, 'y')")
        postgres_admin.execute(f"ALTER TABLE {name}.items OWNER TO {name}")
        yield found
    finally:
        for sql in (f"DROP TABLE IF EXISTS sdk_test.`{name}`", f"DROP DATABASE IF EXISTS "
                    f"`{name}`", f"DROP USER IF EXISTS '{name}'@'%'"):
            with contextlib.suppress(Exception):
                cursor.execute(sql)
        deadline = time.monotonic() + 20  # the slot is busy until the sync's JVM is gone
        while time.monotonic() < deadline and postgres_admin.execute(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s AND active",
                (name,)).fetchone()[0]:
            time.sleep(0.2)
        for sql in ("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                    f"WHERE slot_name = '{name}'", f"DROP PUBLICATION IF EXISTS {name}",
                    f"DROP SCHEMA IF EXISTS {name} CASCADE",
                    f"DROP SCHEMA IF EXISTS {name}_m CASCADE",
                    f"DROP SCHEMA IF EXISTS {name}_r CASCADE", f"DROP OWNED BY {name}",
                    f"DROP ROLE IF EXISTS {name}"):
            with contextlib.suppress(Exception):
                postgres_admin.execute(sql)


@dataclass
class Findings:
    """What the runs wrote and showed, by where it was seen, and the leaks found in it."""

    accounts: Accounts
    seen: dict[str, bytes] = field(default_factory=dict)
    leaks: list[str] = field(default_factory=list)
    processes: set[str] = field(default_factory=set)
    """Kinds of process scanned (``sdk``, ``java``, ``python worker``, ``head start worker``,
    ``python``)."""
    argv_hits: int = 0
    """Scans that found a password in the ``sdk`` command's own argv (given there)."""

    def look(self, where: str, data: bytes) -> None:
        self.seen[where] = self.seen.get(where, b"") + data
        for secret in self.accounts.secrets:
            form = secret.found_in(data)
            if form is not None:
                self.leaks.append(f"{where}: holds the password (as {form!r})")
                return


def _sdk() -> list[str]:
    """The installed ``sdk`` command (its console script), else the module."""
    script = Path(sys.executable).parent / "sdk"
    return [str(script)] if script.exists() else [sys.executable, "-m", "sdk.app.cli"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _kind(proc: psutil.Process, cmdline: list[str], root: int) -> str:
    if proc.pid == root:
        return "sdk"
    if "java" in proc.name():
        return "java"
    if "sdk.spark.startup.headworkers" in cmdline or proc.name() == NAME.decode():
        return "head start worker"
    return "python worker" if any("pyspark" in a for a in cmdline) else proc.name()


def _scrape(port: int) -> bytes:
    """The metrics text at ``port``, empty while nothing answers there yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            data: bytes = response.read()
            return data
    except (urllib.error.URLError, OSError):
        return b""


def _scan_processes(findings: Findings, root: psutil.Process, run: str, env_names: set[str],
                    argv_given: bool) -> None:
    """The command line and environment of the ``sdk`` process and every process under it
    (the JVM, its Python workers): none holds a password, except the ``sdk`` command's own
    argv when it was given there and the ``password_env`` variables the user set."""
    try:
        processes = [root, *root.children(recursive=True)]
        own = root.cmdline()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return
    for proc in processes:
        try:
            cmdline, environ = proc.cmdline(), proc.environ()
            kind = _kind(proc, cmdline, root.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        findings.processes.add(kind)
        argv = "\0".join(cmdline).encode()
        # a child the sdk process forked shows its argv until it execs its program
        if (proc.pid == root.pid or cmdline == own) and argv_given:
            findings.argv_hits += any(s.found_in(argv) for s in findings.accounts.secrets)
        else:
            findings.look(f"{run}: argv of {kind} process {proc.pid}", argv)
        shown = "\0".join(f"{k}={v}" for k, v in environ.items() if k not in env_names)
        findings.look(f"{run}: environment of {kind} process {proc.pid}", shown.encode())
        if kind == "java":  # what jps and jcmd show of a JVM
            perf = Path(f"/tmp/hsperfdata_{psutil.Process().username()}/{proc.pid}")
            with contextlib.suppress(OSError):
                findings.look(f"{run}: {perf}", perf.read_bytes())


def _scan_sessions(findings: Findings, run: str, mysql_admin: Any, postgres_admin: Any
                   ) -> None:
    """What each server shows of the sync's sessions (its statements, its application name)."""
    name = findings.accounts.mysql_user
    cursor = mysql_admin.cursor()
    cursor.execute("SELECT * FROM information_schema.PROCESSLIST WHERE USER = %s", (name,))
    findings.look(f"{run}: MariaDB's processlist", repr(cursor.fetchall()).encode())
    rows = postgres_admin.execute("SELECT row_to_json(a)::text FROM pg_stat_activity a "
                                  "WHERE usename = %s", (name,)).fetchall()
    findings.look(f"{run}: pg_stat_activity", repr(rows).encode())


def _sync(findings: Findings, tmp_path: Path, run: str, args: list[str],
          env: dict[str, str] | None = None, argv_given: bool = False,
          metrics: bool = False, admins: tuple[Any, Any] | None = None) -> int:
    """Run ``sdk sync`` (``args``) as a command of its own, its passwords in ``env``; while it
    runs, scan its processes, scrape its metrics and the servers' sessions; then read its
    output. Its exit code."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    port = _free_port() if metrics else None
    command = [*_sdk(), "sync", *args] + (["--metrics-port", str(port)] if port else [])
    spark_conf = tmp_path / "spark-conf"
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path),
                "SPARK_CONF_DIR": str(spark_conf), "TMPDIR": str(tmp_path / "tmp"),
                **(env or {})}
    for name in (MYSQL_ENV, PG_ENV):
        if name not in (env or {}):
            full_env.pop(name, None)
    with (out / f"{run}.stdout").open("wb") as stdout, \
            (out / f"{run}.stderr").open("wb") as stderr:
        process = subprocess.Popen(command, stdout=stdout, stderr=stderr, env=full_env,
                                   start_new_session=True)
    root = psutil.Process(process.pid)
    deadline, next_session_scan = time.monotonic() + 180, 0.0
    scrapes = b""
    try:
        while process.poll() is None:
            assert time.monotonic() < deadline, f"{run}: sdk sync did not end"
            _scan_processes(findings, root, run, set(env or {}), argv_given)
            if port is not None:
                scrapes += _scrape(port)
            if admins is not None and time.monotonic() >= next_session_scan:
                _scan_sessions(findings, run, *admins)
                next_session_scan = time.monotonic() + 1.0
            time.sleep(0.1)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    if port is not None:
        assert b"sdk_sync_phase" in scrapes, f"{run}: the metrics were never scraped"
        findings.look(f"{run}: metrics at :{port}/metrics", scrapes)
    for stream in ("stdout", "stderr"):
        findings.look(f"{run}: {stream}", (out / f"{run}.{stream}").read_bytes())
    return process.returncode


def _status(findings: Findings, checkpoint: Path, capsys: pytest.CaptureFixture[bytes]
            ) -> None:
    """``sdk status`` and ``sdk status --json`` of ``checkpoint``, searched (run here: it
    reads the checkpoint alone, and a process of its own would take a second more)."""
    for flags in ([], ["--json"]):
        capsys.readouterr()
        assert main(["status", "--checkpoint", str(checkpoint), *flags]) == 0
        shown = capsys.readouterr()
        assert shown.out, f"sdk status {flags} showed nothing"
        findings.look(f"sdk status {' '.join(flags)} --checkpoint {checkpoint.name}",
                      shown.out + shown.err)


def _scan_files(findings: Findings, root: Path, skip: set[Path]) -> int:
    """Every file under ``root``, byte by byte; how many."""
    count = 0
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink() and path not in skip:
            with contextlib.suppress(FileNotFoundError):
                findings.look(str(path.relative_to(root)), path.read_bytes())
                count += 1
    return count


def _target_rows(findings: Findings, mysql_admin: Any, postgres_admin: Any) -> None:
    """Every row of every table the syncs wrote (mirrors and their ledgers)."""
    name = findings.accounts.mysql_user
    cursor = mysql_admin.cursor()
    cursor.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s",
                   (name,))
    tables = [t for (t,) in cursor.fetchall()]
    for table in tables:
        cursor.execute(f"SELECT * FROM `{name}`.`{table}`")
        findings.look(f"MariaDB table {name}.{table}", repr(cursor.fetchall()).encode())
    pg_tables = postgres_admin.execute(
        "SELECT schemaname, tablename FROM pg_tables WHERE schemaname IN (%s, %s)",
        (f"{name}_m", f"{name}_r")).fetchall()
    for schema, table in pg_tables:
        rows = postgres_admin.execute(f'SELECT t::text FROM {schema}."{table}" t').fetchall()
        findings.look(f"PostgreSQL table {schema}.{table}", repr(rows).encode())
    assert len(tables) >= 2 and len(pg_tables) >= 2, "a mirror and its ledger on each target"


def test_a_password_never_leaks(accounts: Accounts, mysql_admin: Any, postgres_admin: Any,
                                tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
                                ) -> None:
    findings = Findings(accounts)
    events, spark_conf = tmp_path / "events", tmp_path / "spark-conf"
    for folder in (events, spark_conf, tmp_path / "tmp", tmp_path / "spark-local"):
        folder.mkdir()
    (spark_conf / "spark-defaults.conf").write_text(
        f"spark.eventLog.enabled true\nspark.eventLog.dir file://{events}\n"
        "spark.eventLog.compress false\n"  # JSON to search, not zstd
        f"spark.local.dir {tmp_path / 'spark-local'}\n")
    password_file = tmp_path / "pg-password"
    password_file.write_text(accounts.pg.password + "\n")
    password_file.chmod(0o600)
    name = accounts.mysql_user
    admins = (mysql_admin, postgres_admin)
    mysql_table = f"sdk_test.{name}"
    envs = {MYSQL_ENV: accounts.mysql.password, PG_ENV: accounts.pg.password}

    # MariaDB -> PostgreSQL, the source's password inline, the target's from the environment
    assert _sync(findings, tmp_path, "mysql-to-pg", [
        "--source", accounts.mysql_url("inline"), "--target", accounts.pg_url("env"),
        "--tables", mysql_table, "--target-schema", f"{name}_m",
        "--checkpoint", str(tmp_path / "ck-mysql"), "--until", "caught-up", "--verbose"],
        env={PG_ENV: envs[PG_ENV]}, argv_given=True, metrics=True, admins=admins) == 0
    # PostgreSQL -> MariaDB, the source's password from a file, the target's inline
    assert _sync(findings, tmp_path, "pg-to-mysql", [
        "--source", accounts.pg_url(f"file:{password_file}", slot=name, publication=name),
        "--target", accounts.mysql_url("inline", name), "--tables", f"{name}.items",
        "--target-schema", name, "--head-start", "off",  # on Spark from its start
        "--checkpoint", str(tmp_path / "ck-pg"), "--until", "caught-up"],
        argv_given=True, metrics=True, admins=admins) == 0
    # fails in the middle of its stream: the mirror's table (not the role's) refuses its rows,
    # by a trigger (the role holds the rights the sync checks before it starts)
    table = f"{name}_r.{name}"
    for sql in (f"CREATE TABLE {table} (LIKE {name}_m.{name} INCLUDING ALL)",
                f"GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO {name}",
                f"CREATE FUNCTION {name}_r.refuse() RETURNS trigger LANGUAGE plpgsql AS $$ "
                "BEGIN RAISE EXCEPTION 'permission denied: this mirror refuses rows' USING "
                "ERRCODE = 'insufficient_privilege'; END $$",
                f"CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON {table} FOR EACH ROW "
                f"EXECUTE FUNCTION {name}_r.refuse()",
                f"ALTER TABLE {table} ENABLE ALWAYS TRIGGER refuse"):  # as a replica too
        postgres_admin.execute(sql)
    failed = _sync(findings, tmp_path, "refused-writes", [
        "--source", accounts.mysql_url("env"), "--target", accounts.pg_url("inline"),
        "--tables", mysql_table, "--target-schema", f"{name}_r",
        "--checkpoint", str(tmp_path / "ck-refused"), "--until", "caught-up",
        "--retry-seconds", "0", "--verbose"],
        env={MYSQL_ENV: envs[MYSQL_ENV]}, argv_given=True, metrics=True, admins=admins)
    assert failed != 0
    assert b"permission denied" in findings.seen["refused-writes: stderr"]
    # fails before it starts: no such table
    assert _sync(findings, tmp_path, "no-table", [
        "--source", accounts.mysql_url("inline"), "--target", accounts.pg_url("env"),
        "--tables", "sdk_test.no_such_table", "--checkpoint", str(tmp_path / "ck-none")],
        env={PG_ENV: envs[PG_ENV]}, argv_given=True) == 2
    assert b"matches no table" in findings.seen["no-table: stderr"]

    for checkpoint in ("ck-mysql", "ck-pg", "ck-refused"):
        _status(findings, tmp_path / checkpoint, capsysbinary)
    _target_rows(findings, mysql_admin, postgres_admin)
    files = _scan_files(findings, tmp_path, {password_file})
    logged = b"".join(p.read_bytes() for p in events.rglob("events_*"))
    # pg-to-mysql's, and refused-writes' once its head start failed (mysql-to-pg ran whole in
    # the driver's head start, its worker processes scanned)
    assert logged.count(b'"Event":"SparkListenerApplicationStart"') >= 2, "no event logs"
    assert b"SparkListenerSQLExecutionStart" in logged  # with the queries' plans
    assert any((tmp_path / "ck-mysql").rglob("*"))
    # the scans worked: they saw the JVM and its Python workers, and the passwords given inline
    # in the sdk command's own argv (where the user put them)
    assert {"sdk", "java", "python worker", "head start worker"} <= findings.processes, \
        findings.processes
    assert findings.argv_hits > 0
    assert not findings.leaks, f"password leaked ({files} files read):\n" + \
        "\n".join(dict.fromkeys(findings.leaks))

