"""The Oracle dialect's mining loop against a fake connection that plays LogMiner.

No Oracle server runs here, so :class:`FakeOracle` serves recorded redo the way Oracle would:
``V$LOG``/``V$LOGFILE``/``V$ARCHIVED_LOG`` rows, ``DBMS_LOGMNR.ADD_LOGFILE`` /
``START_LOGMNR`` / ``END_LOGMNR`` with Oracle's errors (ORA-01291 for a window the added files
do not cover, ORA-01307 for no session), and ``V$LOGMNR_CONTENTS`` rows only from the files
added, inside the started SCN range, in the columns the query selects. The dialect's code runs
unchanged on it, as on a python-oracledb connection.
"""

from __future__ import annotations

import datetime as dt
import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pytest

import sdk_oracle
from sdk import (
    ChangeEvent,
    FatalSyncError,
    Heartbeat,
    Offset,
    OffsetExpiredError,
    SnapshotSplit,
    TableId,
    TableSchema,
    TableTruncated,
)
from sdk_oracle._miner import Session, make_offset
from sdk_oracle._types import logical_column

MAX_SCN = 18446744073709551615  # V$LOG.NEXT_CHANGE# of the CURRENT log


class OracleError(Exception):
    """What python-oracledb raises (``oracledb.DatabaseError``): the message starts with the
    ORA code."""


@dataclass
class Record:
    """One V$LOGMNR_CONTENTS row."""

    SCN: int
    OPERATION_CODE: int
    XID: bytes
    SQL_REDO: str
    SEG_OWNER: str | None = None
    TABLE_NAME: str | None = None
    ROW_ID: str | None = None
    CSF: int = 0
    ROLLBACK: int = 0
    RS_ID: str = ""
    TIMESTAMP: dt.datetime = dt.datetime(2024, 5, 1, 12, 0, 0)
    SRC_CON_NAME: str = "PDB1"


@dataclass
class FakeOracle:
    """A DB-API connection serving recorded LogMiner data (see the module docstring)."""

    records: list[Record]
    online: list[tuple[int, int, int, int | None, str, str]]
    """thread, sequence, first, next SCN, status, member"""
    archived: list[tuple[int, int, int, int, str]]  # thread, seq, first, next, name
    current_scn: int
    open_starts: list[int] = field(default_factory=list)
    tables: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict)
    on_current_scn: Callable[[FakeOracle], None] | None = None
    added: list[str] = field(default_factory=list)
    window: tuple[int, int] | None = None
    log: list[str] = field(default_factory=list)
    windows: list[tuple[int, int, tuple[str, ...]]] = field(default_factory=list)
    flushes: int = 0
    outputtypehandler: Any = None
    container: str = "PDB1"
    """The container the session is in; V$LOGMNR_CONTENTS queried from a PDB returns only
    that PDB's redo (the 19c reference says so)."""

    def cursor(self) -> FakeCursor:
        return FakeCursor(self)

    def commit(self) -> None:
        self.log.append("COMMIT")

    def rollback(self) -> None:
        self.log.append("ROLLBACK")

    def close(self) -> None:
        pass

    def files(self) -> dict[str, tuple[int, int | None]]:
        out: dict[str, tuple[int, int | None]] = {}
        for _, _, first, nxt, status, member in self.online:
            if status != "UNUSED":
                out[member] = (first, None if nxt in (None, MAX_SCN) else nxt)
        for _, _, first, nxt, name in self.archived:
            out[name] = (first, nxt)
        return out

    def execute(self, sql: str, args: Any) -> tuple[list[str] | None, list[tuple[Any, ...]]]:
        self.log.append(sql)
        binds = args if isinstance(args, dict) else {}
        if sql == "SELECT CURRENT_SCN FROM V$DATABASE":
            if self.on_current_scn is not None:
                self.on_current_scn(self)
            return ["CURRENT_SCN"], [(self.current_scn,)]
        if sql == "SELECT MIN(START_SCN) FROM V$TRANSACTION":
            return ["MIN(START_SCN)"], [(min(self.open_starts, default=None),)]
        if "FROM V$LOG L JOIN V$LOGFILE F" in sql:
            return ["THREAD#", "SEQUENCE#", "FIRST_CHANGE#", "NEXT_CHANGE#", "MIN(F.MEMBER)"], \
                [(t, s, f, n, m) for t, s, f, n, st, m in self.online if st != "UNUSED"]
        if sql.startswith("SELECT THREAD#, SEQUENCE#, FIRST_CHANGE#, NEXT_CHANGE#, NAME FROM "
                          "V$ARCHIVED_LOG"):
            return ["THREAD#", "SEQUENCE#", "FIRST_CHANGE#", "NEXT_CHANGE#", "NAME"], \
                [a for a in self.archived if a[3] > binds["lo"]]
        if sql.startswith("SELECT MIN(FIRST_CHANGE#)"):
            firsts = [f for f, _ in self.files().values()]
            return ["MIN(FIRST_CHANGE#)"], [(min(firsts, default=None),)]
        if "DBMS_LOGMNR.ADD_LOGFILE" in sql:
            name = binds["name"]
            if name not in self.files():
                raise OracleError(f"ORA-01284: file {name} cannot be opened")
            if "DBMS_LOGMNR.NEW" in sql:
                self.added = []
            elif name in self.added:
                raise OracleError(f"ORA-01289: cannot add duplicate logfile {name}")
            self.added.append(name)
            return None, []
        if "DBMS_LOGMNR.START_LOGMNR" in sql:
            self._start(binds["lo"], binds["hi"])
            return None, []
        if "DBMS_LOGMNR.END_LOGMNR" in sql:
            if self.window is None:
                raise OracleError("ORA-01307: no LogMiner session is currently active")
            self.window, self.added = None, []
            return None, []
        if "FROM V$LOGMNR_CONTENTS" in sql:
            return self._contents(sql, binds)
        if sql.startswith("UPDATE SDK_LOGMNR_FLUSH"):
            self.flushes += 1
            return None, []
        if sql.startswith("ALTER SESSION SET CONTAINER"):
            self.container = sql.split("=")[1].strip().strip('"')
            return None, []
        if sql.startswith("ALTER SESSION"):
            return None, []
        match = re.match(r'SELECT (.*) FROM "(\w+)"\."(\w+)"(?: AS OF SCN (\d+))? WHERE', sql)
        if match is not None:
            return [c.strip() for c in match.group(1).split(",")], \
                self.tables[f"{match.group(2)}.{match.group(3)}@{match.group(4)}"]
        raise AssertionError(f"the fake does not know this statement: {sql}")

    def _start(self, lo: int, hi: int) -> None:
        """ORA-01291 unless the added files cover ``lo..hi`` without a gap."""
        ranges = sorted(self.files()[name] for name in self.added)
        covered = ranges[0][0] <= lo if ranges else False
        for (_, nxt), (first, _) in itertools.pairwise(ranges):
            covered = covered and nxt == first
        end = ranges[-1][1] if ranges else None
        if not covered or (end is not None and end <= hi):
            raise OracleError(f"ORA-01291: missing log file for SCN range {lo}..{hi}")
        self.window = (lo, hi)
        self.windows.append((lo, hi, tuple(self.added)))

    def _contents(self, sql: str, binds: dict[str, Any]
                  ) -> tuple[list[str], list[tuple[Any, ...]]]:
        if self.window is None:
            raise OracleError("ORA-01306: dbms_logmnr.start_logmnr() must be invoked before "
                              "selecting from v$logmnr_contents")
        columns = [c.strip() for c in sql[len("SELECT "):sql.index(" FROM ")].split(",")]
        tables = {v for k, v in binds.items() if re.fullmatch(r"t\d+", k)}
        files = [self.files()[n] for n in self.added]
        out = []
        for r in sorted(self.records, key=lambda r: r.SCN):
            if not (self.window[0] <= r.SCN <= self.window[1]
                    and binds["lo"] <= r.SCN <= binds["hi"]):
                continue
            if not any(f <= r.SCN and (n is None or n > r.SCN) for f, n in files):
                continue
            if r.OPERATION_CODE not in (5, 7, 36) and not (
                    r.OPERATION_CODE in (1, 2, 3)
                    and f'{r.SEG_OWNER}"."{r.TABLE_NAME}' in tables):
                continue
            if "pdb" in binds and binds["pdb"] != r.SRC_CON_NAME:
                continue
            if self.container != "CDB$ROOT" and self.container != r.SRC_CON_NAME:
                continue
            out.append(tuple(getattr(r, c) for c in columns))
        return columns, out


@dataclass
class FakeCursor:
    conn: FakeOracle
    arraysize: int = 100
    prefetchrows: int = 2
    outputtypehandler: Any = None
    description: list[tuple[str]] | None = None
    _rows: list[tuple[Any, ...]] = field(default_factory=list)

    def execute(self, sql: str, args: Any = ()) -> None:
        columns, self._rows = self.conn.execute(sql, args)
        self.description = None if columns is None else [(c,) for c in columns]

    def fetchall(self) -> list[tuple[Any, ...]]:
        rows, self._rows = self._rows, []
        return rows

    def fetchmany(self, size: int) -> list[tuple[Any, ...]]:
        rows, self._rows = self._rows[:size], self._rows[size:]
        return rows

    def close(self) -> None:
        pass


# --- the recorded redo ---------------------------------------------------------------------------


def xid(n: int) -> bytes:
    return bytes([n, 0, 0x1B, 0, 0x12, 0x34, 0, 0])


def rs(seq: int, block: int) -> str:
    return f" 0x{seq:06x}.{block:08x}.0010 "


def ins(scn: int, x: int, key: int, name: str, price: str | None = "1.5",
        table: str = "ORDERS", rowid: str | None = None, pdb: str = "PDB1") -> Record:
    value = "NULL" if price is None else f"'{price}'"
    literal = name.replace("'", "''")
    return Record(scn, 1, xid(x), f'insert into "SHOP"."{table}"("ID","NAME","PRICE") values '
                  f"('{key}','{literal}',{value});", "SHOP", table,
                  rowid or f"AAAR3sAAEAAAACXAA{key}", RS_ID=rs(scn // 100, scn),
                  SRC_CON_NAME=pdb)


def upd(scn: int, x: int, key: int, old_name: str, new_name: str, price: str = "1.5"
        ) -> Record:
    return Record(scn, 3, xid(x), f'update "SHOP"."ORDERS" set "NAME" = \'{new_name}\' where '
                  f'"ID" = \'{key}\' and "NAME" = \'{old_name}\' and "PRICE" = \'{price}\';',
                  "SHOP", "ORDERS", f"AAAR3sAAEAAAACXAA{key}", RS_ID=rs(scn // 100, scn))


def dele(scn: int, x: int, key: int, name: str, price: str | None = "1.5", rollback: int = 0,
         rowid: str | None = None) -> Record:
    where = "IS NULL" if price is None else f"= '{price}'"
    return Record(scn, 2, xid(x), f'delete from "SHOP"."ORDERS" where "ID" = \'{key}\' and '
                  f'"NAME" = \'{name}\' and "PRICE" {where};', "SHOP", "ORDERS",
                  rowid or f"AAAR3sAAEAAAACXAA{key}", ROLLBACK=rollback,
                  RS_ID=rs(scn // 100, scn))


def commit(scn: int, x: int, block: int | None = None) -> Record:
    return Record(scn, 7, xid(x), "commit;", RS_ID=rs(scn // 100, block or scn),
                  TIMESTAMP=dt.datetime(2024, 5, 1, 12, 0, scn % 60))


def rollback(scn: int, x: int) -> Record:
    return Record(scn, 36, xid(x), "rollback;", RS_ID=rs(scn // 100, scn))


LONG_NAME = "z'" * 2500  # 5000 characters: SQL_REDO spans several CSF rows


def csf_rows(scn: int, x: int, key: int) -> list[Record]:
    whole = ins(scn, x, key, LONG_NAME)
    text = whole.SQL_REDO
    pieces = [text[i:i + 4000] for i in range(0, len(text), 4000)]
    return [Record(scn, 1, whole.XID, piece, "SHOP", "ORDERS", whole.ROW_ID,
                   CSF=1 if i < len(pieces) - 1 else 0, RS_ID=whole.RS_ID)
            for i, piece in enumerate(pieces)]


def recorded() -> list[Record]:
    return [
        ins(1010, 1, 1, "a"), commit(1020, 1),
        # interleaved: T3 commits first, so its change comes first
        ins(1030, 2, 2, "b"), ins(1035, 3, 3, "c"), upd(1040, 2, 2, "b", "b2"),
        commit(1050, 3), commit(1060, 2),
        # T4 rolled back: its undo row (ROLLBACK=1) and the ROLLBACK operation
        ins(1070, 4, 4, "d"), dele(1075, 4, 4, "d", rollback=1), rollback(1076, 4),
        # T5 rolls back to a savepoint: only id 5 stays
        ins(1080, 5, 5, "e"), ins(1081, 5, 6, "f"), dele(1082, 5, 6, "f", rollback=1),
        commit(1090, 5),
        # T6 is open across SCN 1100 (the snapshot), and the log switches at 1100
        ins(1095, 6, 7, "g"), ins(1097, 7, 8, "h"), commit(1098, 7),
        upd(1110, 6, 7, "g", "g2"), commit(1120, 6),
        # a change of another table and one of another PDB are not captured
        ins(1125, 8, 50, "other", table="OTHER"), ins(1126, 8, 51, "pdb2", pdb="PDB2"),
        commit(1127, 8),
        *csf_rows(1130, 9, 9), commit(1140, 9),
        # two transactions commit at the same SCN: the redo address orders them
        ins(1145, 10, 10, "j"), ins(1146, 11, 11, "k"), commit(1150, 11, block=1),
        commit(1150, 10, block=2),
        dele(1160, 12, 1, "a"), commit(1170, 12),
        ins(1210, 13, 12, "m", price=None), commit(1220, 13),
        # T14 is still open at the end
        ins(1250, 14, 14, "open"),
    ]


def fake(**changes: Any) -> FakeOracle:
    online = [(1, 11, 1100, 1200, "ACTIVE", "/redo/redo02.log"),
              (1, 12, 1200, MAX_SCN, "CURRENT", "/redo/redo03.log"),
              (1, 13, 0, None, "UNUSED", "/redo/redo01.log")]
    archived = [(1, 9, 900, 1000, "/arch/1_9.arc"), (1, 10, 1000, 1100, "/arch/1_10.arc"),
                (1, 11, 1100, 1200, "/arch/1_11.arc")]
    values: dict[str, Any] = {"records": recorded(), "online": online, "archived": archived,
                              "current_scn": 1300, **changes}
    return FakeOracle(**values)


ORDERS = TableSchema(TableId("SHOP", "ORDERS"), (
    logical_column("ID", "NUMBER", 10, 0, False), logical_column("NAME", "VARCHAR2", None,
                                                                 None, True),
    logical_column("PRICE", "NUMBER", 10, 2, True)), primary_key=("ID",))


def session(conn: FakeOracle, **kw: Any) -> Session:
    return Session(conn, flush_table="SDK_LOGMNR_FLUSH", **kw)


def changes(items: Iterator[ChangeEvent | Heartbeat] | list[ChangeEvent | Heartbeat]
            ) -> list[ChangeEvent]:
    return [i for i in items if isinstance(i, ChangeEvent)]


def summary(events: list[ChangeEvent]) -> list[tuple[str, tuple[Any, ...], int]]:
    out = []
    for e in events:
        scn = e.offset["scn"]
        assert isinstance(scn, int)
        out.append((e.op, e.key, scn))
    return out


def read(s: Session, start: Offset, end: Offset | None) -> list[ChangeEvent]:
    return changes(sdk_oracle.stream_log(s, [ORDERS], start, end))


EXPECTED = [("c", (1,), 1020), ("c", (3,), 1050), ("c", (2,), 1060), ("u", (2,), 1060),
            ("c", (5,), 1090), ("c", (8,), 1098), ("c", (7,), 1120), ("u", (7,), 1120),
            ("c", (9,), 1140), ("c", (11,), 1150), ("c", (10,), 1150), ("d", (1,), 1170),
            ("c", (12,), 1220)]


# --- tests ---------------------------------------------------------------------------------------


def test_bounded_read_emits_committed_changes_in_commit_order() -> None:
    conn = fake()
    events = read(session(conn), make_offset(1000), make_offset(1301))
    assert summary(events) == EXPECTED
    by_key = {e.key: e for e in events}
    assert [e.after for e in events if e.key == (2,)] == [(2, "b", Decimal("1.5")),
                                                          (2, "b2", Decimal("1.5"))]
    assert by_key[(9,)].after == (9, LONG_NAME, Decimal("1.5"))  # CSF rows joined
    assert by_key[(12,)].after == (12, "m", None)
    assert events[-2].before == (1, "a", Decimal("1.5"))
    assert events[0].commit_ts == int(dt.datetime(2024, 5, 1, 12, 0, 1020 % 60,
                                                  tzinfo=dt.UTC).timestamp()) * 1_000_000
    # offsets: strictly increasing, the change index counts inside each transaction
    offsets = [e.offset for e in events]
    assert all(sdk_oracle.compare_offset(a, b) < 0 for a, b in itertools.pairwise(offsets))
    assert [o["n"] for o in offsets[2:4]] == [0, 1]
    assert conn.window is None and conn.flushes == 1  # LogMiner ended, redo flushed first


def test_bounded_read_is_repeatable_and_independent_of_window_size() -> None:
    reference = read(session(fake()), make_offset(1000), make_offset(1301))
    assert read(session(fake()), make_offset(1000), make_offset(1301)) == reference
    for window in (1, 7, 33, 150, 1_000_000):
        conn = fake()
        s = session(conn, window=window, min_window=1)
        assert read(s, make_offset(1000), make_offset(1301)) == reference, window
        assert (len(conn.windows) > 1) == (window < 301)


def test_bounds_are_half_open_on_commit_scn() -> None:
    # at SCN 1050, T2 (first change at 1030) is open: a watermark there says mine=1030
    events = read(session(fake()), make_offset(1050, mine=1030), make_offset(1120))
    assert summary(events) == [e for e in EXPECTED if 1050 <= e[2] < 1120]
    assert read(session(fake()), make_offset(1121), make_offset(1140)) == []


def test_a_log_switch_inside_a_window_adds_both_files() -> None:
    conn = fake()
    read(session(conn, window=1_000_000), make_offset(1000), make_offset(1301))
    ((lo, hi, files),) = conn.windows
    assert (lo, hi) == (1000, 1300)
    # sequence 11 is both online (ACTIVE) and archived: added once, from the archive
    assert files == ("/arch/1_10.arc", "/arch/1_11.arc", "/redo/redo03.log")


def test_every_event_offset_is_a_resume_point() -> None:
    """Resuming at any event's offset (mid-transaction too) gives exactly the rest."""
    full = read(session(fake()), make_offset(1000), make_offset(1301))
    for k, e in enumerate(full):
        mine = e.offset["mine"]
        assert isinstance(mine, int) and mine <= e.offset["scn"]
        assert read(session(fake()), e.offset, make_offset(1301)) == full[k:], k


def test_transaction_open_across_the_snapshot_scn() -> None:
    """The snapshot reads AS OF SCN 1100 while T6 (started at 1095) is open: its changes are
    streamed, mined from its start; T7, committed at 1098, is in the snapshot, not the log."""
    conn = fake(current_scn=1100, open_starts=[1095])
    conn.tables["SHOP.ORDERS@1100"] = [(Decimal(1), "a", Decimal("1.5")),
                                       (Decimal(8), "h", None)]
    s = session(conn)
    view = sdk_oracle.begin_snapshot(s, None)
    assert view is not None and view.offset == make_offset(1101, mine=1095)
    split = SnapshotSplit(ORDERS.table, 0, None, None)
    rows = [r for batch in sdk_oracle.read_range(s, ORDERS, split, 100) for r in batch]
    assert rows == [(1, "a", Decimal("1.5")), (8, "h", None)]
    assert any("AS OF SCN 1100" in sql for sql in conn.log)
    sdk_oracle.end_snapshot(s)
    conn.current_scn = 1300
    events = read(s, view.offset, make_offset(1301))
    assert summary(events)[:2] == [("c", (7,), 1120), ("u", (7,), 1120)]
    assert summary(events) == [e for e in EXPECTED if e[2] >= 1101]
    assert conn.windows[0][0] == 1095  # mining started at the open transaction
    # another connection joins the same view with its token
    other = session(fake(current_scn=1200))
    assert view.token is not None
    assert sdk_oracle.begin_snapshot(other, view.token) == view


def test_watermark_reads_scn_around_open_transactions() -> None:
    calls = iter([500, 507])

    def advance(conn: FakeOracle) -> None:
        conn.current_scn = next(calls)

    conn = fake(open_starts=[480, 490], on_current_scn=advance)
    assert sdk_oracle.current_offset(session(conn)) == make_offset(508, mine=480)
    conn = fake(open_starts=[], on_current_scn=advance)
    calls = iter([500, 507])
    # nothing open: a transaction starting between the reads began at or after the first one
    assert sdk_oracle.current_offset(session(conn)) == make_offset(508, mine=500)


def test_expired_start_scn_asks_for_a_new_snapshot() -> None:
    conn = fake()
    conn.archived = [a for a in conn.archived if a[1] >= 11]  # 1_9 and 1_10 deleted
    with pytest.raises(OffsetExpiredError, match="new snapshot"):
        read(session(conn), make_offset(1000), make_offset(1301))
    assert sdk_oracle.earliest_offset(session(conn)) == make_offset(1100)
    assert summary(read(session(conn), make_offset(1100), make_offset(1301))) == \
        [e for e in EXPECTED if e[2] >= 1100 and e != ("c", (7,), 1120)]


def test_a_missing_log_sequence_is_fatal() -> None:
    conn = fake()
    conn.archived = [a for a in conn.archived if a[1] != 10]
    conn.archived.append((1, 10, 1000, 1050, "/arch/1_10.arc"))
    conn.archived.sort()
    # sequence 10 covers 1000..1050 only: the window needs 11 next, which is fine; now drop 11
    conn.online = [o for o in conn.online if o[1] != 11]
    conn.archived = [a for a in conn.archived if a[1] != 11]
    with pytest.raises(FatalSyncError, match="sequence 11"):
        read(session(conn), make_offset(1000), make_offset(1301))


def test_open_ended_read_yields_heartbeats_and_stops_on_close() -> None:
    conn = fake()
    s = session(conn, poll_seconds=0)
    stream = sdk_oracle.stream_log(s, [ORDERS], make_offset(1000), None)
    items: list[ChangeEvent | Heartbeat] = []
    for item in stream:
        items.append(item)
        if isinstance(item, Heartbeat) and item.offset["scn"] == 1301 and \
                sum(isinstance(i, Heartbeat) for i in items) >= 2:
            break
    stream.close()
    assert summary(changes(items)) == EXPECTED
    beat = items[-1]
    assert isinstance(beat, Heartbeat)
    # T14 is open at 1300: resuming from the heartbeat mines from its first change
    assert beat.offset == make_offset(1301, mine=1250)
    assert conn.window is None
    # the open transaction commits later: resuming at the heartbeat emits it once
    conn.records.append(commit(1310, 14))
    conn.current_scn = 1320
    assert summary(read(s, beat.offset, make_offset(1321))) == [("c", (14,), 1310)]


def test_windows_adapt_to_redo_volume() -> None:
    conn = fake()
    s = session(conn, window=100, min_window=10, target_rows=3)
    read(s, make_offset(1000), make_offset(1301))
    sizes = [hi - lo + 1 for lo, hi, _ in conn.windows]
    assert sizes[0] == 100 and min(sizes) < 100  # busy windows shrink
    conn = fake()
    s = session(conn, window=10, target_rows=10_000)
    read(s, make_offset(1000), make_offset(1301))
    sizes = [hi - lo + 1 for lo, hi, _ in conn.windows]
    assert sizes[:3] == [10, 20, 40]  # quiet windows grow


def test_pdb_filter_and_container_switches() -> None:
    conn = fake()
    s = session(conn, pdb="PDB1")
    s.container = "PDB1"
    events = read(s, make_offset(1100), make_offset(1301))
    assert (51,) not in [e.key for e in events]
    assert 'ALTER SESSION SET CONTAINER = "CDB$ROOT"' in conn.log
    conn2 = fake()
    for r in conn2.records:
        r.SRC_CON_NAME = "PDB2"
    assert read(session(conn2, pdb="PDB1"), make_offset(1100), make_offset(1301)) == []


def ddl(scn: int, x: int, sql: str, table: str | None = "ORDERS", owner: str | None = "SHOP"
        ) -> Record:
    return Record(scn, 5, xid(x), sql, owner, table, RS_ID=rs(scn // 100, scn))


def items(s: Session, start: Offset, end: Offset) -> list[ChangeEvent | TableTruncated]:
    return [i for i in sdk_oracle.stream_log(s, [ORDERS], start, end)
            if not isinstance(i, Heartbeat)]


def test_truncate_of_a_captured_table_is_a_table_truncated_item_in_log_order() -> None:
    conn = fake()
    # T13 (first change at 1210) is open when the TRUNCATE runs: DDL commits on its own
    conn.records.append(ddl(1215, 20, 'truncate table "SHOP"."ORDERS";'))
    conn.records.append(commit(1216, 20))
    got = items(session(conn), make_offset(1000), make_offset(1301))
    truncated = [i for i in got if isinstance(i, TableTruncated)]
    assert truncated == [TableTruncated(ORDERS.table, make_offset(
        1215, "0000000c.000004bf.0010", 0, 1210), "TRUNCATE", False)]
    at = got.index(truncated[0])
    assert summary(changes(got[:at])) == [e for e in EXPECTED if e[2] < 1215]
    assert summary(changes(got[at + 1:])) == [("c", (12,), 1220)]
    offsets = [i.offset for i in got]
    assert all(sdk_oracle.compare_offset(a, b) < 0 for a, b in itertools.pairwise(offsets))
    # a batch cut at the truncation: the first read ends before it, the next starts with it
    # (mining again from the open T13's start)
    cut = truncated[0].offset
    assert items(session(fake(records=conn.records)), make_offset(1000), cut) == got[:at]
    assert items(session(fake(records=conn.records)), cut, make_offset(1301)) == got[at:]
    # outside the range it is not there
    assert items(session(fake(records=conn.records)), make_offset(1000), make_offset(1200)) \
        == got[:at]


def test_drop_and_rename_of_a_captured_table_come_as_dropped() -> None:
    """A DROP whose table LogMiner's dictionary no longer names (``OBJ# n``), and a RENAME
    onto the captured name tagged with the table renamed: the statement's text decides."""
    conn = fake()
    conn.records += [ddl(1180, 20, "drop table orders purge", "OBJ# 74613"),
                     ddl(1185, 21, "rename orders_new to orders", "ORDERS_NEW"),
                     ddl(1190, 22, 'truncate table "SHOP"."OTHER"', "OTHER")]
    got = [i for i in items(session(conn), make_offset(1000), make_offset(1301))
           if isinstance(i, TableTruncated)]
    assert [(i.table, i.statement, i.dropped, i.offset["scn"]) for i in got] == [
        (ORDERS.table, "DROP TABLE", True, 1180), (ORDERS.table, "RENAME", True, 1185)]


def test_other_ddl_of_a_captured_table_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    conn = fake()
    conn.records.append(ddl(1180, 20, "alter table orders add (note varchar2(10))"))
    assert items(session(conn), make_offset(1000), make_offset(1301)) == \
        read(session(fake()), make_offset(1000), make_offset(1301))
    assert "DDL on captured table SHOP.ORDERS at SCN 1180" in caplog.text


def test_a_ddl_statement_over_several_rows_is_joined() -> None:
    conn = fake()
    text = "/* " + "x" * 5000 + " */ alter table orders drop partition p_2023"
    pieces = [text[i:i + 4000] for i in range(0, len(text), 4000)]
    conn.records += [Record(1180, 5, xid(20), piece, "SHOP", "ORDERS", CSF=int(k < 1),
                            RS_ID=rs(11, 1180)) for k, piece in enumerate(pieces)]
    (got,) = [i for i in items(session(conn), make_offset(1000), make_offset(1301))
              if isinstance(i, TableTruncated)]
    assert (got.statement, got.dropped) == ("ALTER TABLE ... DROP PARTITION", False)


def test_compare_offset_is_a_total_order() -> None:
    watermark = make_offset(1150)
    a = make_offset(1150, "00000011.00000001.0010", 0, 1145)
    b = make_offset(1150, "00000011.00000001.0010", 1, 1145)
    c = make_offset(1150, "00000011.00000002.0010", 0, 1140)
    d = make_offset(1151)
    ordered = [watermark, a, b, c, d]
    for i, x in enumerate(ordered):
        for j, y in enumerate(ordered):
            got = sdk_oracle.compare_offset(x, y)
            assert (got > 0) - (got < 0) == (i > j) - (i < j)
    assert make_offset(1150, mine=1100) != make_offset(1150, mine=1120)
    assert sdk_oracle.compare_offset(make_offset(1150, mine=1100),
                                     make_offset(1150, mine=1120)) < 0
    assert Offset.from_json(a.to_json()) == a


def test_dialect_loads_through_the_plugin_manager() -> None:
    pytest.importorskip("oracledb", reason="DialectManager.get needs the oracle extra's driver")
    from sdk import Capability, DialectManager

    manager = DialectManager(load_entry_points=False)
    manager.register(sdk_oracle, "oracle")
    dialect = manager.get("oracle")
    assert dialect.has(Capability.ATOMIC_SNAPSHOT)
    assert dialect.compare_offset(make_offset(5), make_offset(6)) < 0

