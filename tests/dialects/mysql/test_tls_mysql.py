"""Verified TLS for the MySQL dialect (``plugins/sdk_mysql/_tls.py``): the URL options, and a
MariaDB of this module's own that accepts only TLS (``require_secure_transport=ON``), so every
connection a check or a sync opens to it, the binlog stream's included, is encrypted or fails."""

from __future__ import annotations

import contextlib
import shutil
import socket
import sqlite3
import ssl
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers.instances import MariaDb, server_dir, start_mariadb, stopping
from helpers.tls import Pki, make_pki

from sdk import ConfigurationError, ConnectionConfig, get_dialect
from sdk.app.cli import main
from sdk.dialect.manager import check_url_options, default_manager

PASSWORD = "tls-Secret-7x"
USER = "sdk_tls"


# --- the options, pure logic -----------------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def tls_of(query: str) -> Any:
    from sdk_mysql import _tls

    return _tls.parse(ConnectionConfig.from_url(f"mysql://u@h/db?{query}").options)


def test_modes_as_mysql_names_them() -> None:
    assert (tls_of("").mode, tls_of("").default) == ("PREFERRED", True)
    assert tls_of("ssl_mode=verify_identity").mode == "VERIFY_IDENTITY"
    assert tls_of("ssl-mode=Required").named == "ssl-mode=REQUIRED"
    assert tls_of("ssl=true").mode == "REQUIRED" and tls_of("ssl=false").mode == "DISABLED"
    assert tls_of("ssl=true&ssl_mode=VERIFY_CA").mode == "VERIFY_CA"
    assert tls_of("ssl_ca=/x/ca.pem").mode == "VERIFY_CA"  # MySQL 8's client rule
    assert tls_of("ssl_ca=/x/ca.pem&ssl_mode=REQUIRED").mode == "REQUIRED"
    assert not tls_of("ssl_mode=PREFERRED&tls_version=TLSv1.3").default
    low, high = tls_of("tls_version=tlsv1.3,TLSv1.2").versions
    assert (low, high) == (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3)
    for query, message in [("ssl_mode=VERIFY", "use one of DISABLED, PREFERRED"),
                           ("ssl_mode=REQUIRED&ssl-mode=DISABLED", "disagree"),
                           ("ssl=false&ssl_mode=REQUIRED", "contradicts ssl_mode=REQUIRED"),
                           ("ssl=maybe", "ssl=true"),
                           ("tls_version=TLSv1.4", "TLSv1.2 and TLSv1.3"),
                           ("tls_version=TLSv1.1,TLSv1.3", "consecutive"),
                           ("ssl_key=/k.pem", "ssl_key is given without ssl_cert")]:
        with pytest.raises(ConfigurationError, match=message):
            tls_of(query)


def test_every_option_is_declared_and_others_are_refused() -> None:
    info = default_manager().get_info("mysql")
    url = ("mysql://u@h/db?ssl_mode=REQUIRED&ssl-mode=REQUIRED&ssl=true&ssl_ca=a&ssl_cert=b&"
           "ssl_key=c&ssl_cipher=d&tls_version=TLSv1.3")
    check_url_options(info, ConnectionConfig.from_url(url))
    with pytest.raises(ConfigurationError, match="did you mean 'ssl_mode'"):
        check_url_options(info, ConnectionConfig.from_url("mysql://u@h/db?ssl_mod=REQUIRED"))


def test_each_mode_makes_the_context_mysql_describes(pki: Pki) -> None:
    from sdk_mysql import _tls

    assert _tls.connection_kwargs(tls_of("")) == {}  # pymysql's shared preferred context
    assert _tls.connection_kwargs(tls_of("ssl_mode=DISABLED&ssl_ca=/nowhere")) == \
        {"ssl_disabled": True}
    for mode, verify, host in [("REQUIRED", ssl.CERT_NONE, False),
                               ("VERIFY_CA", ssl.CERT_REQUIRED, False),
                               ("VERIFY_IDENTITY", ssl.CERT_REQUIRED, True)]:
        ctx = _tls.connection_kwargs(tls_of(f"ssl_mode={mode}&ssl_ca={pki.ca}"))["ssl"]
        assert (ctx.verify_mode, ctx.check_hostname) == (verify, host), mode
    preferred = _tls.connection_kwargs(tls_of(
        f"ssl_mode=PREFERRED&ssl_cert={pki.client_cert}&ssl_key={pki.client_key}&"
        "tls_version=TLSv1.3"))
    ctx = preferred["ssl_preferred"]  # TLS when offered, with the client certificate
    assert ctx.verify_mode == ssl.CERT_NONE and ctx.minimum_version == ssl.TLSVersion.TLSv1_3
    same = tls_of(f"ssl_mode=VERIFY_IDENTITY&ssl_ca={pki.ca}")
    assert _tls.context(same) is _tls.context(same)  # made once per process


def test_a_tls_file_that_is_missing_or_unreadable_names_the_option(pki: Pki,
                                                                    tmp_path: Path) -> None:
    from sdk_mysql import _tls

    for query, message in [
            (f"ssl_ca={tmp_path}/none.pem", f"ssl_ca={tmp_path}/none.pem: no such file"),
            (f"ssl_mode=REQUIRED&ssl_cert={tmp_path}", f"ssl_cert={tmp_path}: cannot be read"),
            (f"ssl_ca={pki.client_key}", "ssl_ca=.*holds no PEM CA certificate"),
            (f"ssl_mode=REQUIRED&ssl_cert={pki.client_cert}&ssl_key={pki.server_key}",
             "not a PEM certificate and its private key"),
            ("ssl_mode=REQUIRED&ssl_cipher=NO-SUCH-CIPHER", "ssl_cipher='NO-SUCH-CIPHER'")]:
        with pytest.raises(ConfigurationError, match=message):
            _tls.connection_kwargs(tls_of(query))


def _handshake_without_tls() -> bytes:
    """A MySQL protocol 10 greeting whose capabilities lack CLIENT.SSL (0x800)."""
    capabilities = 0x000FF7FF & ~0x800 | 0x80000  # PLUGIN_AUTH, no SSL
    body = (b"\x0a5.7.0-fake\x00" + struct.pack("<I", 7) + b"abcdefgh\x00"
            + struct.pack("<H", capabilities & 0xFFFF) + b"\x21" + struct.pack("<H", 2)
            + struct.pack("<H", capabilities >> 16) + b"\x15" + b"\x00" * 10
            + b"ijklmnopqrst\x00" + b"mysql_native_password\x00")
    return struct.pack("<I", len(body))[:3] + b"\x00" + body


def test_tls_asked_for_is_refused_before_the_password_is_sent() -> None:
    """pymysql 1.1 logged in in plaintext when the server offered no TLS: the dialect's
    connection stops at the greeting, so the password never leaves the client."""
    pytest.importorskip("pymysql")
    listener = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []

    def serve() -> None:
        peer, _ = listener.accept()
        with peer:
            peer.sendall(_handshake_without_tls())
            peer.settimeout(2)
            with contextlib.suppress(OSError):
                while chunk := peer.recv(4096):
                    received.append(chunk)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    port = listener.getsockname()[1]
    url = f"mysql://{USER}:{PASSWORD}@127.0.0.1:{port}/db?ssl_mode=REQUIRED"
    with pytest.raises(ConfigurationError) as caught:
        get_dialect("mysql").connect(ConnectionConfig.from_url(url))
    thread.join(5)
    listener.close()
    assert str(caught.value) == (
        f"cannot connect to mysql://{USER}:***@127.0.0.1:{port}/db: ssl_mode=REQUIRED but the "
        "server offers no TLS: enable TLS on the server (ssl_cert/ssl_key) or set "
        "ssl_mode=PREFERRED")
    assert b"".join(received) == b""  # not even the user name


# --- a MariaDB that accepts only TLS ---------------------------------------------------------


@dataclass
class TlsServer:
    """This module's MariaDB (accepting only TLS), its certificates and the files it serves
    its certificate from (swapped by :meth:`presenting`)."""

    server: MariaDb
    pki: Pki
    served_cert: Path
    served_key: Path

    @property
    def port(self) -> int:
        return self.server.port

    def execute(self, *statements: str) -> None:
        """Run ``statements`` as root over the Unix socket (secure transport without TLS)."""
        self.server.execute(*statements)

    def url(self, database: str = "tls_src", query: str = "") -> str:
        return self.server.url(USER, PASSWORD, database, f"?{query}" if query else "")

    def verified(self, database: str = "tls_src") -> str:
        return self.url(database, f"ssl_mode=VERIFY_IDENTITY&ssl_ca={self.pki.ca}")

    def rows(self, table: str) -> dict[int, str]:
        conn = self.server.admin()
        try:
            with conn.cursor() as cur:
                cur.execute(f"SELECT id, note FROM {table}")
                return {int(i): str(n) for i, n in cur.fetchall()}
        finally:
            conn.close()

    @contextlib.contextmanager
    def presenting(self, cert: Path, key: Path) -> Iterator[None]:
        """The server presents ``cert`` (reloaded by FLUSH SSL) until the block ends."""
        shutil.copyfile(cert, self.served_cert)
        shutil.copyfile(key, self.served_key)
        self.execute("FLUSH SSL")
        try:
            yield
        finally:
            shutil.copyfile(self.pki.server_cert, self.served_cert)
            shutil.copyfile(self.pki.server_key, self.served_key)
            self.execute("FLUSH SSL")


@pytest.fixture(scope="module")
def tls_server() -> Iterator[TlsServer]:
    """A MariaDB from the system binaries (tests/helpers/instances.py), TLS on and required,
    and a user with a password that may read (source role) and write ``tls_dst`` (target
    role)."""
    pytest.importorskip("pymysql")
    if not (shutil.which("mariadbd") and shutil.which("mariadb-install-db")):
        pytest.skip("needs the MariaDB server binaries (mariadbd, mariadb-install-db)")
    root = server_dir()
    try:
        pki = make_pki(root / "pki")
        served_cert, served_key = root / "served.pem", root / "served-key.pem"
        shutil.copyfile(pki.server_cert, served_cert)
        shutil.copyfile(pki.server_key, served_key)
        server = start_mariadb(root / "mariadb", server_id=4242, extra=(
            f"--ssl-ca={pki.ca}", f"--ssl-cert={served_cert}", f"--ssl-key={served_key}",
            "--require-secure-transport=ON"))
        with stopping(server):
            tls = TlsServer(server, pki, served_cert, served_key)
            tls.execute(
                f"CREATE USER '{USER}'@'%' IDENTIFIED BY '{PASSWORD}'",
                f"GRANT SELECT, RELOAD, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO "
                f"'{USER}'@'%'",
                "CREATE DATABASE tls_src", "CREATE DATABASE tls_dst",
                f"GRANT CREATE, INSERT, UPDATE, DELETE, DROP, ALTER, INDEX ON tls_dst.* TO "
                f"'{USER}'@'%'",
                "CREATE TABLE tls_src.orders (id INT PRIMARY KEY, note VARCHAR(40))",
                "INSERT INTO tls_src.orders VALUES (1, 'one'), (2, 'two')")
            yield tls
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _fails_with(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line of an ``sdk`` command that must fail before doing anything."""
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    assert PASSWORD not in err
    return err


@pytest.mark.mysql
def test_check_shows_both_connections_verified(tls_server: TlsServer,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--source", tls_server.verified()]) == 0
    out = capsys.readouterr().out
    assert PASSWORD not in out
    dialect = get_dialect("mysql")
    conn = dialect.connect(ConnectionConfig.from_url(tls_server.verified()))
    try:
        report = {s.connection: s for s in dialect.connection_security(conn)}
    finally:
        conn.close()
    assert set(report) == {"queries", "binlog stream"}
    for security in report.values():
        assert security.encrypted and security.verified and security.host_checked
        assert security.version in ("TLSv1.2", "TLSv1.3") and security.cipher
        assert security.subject == "CN=localhost, O=sdk tests" and not security.fix
    assert "[OK] TLS on the queries connection: encrypted" in out
    assert "[OK] TLS on the binlog stream connection: encrypted" in out
    assert "certificate verified, host name checked" in out


@pytest.mark.mysql
def test_the_default_encrypts_without_verifying(tls_server: TlsServer) -> None:
    dialect = get_dialect("mysql")
    conn = dialect.connect(ConnectionConfig.from_url(tls_server.url()))
    try:
        report = dialect.connection_security(conn)
    finally:
        conn.close()
    assert [s.connection for s in report] == ["queries", "binlog stream"]
    for security in report:
        assert security.encrypted and not security.verified and not security.host_checked
        assert security.subject == "CN=localhost, O=sdk tests"
        assert "ssl_mode=VERIFY_IDENTITY" in security.fix
        assert not security.requirement().ok


@pytest.mark.mysql
def test_side_connections_carry_the_same_tls(tls_server: TlsServer) -> None:
    """The catalogue's side connection of a stream and the binlog reader's collation lookup
    open from the connection's settings, so they are verified TLS as well."""
    import sdk_mysql
    from sdk_mysql import _binlog, _tls

    conn = sdk_mysql.connect(ConnectionConfig.from_url(tls_server.verified()))
    live = sdk_mysql._LiveSchemas(conn)
    try:
        conn.in_view = True  # the stream's connection is busy: a side connection is opened
        side = live._connection()
        assert side is not conn
        security = _tls.describe(side.raw, "side")
        assert security.encrypted and security.verified and security.host_checked
        charsets = _binlog._Charsets(conn.settings)
        assert charsets.name(4000) == "collation 4000"  # unknown to pymysql: asks the server
    finally:
        live.close()
        conn.close()


@pytest.mark.mysql
def test_failures_name_the_option_to_fix(tls_server: TlsServer,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    other = tls_server.url(query=f"ssl_mode=VERIFY_CA&ssl_ca={tls_server.pki.other_ca}")
    err = _fails_with(["check", "--source", other], capsys)
    assert f"not signed by the CA in ssl_ca={tls_server.pki.other_ca}" in err
    plain = tls_server.url(query="ssl_mode=DISABLED")
    err = _fails_with(["check", "--source", plain], capsys)
    assert "ssl_mode=DISABLED" in err and "require_secure_transport" in err
    missing = tls_server.url(query=f"ssl_ca={tls_server.pki.directory}/gone.pem")
    err = _fails_with(["sync", "--source", missing, "--target", "sqlite:///unused.db"], capsys)
    assert f"ssl_ca={tls_server.pki.directory}/gone.pem: no such file" in err
    with tls_server.presenting(tls_server.pki.wrong_host_cert, tls_server.pki.wrong_host_key):
        err = _fails_with(["check", "--source", tls_server.verified()], capsys)
        assert "not valid for the host name '127.0.0.1'" in err and "ssl_mode=VERIFY_CA" in err
        # the certificate is signed by the CA: VERIFY_CA accepts it, as the message says
        conn = get_dialect("mysql").connect(ConnectionConfig.from_url(
            tls_server.url(query=f"ssl_mode=VERIFY_CA&ssl_ca={tls_server.pki.ca}")))
        conn.close()


@pytest.mark.mysql
def test_required_is_refused_by_a_server_without_tls(mysql_url: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The shared test MariaDB has TLS disabled (``@@have_ssl`` DISABLED)."""
    url = mysql_url + ("&" if "?" in mysql_url else "?") + "ssl_mode=REQUIRED"
    config = ConnectionConfig.from_url(url)
    with pytest.raises(ConfigurationError) as caught:
        get_dialect("mysql").connect(config)
    message = str(caught.value)  # the URL masked (this server's password is its user name)
    assert message.startswith(f"cannot connect to {config.masked_url}: ssl_mode=REQUIRED but "
                              "the server offers no TLS") and "\n" not in message


@pytest.mark.mysql
@pytest.mark.spark
@pytest.mark.slow
def test_sync_from_the_tls_server_snapshot_then_binlog(
        tls_server: TlsServer, spark: Any, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Snapshot, then the changes through the binlog, all over verified TLS: the server
    refuses any plaintext connection, so the binlog stream's was encrypted too."""
    mirror = tmp_path / "mirror.db"
    tls_server.execute("CREATE TABLE tls_src.items (id INT PRIMARY KEY, note VARCHAR(40))",
                   "INSERT INTO tls_src.items VALUES " +
                   ", ".join(f"({i}, 'n{i}')" for i in range(200)))
    args = ["sync", "--source", tls_server.verified(), "--target", f"sqlite:///{mirror}",
            "--tables", "tls_src.items", "--checkpoint", str(tmp_path / "ck"),
            "--until", "caught-up"]
    assert main(args) == 0
    assert "applied 200 rows" in capsys.readouterr().out
    tls_server.execute("UPDATE tls_src.items SET note = 'changed' WHERE id < 5",
                   "DELETE FROM tls_src.items WHERE id >= 195",
                   "INSERT INTO tls_src.items VALUES (1000, 'new')")
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "applied 11 rows" in out and PASSWORD not in out
    with sqlite3.connect(mirror) as lite:
        mirrored = {int(i): str(n) for i, n in lite.execute(
            "SELECT id, note FROM " + next(
                name for (name,) in lite.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'")
                if name.endswith("items")))}
    assert mirrored == tls_server.rows("tls_src.items")


@pytest.mark.mysql
@pytest.mark.spark
@pytest.mark.slow
def test_sync_into_the_tls_server_as_target(tls_server: TlsServer, spark: Any,
                                            tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "shop.db"
    with sqlite3.connect(source) as lite:
        lite.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, note TEXT)")
        lite.executemany("INSERT INTO orders VALUES (?, ?)",
                         [(i, f"o{i}") for i in range(300)])
    assert main(["sync", "--source", f"sqlite:///{source}", "--target",
                 tls_server.verified("tls_dst"), "--target-schema", "tls_dst",
                 "--checkpoint", str(tmp_path / "ck"), "--until", "caught-up"]) == 0
    out = capsys.readouterr().out
    assert "applied 300 rows" in out and PASSWORD not in out
    assert tls_server.rows("tls_dst.orders") == {i: f"o{i}" for i in range(300)}
