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
from typing import TYPE_CHECKING, Any

from sdk import LogMismatchError, Offset, OffsetExpiredError, hookimpl

from ._offsets import gtid_of, parts

if TYPE_CHECKING:
    from . import MySqlConnection

_GTID_EVENT = re.compile(r"GTID (\d+)-(\d+)-(\d+)")
_NO_PRIVILEGE = (1227, 1142, 1143)  # access denied: a check the user may not make is skipped
WAY_BACK = ("start a new sync with a new --checkpoint directory (a new snapshot), or point "
            "--source at the server the checkpoint follows")


@hookimpl
def server_identity(conn: MySqlConnection) -> dict[str, str]:
    """MySQL's ``server_uuid``; MariaDB's data directory's creation time, where this user may
    see the privilege table (else nothing)."""
    if not conn.mariadb:
        ((uuid,),) = conn.query("SELECT @@GLOBAL.server_uuid")
        return {"server_uuid": _text(uuid)}
    rows = conn.query("SELECT MIN(CREATE_TIME) FROM information_schema.TABLES WHERE "
                      "TABLE_SCHEMA = 'mysql' AND TABLE_NAME IN ('global_priv', 'user')")
    created = rows[0][0] if rows else None
    return {"datadir_created": str(created)} if created is not None else {}


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
