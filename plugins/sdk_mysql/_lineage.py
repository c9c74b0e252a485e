"""Which server and binlog an offset belongs to: ``server_identity`` and ``check_offset``.

MySQL names itself by ``@@server_uuid``. MariaDB has no such id, so its identity is when its
data directory was made (the creation time of its privilege table, which stays the same
across restarts and upgrades within a major version): two servers set up apart differ there.
A binlog reset (``RESET MASTER``, a restored or rebuilt server) keeps the identity, so every
position is also checked against the binlog itself: its file must be listed, the position
must lie within the file and at the start of an event, and on MariaDB the transaction there
must come after the GTID position the offset recorded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sdk import LogMismatchError, Offset, OffsetExpiredError, hookimpl

from ._binlog import locate_mariadb_gtid
from ._offsets import MariadbGtidState, gtid_of, make_offset, parts

if TYPE_CHECKING:
    from . import MySqlConnection

_GTID_EVENT = re.compile(r"GTID (\d+)-(\d+)-(\d+)")
_NO_PRIVILEGE = (1227, 1142, 1143)  # access denied: a check the user may not make is skipped
WAY_BACK = ("start a new sync with a new --checkpoint directory (a new snapshot), or point "
            "--source at the server the checkpoint follows")


@hookimpl
def server_identity(conn: MySqlConnection) -> dict[str, str]:
    """MySQL's ``server_uuid``; MariaDB's data directory's creation time, where this user may
    see the privilege table, and its ``server_id`` (unique within a replication topology)."""
    if not conn.mariadb:
        ((uuid,),) = conn.query("SELECT @@GLOBAL.server_uuid")
        return {"server_uuid": _text(uuid)}
    rows = conn.query("SELECT MIN(CREATE_TIME), @@GLOBAL.server_id FROM information_schema."
                      "TABLES WHERE TABLE_SCHEMA = 'mysql' AND TABLE_NAME IN ('global_priv', "
                      "'user')")
    created, server_id = rows[0] if rows else (None, None)
    identity = {"server_id": str(server_id)} if server_id is not None else {}
    return {"datadir_created": str(created), **identity} if created is not None else identity


@hookimpl
def check_offset(conn: MySqlConnection, offset: Offset) -> None:
    """Refuse an offset whose binlog file the server does not list (purged, or reset), that
    lies past its file's end or inside an event, or (MariaDB) that sits before a transaction
    the GTID position it recorded already holds: a log begun again."""
    import pymysql

    file, pos, _ = parts(offset)
    listed = [(_text(r[0]), int(r[1])) for r in conn.query("SHOW BINARY LOGS")]
    sizes = dict(listed)
    if file not in sizes:
        refuse_unlisted(file, [name for name, _ in listed])
    if pos > sizes[file]:
        raise LogMismatchError(
            f"the checkpoint's binlog position {file}:{pos} lies past the end of that file "
            f"({sizes[file]} bytes): the binlog was reset or restored, or this is another "
            f"server; {WAY_BACK}")
    if pos == sizes[file]:
        return  # the end of a file: nothing written there yet
    try:
        rows = conn.query(f"SHOW BINLOG EVENTS IN '{_quoted(file)}' FROM {int(pos)} LIMIT 1")
    except pymysql.err.OperationalError as exc:
        if exc.args and exc.args[0] in _NO_PRIVILEGE:
            return
        raise LogMismatchError(
            f"the checkpoint's binlog position {file}:{pos} is not where an event starts "
            f"({exc.args[-1]}): the binlog was reset or restored, or this is another server; "
            f"{WAY_BACK}") from None
    gtid = gtid_of(offset)
    if conn.mariadb and gtid and rows:
        _check_gtid_order(file, pos, gtid, _text(rows[0][5]))


@hookimpl
def locate_offset(conn: MySqlConnection, offset: Offset, source: Mapping[str, str]
                  ) -> Offset | None:
    """The offset's place in this server's binlog, found by the MariaDB GTID position it
    carries: where a replica reading from that position would begin (see
    ``_binlog.locate_mariadb_gtid``). A server lacking transactions of that position (a
    replica promoted before it had them all) is refused, naming them, as is one with the
    ``server_id`` of the ``source`` (no replica shares its primary's): another server whose
    GTIDs merely look the same. None for an offset without a GTID position."""
    import pymysql

    n = parts(offset)[2]
    gtid = gtid_of(offset)
    if not conn.mariadb:
        raise LogMismatchError(
            "following a failover by GTID is implemented for MariaDB only (MySQL's GTID sets "
            f"are not followed along the binlog yet); {WAY_BACK}")
    if gtid is None:
        return None  # a split's watermark taken under writes: the engine places it
    ((server_id,),) = conn.query("SELECT @@GLOBAL.server_id")
    if source.get("server_id") == str(server_id):
        raise LogMismatchError(
            f"this server is not a replica of the one the checkpoint followed: both have "
            f"server_id {server_id}, which a replication topology never shares, and its "
            f"binlog is another history whatever its GTIDs; {WAY_BACK}")
    try:
        found_file, found_pos, first = locate_mariadb_gtid(conn.settings, gtid)
    except pymysql.err.OperationalError as exc:
        if exc.args and exc.args[0] == 1236:
            raise LogMismatchError(_lost(conn, gtid, str(exc.args[-1]), None)) from None
        raise
    ((now,),) = conn.query("SELECT @@GLOBAL.gtid_binlog_pos")
    missing = _missing(gtid, _text(now or ""), first)
    if missing:
        raise LogMismatchError(_lost(conn, gtid, "", missing))
    return make_offset(found_file, found_pos, n, gtid)


def _missing(recorded: str, now: str, first: str | None) -> list[str]:
    """The transactions after GTID position ``recorded`` a server at ``now`` lacks, by domain:
    those the checkpoint read (``now`` is behind ``recorded``), and those between ``recorded``
    and ``first``, the first transaction after it in the server's binlog (a binlog that
    begins later)."""
    have = MariadbGtidState(now).domains
    read = MariadbGtidState(recorded).domains
    missing = []
    for domain, gtid in read.items():
        held = _seq(have[domain]) if domain in have else 0
        if held < _seq(gtid):
            missing.append(_span(domain, held + 1, _seq(gtid)))
    if first is not None and not missing:
        domain = int(first.split("-", 1)[0])
        if domain in read and _seq(first) > _seq(read[domain]) + 1:
            missing.append(_span(domain, _seq(read[domain]) + 1, _seq(first) - 1))
    return missing


def _seq(gtid: str) -> int:
    """The sequence number of MariaDB GTID ``domain-server-seq``."""
    return int(gtid.rsplit("-", 1)[1])


def _span(domain: int, first: int, last: int) -> str:
    return f"{domain}-*-{first}" if first == last else f"{domain}-*-{first} to {domain}-*-{last}"


def _lost(conn: MySqlConnection, recorded: str, reason: str, missing: list[str] | None
          ) -> str:
    """The refusal of a server whose binlog cannot go on from GTID position ``recorded``:
    the transactions it lacks, and the ways back."""
    ((now,),) = conn.query("SELECT @@GLOBAL.gtid_binlog_pos")
    now = _text(now or "") or "nothing"
    if missing is None:
        missing = _missing(recorded, now, None)
    lacks = f"its binlog (at {now}) lacks {', '.join(missing)}" if missing else \
        f"its binlog (at {now}) does not hold those transactions"
    because = f" ({reason})" if reason else ""
    return (f"this server's binlog cannot go on from the checkpoint's GTID position "
            f"{recorded}: {lacks}{because}, which the sync read and applied. Apply them here "
            f"from the binlog of the server the checkpoint followed (mariadb-binlog "
            f"--start-position ...) and run again, or {WAY_BACK}")


def refuse_unlisted(file: str, listed: list[str]) -> None:
    """Raise for binlog ``file`` not among the ``listed`` ones: purged when it sorts before
    them, else a log that is not the one the offset came from."""
    base, _, number = file.rpartition(".")
    first = listed[0] if listed else None
    if first is not None and first.rpartition(".")[0] == base and \
            int(number) < int(first.rpartition(".")[2]):
        raise OffsetExpiredError(
            f"binlog {file} was purged (oldest kept: {first}): the changes since the saved "
            "offset are gone; take a new snapshot and keep binlogs longer "
            "(binlog_expire_logs_seconds)")
    kept = f"{first} to {listed[-1]}" if first is not None else "none"
    raise LogMismatchError(
        f"the checkpoint's binlog file {file} is not on the server (its binlogs: {kept}): "
        f"the binlog was reset (RESET MASTER) or restored, or this is another server; "
        f"{WAY_BACK}")


def _check_gtid_order(file: str, pos: int, recorded: str, info: str) -> None:
    """Raise when the transaction starting at ``file:pos`` (its GTID event's ``info``) is not
    later, in its domain, than the GTID position ``recorded`` there."""
    found = _GTID_EVENT.search(info)
    if found is None:
        return  # not a transaction's start (a rotation, a GTID list): nothing to compare
    domain, seq = int(found.group(1)), int(found.group(3))
    for entry in recorded.split(","):
        fields = entry.strip().split("-")
        if len(fields) == 3 and int(fields[0]) == domain and seq <= int(fields[2]):
            raise LogMismatchError(
                f"the transaction at the checkpoint's binlog position {file}:{pos} is GTID "
                f"{found.group(0)[5:]}, but the checkpoint was taken after {entry.strip()}: "
                f"the binlog was begun again (RESET MASTER, a restored backup) or this is "
                f"another server; {WAY_BACK}")


def _quoted(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
