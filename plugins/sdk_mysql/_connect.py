"""pymysql connections that share one TLS context per process.

pymysql builds a new default ``SSLContext`` for every connection when no TLS option is given
(TLS "preferred"): loading the system's CA store costs ~40 ms of CPU, once per split task and
per binlog read. The context it builds is the same each time, so it is built once here and
reused; explicit TLS options still get their own context, as pymysql makes it.
"""

from __future__ import annotations

import functools
from typing import Any


@functools.cache
def _connection_class() -> type[Any]:
    import pymysql.connections

    class Connection(pymysql.connections.Connection):  # type: ignore[misc]
        """pymysql's connection, with the "preferred" TLS context made once per process."""

        def _create_ssl_ctx(self, sslp: Any) -> Any:
            if isinstance(sslp, dict) and not sslp:
                return _preferred_context(super()._create_ssl_ctx)
            return super()._create_ssl_ctx(sslp)

    return Connection


_PREFERRED: list[Any] = []


def _preferred_context(make: Any) -> Any:
    if not _PREFERRED:
        _PREFERRED.append(make({}))
    return _PREFERRED[0]


def open_connection(**kwargs: Any) -> Any:
    """``pymysql.connect(**kwargs)``, sharing the default TLS context (also the
    ``pymysql_wrapper`` of python-mysql-replication's reader)."""
    return _connection_class()(**kwargs)
