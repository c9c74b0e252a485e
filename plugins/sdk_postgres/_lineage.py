"""Which cluster and WAL an offset belongs to: ``server_identity`` and ``check_offset``.

A cluster keeps its ``system_identifier`` from ``initdb`` on, through base backups and
standbys; a promoted standby or a restore that ends recovery starts a new timeline, whose WAL
may hold other changes at the same LSNs. The database's OID tells a database dropped and
created again from the one captured, and the slot is what holds the WAL a sync reads: a
restored cluster has none (base backups leave slots out), and a slot made again starts at
the moment it was made.

A promoted physical standby keeps the system identifier and every LSN below where it was
promoted: a checkpoint's positions mean the same there (``locate_offset``), provided the slot
came along (a failover slot, PostgreSQL 17+) and the sync read nothing past the promotion.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from sdk import LogMismatchError, Offset, hookimpl

from ._offsets import lsn_int, lsn_text, parts
from ._stream import check_slot

if TYPE_CHECKING:
    from ._connection import PgConnection

WAY_BACK = ("start a new sync with a new --checkpoint directory (a new snapshot), or point "
            "--source at the server the checkpoint follows")


@hookimpl
def server_identity(conn: PgConnection) -> dict[str, str]:
    """The cluster's system identifier, its current timeline (the first field of the WAL
    file name at the head), the database's OID and the slot's name."""
    ((system, timeline, database),) = conn.query(
        "SELECT (SELECT system_identifier FROM pg_control_system())::text, "
        "('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int, "
        "(SELECT oid FROM pg_database WHERE datname = current_database())::text")
    return {"system_identifier": str(system), "timeline": str(timeline),
            "database_oid": str(database), "slot": conn.slot}


@hookimpl
def check_offset(conn: PgConnection, offset: Offset) -> None:
    """Refuse an offset the slot cannot serve: no slot (a restored cluster, another server,
    dropped), a slot lost or advanced past it (:func:`._stream.check_slot`)."""
    if not conn.query("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (conn.slot,)):
        raise LogMismatchError(
            f"replication slot {conn.slot!r} does not exist: it was dropped, the cluster was "
            f"restored from a backup (base backups leave slots out), or this is another "
            f"server; the changes since the checkpoint cannot be read; {WAY_BACK}")
    check_slot(conn, parts(offset)[0])


FAILOVER_SLOTS = (
    "PostgreSQL 17+ keeps a slot made with failover (this dialect makes it so; URL option "
    "failover_slot) in step on a standby with sync_replication_slots = on, "
    "hot_standby_feedback = on, primary_slot_name set and dbname in primary_conninfo, and "
    "synchronized_standby_slots on the primary naming the standby's slot")


@hookimpl
def locate_offset(conn: PgConnection, offset: Offset, source: Mapping[str, str]) -> Offset:
    """The same offset, on a promoted standby of the checkpoint's cluster (same system
    identifier, the LSNs below its promotion shared) that has the slot. Refused: another
    cluster, a standby not promoted, no slot (not synchronized before the failover), or a
    checkpoint that read WAL past where the standby was promoted (lost transactions)."""
    ((system, replay, recovery),) = conn.query(
        "SELECT (SELECT system_identifier FROM pg_control_system())::text, "
        "pg_last_wal_replay_lsn()::text, pg_is_in_recovery()")
    if source.get("system_identifier") not in (None, str(system)):
        raise LogMismatchError(
            f"this is another PostgreSQL cluster (system_identifier {system}, the "
            f"checkpoint's was {source.get('system_identifier')}): its WAL is another "
            f"history, not a standby promoted from the checkpoint's; {WAY_BACK}")
    if recovery:
        raise LogMismatchError(
            "this server is a standby, still in recovery: point --source at the primary (a "
            "URL naming several hosts finds it), or promote this one first")
    if not conn.query("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (conn.slot,)):
        raise LogMismatchError(
            f"replication slot {conn.slot!r} does not exist on this server, which took over "
            f"from the one the checkpoint followed: it was not kept in step with the old "
            f"primary's, so the changes since the checkpoint cannot be read here. "
            f"{FAILOVER_SLOTS}; and a slot that has not moved since writes went on (a sync "
            f"still in its first snapshot) stays temporary on the standby until the log "
            f"phase moves it (docs/dialects/postgres.md: make it ahead). Now: {WAY_BACK}")
    lsn = parts(offset)[0]
    if replay is not None and lsn > lsn_int(str(replay)):
        raise LogMismatchError(
            f"the checkpoint read the old primary's WAL up to {lsn_text(lsn)}, but this "
            f"server was promoted at {replay}: transactions committed between were lost in "
            f"the failover and may be in the target though not here (synchronized_standby_"
            f"slots on the primary keeps a sync from reading past its standby); {WAY_BACK}")
    return offset
