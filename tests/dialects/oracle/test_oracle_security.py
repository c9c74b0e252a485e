"""The Oracle dialect's TLS options, ``connection_security``, ``server_identity`` and
``check_offset``, offline.

No Oracle server runs here. The URL options are checked against the keyword arguments
``oracledb.connect`` receives; the driver's own certificate checks run for real against a TLS
listener with this repository's private CA (the handshake is all that listener speaks, so a
connection that passes it fails afterwards, on the Oracle protocol); the hooks run on
:class:`Recorded`, a DB-API connection that answers each statement with the rows the Oracle
reference documents for it (``SYS_CONTEXT``, ``V$SESSION_CONNECT_INFO``, ``V$DATABASE``,
``V$LOG``/``V$ARCHIVED_LOG``).
"""

from __future__ import annotations

import datetime as dt
import shutil
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import sdk_oracle
from sdk import (
    ConfigurationError,
    ConnectionConfig,
    LogMismatchError,
    OffsetExpiredError,
    RetriableError,
)
from sdk.dialect.manager import check_url_options
from sdk_oracle import _security
from sdk_oracle._miner import OLDEST_LOG, Session, make_offset
from sdk_oracle._tls import TlsSettings, tls_settings

# --- a recorded connection ------------------------------------------------------------------


class OracleError(Exception):
    """What python-oracledb raises for a server error: the message starts with the ORA code."""


@dataclass
class Recorded:
    """A DB-API connection answering each known statement with recorded rows (an exception
    instance is raised instead), and failing the test on any other."""

    answers: dict[str, list[tuple[Any, ...]] | Exception]
    statements: list[str] = field(default_factory=list)

    def cursor(self) -> RecordedCursor:
        return RecordedCursor(self)

    def close(self) -> None:
        pass


@dataclass
class RecordedCursor:
    conn: Recorded
    description: list[tuple[str]] | None = None
    _rows: list[tuple[Any, ...]] = field(default_factory=list)

    def execute(self, sql: str, args: Any = ()) -> None:
        self.conn.statements.append(sql)
        if sql.startswith("ALTER SESSION"):
            self.description, self._rows = None, []
            return
        if sql not in self.conn.answers:
            raise AssertionError(f"no recorded answer for: {sql}")
        answer = self.conn.answers[sql]
        if isinstance(answer, Exception):
            raise answer
        self.description, self._rows = [("COLUMN",)], list(answer)

    def fetchall(self) -> list[tuple[Any, ...]]:
        rows, self._rows = self._rows, []
        return rows

    def close(self) -> None:
        pass


def session(answers: dict[str, list[tuple[Any, ...]] | Exception], tls: TlsSettings | None = None,
            pdb: str | None = None) -> Session:
    return Session(Recorded(answers), pdb=pdb, tls=tls or TlsSettings())


# --- the URL options --------------------------------------------------------------------------


@pytest.fixture
def wallet(tmp_path: Path) -> Path:
    directory = tmp_path / "wallet"
    directory.mkdir()
    (directory / "ewallet.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    return directory


def test_no_tls_option_passes_nothing_and_keeps_the_drivers_default() -> None:
    settings, kwargs = tls_settings({})
    assert kwargs == {}
    assert settings == TlsSettings("tcp", None, True, None, None) and not settings.tls


def test_tcps_options_reach_the_driver_under_its_own_names(wallet: Path) -> None:
    settings, kwargs = tls_settings({
        "protocol": "TCPS", "wallet_location": str(wallet), "ssl_server_dn_match": "off",
        "ssl_server_cert_dn": "CN=db.example.com,O=Example", "ssl_version": "TLSv1.3"})
    assert kwargs == {"protocol": "tcps", "wallet_location": str(wallet),
                      "ssl_server_dn_match": False,
                      "ssl_server_cert_dn": "CN=db.example.com,O=Example",
                      "ssl_version": ssl.TLSVersion.TLSv1_3}
    assert settings.tls and settings.version == "TLSv1.3" and not settings.dn_match


def test_the_options_are_known_to_the_url_check(wallet: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    info = sdk_oracle.dialect_info()
    monkeypatch.setenv("W", "secret")
    (wallet / "pw").write_text("secret")
    for password in ("wallet_password_env=W", f"wallet_password_file={wallet / 'pw'}",
                     "wallet_password=y"):
        config = ConnectionConfig.from_url(
            f"oracle://u:p@db:2484/SVC?protocol=tcps&wallet_location={wallet}"
            f"&{password}&ssl_server_dn_match=true&ssl_server_cert_dn=CN%3Ddb&ssl_version=1.2")
        check_url_options(info, config)
        assert config.options["wallet_password"] in ("secret", "y")  # read as the password is
    with pytest.raises(ConfigurationError, match="wallet_location"):
        check_url_options(info, ConnectionConfig.from_url(
            "oracle://u:p@db/SVC?wallet_locaton=/w"))


@pytest.mark.parametrize(("options", "message"), [
    ({"protocol": "tls"}, r"^protocol='tls' must be tcp or tcps$"),
    ({"protocol": "tcps", "ssl_server_dn_match": "maybe"},
     r"^ssl_server_dn_match='maybe' must be true or false$"),
    ({"protocol": "tcps", "ssl_version": "1.1"}, r"^ssl_version='1.1' must be TLSv1.2 or "
                                                 r"TLSv1.3$"),
    ({"ssl_server_cert_dn": "CN=db"}, r"^ssl_server_cert_dn applies only to TLS: add "
                                      r"protocol=tcps"),
    ({"protocol": "tcp", "wallet_location": "/w"}, r"^wallet_location applies only to TLS"),
    ({"protocol": "tcps", "wallet_location": "/no/such/wallet"},
     r"^wallet_location=/no/such/wallet is not a directory on this machine"),
])
def test_bad_values_are_one_line_errors(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as caught:
        tls_settings(options)
    assert "\n" not in str(caught.value)


def test_a_wallet_without_its_pem_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"has no ewallet\.pem"):
        tls_settings({"protocol": "tcps", "wallet_location": str(tmp_path)})


def test_the_wallet_password_comes_from_the_url_a_variable_or_a_file(
        wallet: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = {"protocol": "tcps", "wallet_location": str(wallet)}
    assert tls_settings({**base, "wallet_password": "s3"})[1]["wallet_password"] == "s3"
    monkeypatch.setenv("WALLET_PW", "from-env")
    secret = tmp_path / "pw"
    secret.write_text("from-file\n")
    for query, expected in (("wallet_password_env=WALLET_PW", "from-env"),
                            (f"wallet_password_file={secret}", "from-file")):
        config = ConnectionConfig.from_url(f"oracle://u@db/SVC?protocol=tcps&"
                                           f"wallet_location={wallet}&{query}")
        assert tls_settings(config.options)[1]["wallet_password"] == expected
    with pytest.raises(ConfigurationError, match="which is not set"):
        ConnectionConfig.from_url("oracle://u@db/SVC?wallet_password_env=NO_SUCH_VARIABLE_SDK")
    with pytest.raises(ConfigurationError, match="cannot read wallet_password_file"):
        ConnectionConfig.from_url(f"oracle://u@db/SVC?wallet_password_file={tmp_path}/missing")
    settings = tls_settings({**base, "wallet_password": "s3"})[0]
    assert "s3" not in repr(settings)


def test_connect_passes_the_options_and_never_shows_the_wallet_password(
        wallet: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import oracledb

    seen: dict[str, Any] = {}

    def fake_connect(**kwargs: Any) -> Recorded:
        seen.update(kwargs)
        raise oracledb.OperationalError("DPY-6005: cannot connect to database (CONNECTION_ID=x)"
                                        ".\n[Errno 111] Connection refused")

    monkeypatch.setattr(oracledb, "connect", fake_connect)
    config = ConnectionConfig.from_url(
        f"oracle://u:pw@db:2484/SVC?protocol=tcps&wallet_location={wallet}"
        "&wallet_password=wallet-secret")
    with pytest.raises(RetriableError) as caught:
        sdk_oracle.connect(config)
    assert seen["protocol"] == "tcps" and seen["wallet_location"] == str(wallet)
    assert seen["wallet_password"] == "wallet-secret" and seen["dsn"] == "db:2484/SVC"
    assert "wallet-secret" not in str(caught.value) and "pw@" not in str(caught.value)


def test_connect_opens_the_session_with_its_tls_settings(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    import oracledb

    raw = Recorded({"SELECT TO_CHAR(SYSTIMESTAMP, 'TZH:TZM') FROM DUAL": [("+00:00",)]})
    monkeypatch.setattr(oracledb, "connect", lambda **kwargs: raw)
    conn = sdk_oracle.connect(ConnectionConfig.from_url(
        "oracle://u:pw@db:2484/SVC?protocol=tcps&ssl_server_cert_dn=CN%3Ddb"))
    assert conn.tls == TlsSettings("tcps", None, True, "CN=db", None)


# --- the driver's own checks, against a real TLS handshake -----------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Any:
    pytest.importorskip("cryptography")
    from helpers.tls import make_pki

    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def tls_listener(pki: Any) -> Iterator[Any]:
    """Start a listener that completes a TLS handshake with the chosen certificate and then
    closes; yields a function of (certificate, key) returning its port."""
    servers: list[socket.socket] = []

    def start(cert: Path, key: Path) -> int:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        listener = socket.create_server(("127.0.0.1", 0))
        servers.append(listener)

        def serve() -> None:
            while True:
                try:
                    plain, _ = listener.accept()
                except OSError:
                    return
                try:
                    with context.wrap_socket(plain, server_side=True) as tls:
                        tls.recv(1)
                except (OSError, ssl.SSLError):
                    pass

        threading.Thread(target=serve, daemon=True).start()
        return int(listener.getsockname()[1])

    yield start
    for listener in servers:
        listener.close()


def _wallet_with(directory: Path, ca: Path) -> Path:
    directory.mkdir(exist_ok=True)
    shutil.copy(ca, directory / "ewallet.pem")
    return directory


def _connect(port: int, host: str = "localhost", **options: str) -> BaseException:
    query = "&".join(f"{k}={v}" for k, v in {"protocol": "tcps", "connect_timeout": "5",
                                              **options}.items())
    with pytest.raises((ConfigurationError, RetriableError)) as caught:
        sdk_oracle.connect(ConnectionConfig.from_url(f"oracle://u:p@{host}:{port}/SVC?{query}"))
    return caught.value


def test_the_server_certificate_is_verified_against_the_wallets_ca(
        pki: Any, tls_listener: Any, tmp_path: Path) -> None:
    pytest.importorskip("oracledb")
    port = tls_listener(pki.server_cert, pki.server_key)
    trusted = _wallet_with(tmp_path / "trusted", pki.ca)
    wrong = _wallet_with(tmp_path / "wrong", pki.other_ca)
    passed = _connect(port, wallet_location=str(trusted))
    assert "TLS:" not in str(passed)  # the handshake passed; the Oracle protocol did not
    refused = _connect(port, wallet_location=str(wrong))
    assert isinstance(refused, ConfigurationError)
    assert "TLS: [SSL: CERTIFICATE_VERIFY_FAILED]" in str(refused)


def test_the_certificate_must_name_the_host_or_the_dn_unless_matching_is_off(
        pki: Any, tls_listener: Any, tmp_path: Path) -> None:
    pytest.importorskip("oracledb")
    port = tls_listener(pki.wrong_host_cert, pki.wrong_host_key)
    trusted = str(_wallet_with(tmp_path / "trusted", pki.ca))
    refused = _connect(port, wallet_location=trusted)
    assert isinstance(refused, ConfigurationError) and "TLS: DPY-6006" in str(refused)
    assert "TLS:" not in str(_connect(port, wallet_location=trusted,
                                      ssl_server_dn_match="false"))
    other_dn = _connect(port, wallet_location=trusted, ssl_server_cert_dn="CN%3Dlocalhost")
    assert isinstance(other_dn, ConfigurationError) and "TLS: DPY-6002" in str(other_dn)
    its_dn = _connect(port, wallet_location=trusted,
                      ssl_server_cert_dn="CN%3Ddb.elsewhere.invalid%2CO%3Dsdk%20tests")
    assert "TLS:" not in str(its_dn)


# --- connection_security on recorded rows ---------------------------------------------------

TCP_BANNERS = [("TCP/IP NT Protocol Adapter for Linux: Version 19.0.0.0.0 - Production",),
               ("Encryption service for Linux: Version 19.0.0.0.0 - Production",),
               ("Crypto-checksumming service for Linux: Version 19.0.0.0.0 - Production",)]
NNE_BANNERS = [*TCP_BANNERS,
               ("AES256 Encryption service adapter for Linux: Version 19.0.0.0.0 - "
                "Production",)]


def test_a_plain_tcp_connection_is_reported_unencrypted_with_the_fix() -> None:
    conn = session({_security.PROTOCOL: [("tcp",)], _security.BANNERS: TCP_BANNERS})
    (report,) = sdk_oracle.connection_security(conn)
    assert not report.encrypted and not report.verified
    assert "?protocol=tcps" in report.fix
    assert str(report.requirement()).startswith("[WARN] TLS on the queries and LogMiner "
                                                "connection: not encrypted")


def test_native_network_encryption_is_encrypted_but_not_verified() -> None:
    conn = session({_security.PROTOCOL: [("tcp",)], _security.BANNERS: NNE_BANNERS})
    (report,) = sdk_oracle.connection_security(conn)
    assert report.encrypted and not report.verified and report.cipher == "AES256"
    assert report.fix.startswith("native network encryption does not authenticate")


def test_tcps_is_verified_and_host_checked_by_default() -> None:
    conn = session({_security.PROTOCOL: [("tcps",)], _security.BANNERS: TCP_BANNERS},
                   TlsSettings("tcps", "/wallet", True, "CN=db.example.com", "TLSv1.3"))
    (report,) = sdk_oracle.connection_security(conn)
    assert report.verified and report.host_checked and report.fix == ""
    assert report.subject == "CN=db.example.com" and report.version == "TLSv1.3"
    assert str(report.requirement()).startswith("[OK] TLS on the queries and LogMiner")


def test_tcps_without_dn_matching_says_the_host_is_not_checked() -> None:
    conn = session({_security.PROTOCOL: [("TCPS",)],
                    _security.BANNERS: OracleError("ORA-00942: table or view does not exist")},
                   TlsSettings("tcps", None, False))
    (report,) = sdk_oracle.connection_security(conn)
    assert report.verified and not report.host_checked and report.subject is None
    assert "ssl_server_dn_match=true" in report.fix
    assert "host name not checked" in str(report.requirement())


# --- server_identity and check_offset on recorded rows ----------------------------------------

RESETLOGS = dt.datetime(2024, 3, 1, 9, 30, 5)


def identity_row(dbid: int = 1234567890, resetlogs: int = 1920977) -> list[tuple[Any, ...]]:
    return [(dbid, "ORCLCDB", resetlogs, RESETLOGS)]


def test_identity_is_the_dbid_name_and_incarnation() -> None:
    conn = session({_security.IDENTITY: identity_row()}, pdb="PDB1")
    conn.container = "PDB1"
    assert sdk_oracle.server_identity(conn) == {
        "dbid": "1234567890", "db_name": "ORCLCDB",
        "incarnation": "RESETLOGS at SCN 1920977 on 2024-03-01 09:30:05"}
    assert conn.raw.statements[0] == 'ALTER SESSION SET CONTAINER = "CDB$ROOT"'


def test_a_resetlogs_changes_the_identity() -> None:
    before = sdk_oracle.server_identity(session({_security.IDENTITY: identity_row()}))
    after = sdk_oracle.server_identity(session({_security.IDENTITY: identity_row(
        resetlogs=5000000)}))
    assert before["dbid"] == after["dbid"] and before["incarnation"] != after["incarnation"]


def positions(current: int, oldest: int | None) -> dict[str, list[tuple[Any, ...]] | Exception]:
    return {"SELECT CURRENT_SCN FROM V$DATABASE": [(current,)], OLDEST_LOG: [(oldest,)]}


def test_an_offset_inside_the_log_passes() -> None:
    sdk_oracle.check_offset(session(positions(5000, 1000)),
                            make_offset(4000, "00000062.000001a4.0010", 2, 3900))
    sdk_oracle.check_offset(session(positions(5000, 1000)), make_offset(5001))  # a watermark


def test_an_offset_past_the_current_scn_is_another_log() -> None:
    with pytest.raises(LogMismatchError) as caught:
        sdk_oracle.check_offset(session(positions(5000, 1000)), make_offset(9000, mine=8000))
    message = str(caught.value)
    assert "SCN 9000" in message and "current SCN is 5000" in message
    assert "RESETLOGS" in message and "another database" in message
    assert "new checkpoint directory" in message


def test_an_offset_whose_redo_was_deleted_is_expired() -> None:
    with pytest.raises(OffsetExpiredError) as caught:
        sdk_oracle.check_offset(session(positions(5000, 3000)), make_offset(4000, mine=2500))
    message = str(caught.value)
    assert "SCN 2500" in message and "SCN 3000" in message
    assert "new checkpoint directory" in message
    with pytest.raises(OffsetExpiredError):
        sdk_oracle.check_offset(session(positions(5000, None)), make_offset(4000))
