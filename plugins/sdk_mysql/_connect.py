"""pymysql connections made cheaper where pymysql spends CPU it need not.

- TLS: pymysql builds a new default ``SSLContext`` for every connection when no TLS option is
  given (TLS "preferred"): loading the system's CA store costs ~40 ms of CPU, once per split
  task and per binlog read. The context it builds is the same each time, so it is built once
  here and reused; explicit TLS options still get their own context (``_tls``).
- TLS asked for is never given up: with an explicit ``ssl`` context the connection is refused
  before the credentials are sent when the server does not offer TLS (pymysql 1.1 went on in
  plaintext), and ``ssl_preferred`` is a context used only when the server offers TLS.
- DATETIME and TIMESTAMP text: pymysql parses each with a regular expression (~2.2 us a value,
  a fifth of a snapshot row's decoding); ``datetime.fromisoformat`` reads the same text in
  ~0.13 us.
- Character set: every connection is ``utf8mb4`` (pymysql sends ``SET NAMES`` after the login,
  over the server's default and an ``init_connect``), so a SELECT gives every column's text
  converted by the server, whatever its character set (latin1, cp1251, ucs2...) and the
  database's or server's default. The binlog carries the bytes in the column's own set, which
  ``_rows`` decodes as the server converts them (``_binlog._Charsets.table``).
"""

from __future__ import annotations

import datetime as dt
import functools
from typing import Any


@functools.cache
def _connection_class() -> type[Any]:
    import pymysql.connections
    from pymysql.constants import CLIENT

    class Connection(pymysql.connections.Connection):  # type: ignore[misc]
        """pymysql's connection, with the "preferred" TLS context made once per process (or
        given as ``ssl_preferred``), and explicit TLS refused rather than given up."""

        def __init__(self, *args: Any, ssl_preferred: Any = None, **kwargs: Any) -> None:
            self._sdk_preferred = ssl_preferred
            self._sdk_tls_required = False
            super().__init__(*args, **kwargs)

        def _create_ssl_ctx(self, sslp: Any) -> Any:
            if isinstance(sslp, dict) and not sslp:  # no TLS option: TLS when offered
                return self._sdk_preferred or _preferred_context(super()._create_ssl_ctx)
            self._sdk_tls_required = True  # TLS options given: TLS, or no connection
            return super()._create_ssl_ctx(sslp)

        def _request_authentication(self) -> None:
            offered = bool(self.server_capabilities & CLIENT.SSL)
            if self._sdk_tls_required and not offered:  # refused before the credentials go
                exc = pymysql.err.OperationalError(
                    2026, "TLS is required but the server does not offer it")
                exc.no_server_tls = True
                raise exc
            try:
                super()._request_authentication()
            except pymysql.err.MySQLError as exc:
                exc.server_offers_tls = offered  # for the message of a login refused
                raise

    return Connection


_PREFERRED: list[Any] = []


def _preferred_context(make: Any) -> Any:
    if not _PREFERRED:
        _PREFERRED.append(make({}))
    return _PREFERRED[0]


@functools.cache
def _conversions(utc_session: bool) -> dict[Any, Any]:
    """pymysql's conversions with DATETIME and TIMESTAMP text read by ``fromisoformat``. With
    ``utc_session`` (the dialect's own connections, whose session time zone is UTC) a TIMESTAMP
    becomes the aware UTC datetime the dialect yields, so a snapshot row's second pass only
    looks for zero dates (which stay the text pymysql gives)."""
    from pymysql.constants import FIELD_TYPE
    from pymysql.converters import conversions, convert_datetime

    def datetime_text(text: str) -> Any:
        try:
            return dt.datetime.fromisoformat(text)
        except ValueError:  # a zero date, which pymysql gives back as its text
            return convert_datetime(text)

    if not utc_session:
        return {**conversions, FIELD_TYPE.DATETIME: datetime_text,
                FIELD_TYPE.TIMESTAMP: datetime_text}

    def instant(text: str) -> Any:
        try:  # parsed aware: 0.17 us a value, where parsing then replace(tzinfo=) takes 0.94
            return dt.datetime.fromisoformat(text + "+00:00")
        except ValueError:  # pymysql's reading of it, a zero date as its text
            value = datetime_text(text)
        return value.replace(tzinfo=dt.UTC) if isinstance(value, dt.datetime) else value

    return {**conversions, FIELD_TYPE.DATETIME: datetime_text, FIELD_TYPE.TIMESTAMP: instant}


def open_connection(utc_session: bool = False, **kwargs: Any) -> Any:
    """``pymysql.connect(**kwargs)``, sharing the default TLS context and reading DATETIME and
    TIMESTAMP text faster (see :func:`_conversions`; ``utc_session`` only for a connection
    whose ``init_command`` sets the session time zone to UTC). Also the ``pymysql_wrapper`` of
    python-mysql-replication's reader."""
    kwargs.setdefault("conv", _conversions(utc_session))
    kwargs.setdefault("charset", "utf8mb4")  # pymysql's default too: said, not assumed
    return _connection_class()(**kwargs)
