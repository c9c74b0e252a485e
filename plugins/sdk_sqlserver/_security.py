"""Encryption of the pymssql connection (``?encryption=``), how it is protected
(``connection_security``), and which database and log a checkpoint belongs to
(``server_identity``, ``check_offset``).

pymssql hands ``encryption`` to FreeTDS (``off``, ``request``, ``require``) and has no option
for a trusted CA or a host name check: FreeTDS checks a server certificate only when its own
``freetds.conf`` names a ``ca file``, which pymssql does not set and the server cannot report.
So an encrypted connection is reported as not verified: protected from eavesdropping, not from
a man in the middle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sdk import ConfigurationError, ConnectionSecurity, LogMismatchError, OffsetExpiredError

from ._lsn import lsn_hex

Rows = Callable[[str, Sequence[Any]], list[tuple[Any, ...]]]

ENCRYPTION = ("off", "request", "require")
TDS_VERSIONS = ("7.0", "7.1", "7.2", "7.3", "7.4")
URL_OPTIONS = (
    ("encryption", "off, request or require: FreeTDS's TLS level (default: FreeTDS's, "
                   "request); the server certificate is never verified"),
)


def driver_options(options: Mapping[str, str]) -> tuple[str, str | None]:
    """The checked ``tds_version`` and ``encryption`` as ``pymssql.connect`` takes them
    (``encryption`` None unless the URL gives it: the driver's default)."""
    tds_version = options.get("tds_version", "7.4").strip()
    if tds_version not in TDS_VERSIONS:
        raise ConfigurationError(
            f"tds_version={options['tds_version']!r} must be one of {', '.join(TDS_VERSIONS)} "
            "(pymssql reads 8.0 as 7.1; TDS 8.0 strict encryption is not available through it)")
    if "encryption" not in options:
        return tds_version, None
    level = options["encryption"].strip().lower()
    if level not in ENCRYPTION:
        raise ConfigurationError(f"encryption={options['encryption']!r} must be one of "
                                 f"{', '.join(ENCRYPTION)}")
    return tds_version, level


CONNECTION = "queries and change tables"
CONNECTION_INFO = ("SELECT encrypt_option, net_transport, protocol_type "
                   "FROM sys.dm_exec_connections WHERE session_id = @@SPID")
UNVERIFIED = ("pymssql (FreeTDS) has no option to verify the server certificate: the "
              "connection is encrypted but a man in the middle is not ruled out "
              "(docs/dialects/sqlserver.md, 'Connecting securely')")


def security(rows: Rows, encryption: str | None) -> list[ConnectionSecurity]:
    """The one connection the dialect opens: encrypted as ``sys.dm_exec_connections`` says
    (or, when the login may not read it, as ``encryption=require`` promises); never verified."""
    try:
        found = rows(CONNECTION_INFO, ())
    except Exception:  # VIEW SERVER STATE missing: sdk check's preflight names it
        found = []
    if found:
        encrypted = str(found[0][0]).strip().upper() == "TRUE"
        seen = ""
    else:
        encrypted = encryption == "require"
        seen = " (sys.dm_exec_connections not readable: reported from the URL's encryption)"
    if encrypted:
        return [ConnectionSecurity(CONNECTION, encrypted=True, fix=UNVERIFIED + seen)]
    return [ConnectionSecurity(
        CONNECTION, encrypted=False,
        fix="add ?encryption=require (the server needs a certificate; it will still not be "
            "verified: docs/dialects/sqlserver.md, 'Connecting securely')" + seen)]


RECOVERY = ("SELECT CONVERT(char(36), database_guid), CONVERT(char(36), recovery_fork_guid) "
            "FROM sys.database_recovery_status WHERE database_id = DB_ID()")
BROKER = ("SELECT CONVERT(char(36), service_broker_guid) FROM sys.databases "
          "WHERE database_id = DB_ID()")
WAY_BACK = "start over with a new checkpoint directory (a new snapshot)"


def identity(rows: Rows) -> dict[str, str]:
    """The database's GUID and its recovery fork (a restore with recovery starts a new fork):
    GUIDs only, as a server or database name changes with a move. Without the right to read
    ``sys.database_recovery_status``, the Service Broker GUID (which every database shows)."""
    try:
        found = rows(RECOVERY, ())
    except Exception:
        found = []
    if found and found[0][0] is not None:
        database, fork = found[0]
        out = {"database_guid": str(database).strip().lower()}
        if fork is not None:
            out["recovery_fork_guid"] = str(fork).strip().lower()
        return out
    (broker,) = rows(BROKER, ())[0]
    return {"service_broker_guid": str(broker).strip().lower()}


def check(lsn: str, head: str, minimums: Sequence[tuple[str, bytes | None]]) -> None:
    """Refuse an offset LSN past the log's end ``head`` (another database, or a restore of an
    older backup), and one below every capture instance's minimum LSN (cleaned up)."""
    if lsn > head:
        raise LogMismatchError(
            f"the checkpoint resumes at LSN 0x{lsn} but the database's transaction log ends at "
            f"0x{head}: the database was restored from an older backup, or the URL names "
            f"another database or server; {WAY_BACK}")
    lows = [(name, lsn_hex(raw)) for name, raw in minimums
            if raw is not None and any(bytes(raw))]
    if lows and all(lsn < low for _, low in lows):
        name, low = min(lows, key=lambda item: item[1])
        raise OffsetExpiredError(
            f"the checkpoint resumes at LSN 0x{lsn} but every capture instance now starts "
            f"later (the oldest, {name}, at 0x{low}): the CDC cleanup job removed those "
            f"changes (retention); {WAY_BACK}, and keep changes longer with "
            "sys.sp_cdc_change_job @job_type = N'cleanup', @retention = <minutes>")
