"""TLS for every connection the dialect opens: the URL options as MySQL's client names them
(``ssl_mode``, ``ssl_ca``, ``ssl_cert``, ``ssl_key``, ``ssl_cipher``, ``tls_version``,
``ssl``), made into what pymysql takes, the failures said as one line naming the option to
fix, and each connection's protection as ``sdk check`` shows it.

Modes (MySQL's ``--ssl-mode``): DISABLED (plaintext), PREFERRED (the default: encrypt when
the server offers TLS, verify nothing, plaintext otherwise), REQUIRED (encrypt or refuse,
verify nothing), VERIFY_CA (also check the certificate chains to ``ssl_ca``, or to the
system's CAs without it), VERIFY_IDENTITY (also check it names the host connected to). As
MySQL 8's client does, ``ssl_ca`` without ``ssl_mode`` means VERIFY_CA. ``ssl=true`` means
REQUIRED and ``ssl=false`` DISABLED.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sdk import ConfigurationError, ConnectionSecurity, hookimpl

if TYPE_CHECKING:
    from . import MySqlConnection

MODES = ("DISABLED", "PREFERRED", "REQUIRED", "VERIFY_CA", "VERIFY_IDENTITY")
VERIFYING = ("VERIFY_CA", "VERIFY_IDENTITY")
FILE_OPTIONS = ("ssl_ca", "ssl_cert", "ssl_key")
VERSIONS = {"tlsv1": ssl.TLSVersion.TLSv1, "tlsv1.1": ssl.TLSVersion.TLSv1_1,
            "tlsv1.2": ssl.TLSVersion.TLSv1_2, "tlsv1.3": ssl.TLSVersion.TLSv1_3}
_ORDER = list(VERSIONS)

URL_OPTIONS = (
    ("ssl_mode", "TLS: DISABLED, PREFERRED (default: encrypt if offered, verify nothing), "
                 "REQUIRED, VERIFY_CA or VERIFY_IDENTITY"),
    ("ssl-mode", "the same as ssl_mode (the mysql client's spelling)"),
    ("ssl", "true: ssl_mode=REQUIRED, false: ssl_mode=DISABLED"),
    ("ssl_ca", "PEM file of the CA that signed the server's certificate (alone: VERIFY_CA)"),
    ("ssl_cert", "PEM file of a client certificate"),
    ("ssl_key", "PEM file of the client certificate's private key"),
    ("ssl_cipher", "OpenSSL cipher list for TLS 1.2 and below"),
    ("tls_version", "TLS versions allowed, e.g. TLSv1.2,TLSv1.3"),
)

NO_TLS_CODE = 2026  # CR_SSL_CONNECTION_ERROR, as the mysql client reports it
SECURE_TRANSPORT_CODES = {3159, 4036}  # MySQL's ER_SECURE_TRANSPORT_REQUIRED, MariaDB's code
_HOST_MISMATCH = {62, 64}  # X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH


@dataclass(frozen=True)
class TlsOptions:
    """The TLS a URL asks for: the mode, how the user spelt it (for messages) and the files
    and limits of the handshake."""

    mode: str = "PREFERRED"
    named: str = "ssl_mode=PREFERRED (the default)"
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    cipher: str | None = None
    versions: tuple[ssl.TLSVersion, ssl.TLSVersion] | None = None

    @property
    def default(self) -> bool:
        """PREFERRED with nothing to add: pymysql's own context serves (shared per process)."""
        return self.mode == "PREFERRED" and not (self.ca or self.cert or self.key or self.cipher
                                                 or self.versions)


def _flag(value: str) -> bool:
    """``ssl=``'s value as a boolean; anything else is refused naming the option."""
    text = value.strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ConfigurationError(f"ssl={value!r}: use ssl=true (ssl_mode=REQUIRED) or ssl=false "
                             "(ssl_mode=DISABLED)")


def _versions(value: str) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    """``tls_version``'s list as the minimum and maximum version of a context; the versions
    must be contiguous, since a context allows a range."""
    names = [v.strip().lower() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in VERSIONS]
    if not names or unknown:
        raise ConfigurationError(f"tls_version={value!r}: use a comma-separated list of "
                                 "TLSv1.2 and TLSv1.3 (or TLSv1, TLSv1.1)")
    positions = sorted({_ORDER.index(n) for n in names})
    if positions != list(range(positions[0], positions[-1] + 1)):
        raise ConfigurationError(f"tls_version={value!r}: the versions must be consecutive "
                                 "(e.g. TLSv1.2,TLSv1.3)")
    return VERSIONS[_ORDER[positions[0]]], VERSIONS[_ORDER[positions[-1]]]


def parse(options: Mapping[str, str]) -> TlsOptions:
    """The TLS options of a URL's query, checked (files are opened later, by :func:`context`)."""
    spelt = {name: options[name] for name in ("ssl_mode", "ssl-mode") if name in options}
    modes = {v.strip().upper() for v in spelt.values()}
    if len(modes) > 1:
        raise ConfigurationError("ssl_mode and ssl-mode are the same option and disagree: "
                                 "give one")
    ca = options.get("ssl_ca") or None
    named = ""
    if modes:
        (mode,) = modes
        name = next(iter(spelt))
        if mode not in MODES:
            raise ConfigurationError(f"{name}={spelt[name]!r}: use one of {', '.join(MODES)}")
        named = f"{name}={mode}"
    if "ssl" in options:
        wanted = "REQUIRED" if _flag(options["ssl"]) else "DISABLED"
        if not modes:
            mode, named = wanted, f"ssl={options['ssl']}"
        elif (wanted == "DISABLED") != (mode == "DISABLED"):
            raise ConfigurationError(f"ssl={options['ssl']} contradicts {named}: give one")
    elif not modes:
        mode, named = ("VERIFY_CA", "ssl_ca (without ssl_mode: VERIFY_CA)") if ca else \
            ("PREFERRED", "ssl_mode=PREFERRED (the default)")
    if options.get("ssl_key") and not options.get("ssl_cert"):
        raise ConfigurationError("ssl_key is given without ssl_cert: add ssl_cert, the client "
                                 "certificate the key belongs to")
    versions = _versions(options["tls_version"]) if options.get("tls_version") else None
    return TlsOptions(mode, named, ca, options.get("ssl_cert") or None,
                      options.get("ssl_key") or None, options.get("ssl_cipher") or None,
                      versions)


def _readable(option: str, path: str) -> str:
    """``path`` expanded, after checking this process can read it (the message names the
    option: on a cluster the file must be at that path on every node)."""
    full = os.path.expanduser(path)
    try:
        with open(full, "rb"):
            pass
    except FileNotFoundError:
        raise ConfigurationError(
            f"{option}={path}: no such file (on a cluster it must exist at this path on every "
            "node, the Spark executors included)") from None
    except OSError as exc:
        raise ConfigurationError(f"{option}={path}: cannot be read ({exc.strerror})") from None
    return full


_CONTEXTS: dict[tuple[Any, ...], ssl.SSLContext] = {}


def context(tls: TlsOptions) -> ssl.SSLContext | None:
    """The client context of ``tls`` (None for DISABLED and the plain default), made once per
    process for the same options and files (a changed file, by its time, makes a new one)."""
    if tls.mode == "DISABLED" or tls.default:
        return None
    files = [(o, p) for o, p in zip(FILE_OPTIONS, (tls.ca, tls.cert, tls.key), strict=True) if p]
    paths = {o: _readable(o, p) for o, p in files}
    stamp = tuple(os.stat(p).st_mtime_ns for p in paths.values())
    cache_key = (tls, stamp)
    if cache_key not in _CONTEXTS:
        _CONTEXTS[cache_key] = _make_context(tls, paths)
    return _CONTEXTS[cache_key]


def _make_context(tls: TlsOptions, paths: Mapping[str, str]) -> ssl.SSLContext:
    """A new context for ``tls`` from the files at ``paths`` (checked readable)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if tls.mode in VERIFYING:
        try:
            if "ssl_ca" in paths:
                ctx.load_verify_locations(cafile=paths["ssl_ca"])
            else:
                ctx.load_default_certs()
        except ssl.SSLError as exc:
            raise ConfigurationError(f"ssl_ca={tls.ca}: holds no PEM CA certificate "
                                     f"({exc.reason or exc})") from None
        ctx.check_hostname = tls.mode == "VERIFY_IDENTITY"
        ctx.verify_mode = ssl.CERT_REQUIRED
    else:  # PREFERRED, REQUIRED: encrypted, nothing verified (as MySQL's client, ssl_ca or not)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    # MySQL's own generated certificates fail the strict checks Python 3.13 turns on
    ctx.verify_flags &= ~ssl.VERIFY_X509_STRICT
    if "ssl_cert" in paths:
        try:
            ctx.load_cert_chain(paths["ssl_cert"], paths.get("ssl_key"))
        except ssl.SSLError as exc:
            raise ConfigurationError(
                f"ssl_cert={tls.cert}" + (f" and ssl_key={tls.key}" if tls.key else "") +
                f": not a PEM certificate and its private key ({exc.reason or exc})") from None
    if tls.cipher:
        try:
            ctx.set_ciphers(tls.cipher)
        except ssl.SSLError:
            raise ConfigurationError(f"ssl_cipher={tls.cipher!r}: OpenSSL knows no cipher of "
                                     "that list") from None
    if tls.versions:
        ctx.minimum_version, ctx.maximum_version = tls.versions
    return ctx


def connection_kwargs(tls: TlsOptions) -> dict[str, Any]:
    """What :func:`._connect.open_connection` takes for ``tls``: ``ssl`` (a context: TLS or
    refuse, see ``_connect``), ``ssl_disabled``, ``ssl_preferred`` (a context for TLS when
    offered), or nothing (pymysql's preferred default)."""
    ctx = context(tls)
    if tls.mode == "DISABLED":
        return {"ssl_disabled": True}
    if ctx is None:
        return {}
    if tls.mode == "PREFERRED":
        return {"ssl_preferred": ctx}
    return {"ssl": ctx}


_PASSING = (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)


def handshake_failed(exc: BaseException) -> bool:
    """Whether ``exc`` (pymysql's error for a connection it could not open) is a TLS handshake
    that failed for the certificates or protocol, not a connection cut during it: retrying
    will not help."""
    original = getattr(exc, "original_exception", None)
    return (isinstance(original, ssl.SSLError) and not isinstance(original, _PASSING)) or \
        bool(getattr(exc, "no_server_tls", False))


def failure(exc: BaseException, tls: TlsOptions, host: str) -> str | None:
    """One line saying why a connection failed for TLS and which option fixes it; None when
    ``exc`` is not a TLS failure."""
    original = getattr(exc, "original_exception", None)
    args = getattr(exc, "args", ())
    code = args[0] if args and isinstance(args[0], int) else None
    if getattr(exc, "no_server_tls", False):
        return (f"{tls.named} but the server offers no TLS: enable TLS on the server "
                "(ssl_cert/ssl_key) or set ssl_mode=PREFERRED")
    if isinstance(original, ssl.SSLCertVerificationError):
        reason = original.verify_message or str(original)
        if original.verify_code in _HOST_MISMATCH:
            return (f"the server's certificate is not valid for the host name {host!r} "
                    f"({reason}): connect by a name the certificate holds, or set "
                    "ssl_mode=VERIFY_CA to check only that a trusted CA signed it")
        if tls.ca:
            return (f"the server's certificate is not signed by the CA in ssl_ca={tls.ca} "
                    f"({reason}): set ssl_ca to the CA file that signed it")
        return (f"the server's certificate is not signed by a CA this system trusts "
                f"({reason}): set ssl_ca to the CA file that signed it")
    if isinstance(original, ssl.SSLError) and not isinstance(original, _PASSING):
        return (f"the TLS handshake with {host} failed ({original.reason or original}): check "
                f"tls_version and ssl_cipher against what the server accepts ({tls.named})")
    if tls.mode != "DISABLED":
        return None
    text = str(args[-1]) if args else ""
    if code in SECURE_TRANSPORT_CODES or "insecure transport" in text:
        return (f"the server accepts only encrypted connections (require_secure_transport) "
                f"and {tls.named}: remove it, or set ssl_mode=VERIFY_IDENTITY&ssl_ca=<CA file>")
    if code == 1045 and getattr(exc, "server_offers_tls", False):
        return (f"{text} with {tls.named}: the server may accept only encrypted connections "
                "(require_secure_transport=ON, which MariaDB reports as access denied): remove "
                f"{tls.named} or set ssl_mode=VERIFY_IDENTITY&ssl_ca=<CA file>; otherwise check "
                "the user and password")
    return None


def _subject(sock: Any) -> str | None:
    """The server certificate's subject, most specific first (``CN=db, O=example``), read
    from the TLS socket: parsed from its DER (a context that verifies nothing gets no dict)."""
    try:
        der = sock.getpeercert(binary_form=True)
    except (AttributeError, ValueError):
        return None
    if der:
        try:
            from cryptography import x509
        except ImportError:
            pass
        else:
            name = x509.load_der_x509_certificate(der).subject
            return ", ".join(a.rfc4514_string() for a in reversed(list(name))) or None
    short = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU",
             "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST"}
    info = sock.getpeercert() or {}
    parts = [f"{short.get(k, k)}={v}" for rdn in info.get("subject", ()) for k, v in rdn]
    return ", ".join(reversed(parts)) or None


def describe(raw: Any, connection: str) -> ConnectionSecurity:
    """How the pymysql connection ``raw`` is protected, as the server and its socket say."""
    with raw.cursor() as cur:
        cur.execute("SHOW SESSION STATUS WHERE Variable_name IN ('Ssl_version', 'Ssl_cipher')")
        status = {str(k): str(v) for k, v in cur.fetchall()}
    version = status.get("Ssl_version") or None
    sock = getattr(raw, "_sock", None)
    encrypted = bool(version) and isinstance(sock, ssl.SSLSocket)
    ctx = getattr(raw, "ctx", None) if encrypted else None
    verified = ctx is not None and ctx.verify_mode == ssl.CERT_REQUIRED
    host_checked = verified and bool(ctx is not None and ctx.check_hostname)
    want = "ssl_mode=VERIFY_IDENTITY&ssl_ca=<CA file>"
    if not encrypted:
        fix = f"enable TLS on the server, then add {want} to the URL"
    elif not verified:
        fix = f"add {want} to the URL"
    elif not host_checked:
        fix = "set ssl_mode=VERIFY_IDENTITY (connect by a name the server's certificate holds)"
    else:
        fix = ""
    return ConnectionSecurity(connection, encrypted, verified, host_checked, version,
                              status.get("Ssl_cipher") or None,
                              _subject(sock) if encrypted else None, fix)


@hookimpl
def connection_security(conn: MySqlConnection) -> list[ConnectionSecurity]:
    """The queries' connection, and one opened with exactly the binlog reader's settings."""
    from ._connect import open_connection

    out = [describe(conn.raw, "queries")]
    stream = open_connection(**conn.settings)
    try:
        out.append(describe(stream, "binlog stream"))
    finally:
        stream.close()
    return out
