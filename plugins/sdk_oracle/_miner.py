"""LogMiner in SCN windows: add the redo logs covering a window, start LogMiner on it, read
``V$LOGMNR_CONTENTS`` for the captured tables, buffer each transaction by XID and emit it at its
COMMIT, in commit order.

Oracle 19c and later have no continuous mining, so the loop re-adds the logs for every window
(a log switch inside a window just means two files). Offsets are

- ``scn``: the commit SCN of the change's transaction (watermarks: the first SCN not yet
  committed);
- ``rba``: the redo address of the COMMIT record (``RS_ID``), fixed width so text order is
  address order; it orders transactions that commit at the same SCN (``""`` for watermarks,
  below every commit at that SCN);
- ``n``: the change's index in its transaction;
- ``mine``: where mining must restart to resume here: the first SCN of the oldest transaction
  still open at that point. It is resume data, not a position: it only breaks ties.

Everything here talks to a DB-API connection through :class:`Session`, so the same code runs on
a python-oracledb connection and on the recorded fake the tests use.
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sdk import (
    ChangeEvent,
    FatalSyncError,
    Heartbeat,
    Offset,
    OffsetExpiredError,
    TableSchema,
    TableTruncated,
)

from . import _ddl, _redo
from ._tls import TlsSettings
from ._types import NLS_SESSION, RedoValueError, from_redo

log = logging.getLogger(__name__)

NAME = "oracle"
OP_INSERT, OP_DELETE, OP_UPDATE, OP_DDL, OP_COMMIT, OP_ROLLBACK = 1, 2, 3, 5, 7, 36
DML_OPS = {OP_INSERT: "c", OP_DELETE: "d", OP_UPDATE: "u"}
FETCH_ROWS = 2000

Position = tuple[int, str, int, int]
"""``(scn, rba, n, mine)``: the offset fields in compare order."""


def make_offset(scn: int, rba: str = "", n: int = 0, mine: int | None = None) -> Offset:
    """An offset; ``mine`` defaults to ``scn`` (nothing open before it)."""
    return Offset.from_sorted(NAME, (("mine", scn if mine is None else mine), ("n", n),
                                     ("rba", rba), ("scn", scn)))


def parts(offset: Offset) -> Position:
    scn, rba, n, mine = offset["scn"], offset.get("rba", ""), offset.get("n", 0), \
        offset.get("mine")
    if mine is None:
        mine = scn
    assert isinstance(scn, int) and isinstance(rba, str) and isinstance(n, int) \
        and isinstance(mine, int), offset
    return scn, rba, n, mine


def compare(a: Offset, b: Offset) -> int:
    x, y = parts(a), parts(b)
    return (x > y) - (x < y)


def rba_text(rs_id: str | None, xid: str) -> str:
    """``' 0x000062.000001a4.0010 '`` -> ``'00000062.000001a4.0010'`` (sequence, block, byte
    offset, zero-padded so text order is address order). Without an RS_ID, the XID keeps the
    order total."""
    if rs_id:
        try:
            seq, block, byte = rs_id.strip().removeprefix("0x").split(".")
            return f"{int(seq, 16):08x}.{int(block, 16):08x}.{int(byte, 16):04x}"
        except ValueError:
            pass
    return f"~{xid}"


@dataclass
class Session:
    """A DB-API connection to Oracle and the dialect's settings for it.

    ``pdb`` set: the connection is a common user in ``CDB$ROOT``; mining runs in the root and
    filters ``SRC_CON_NAME``, table reads switch to the PDB."""

    raw: Any
    pdb: str | None = None
    flush_table: str | None = None
    window: int = 20_000
    min_window: int = 1_000
    max_window: int = 2_000_000
    target_rows: int = 50_000
    poll_seconds: float = 1.0
    db_utc_offset: dt.timedelta = dt.timedelta(0)
    snapshot_scn: int | None = None
    container: str | None = None
    flush_ok: bool = True
    tls: TlsSettings = field(default_factory=TlsSettings)
    """What the URL asked of TLS (for ``connection_security``)."""

    def rows(self, sql: str, args: Sequence[Any] | Mapping[str, Any] = ()
             ) -> list[tuple[Any, ...]]:
        cursor = self.raw.cursor()
        try:
            cursor.execute(sql, args)
            return [tuple(r) for r in cursor.fetchall()] if cursor.description else []
        finally:
            cursor.close()

    def run(self, sql: str, args: Sequence[Any] | Mapping[str, Any] = ()) -> None:
        cursor = self.raw.cursor()
        try:
            cursor.execute(sql, args)
        finally:
            cursor.close()

    def iterate(self, sql: str, args: Sequence[Any] | Mapping[str, Any] = ()
                ) -> Iterator[tuple[Any, ...]]:
        cursor = self.raw.cursor()
        try:
            cursor.arraysize = FETCH_ROWS
            cursor.prefetchrows = FETCH_ROWS
            cursor.execute(sql, args)
            while batch := cursor.fetchmany(FETCH_ROWS):
                yield from batch
        finally:
            cursor.close()

    def use(self, where: str) -> None:
        """Switch to ``"root"`` (mining) or ``"pdb"`` (tables); a no-op without ``pdb``."""
        if self.pdb is None:
            return
        target = "CDB$ROOT" if where == "root" else self.pdb
        if self.container != target:
            self.run(f'ALTER SESSION SET CONTAINER = "{target}"')
            self.run(NLS_SESSION)
            self.container = target

    def close(self) -> None:
        self.raw.close()

    # --- positions ------------------------------------------------------------------------

    def current_scn(self) -> int:
        return int(self.rows("SELECT CURRENT_SCN FROM V$DATABASE")[0][0])

    def watermark(self) -> Offset:
        """The first SCN not yet committed, with the oldest open transaction's start SCN as the
        mining restart point (read between two SCN reads, so a transaction that starts or
        commits meanwhile is covered either way)."""
        before = self.current_scn()
        oldest = self.rows("SELECT MIN(START_SCN) FROM V$TRANSACTION")[0][0]
        scn = self.current_scn()
        mine = before if oldest is None else min(before, int(oldest))
        return make_offset(scn + 1, mine=mine)

    def flush(self) -> None:
        """Make LGWR write the redo buffer, by committing a one-row update: redo up to now is
        then in the online log where LogMiner reads it (what Debezium's flush table does)."""
        if not self.flush_table or not self.flush_ok:
            return
        self.use("root")
        try:
            self.run(f"UPDATE {self.flush_table} SET SCN = (SELECT CURRENT_SCN FROM V$DATABASE)")
            self.raw.commit()
        except Exception as exc:  # a missing table: preflight reports it; mine without
            log.warning("flush table %s not usable (%s); mining without redo flushes",
                        self.flush_table, str(exc).splitlines()[0])
            self.flush_ok = False


# --- redo log files ----------------------------------------------------------------------------

ONLINE_LOGS = (
    "SELECT L.THREAD#, L.SEQUENCE#, L.FIRST_CHANGE#, L.NEXT_CHANGE#, MIN(F.MEMBER) "
    "FROM V$LOG L JOIN V$LOGFILE F ON F.GROUP# = L.GROUP# "
    "WHERE L.STATUS <> 'UNUSED' AND (F.STATUS IS NULL OR F.STATUS <> 'INVALID') "
    "GROUP BY L.THREAD#, L.SEQUENCE#, L.FIRST_CHANGE#, L.NEXT_CHANGE#")
ARCHIVED_LOGS = (
    "SELECT THREAD#, SEQUENCE#, FIRST_CHANGE#, NEXT_CHANGE#, NAME FROM V$ARCHIVED_LOG "
    "WHERE NAME IS NOT NULL AND STATUS = 'A' AND ARCHIVED = 'YES' AND STANDBY_DEST = 'NO' "
    "AND NEXT_CHANGE# > :lo AND DEST_ID IN (SELECT DEST_ID FROM V$ARCHIVE_DEST_STATUS "
    "WHERE STATUS = 'VALID' AND TYPE = 'LOCAL')")
OLDEST_LOG = (
    "SELECT MIN(FIRST_CHANGE#) FROM (SELECT FIRST_CHANGE# FROM V$LOG WHERE STATUS <> 'UNUSED' "
    "UNION ALL SELECT FIRST_CHANGE# FROM V$ARCHIVED_LOG WHERE NAME IS NOT NULL AND STATUS = 'A')")


@dataclass(frozen=True)
class LogFile:
    thread: int
    sequence: int
    first: int
    next: int | None
    name: str


def log_files(session: Session, lo: int, hi: int) -> list[str]:
    """The files holding redo SCNs ``lo..hi``, one per (thread, sequence), archived copies
    preferred (an online log is overwritten once archived). Raises
    :class:`OffsetExpiredError` when the redo for ``lo`` is gone and :class:`FatalSyncError`
    for a gap in the sequence."""
    found: dict[tuple[int, int], LogFile] = {}
    for thread, seq, first, nxt, name in session.rows(ONLINE_LOGS):
        found[(int(thread), int(seq))] = LogFile(int(thread), int(seq), int(first),
                                                 None if nxt is None else int(nxt), name)
    for thread, seq, first, nxt, name in session.rows(ARCHIVED_LOGS, {"lo": lo}):
        found[(int(thread), int(seq))] = LogFile(int(thread), int(seq), int(first),
                                                 None if nxt is None else int(nxt), name)
    chosen: list[LogFile] = []
    for thread in sorted({t for t, _ in found}):
        logs = sorted((f for f in found.values() if f.thread == thread),
                      key=lambda f: f.sequence)
        logs = [f for f in logs if f.next is None or f.next > lo]
        if not logs:
            continue
        if logs[0].first > lo:
            raise OffsetExpiredError(
                f"the redo for SCN {lo} is no longer available (the oldest log of thread "
                f"{thread} starts at SCN {logs[0].first}): the archived logs were deleted; "
                "take a new snapshot (startup.mode=initial)")
        for prev, cur in itertools.pairwise(logs):
            if cur.sequence != prev.sequence + 1:
                raise FatalSyncError(
                    f"redo log sequence {prev.sequence + 1} of thread {thread} is missing "
                    f"(between SCN {prev.next} and {cur.first}): restore it or take a new "
                    "snapshot")
        chosen.extend(f for f in logs if f.first <= hi)
    if not chosen:
        raise OffsetExpiredError(f"no redo log holds SCN {lo}: take a new snapshot")
    return [f.name for f in sorted(chosen, key=lambda f: (f.first, f.thread, f.sequence))]


def check_available(session: Session, scn: int) -> None:
    """Raise :class:`OffsetExpiredError` when mining cannot start at ``scn`` any more."""
    session.use("root")
    (oldest,) = session.rows(OLDEST_LOG)[0]
    if oldest is None or scn < int(oldest):
        raise OffsetExpiredError(
            f"the log no longer holds SCN {scn} (the oldest available redo starts at SCN "
            f"{oldest}): the archived logs were deleted; a new snapshot is needed")


ADD_FIRST = "BEGIN SYS.DBMS_LOGMNR.ADD_LOGFILE(LOGFILENAME => :name, " \
    "OPTIONS => SYS.DBMS_LOGMNR.NEW); END;"
ADD_MORE = "BEGIN SYS.DBMS_LOGMNR.ADD_LOGFILE(LOGFILENAME => :name, " \
    "OPTIONS => SYS.DBMS_LOGMNR.ADDFILE); END;"
START = "BEGIN SYS.DBMS_LOGMNR.START_LOGMNR(STARTSCN => :lo, ENDSCN => :hi, " \
    "OPTIONS => SYS.DBMS_LOGMNR.DICT_FROM_ONLINE_CATALOG + SYS.DBMS_LOGMNR.NO_ROWID_IN_STMT); " \
    "END;"
END = "BEGIN SYS.DBMS_LOGMNR.END_LOGMNR; END;"


def contents_query(tables: Sequence[TableSchema], pdb: str | None
                   ) -> tuple[str, dict[str, Any]]:
    """The ``V$LOGMNR_CONTENTS`` query of a window: DML of the captured tables, every COMMIT
    and ROLLBACK (a transaction's end is not tagged with its tables), and every DDL (a
    ``RENAME`` onto a captured name, or a ``DROP`` whose table LogMiner's dictionary no longer
    names, is tagged with another table or none; the statement's text tells)."""
    binds: dict[str, Any] = {}
    names = []
    for i, t in enumerate(tables):
        binds[f"t{i}"] = f'{t.table.schema}"."{t.table.name}'
        names.append(f":t{i}")
    sql = ("SELECT SCN, OPERATION_CODE, XID, CSF, ROLLBACK, SEG_OWNER, TABLE_NAME, ROW_ID, "
           "RS_ID, TIMESTAMP, SQL_REDO FROM V$LOGMNR_CONTENTS "
           "WHERE SCN >= :lo AND SCN <= :hi AND (OPERATION_CODE IN (5, 7, 36) OR "
           "(OPERATION_CODE IN (1, 2, 3) AND SEG_OWNER || '\".\"' || TABLE_NAME IN ("
           + (", ".join(names) or "NULL") + ")))")
    if pdb is not None:
        sql += " AND SRC_CON_NAME = :pdb"
        binds["pdb"] = pdb
    return sql, binds


# --- transactions ------------------------------------------------------------------------------


@dataclass
class Change:
    scn: int
    owner: str
    table: str
    row_id: str | None
    sql: str


@dataclass
class Txn:
    """A transaction's buffered changes to captured tables, from its first such change."""

    start: int
    changes: list[Change] = field(default_factory=list)


@dataclass
class Miner:
    """The state of one read: open transactions, half-joined CSF statements, the bounds."""

    session: Session
    tables: Mapping[tuple[str, str], TableSchema]
    start: Position
    end: Position | None
    open: dict[str, Txn] = field(default_factory=dict)
    pending: dict[str, list[str]] = field(default_factory=dict)

    def oldest_open(self, default: int) -> int:
        return min((t.start for t in self.open.values()), default=default)

    def window(self, lo: int, hi: int) -> Iterator[ChangeEvent | TableTruncated]:
        """Mine SCNs ``lo..hi`` and yield the changes of the transactions that commit there."""
        s = self.session
        s.use("root")
        files = log_files(s, lo, hi)
        for i, name in enumerate(files):
            s.run(ADD_FIRST if i == 0 else ADD_MORE, {"name": name})
        s.run(START, {"lo": lo, "hi": hi})
        sql, binds = contents_query(list(self.tables.values()), s.pdb)
        count = 0
        try:
            for row in s.iterate(sql, {**binds, "lo": lo, "hi": hi}):
                count += 1
                yield from self.row(*row)
        finally:
            try:
                s.run(END)
            except Exception as exc:  # ORA-01307: no LogMiner session is active
                if "ORA-01307" not in str(exc):
                    raise
        if count > s.target_rows:
            s.window = max(s.min_window, s.window // 2)
        elif count < s.target_rows // 10:
            s.window = min(s.max_window, s.window * 2)

    def row(self, scn: Any, op: Any, xid_raw: Any, csf: Any, rollback: Any, owner: str | None,
            table: str | None, row_id: str | None, rs_id: str | None, stamp: Any,
            sql: str | None) -> Iterator[ChangeEvent | TableTruncated]:
        scn, op = int(scn), int(op)
        xid = xid_raw.hex().upper() if isinstance(xid_raw, (bytes, bytearray)) \
            else str(xid_raw)
        if op == OP_DDL:
            pieces = self.pending.setdefault(xid, [])
            pieces.append(sql or "")
            if not int(csf or 0):  # else SQL_REDO continues in the next row
                yield from self._ddl(scn, owner, table, "".join(self.pending.pop(xid)),
                                     rba_text(rs_id, xid))
        elif op in DML_OPS:
            pieces = self.pending.setdefault(xid, [])
            pieces.append(sql or "")
            txn = self.open.get(xid)
            if txn is None:
                txn = self.open[xid] = Txn(scn)
            if int(csf or 0):
                return  # SQL_REDO continues in the next row
            text = "".join(self.pending.pop(xid))
            if int(rollback or 0):
                self._undo(txn, row_id)
            else:
                txn.changes.append(Change(scn, owner or "", table or "", row_id, text))
        elif op == OP_COMMIT:
            txn = self.open.pop(xid, None)
            self.pending.pop(xid, None)
            if txn is not None and txn.changes:
                yield from self._commit(txn, scn, rba_text(rs_id, xid), stamp)
        elif op == OP_ROLLBACK:
            self.open.pop(xid, None)
            self.pending.pop(xid, None)

    @staticmethod
    def _undo(txn: Txn, row_id: str | None) -> None:
        """A ``ROLLBACK=1`` row undoes the transaction's latest change to the same row (a
        rollback to a savepoint, or the undo records of a whole rollback)."""
        for i in range(len(txn.changes) - 1, -1, -1):
            if txn.changes[i].row_id == row_id:
                del txn.changes[i]
                return

    def _ddl(self, scn: int, owner: str | None, table: str | None, sql: str, rba: str
             ) -> Iterator[TableTruncated]:
        """A DDL statement at ``scn`` (its redo address ``rba``): a :class:`TableTruncated`
        per captured table it empties or replaces (:mod:`._ddl`), placed like a transaction
        committing there (DDL commits on its own); a warning for other DDL of a captured
        table."""
        position = (scn, rba, 0)
        if position < self.start[:3] or (self.end is not None and position >= self.end[:3]):
            return
        hit = _ddl.emptied(sql, owner)
        tagged = (owner, table) if owner and table else None
        if hit is None:
            if tagged in self.tables:
                log.warning("DDL on captured table %s.%s at SCN %s: %s", owner, table, scn,
                            sql[:200])
            return
        names = [*hit.tables, *([tagged] if tagged is not None else [])]
        named = [t for t in self.tables if t in names or t[0] in hit.users]
        offset = make_offset(scn, rba, 0, self.oldest_open(scn))
        for key in named:
            yield TableTruncated(self.tables[key].table, offset, hit.statement, hit.dropped)

    def _commit(self, txn: Txn, scn: int, rba: str, stamp: Any) -> Iterator[ChangeEvent]:
        mine = min(txn.start, self.oldest_open(txn.start))
        commit_ts = None
        if isinstance(stamp, dt.datetime):
            utc = (stamp - self.session.db_utc_offset).replace(tzinfo=dt.UTC)
            commit_ts = int(utc.timestamp()) * 1_000_000 + utc.microsecond
        for n, change in enumerate(txn.changes):
            position = (scn, rba, n, mine)
            if position[:3] < self.start[:3]:
                continue
            if self.end is not None and position[:3] >= self.end[:3]:
                return
            schema = self.tables.get((change.owner, change.table))
            if schema is None:
                continue
            yield event(schema, change.sql, make_offset(scn, rba, n, mine), commit_ts)


def event(table: TableSchema, sql: str, offset: Offset, commit_ts: int | None) -> ChangeEvent:
    """A change event from one ``SQL_REDO`` statement of ``table``."""
    try:
        redo = _redo.parse(sql)
        unknown = sorted((set(redo.new) | set(redo.old)) - set(table.column_names))
        if unknown:
            raise FatalSyncError(
                f"a change of {table.table} at {offset} has column(s) {unknown} the captured "
                "schema does not know (DDL since the snapshot?): take a new snapshot of the "
                "table")
        if redo.op == "c":
            after = tuple(from_redo(c, redo.new.get(c.name)) for c in table.columns)
            return ChangeEvent(table.table, "c", table.key_of(after), after, offset,
                               commit_ts=commit_ts)
        old = {c.name: from_redo(c, redo.old[c.name]) for c in table.columns
               if c.name in redo.old}
        before = tuple(old[c.name] for c in table.columns) if len(old) == len(
            table.columns) else None
        missing_key = [k for k in table.key if k not in old]
        if missing_key:
            raise FatalSyncError(
                f"a {'delete' if redo.op == 'd' else 'update'} of {table.table} at {offset} "
                f"does not log key column(s) {missing_key}: run ALTER TABLE "
                f'"{table.table.schema}"."{table.table.name}" ADD SUPPLEMENTAL LOG DATA (ALL) '
                "COLUMNS and take a new snapshot")
        old_key = tuple(old[k] for k in table.key)
        if redo.op == "d":
            return ChangeEvent(table.table, "d", old_key, None, offset, before,
                               commit_ts=commit_ts)
        image = {**old, **{c.name: from_redo(c, redo.new[c.name]) for c in table.columns
                           if c.name in redo.new}}
        absent = [c.name for c in table.columns if c.name not in image]
        if absent:
            raise FatalSyncError(
                f"an update of {table.table} at {offset} does not log column(s) {absent}: "
                "the after image would be incomplete. Run ALTER TABLE "
                f'"{table.table.schema}"."{table.table.name}" ADD SUPPLEMENTAL LOG DATA (ALL) '
                "COLUMNS and take a new snapshot (LOB columns are never logged)")
        after = tuple(image[c.name] for c in table.columns)
        key = table.key_of(after)
        return ChangeEvent(table.table, "u", key, after, offset, before,
                           old_key if old_key != key else None, commit_ts)
    except (_redo.RedoSyntaxError, RedoValueError) as exc:
        raise FatalSyncError(f"cannot read a change of {table.table} at {offset}: {exc}") \
            from None


def read(session: Session, tables: Sequence[TableSchema], start: Offset, end: Offset | None
         ) -> Iterator[ChangeEvent | Heartbeat | TableTruncated]:
    """``stream_log``: the committed changes with ``start <= offset < end``; with ``end``
    None, forever, with a heartbeat after each window and while idle."""
    begin = parts(start)
    stop = parts(end) if end is not None else None
    miner = Miner(session, {(t.table.schema, t.table.name): t for t in tables}, begin, stop)
    lo = begin[3]
    check_available(session, lo)
    while True:
        if stop is not None:
            # commits below ``end``: at SCNs below end.scn, or at it for an event offset
            upper = stop[0] if (stop[1], stop[2]) > ("", 0) else stop[0] - 1
        else:
            upper = session.current_scn()
        if lo <= upper:
            session.flush()
        mined = lo
        while lo <= upper:
            hi = min(lo + session.window - 1, upper)
            yield from miner.window(lo, hi)
            lo = hi + 1
            if stop is None and lo > begin[0]:
                yield Heartbeat(make_offset(lo, mine=miner.oldest_open(lo)))
        if stop is not None:
            return
        if lo == mined:  # nothing new: idle
            if lo >= begin[0]:
                yield Heartbeat(make_offset(lo, mine=miner.oldest_open(lo)))
            time.sleep(session.poll_seconds)
