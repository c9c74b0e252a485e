"""The TLS (TCPS) options of the Oracle URL, checked and turned into python-oracledb's
keyword arguments.

python-oracledb's thin mode negotiates TLS itself: with ``protocol=tcps`` it verifies the
server's certificate chain against the system trust store plus the CA certificates of the
wallet's ``ewallet.pem`` (``wallet_location``), and then, unless ``ssl_server_dn_match`` is
off, matches the certificate's distinguished name against ``ssl_server_cert_dn`` or else the
host name. The URL options keep the driver's names.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sdk import ConfigurationError

URL_OPTIONS = (
    ("protocol", "tcp (default) or tcps: TLS to a TCPS listener"),
    ("wallet_location", "a directory with ewallet.pem: the CAs that verify the server (and a "
                        "client certificate for mutual TLS)"),
    ("wallet_password", "the password of an encrypted ewallet.pem (better from a variable or "
                        "a file: wallet_password_env=NAME, wallet_password_file=PATH)"),
    ("ssl_server_dn_match", "match the server certificate's DN against the host name or "
                            "ssl_server_cert_dn (default true)"),
    ("ssl_server_cert_dn", "the DN the server certificate must have"),
    ("ssl_version", "pin TLSv1.2 or TLSv1.3 (default: the best both sides have)"),
)

PEM_WALLET = "ewallet.pem"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
_VERSIONS = {"tlsv1.2": ssl.TLSVersion.TLSv1_2, "1.2": ssl.TLSVersion.TLSv1_2,
             "tlsv1.3": ssl.TLSVersion.TLSv1_3, "1.3": ssl.TLSVersion.TLSv1_3}
_TLS_ONLY = ("wallet_location", "wallet_password", "ssl_server_cert_dn", "ssl_version")


@dataclass(frozen=True)
class TlsSettings:
    """What the URL asked of the connection's TLS, kept for ``connection_security`` (never the
    wallet password)."""

    protocol: str = "tcp"
    wallet_location: str | None = None
    dn_match: bool = True
    cert_dn: str | None = None
    version: str | None = None

    @property
    def tls(self) -> bool:
        return self.protocol == "tcps"


def tls_settings(options: Mapping[str, str]) -> tuple[TlsSettings, dict[str, Any]]:
    """The URL's TLS options checked, and the keyword arguments that pass them to
    ``oracledb.connect`` (none when the URL has none: the driver's defaults, plain TCP)."""
    protocol = options.get("protocol", "tcp").strip().lower()
    if protocol not in ("tcp", "tcps"):
        raise ConfigurationError(f"protocol={options['protocol']!r} must be tcp or tcps")
    if protocol == "tcp":
        given = [name for name in _TLS_ONLY if name in options]
        if given:
            raise ConfigurationError(f"{given[0]} applies only to TLS: add protocol=tcps "
                                     "(and connect to the TCPS listener's port)")
    kwargs: dict[str, Any] = {}
    if "protocol" in options:
        kwargs["protocol"] = protocol
    dn_match = True
    if "ssl_server_dn_match" in options:
        text = options["ssl_server_dn_match"].strip().lower()
        if text not in _TRUE + _FALSE:
            raise ConfigurationError(f"ssl_server_dn_match={options['ssl_server_dn_match']!r} "
                                     "must be true or false")
        dn_match = text in _TRUE
        kwargs["ssl_server_dn_match"] = dn_match
    wallet = options.get("wallet_location")
    if wallet is not None:
        wallet = str(Path(wallet).expanduser())
        if not Path(wallet).is_dir():
            raise ConfigurationError(f"wallet_location={wallet} is not a directory on this "
                                     "machine (every Spark node needs the wallet at this path)")
        if not (Path(wallet) / PEM_WALLET).is_file():
            raise ConfigurationError(f"wallet_location={wallet} has no {PEM_WALLET} (thin mode "
                                     "reads the PEM wallet; orapki converts a cwallet.sso)")
        kwargs["wallet_location"] = wallet
    password = options.get("wallet_password")  # _env and _file: read with the URL
    if password is not None:
        kwargs["wallet_password"] = password
    cert_dn = options.get("ssl_server_cert_dn") or None
    if cert_dn is not None:
        kwargs["ssl_server_cert_dn"] = cert_dn
    version = None
    if "ssl_version" in options:
        key = options["ssl_version"].strip().lower()
        if key not in _VERSIONS:
            raise ConfigurationError(f"ssl_version={options['ssl_version']!r} must be TLSv1.2 "
                                     "or TLSv1.3")
        kwargs["ssl_version"] = _VERSIONS[key]
        version = "TLSv1." + key[-1]
    return TlsSettings(protocol, wallet, dn_match, cert_dn, version), kwargs
