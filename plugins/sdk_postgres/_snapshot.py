"""The exported snapshot: the consistent view that ``begin_snapshot`` shares between
connections.

``begin_snapshot(conn, None)`` opens a replication connection and creates a *temporary*
logical slot with ``(SNAPSHOT 'export')``. The server returns the slot's consistent point and
the name of a snapshot that sees exactly the transactions whose commit record lies below that
point: logical decoding skips a transaction when its commit record starts before the
consistent point (``SnapBuildXactNeedsSkip``), and the dialect's offsets are the commit
record's LSN, so ``(consistent point, 0)`` splits the log exactly where the snapshot does.
The changes from that offset on are then read from the sync's own slot, which must already
exist at or below the consistent point (it is checked; otherwise the view is refused and the
engine falls back to watermarks).

The temporary slot is only a vehicle to export a snapshot: a slot can export one only when it
is created, so the sync's existing slot cannot. Ownership: the connection that created the
view owns the exporting connection (``PgConnection.exporter``); the snapshot stays importable
only while that connection is open and idle, so other connections may join with the view's
token until the owner calls ``end_snapshot`` (which closes it and drops the temporary slot).
A token is ``"<consistent point>@<snapshot name>"``.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from dataclasses import dataclass
from typing import Any

from sdk import ConfigurationError, SnapshotView

from . import _tls
from ._connection import PgConnection
from ._offsets import lsn_int, lsn_text, make_offset

EXPORT_SQL = "CREATE_REPLICATION_SLOT {slot} TEMPORARY LOGICAL pgoutput (SNAPSHOT 'export')"
EXPORT_SQL_BEFORE_15 = "CREATE_REPLICATION_SLOT {slot} TEMPORARY LOGICAL pgoutput EXPORT_SNAPSHOT"
"""PostgreSQL 10-14 know only this unparenthesised form (15 added the one above)."""


@dataclass
class Exporter:
    """The idle replication connection holding an exported snapshot, and its temporary slot."""

    raw: Any
    slot: str

    def close(self) -> None:
        """Drop the temporary slot, then disconnect. The server would drop it by itself when
        the session ends, but only after the client has gone; dropping it first means no
        slot is left pinning WAL once ``end_snapshot`` returns."""
        import psycopg

        try:
            if not self.raw.closed:
                with contextlib.suppress(psycopg.Error):
                    self.raw.execute(f"DROP_REPLICATION_SLOT {self.slot}")
        finally:
            self.raw.close()


def _export(conn: PgConnection) -> tuple[Exporter, int, str] | None:
    """Open a replication connection and export a snapshot from a new temporary slot; return
    (the connection, the consistent point, the snapshot name), or None when the slot could not
    be created within ``wait_seconds``.

    Creating a logical slot waits until every transaction holding an xid when it started has
    ended; ``statement_timeout`` does not apply to replication commands, so a timer cancels a
    creation that waits too long (the engine then uses watermarks, whose own wait names the
    sessions in the way)."""
    import threading

    import psycopg

    args = dict(conn.connect_args, replication="database", autocommit=True)  # TLS too
    args.pop("options", None)
    try:
        rep = psycopg.connect(**args)
    except psycopg.OperationalError as exc:
        tls = _tls.failure(args, str(exc))  # a pg_hba rule of its own may ask more of TLS
        if tls is None:
            raise
        raise ConfigurationError(
            f"cannot open the replication connection of an exported snapshot to "
            f"postgresql://{args.get('user') or ''}@{args.get('host')}:{args.get('port')}/"
            f"{args.get('dbname') or ''}: {tls}") from None
    slot = f"sdk_snap_{os.getpid()}_{uuid.uuid4().hex[:12]}"
    timer = threading.Timer(conn.wait_seconds, rep.cancel_safe)
    timer.start()
    try:
        command = EXPORT_SQL if rep.info.server_version >= 150000 else EXPORT_SQL_BEFORE_15
        row = rep.execute(command.format(slot=slot)).fetchone()
    except psycopg.errors.QueryCanceled:
        rep.close()
        return None
    except BaseException:
        rep.close()
        raise
    finally:
        timer.cancel()
    assert row is not None
    _, point, name, _ = row
    return Exporter(rep, slot), lsn_int(point), name


def _import(conn: PgConnection, name: str) -> bool:
    """Start a REPEATABLE READ transaction on ``conn`` in the exported snapshot ``name``;
    False (and no transaction left open) when the snapshot no longer exists."""
    import psycopg
    from psycopg import sql

    conn.raw.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
    try:
        conn.raw.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(name)))
    except (psycopg.errors.InvalidParameterValue,  # malformed or gone (PostgreSQL 15)
            psycopg.errors.UndefinedObject,  # gone (PostgreSQL 18)
            psycopg.errors.ObjectNotInPrerequisiteState):
        conn.raw.execute("ROLLBACK")
        return False
    conn.in_view = True
    return True


def _slot_serves(conn: PgConnection, lsn: int) -> bool:
    """Whether the sync's slot can still decode from ``lsn``, or there is none: a read that
    follows no log (a batch read; a stream makes its slot before its first view, and one
    dropped under it is found when the stream reads it)."""
    rows = conn.query("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                      "WHERE slot_name = %s", (conn.slot,))
    return not rows or (rows[0][0] is not None and lsn_int(rows[0][0]) <= lsn)


def begin(conn: PgConnection, token: str | None) -> SnapshotView | None:
    """Read in one exported snapshot: a new one (``token`` None) or the one named by
    ``token``; None when the token's snapshot is gone (its owner ended it), when the sync's
    slot is missing or past the view, or when no slot could be created in time."""
    if conn.in_view or conn.exporter is not None:
        end(conn)
    if token is not None:
        point, sep, name = token.partition("@")
        try:
            lsn = lsn_int(point)
        except ValueError:
            return None
        if not sep or not name or not _import(conn, name):
            return None
        return SnapshotView(make_offset(lsn), token)
    exported = _export(conn)
    if exported is None:
        return None
    rep, lsn, name = exported
    try:
        if not _slot_serves(conn, lsn) or not _import(conn, name):
            rep.close()
            return None
    except BaseException:
        rep.close()
        raise
    conn.exporter = rep
    return SnapshotView(make_offset(lsn), f"{lsn_text(lsn)}@{name}")


def end(conn: PgConnection) -> None:
    """End this connection's view; if it created the view, close the exporting connection
    too (its temporary slot goes with it, and tokens of the view stop being valid)."""
    try:
        if conn.in_view:
            conn.in_view = False
            conn.raw.execute("ROLLBACK")
    finally:
        if conn.exporter is not None:
            rep, conn.exporter = conn.exporter, None
            rep.close()
