"""A private certificate authority for the TLS tests: a CA, and server and client certificates
it signs, written as PEM files the servers and the URLs' options read."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pki:
    """PEM files in one directory: ``ca`` signed ``server_cert`` (for ``localhost`` and
    127.0.0.1) and ``client_cert``; ``other_ca`` signed nothing here (a wrong CA);
    ``wrong_host_cert`` is signed by ``ca`` for a name no test connects to."""

    directory: Path
    ca: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path
    wrong_host_cert: Path
    wrong_host_key: Path


def _name(common_name: str) -> object:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "sdk tests"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key() -> object:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: object, path: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    path.write_bytes(key.private_bytes(  # type: ignore[attr-defined]
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption()))
    path.chmod(0o600)


def _certificate(subject: str, key: object, issuer: str, issuer_key: object, *, ca: bool,
                 names: tuple[str, ...] = (), client: bool = False) -> object:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID

    now = dt.datetime.now(dt.UTC)
    builder = (x509.CertificateBuilder()
               .subject_name(_name(subject))  # type: ignore[arg-type]
               .issuer_name(_name(issuer))  # type: ignore[arg-type]
               .public_key(key.public_key())  # type: ignore[attr-defined]
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(days=1))
               .not_valid_after(now + dt.timedelta(days=30))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False,
            encipher_only=False, decipher_only=False), critical=True)
    else:
        alternatives: list[x509.GeneralName] = []
        for name in names:
            try:
                alternatives.append(x509.IPAddress(ipaddress.ip_address(name)))
            except ValueError:
                alternatives.append(x509.DNSName(name))
        if alternatives:
            builder = builder.add_extension(x509.SubjectAlternativeName(alternatives),
                                            critical=False)
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())  # type: ignore[arg-type]


def _write_cert(cert: object, path: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))  # type: ignore[attr-defined]


def make_pki(directory: Path) -> Pki:
    """A CA and the certificates the TLS tests use, in ``directory`` (created)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = Pki(directory, directory / "ca.pem", directory / "ca-key.pem",
                directory / "server.pem", directory / "server-key.pem",
                directory / "client.pem", directory / "client-key.pem",
                directory / "other-ca.pem", directory / "wrong-host.pem",
                directory / "wrong-host-key.pem")
    ca_key = _key()
    _write_key(ca_key, paths.ca_key)
    _write_cert(_certificate("sdk test CA", ca_key, "sdk test CA", ca_key, ca=True), paths.ca)
    other_key = _key()
    _write_cert(_certificate("another CA", other_key, "another CA", other_key, ca=True),
                paths.other_ca)
    for cert_path, key_path, subject, names, client in (
            (paths.server_cert, paths.server_key, "localhost", ("localhost", "127.0.0.1"),
             False),
            (paths.client_cert, paths.client_key, "sdk_tls", (), True),
            (paths.wrong_host_cert, paths.wrong_host_key, "db.elsewhere.invalid",
             ("db.elsewhere.invalid",), False)):
        key = _key()
        _write_key(key, key_path)
        _write_cert(_certificate(subject, key, "sdk test CA", ca_key, ca=False, names=names,
                                 client=client), cert_path)
    return paths
