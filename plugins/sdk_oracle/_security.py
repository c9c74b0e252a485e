"""How the Oracle connection is protected (``connection_security``), and which database and
log a checkpoint belongs to (``server_identity``, ``check_offset``)."""

from __future__ import annotations

import datetime as dt

from sdk import ConnectionSecurity, LogMismatchError, Offset, OffsetExpiredError

from ._miner import OLDEST_LOG, Session, parts

# --- connection_security ----------------------------------------------------------------------

PROTOCOL = "SELECT SYS_CONTEXT('USERENV', 'NETWORK_PROTOCOL') FROM DUAL"
BANNERS = ("SELECT NETWORK_SERVICE_BANNER FROM V$SESSION_CONNECT_INFO "
           "WHERE SID = SYS_CONTEXT('USERENV', 'SID')")
CONNECTION = "queries and LogMiner"


def security(session: Session) -> list[ConnectionSecurity]:
    """The one connection the dialect opens (queries and mining share it): TCPS from the
    server's ``NETWORK_PROTOCOL``, native network encryption from its service banners."""
    settings = session.tls
    (protocol,) = session.rows(PROTOCOL)[0]
    tls = str(protocol or "").strip().lower() == "tcps"
    try:
        banners = [str(b) for (b,) in session.rows(BANNERS) if b]
    except Exception:  # V$SESSION_CONNECT_INFO not granted: the banners are only a detail
        banners = []
    # "AES256 Encryption service adapter for Linux: ...": native network encryption is on
    nne = next((b.split()[0] for b in banners
                if "encryption service adapter" in b.lower()), None)
    if tls:
        host_checked = settings.dn_match
        fix = "" if host_checked else \
            "?ssl_server_dn_match=true checks the certificate's DN against the host name " \
            "(or ?ssl_server_cert_dn=DN)"
        return [ConnectionSecurity(
            CONNECTION, encrypted=True, verified=True, host_checked=host_checked,
            version=settings.version, cipher=nne,
            subject=settings.cert_dn if settings.dn_match else None, fix=fix)]
    fix = ("?protocol=tcps to the server's TCPS listener, with its CA in ?wallet_location=DIR "
           "(ewallet.pem) unless the system trust store holds it")
    if nne is not None:
        fix = "native network encryption does not authenticate the server: " + fix
    return [ConnectionSecurity(CONNECTION, encrypted=nne is not None, cipher=nne, fix=fix)]


# --- server_identity and check_offset -------------------------------------------------------

IDENTITY = "SELECT DBID, NAME, RESETLOGS_CHANGE#, RESETLOGS_TIME FROM V$DATABASE"
WAY_BACK = "start over with a new checkpoint directory (a new snapshot)"


def identity(session: Session) -> dict[str, str]:
    """The database's DBID and name, and its incarnation: an ``OPEN RESETLOGS`` (a restore or
    a flashback) starts a new one, whose SCNs repeat those of the old one's lost future."""
    session.use("root")
    dbid, name, resetlogs_scn, resetlogs_time = session.rows(IDENTITY)[0]
    when = resetlogs_time.strftime("%Y-%m-%d %H:%M:%S") \
        if isinstance(resetlogs_time, dt.datetime) else str(resetlogs_time)
    return {"dbid": str(int(dbid)), "db_name": str(name),
            "incarnation": f"RESETLOGS at SCN {int(resetlogs_scn)} on {when}"}


def check(session: Session, offset: Offset) -> None:
    """Refuse an offset past the database's current SCN (another database, or a restore to an
    earlier point), and one whose redo, from its mining restart SCN, is deleted."""
    scn, _, _, mine = parts(offset)
    current = session.current_scn()
    if scn - 1 > current:  # a watermark is CURRENT_SCN + 1 when taken
        raise LogMismatchError(
            f"the checkpoint resumes at SCN {scn} but the database's current SCN is {current}: "
            "it was restored or flashed back to an earlier point (OPEN RESETLOGS), or the URL "
            f"names another database; {WAY_BACK}")
    session.use("root")
    (oldest,) = session.rows(OLDEST_LOG)[0]
    if oldest is None or mine < int(oldest):
        raise OffsetExpiredError(
            f"the checkpoint resumes mining at SCN {mine} but the oldest redo still listed "
            f"starts at SCN {oldest}: the archived logs holding it were deleted (RMAN "
            f"retention); {WAY_BACK}, and keep archived logs longer than the longest pause "
            "of a sync")
