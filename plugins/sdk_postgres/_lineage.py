"""Which cluster and WAL an offset belongs to: ``server_identity`` and ``check_offset``.

A cluster keeps its ``system_identifier`` from ``initdb`` on, through base backups and
standbys; a promoted standby or a restore that ends recovery starts a new timeline, whose WAL
may hold other changes at the same LSNs. The database's OID tells a database dropped and
created again from the one captured, and the slot is what holds the WAL a sync reads: a
restored cluster has none (base backups leave slots out), and a slot made again starts at
the moment it was made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sdk import LogMismatchError, Offset, hookimpl

from ._offsets import parts
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
