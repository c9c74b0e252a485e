"""TLS on the dialect's connections: libpq's ``ssl*`` URL options, checked before connecting;
libpq's TLS failures as one line naming the URL option to fix; and how each connection is
protected, for ``sdk check`` (``connection_security``).

The options are libpq's own, under libpq's names, passed through unchanged: without any,
libpq's default applies (``sslmode=prefer``: TLS when the server offers it, the certificate not
checked, plaintext otherwise; ``PGSSLMODE`` and the other ``PGSSL*`` variables still apply).
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import ssl
import stat
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sdk import ConfigurationError, ConnectionSecurity, hookimpl

if TYPE_CHECKING:
    from cryptography.x509 import Certificate

    from ._connection import PgConnection

MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
"""libpq's sslmode values, weakest first."""
VERIFYING = ("verify-ca", "verify-full")
FILES = ("sslrootcert", "sslcert", "sslkey", "sslcrl", "sslcrldir")
"""The options naming a file (``sslcrldir`` a directory) that libpq opens at connect, on the
driver and on every Spark executor."""
URL_OPTIONS: tuple[tuple[str, str], ...] = (
    ("sslmode", "libpq's TLS mode: disable, allow, prefer (libpq's default: no verification), "
                "require, verify-ca, verify-full"),
    ("sslrootcert", "the CA certificate file that verifies the server's certificate, or "
                    "system for the system's trusted CAs (libpq 16+; implies verify-full)"),
    ("sslcert", "the client certificate file (for cert authentication)"),
    ("sslkey", "the client certificate's private key file (mode 0600)"),
    ("sslpassword", "the passphrase of an encrypted sslkey"),
    ("sslcrl", "a certificate revocation list file"),
    ("sslcrldir", "a directory of certificate revocation lists"),
    ("sslnegotiation", "postgres (default) or direct: TLS without the SSLRequest round trip "
                       "(libpq and server 17+)"),
    ("sslsni", "1 (libpq's default) sends the host name in TLS SNI, 0 does not"),
)
NAMES = tuple(name for name, _ in URL_OPTIONS)
SSL_REQUEST = struct.pack("!ii", 8, 80877103)
"""PostgreSQL's SSLRequest packet: length 8, then the request code 1234.5679."""
VERIFY_FIX = "add sslmode=verify-full&sslrootcert=/path/ca.pem to the URL"


def libpq_version() -> int:
    """The linked libpq's version number (``180006`` for 18.6)."""
    import psycopg

    return psycopg.pq.version()


def _version_text(number: int) -> str:
    return f"{number // 10000}.{number % 10000}"


def _need(number: int, what: str) -> None:
    """Refuse ``what`` when the linked libpq is older than ``number``."""
    have = libpq_version()
    if have < number:
        raise ConfigurationError(
            f"URL option {what} needs libpq {number // 10000} or later; psycopg here uses "
            f"libpq {_version_text(have)}: upgrade psycopg[binary] (it bundles a recent libpq) "
            "or leave the option out")


def _check_path(name: str, value: str) -> None:
    """Refuse a TLS file option naming a path this process cannot read, before libpq does
    (libpq skips a missing sslcert silently, and words the others less plainly)."""
    path = Path(value).expanduser()
    where = "(each Spark executor opens it at the same path)"
    directory = name == "sslcrldir"
    try:
        info = path.stat()
    except FileNotFoundError:
        raise ConfigurationError(f"URL option {name} names {path}, which does not exist "
                                 f"{where}") from None
    except OSError as exc:
        raise ConfigurationError(f"URL option {name} names {path}, which this process cannot "
                                 f"reach: {exc.strerror}") from None
    if directory != stat.S_ISDIR(info.st_mode):
        kind = "a directory" if directory else "a file"
        raise ConfigurationError(f"URL option {name} names {path}, which is not {kind}")
    if not os.access(path, os.R_OK | (os.X_OK if directory else 0)):
        raise ConfigurationError(f"URL option {name} names {path}, which this process (uid "
                                 f"{os.geteuid()}) cannot read: check its owner and mode")
    if name == "sslkey" and os.name == "posix":
        # libpq's own rule: the owner's key no group or other access; root's at most g=r
        mode = stat.S_IMODE(info.st_mode)
        loose = ((info.st_uid == os.geteuid() and mode & 0o077)
                 or (info.st_uid == 0 and mode & 0o137))
        if loose:
            raise ConfigurationError(
                f"URL option sslkey names {path}, which has mode {mode:04o}: libpq refuses a "
                f"private key others may read; chmod 600 {path}")


def connect_args(options: Mapping[str, str]) -> dict[str, str]:
    """The libpq TLS keywords among the URL's ``options``, each checked: a wrong value, a
    file that cannot be read or an option the linked libpq lacks is refused naming it."""
    args = {name: options[name] for name in NAMES if name in options}
    mode = args.get("sslmode")
    if mode is not None and mode not in MODES:
        raise ConfigurationError(f"URL option sslmode={mode!r} is not one of "
                                 f"{', '.join(MODES)}")
    if args.get("sslrootcert") == "system":
        _need(160000, "sslrootcert=system")
        if mode not in (None, "verify-full"):
            raise ConfigurationError(
                f"URL option sslrootcert=system checks the server against the system's trusted "
                f"CAs and its host name, and libpq refuses it with sslmode={mode}: leave "
                "sslmode out or set sslmode=verify-full")
    negotiation = args.get("sslnegotiation")
    if negotiation is not None:
        _need(170000, "sslnegotiation")
        if negotiation not in ("postgres", "direct"):
            raise ConfigurationError(f"URL option sslnegotiation={negotiation!r} is not one "
                                     "of postgres, direct")
        strong = mode in ("require", *VERIFYING) or (
            mode is None and args.get("sslrootcert") == "system")
        if negotiation == "direct" and not strong:
            raise ConfigurationError(
                f"URL option sslnegotiation=direct needs sslmode=require, verify-ca or "
                f"verify-full (it cannot fall back to plaintext), not sslmode={mode or 'prefer'}")
    if args.get("sslsni", "1") not in ("0", "1"):
        raise ConfigurationError(f"URL option sslsni={args['sslsni']!r} is not 0 or 1")
    for name in FILES:
        if name in args and not (name == "sslrootcert" and args[name] == "system"):
            _check_path(name, args[name])
    return args


# --- failures --------------------------------------------------------------------------------


HOST_MISMATCH = re.compile(r'server certificate for "([^"]*)"(?: \(and \d+ other names?\))? '
                           r'does not match host name "([^"]*)"')
TLS_ALERT = re.compile(r"SSL error: (?:tlsv1|sslv3|tls) alert (unknown ca|bad certificate|"
                       r"certificate required|certificate unknown|decrypt error)")


def failure(args: Mapping[str, Any], message: str) -> str | None:
    """What to do about a connection failure that libpq's ``message`` shows to be a TLS
    matter, as one line naming the URL option; None when it is not one (``args``: the
    keywords given to libpq)."""
    mode = str(args.get("sslmode") or os.environ.get("PGSSLMODE") or "prefer")
    root = args.get("sslrootcert") or os.environ.get("PGSSLROOTCERT")
    host, port = str(args.get("host") or ""), int(args.get("port") or 5432)
    if match := HOST_MISMATCH.search(message):
        names = _certificate_names(host, port) or [match.group(1)]
        return (f"the server's certificate is for {', '.join(names)}, not for the host name "
                f"{match.group(2)!r} of the URL (sslmode=verify-full checks it): connect by a "
                f"name the certificate has ({names[0]}), or set sslmode=verify-ca to verify "
                "the CA without the name")
    if "certificate verify failed" in message:
        server = _describe(host, port)
        where = ("a CA the system trusts (sslrootcert=system)" if root == "system" else
                 f"the CA in sslrootcert={root}" if root else
                 "the CA in ~/.postgresql/root.crt (no sslrootcert given)")
        return (f"the server's certificate{server} is not signed by {where}: set sslrootcert "
                "to the CA certificate that signed the server's")
    if "no pg_hba.conf entry" in message and "no encryption" in message:
        return (f"the server accepts this connection only over TLS (pg_hba.conf has no rule "
                f"for an unencrypted one) and sslmode={mode} connects without it: "
                f"set sslmode=verify-full&sslrootcert=/path/ca.pem (or sslmode=require)")
    if "server does not support SSL, but SSL was required" in message:
        return (f"the server does not offer TLS (ssl=off there) and sslmode={mode} requires "
                "it: turn ssl on on the server (ssl_cert_file, ssl_key_file), or set "
                "sslmode=prefer to connect unencrypted where that is acceptable")
    if "root certificate file" in message and "does not exist" in message:
        return (f"sslmode={mode} verifies the server's certificate and needs the CA that "
                "signed it: add sslrootcert=/path/ca.pem (or sslrootcert=system for the "
                "system's trusted CAs)")
    if "connection requires a valid client certificate" in message:
        return ("the server requires a client certificate for this connection (pg_hba.conf "
                "cert, or clientcert=verify-ca/verify-full): add "
                "sslcert=/path/client.pem&sslkey=/path/client-key.pem")
    if "certificate authentication failed for user" in message:
        return (f"the client certificate in sslcert={args.get('sslcert')} is not for the user "
                f"{args.get('user')!r} (its CN must be the role's name, or map to it in "
                "pg_ident.conf): use a certificate issued for this role in sslcert and sslkey")
    if "could not load private key file" in message or "private key file" in message:
        reason = message.rsplit(":", 1)[-1].strip()
        hint = ("set sslpassword to the key's passphrase" if "decrypt" in reason or
                "password" in reason else "set sslkey to the key of the certificate in "
                f"sslcert={args.get('sslcert')}")
        return f"libpq cannot use sslkey={args.get('sslkey')} ({reason}): {hint}"
    if "certificate file" in message:
        return (f"libpq cannot use sslcert={args.get('sslcert')} "
                f"({message.rsplit(':', 1)[-1].strip()}): set sslcert to a PEM certificate")
    if alert := TLS_ALERT.search(message):
        return (f"the server refused the client certificate in sslcert={args.get('sslcert')} "
                f"({alert.group(1)}): use a certificate signed by a CA in the server's "
                "ssl_ca_file")
    if "SSL error:" in message:
        detail = message.split("SSL error:", 1)[1].strip().splitlines()[0]
        if args.get("sslnegotiation") == "direct":
            return (f"the server did not take a direct TLS handshake ({detail}): "
                    "sslnegotiation=direct needs PostgreSQL 17 or later on the server; "
                    "leave sslnegotiation out")
        return (f"the TLS handshake failed ({detail}) with sslmode={mode}: check sslmode, "
                "sslrootcert, sslcert and sslkey against the server's TLS settings")
    if "weak sslmode" in message:
        return " ".join(message.split("connection is bad:")[-1].split())
    return None


def _certificate_names(host: str, port: int) -> list[str]:
    """The host names and addresses the server's certificate is for (best effort)."""
    cert = peer_certificate(host, port)
    if cert is None:
        return []
    from cryptography import x509

    try:
        alternatives = cert.extensions.get_extension_for_class(
            x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return [str(a.value) for a in
                cert.subject.get_attributes_for_oid(x509.oid.NameOID.COMMON_NAME)]
    return [*alternatives.get_values_for_type(x509.DNSName),
            *(str(ip) for ip in alternatives.get_values_for_type(x509.IPAddress))]


def _describe(host: str, port: int) -> str:
    """`` (subject, issued by issuer)`` of the server's certificate, or nothing."""
    cert = peer_certificate(host, port)
    if cert is None:
        return ""
    return f" ({_name(cert.subject)}, issued by {_name(cert.issuer)})"


# --- what sdk check shows --------------------------------------------------------------------


def _name(name: Any) -> str:
    """An X.509 name as people read it, most specific first: ``CN=localhost, O=sdk tests``."""
    return ", ".join(rdn.rfc4514_string() for rdn in reversed(name.rdns))


def peer_certificate(host: str, port: int, timeout: float = 5.0) -> Certificate | None:
    """The certificate the server at ``host:port`` presents, read by a TLS handshake of our
    own without verification (libpq does not hand the peer certificate to psycopg); None on
    a Unix socket, without TLS, without the ``cryptography`` package or on any failure."""
    if not host or host.startswith("/") or host.startswith("@"):
        return None
    try:
        from cryptography import x509
    except ImportError:
        return None
    try:
        ipaddress.ip_address(host)
        server_name = None
    except ValueError:
        server_name = host
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # only to read what the server presents
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(SSL_REQUEST)
            if sock.recv(1) != b"S":
                return None
            with context.wrap_socket(sock, server_hostname=server_name) as tls:
                der = tls.getpeercert(binary_form=True)
    except (OSError, ssl.SSLError):
        return None
    return x509.load_der_x509_certificate(der) if der else None


def _settings(raw: Any) -> dict[str, str]:
    """The libpq settings a connection runs with (given, from ``PGSSL*`` or default)."""
    return {option.keyword.decode(): option.val.decode() for option in raw.pgconn.info
            if option.val is not None}


def describe(raw: Any, connection: str) -> ConnectionSecurity:
    """How the open psycopg connection ``raw`` is protected, as ``sdk check`` shows it."""
    import psycopg

    settings = _settings(raw)
    host = raw.info.host
    if host.startswith("/") or host.startswith("@"):
        return ConnectionSecurity(connection, encrypted=False, fix=(
            f"a Unix socket ({host}) stays on this machine and has no TLS; over TCP "
            f"{VERIFY_FIX.removeprefix('add ')}"))
    if not raw.pgconn.ssl_in_use:
        return ConnectionSecurity(connection, encrypted=False, fix=VERIFY_FIX)
    mode = settings.get("sslmode", "prefer")
    system = settings.get("sslrootcert") == "system"
    verified = mode in VERIFYING or system
    host_checked = mode == "verify-full" or system
    version = cipher = None
    try:
        row = raw.execute("SELECT version, cipher FROM pg_stat_ssl "
                          "WHERE pid = pg_backend_pid()").fetchone()
    except psycopg.Error:
        row = None
    if row is not None:
        version, cipher = row
    cert = peer_certificate(raw.info.hostaddr or host, raw.info.port)
    if not verified:
        fix = (f"sslmode={mode} encrypts without checking the certificate: "
               "set sslmode=verify-full&sslrootcert=/path/ca.pem in the URL")
    elif not host_checked:
        fix = "sslmode=verify-ca does not check the host name: set sslmode=verify-full"
    else:
        fix = ""
    return ConnectionSecurity(connection, encrypted=True, verified=verified,
                              host_checked=host_checked, version=version, cipher=cipher,
                              subject=_name(cert.subject) if cert is not None else None, fix=fix)


@hookimpl
def connection_security(conn: PgConnection) -> list[ConnectionSecurity]:
    """The queries' connection, and the replication connection ``begin_snapshot`` opens with
    the same settings (opened here to read it, then closed; left out when it cannot open)."""
    import psycopg

    found = [describe(conn.raw, "queries")]
    if conn.connect_args:
        args = dict(conn.connect_args, replication="database", autocommit=True)
        args.pop("options", None)
        try:
            rep = psycopg.connect(**args)
        except psycopg.Error:
            return found
        try:
            found.append(describe(rep, "replication"))
        finally:
            rep.close()
    return found
