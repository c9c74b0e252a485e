"""Database URLs: parsing, the dialect they select, and masking so a password is never shown."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from .errors import ConfigurationError


@dataclass(frozen=True)
class ConnectionConfig:
    """Where a database is and how to log in, parsed from a URL.

    ``repr`` and ``masked_url`` never show the password. Extra query parameters land in
    ``options`` for the dialect to read (``?ssl=true``).
    """

    dialect: str
    host: str | None = None
    port: int | None = None
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    database: str | None = None
    options: Mapping[str, str] = field(default_factory=dict)
    hosts: tuple[tuple[str, int | None], ...] = ()
    """Every host of a URL naming several (``mysql://u@db1,db2:3307/shop``), in order: the
    servers of one replication topology, the primary among them; ``host`` and ``port`` are
    the first's. Empty for a URL of one host."""
    url: str = field(default="", repr=False, compare=False)
    """The URL as given, for a dialect whose URL names a location rather than a server (a
    table format's root: ``delta+s3://bucket/prefix``); it may hold a secret, never log it."""

    @classmethod
    def from_url(cls, url: str) -> ConnectionConfig:
        """Parse ``scheme://user:password@host:port/database?opt=value``; several hosts may be
        given, comma-separated (``host1:port1,host2``: see :attr:`hosts`).

        The scheme selects the dialect by its name or a scheme it declares
        (``DialectInfo.url_schemes``: ``postgresql://`` is ``postgres``). A URL with no host
        names a file: ``sqlite:///relative.db``, ``sqlite:////absolute.db``. Instead of
        writing the password in the URL, ``?password_env=NAME`` reads it from an environment
        variable and ``?password_file=PATH`` from a file.
        """
        hosts: tuple[tuple[str, int | None], ...] = ()
        try:
            parts = urlsplit(url)
            if "," in parts.netloc.rpartition("@")[2]:
                hosts = _hosts(parts.netloc.rpartition("@")[2])
                auth = parts.netloc.rpartition("@")[0]
                first = f"{hosts[0][0]}:{hosts[0][1]}" if hosts[0][1] else hosts[0][0]
                parts = parts._replace(netloc=f"{auth}@{first}" if auth else first)
            port = parts.port
        except ValueError as exc:
            raise ConfigurationError(f"bad database URL {mask_url(url)!r}: {exc}") from None
        if not parts.scheme or "://" not in url:
            raise ConfigurationError(
                f"bad database URL {mask_url(url)!r}: it needs a scheme such as "
                "mysql://, postgresql://, sqlite:///")
        dialect = _dialect_of(parts.scheme.lower())
        options = dict(parse_qsl(parts.query))
        if not parts.netloc:  # a file: the path after the scheme's "///" as given
            path = unquote(parts.path[1:] if parts.path.startswith("/") else parts.path)
            return cls(dialect, database=path or None, options=options, url=url)
        database = unquote(parts.path.lstrip("/")) or None
        inline = unquote(parts.password) if parts.password else None
        password = _resolve_secret(options.pop("password_env", None),
                                   options.pop("password_file", None), inline)
        _resolve_secret_options(options)
        return cls(
            dialect=dialect,
            host=parts.hostname,
            port=port,
            user=unquote(parts.username) if parts.username else None,
            password=password,
            database=database,
            options=options,
            hosts=hosts,
            url=url,
        )

    @property
    def masked_url(self) -> str:
        """The URL with the password replaced by ``***``: safe to log."""
        auth = ""
        if self.user:
            auth = self.user + (":***" if self.password else "") + "@"
        hosts = self.hosts or ((self.host or "", self.port),)
        where = ",".join((f"[{h}]" if ":" in h else h) + (f":{p}" if p else "") for h, p in hosts)
        return f"{self.dialect}://{auth}{where}/{self.database or ''}"

    def __repr__(self) -> str:
        options = {k: "***" if is_secret_option(k) else v for k, v in self.options.items()}
        return (f"ConnectionConfig(dialect={self.dialect!r}, host={self.host!r}, "
                f"port={self.port!r}, user={self.user!r}, database={self.database!r}, "
                f"options={options!r})")

    def with_host(self, host: str, port: int | None) -> ConnectionConfig:
        """A copy naming only ``host:port`` (one of :attr:`hosts`)."""
        return replace(self, host=host, port=port, hosts=())

    def with_options(self, **options: str) -> ConnectionConfig:
        """A copy with more options."""
        return replace(self, options={**self.options, **options})

    def __str__(self) -> str:
        return self.masked_url


def _own_name(scheme: str) -> str:
    """A URL scheme's dialect when none is installed to say: its first part (``delta+s3``
    -> ``delta``)."""
    return scheme.split("+")[0]


_schemes: list[Callable[[str], str]] = [_own_name]
"""What names the dialect of a URL scheme: :mod:`.manager` puts the installed dialects'
lookup here when it loads (it imports this module; this one does not import it)."""


def name_schemes_with(lookup: Callable[[str], str]) -> None:
    """Name URL schemes' dialects with ``lookup`` from now on (the dialect manager's)."""
    _schemes[0] = lookup


def _dialect_of(scheme: str) -> str:
    """The dialect a URL scheme selects (``delta+s3`` by its ``delta``), as the installed
    dialects declare their schemes; the scheme itself when none does."""
    return _schemes[0](scheme)


def _hosts(text: str) -> tuple[tuple[str, int | None], ...]:
    """``host1:port1,host2,...`` as (host, port) pairs (``[::1]:5432`` for an IPv6 one)."""
    hosts = []
    for item in text.split(","):
        item = item.strip()
        host, port = item, None
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            port = rest[1:] if rest.startswith(":") else None
        elif item.count(":") == 1:
            host, port = item.split(":")
        if not host or (port is not None and not port.isdigit()):
            raise ValueError(f"bad host {item!r} in the host list")
        hosts.append((host, int(port) if port else None))
    return tuple(hosts)


def is_secret_option(name: str) -> bool:
    """Whether a URL option holds a secret (a key's or a wallet's password), never shown."""
    return any(word in name.lower() for word in ("password", "secret", "token"))


def _resolve_secret(env: str | None, file: str | None, inline: str | None,
                    name: str = "password") -> str | None:
    if env is not None:
        if env not in os.environ:
            raise ConfigurationError(f"{name}_env names the environment variable {env!r}, "
                                     "which is not set")
        return os.environ[env]
    if file is not None:
        path = Path(file).expanduser()
        try:
            return path.read_text().strip()
        except OSError as exc:
            raise ConfigurationError(f"cannot read {name}_file {path}: {exc.strerror}") \
                from None
    return inline


def _resolve_secret_options(options: dict[str, str]) -> None:
    """Read each secret option given as ``NAME_env`` or ``NAME_file`` (``sslpassword_file``,
    ``wallet_password_env``) into ``NAME``, as the password is, so no secret need stand in a
    URL."""
    for option in [o for o in options if o.endswith(("_env", "_file"))]:
        name, _, how = option.rpartition("_")
        if not is_secret_option(name):
            continue
        if name in options or f"{name}_{'file' if how == 'env' else 'env'}" in options:
            raise ConfigurationError(f"give {name} one way: {name}, {name}_env or {name}_file")
        value = options.pop(option)
        secret = _resolve_secret(value if how == "env" else None,
                                 value if how == "file" else None, None, name)
        options[name] = secret or ""


def mask_url(url: str) -> str:
    """Hide the password of a URL that may not even parse."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    auth, at, host = rest.rpartition("@")
    if not at or ":" not in auth:
        return url
    user = auth.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}"
