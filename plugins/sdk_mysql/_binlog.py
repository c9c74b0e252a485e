"""Reading the binlog: between two offsets, or following the log.

An offset is ``(file, pos, n)``: ``pos`` is where the change's transaction starts in ``file``
(its GTID or BEGIN event) and ``n`` the change's index inside the transaction, so a read can
start inside a multi-row event exactly: it starts the replication stream at the transaction and
skips the first ``n`` changes. Watermarks from the server (``SHOW BINLOG STATUS``,
``Binlog_snapshot_position``) are transaction boundaries with ``n = 0``.

The replication connection is opened (and reopened) here at a file and position, as a replica
does (:class:`_Dump`); the events are read packet by packet: a transaction's start is its GTID
(or BEGIN) event's own position, from the event header, and rows are decoded by ``_rows`` (table
maps parsed once, a generated reader per table version). The end is checked once per
transaction (and per row only inside the transaction the end points into), because the stream
does not always end with EOF.

Rows of tables not read are decoded only when a change of a table read follows them in the same
transaction, since ``n`` counts every row of the transaction (so an offset means the same
whatever tables a read follows): transactions of other tables cost their events' headers and
table maps, not their rows. Such an event's bytes are kept and counted only if needed; at most
``MAX_UNREAD`` wait, then they are counted.

Schema changes: each table read has the schema its rows are currently shaped by (at first the
one it was given). A table map of it whose columns are not that schema's (``_rows.shaped_like``:
a column added, dropped, renamed or retyped) gets a new schema from ``reshape`` (the dialect's:
the live table's columns where they still match, the table map's otherwise), once per table
map version, since versions are cached with the table map's bytes. The first change read in
that version's shape is preceded by a ``SchemaChange`` at its own offset, and rows are shaped
by the new schema from there on. A table map in the current shape changes nothing; per rows
event the cost is one identity test.

On MariaDB each offset also carries the GTID position at its transaction's start (see
``_offsets``): the reader starts from the position's GTID state and adds each transaction's GTID
as it passes, so the per-row cost is one more tuple item.

Following the log (no end) keeps one blocking replication connection with the protocol's
heartbeat (``slave_heartbeat``): an idle server sends a heartbeat event carrying the binlog
file and the end of the last event sent, which is a transaction boundary. A ``Heartbeat`` is
yielded at such boundaries: on each server heartbeat, on rotation, and at the end of a
transaction when the last one is ``heartbeat_seconds`` old, so the offset advances while other
tables are written, too.
"""

from __future__ import annotations

import random
import struct
import time
from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter
from typing import Any

from sdk import (
    ChangeEvent,
    ConfigurationError,
    Heartbeat,
    LogItem,
    Offset,
    OffsetExpiredError,
    RetriableError,
    SchemaChange,
    TableSchema,
    TableTruncated,
)

from ._connect import open_connection
from ._ddl import ROWS_ONLY, Name, emptied
from ._offsets import NAME, MariadbGtidState, make_offset, position_key
from ._rows import RowsDecoder, TableMap, compile_rows, lenenc, parse_table_map, shaped_like
from ._tls import handshake_failed

_MARIADB_STANDALONE = 1  # MariaDB GTID event flag FL_STANDALONE: a statement without Xid
MAX_UNREAD = 64  # rows events of other tables held undecoded per transaction, at most
MAX_TABLE_MAPS = 4096  # distinct table map events kept parsed, at most

# event types
QUERY, ROTATE, XID, TABLE_MAP, HEARTBEAT = 2, 4, 16, 19, 27
GTID, MARIADB_GTID = 33, 162
WRITE_V1, UPDATE_V1, DELETE_V1, WRITE_V2, UPDATE_V2, DELETE_V2 = 23, 24, 25, 30, 31, 32
_ROWS = {WRITE_V1: "c", UPDATE_V1: "u", DELETE_V1: "d", WRITE_V2: "c", UPDATE_V2: "u",
         DELETE_V2: "d"}
_V2 = {WRITE_V2, UPDATE_V2, DELETE_V2}
_UNREADABLE = {
    39: "MySQL's partial JSON updates (binlog_row_value_options = PARTIAL_JSON): set it to ''",
    40: "MySQL's compressed transactions (binlog_transaction_compression = ON): set it OFF",
    **{kind: "MariaDB's compressed binlog events (log_bin_compress = ON): set it OFF"
       for kind in range(165, 172)},
}
_HEADER = struct.Struct("<xIBIIIH")  # the OK byte, then the event's common header
_HEADER_SIZE = 20
_COMMIT_WORDS = (b"COMMIT", b"ROLLBACK")


Reshape = Callable[[TableMap, TableSchema, bool, Callable[[int], str]], TableSchema]
"""``reshape(table_map, old, mariadb, collation_name)``: the schema of a table whose table map
no longer has the columns of ``old``, the one it was shaped by."""


class _Shape:
    """The schema a table's rows are currently shaped by (one per table read, shared by its
    versions)."""

    __slots__ = ("schema",)

    def __init__(self, schema: TableSchema) -> None:
        self.schema = schema


class _Version:
    """One table map's parse, the schema its rows are shaped by (None: a table not read), the
    ``zero_dates`` option its rows are read under, and its compiled rows decoders (by
    present-columns bitmaps)."""

    __slots__ = ("decoders", "key_of", "map", "schema", "shape", "zero_dates")

    def __init__(self, table_map: TableMap, schema: TableSchema | None,
                 shape: _Shape | None = None, zero_dates: str = "error") -> None:
        self.map = table_map
        self.schema = schema
        self.shape = shape
        self.zero_dates = zero_dates
        self.key_of = _key_getter(schema) if schema is not None else None
        self.decoders: dict[bytes, RowsDecoder] = {}

    def rows(self, body: bytes, kind: int) -> list[Any]:
        """Every row of a rows event of this table (an update's as before/after pairs)."""
        pos = 8 + (int.from_bytes(body[8:10], "little") if kind in _V2 else 0)
        count, pos = lenenc(body, pos)
        width = (count + 7) // 8
        update = _ROWS[kind] == "u"
        end = pos + width * (2 if update else 1)
        bitmaps = body[pos:end]
        decoder = self.decoders.get(bitmaps)
        if decoder is None:
            present = _bits(bitmaps[:width], count)
            after = _bits(bitmaps[width:], count) if update else None
            decoder = compile_rows(self.map, self.schema, present, after, self.zero_dates)
            self.decoders[bitmaps] = decoder
        return decoder.read(body, end)


def _bits(bitmap: bytes, count: int) -> list[int]:
    value = int.from_bytes(bitmap, "little")
    return [i for i in range(count) if value >> i & 1]


class _Charsets:
    """Collation ids to character set and collation names: pymysql's table, then the server's
    own (read once, when a collation pymysql does not know appears)."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.server: dict[int, tuple[str, str]] | None = None

    def _lookup(self, collation: int) -> tuple[str, str]:
        """The character set and the collation's name."""
        from pymysql.charset import charset_by_id

        try:
            known = charset_by_id(collation)
            return str(known.name), str(known.collation)
        except KeyError:
            pass
        if self.server is None:
            connection = open_connection(**self.settings)
            try:
                with connection.cursor() as cur:
                    cur.execute("SELECT ID, CHARACTER_SET_NAME, COLLATION_NAME FROM "
                                "information_schema.COLLATIONS WHERE ID IS NOT NULL")
                    self.server = {int(i): (str(n), str(c)) for i, n, c in cur.fetchall()}
            finally:
                connection.close()
        unknown = f"collation {collation}"
        return self.server.get(collation, (unknown, unknown))

    def name(self, collation: int) -> str:
        """The character set of a collation id."""
        return self._lookup(collation)[0]

    def collation(self, collation: int) -> str:
        """The name of a collation id."""
        return self._lookup(collation)[1]


class _Dump:
    """The replication connection: opened, and reopened, here on a pymysql connection (the
    session variables a replica sets, then COM_BINLOG_DUMP), and read packet by packet.

    Two pymysql methods without a public equivalent are used, the ones each of its own commands
    goes through: ``_execute_command`` (sends a command packet with sequence id 0) and
    ``_read_packet`` (reads one, raising the server's error packet as ``OperationalError``).
    The connection is pymysql's own class (``_connect``), so they cannot be missing.

    A connection lost or silent past ``read_timeout`` is reopened at the end of the last event
    read; one that cannot be reopened raises the driver's error."""

    def __init__(self, settings: dict[str, Any], file: str, pos: int, follow: bool,
                 heartbeat_seconds: float, mariadb_gtid: str | None = None) -> None:
        self.settings = settings
        self.file, self.pos = file, pos  # the end of the last event read
        self.follow = follow
        self.heartbeat_seconds = heartbeat_seconds
        self.mariadb_gtid = mariadb_gtid  # MariaDB: start after this GTID position instead
        self.replica_id = random.randint(1 << 20, (1 << 31) - 1)  # ours, as a replica's
        self.checksum = 0
        self.mariadb = False
        self.server_id: int | None = None  # the first connection's, which a reopened one keeps
        self._connection: Any = None
        self._read: Any = None

    def _connect(self) -> None:
        """Open the connection and start the dump at ``file:pos`` (or at the GTID position)."""
        from pymysql.constants.COMMAND import COM_BINLOG_DUMP

        connection = self._connection = open_connection(**self.settings)
        with connection.cursor() as cur:
            cur.execute("SELECT @@server_id")
            self._check_server(int(cur.fetchone()[0]))
            self.checksum = 4 if self._checksum_on(cur) else 0
            if self.follow and self.heartbeat_seconds:
                cur.execute("SET @master_heartbeat_period = %s", (self._heartbeat_period(),))
            # MariaDB sends its GTID events (and no dummy events in their place, which
            # 10.6.12 gets wrong) to replicas of this capability; MySQL ignores it
            cur.execute("SET @mariadb_slave_capability = 4")
            if self.mariadb_gtid is not None:
                cur.execute("SET @slave_connect_state = %s", (self.mariadb_gtid,))
                cur.execute("SET @slave_gtid_strict_mode = 1")
                cur.execute("SET @slave_gtid_ignore_duplicates = 0")
        self.mariadb = "MariaDB" in connection.get_server_info()
        flags = 0 if self.follow else 1  # BINLOG_DUMP_NON_BLOCK: EOF at the binlog's end
        if self.mariadb_gtid is not None:  # the server starts from @slave_connect_state
            file, pos = "", 4
        else:
            file, pos = self.file, self.pos
        connection._execute_command(
            COM_BINLOG_DUMP, struct.pack("<IHI", pos, flags, self.replica_id) + file.encode())
        self._read = connection._read_packet

    @staticmethod
    def _checksum_on(cur: Any) -> bool:
        """Whether events end in a checksum; if so the server is told this replica reads them
        (else it refuses to send any)."""
        cur.execute("SHOW GLOBAL VARIABLES LIKE 'BINLOG_CHECKSUM'")
        row = cur.fetchone()
        if row is None or row[1] == "NONE":
            return False
        cur.execute("SET @master_binlog_checksum = @@global.binlog_checksum")
        return True

    def _heartbeat_period(self) -> int:
        """The heartbeat period in nanoseconds: at most half of ``read_timeout``, so that an
        idle connection is never taken for a lost one."""
        read_timeout = float(self.settings.get("read_timeout", 4294967))
        return int(min(read_timeout / 2.0, self.heartbeat_seconds, 4294967) * 1_000_000_000)

    def _check_server(self, server_id: int) -> None:
        """A reopened connection must reach the server the first one did: the same position
        on another one (a failover behind one host name) names something else."""
        if self.server_id is None:
            self.server_id = server_id
        elif server_id != self.server_id:
            raise RetriableError(
                f"the binlog connection reopened on another server (server_id {server_id}, "
                f"was {self.server_id}): a failover; the sync restarts from its checkpoint "
                "to follow it")

    def packets(self) -> Iterator[bytes]:
        """Each event packet (the OK byte, the header, the body and the checksum); ends at the
        server's EOF (a read to the binlog's end that does not follow it)."""
        from pymysql.err import OperationalError

        self._connect()
        while True:
            try:
                data: bytes = self._read()._data
            except OperationalError as exc:
                if exc.args and exc.args[0] in (2006, 2013):
                    self.close()
                    self._connect()
                    continue
                raise
            if data[0]:
                if data[0] == 0xFE and len(data) < 9:
                    return
                continue
            yield data

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()


def locate_mariadb_gtid(settings: dict[str, Any], gtid: str
                        ) -> tuple[str, int, str | None]:
    """Where the server's binlog holds the first transaction after MariaDB GTID position
    ``gtid``: its file, position and GTID (None: none yet, the position is the binlog's end).
    A non-blocking binlog dump from that position, as a replica connects, read to its first
    transaction; the fake ``Gtid_list`` the server sends first carries where it begins. In
    GTID strict mode: a server whose binlog does not hold each GTID of ``gtid`` exactly
    (another server's history, a replica built from a later dump) raises the driver's
    error 1236."""
    dump = _Dump(settings, "", 4, False, 0.0, mariadb_gtid=gtid)
    file, pos = "", 0
    try:
        for data in dump.packets():
            _, kind, server_id, size, log_pos, _ = _HEADER.unpack_from(data)
            body = data[_HEADER_SIZE:len(data) - dump.checksum]
            if kind == ROTATE:
                file, pos = body[8:].decode(), int.from_bytes(body[:8], "little")
                continue
            if kind == MARIADB_GTID:
                domain = int.from_bytes(body[8:12], "little")
                seq = int.from_bytes(body[:8], "little")
                return file, log_pos - size, f"{domain}-{server_id}-{seq}"
            if log_pos:
                pos = log_pos
    finally:
        dump.close()
    return file, pos, None


CONNECTION_LOST = {2003, 2006, 2013}
"""Can't connect, server gone away, connection lost (or silent past ``read_timeout``)."""


def read_changes(settings: dict[str, Any], tables: Sequence[TableSchema],
                 start: tuple[str, int, int], end: tuple[str, int, int] | None,
                 gtid: str | None = None, heartbeat_seconds: float = 0.5,
                 reshape: Reshape | None = None, zero_dates: str = "error"
                 ) -> Iterator[LogItem]:
    """Changes of ``tables`` with ``start <= offset < end`` in log order. ``end`` None follows
    the log for ever, with heartbeats (see the module docstring). ``gtid`` is MariaDB's GTID
    position at ``start``'s transaction (None: offsets get no ``gtid``). ``reshape`` gives the
    new schema of a table whose columns changed (see the module docstring); None: the rows are
    read by name with the schema given, which fails if a column of it is gone. ``zero_dates``
    (the URL option): a date Python cannot hold reads as a BadValue of its text (``error``)
    or None (``null``), chosen when a table version's decoder is compiled (no cost per
    value)."""
    from pymysql.err import OperationalError

    captured = {(t.table.schema, t.table.name): _Shape(t) for t in tables}
    start_file, start_pos, start_n = start
    follow = end is None
    end_key = position_key(end) if end is not None else None
    end_txn = (end[0], end[1]) if end is not None else None
    dump = _Dump(settings, start_file, start_pos, follow, heartbeat_seconds)
    charsets = _Charsets(settings)
    parsed: dict[bytes, _Version] = {}  # table map bodies seen, parsed
    current: dict[int, _Version] = {}  # table id -> its latest table map
    state = MariadbGtidState(gtid) if gtid is not None else None
    txn_gtid = gtid
    txn_file, txn_pos = start_file, start_pos
    skip = start_n  # changes of this transaction before the start
    limit: int | None = None  # the end's index when the end lies in this transaction
    after_gtid = standalone = in_txn = txn_mariadb = False
    index = 0
    numbered_file, file_number = "", 0
    unread: list[tuple[_Version, bytes, int]] = []  # rows events of other tables, not decoded
    # following: the last transaction boundary passed (never behind start) and its GTID state
    boundary, boundary_gtid = start, gtid
    last_beat = time.monotonic()
    header = _HEADER.unpack_from

    def truncations(found: tuple[str, list[Name], list[str]], default: str, file: str,
                    pos: int, gtid: str | None) -> Iterator[TableTruncated]:
        """The captured tables a DDL statement at ``file:pos`` empties or replaces (names
        unqualified are in database ``default``), if it lies within the read."""
        statement, names, databases = found
        hit = [key for db, name in names if (key := _captured(db or default, name)) is not None]
        hit += [key for key in captured if key[0] in databases]
        at = position_key((file, pos, 0))
        if not hit or at < position_key(start) or (end_key is not None and at >= end_key):
            return
        offset = _offset(file, pos, 0, gtid)
        for key in dict.fromkeys(hit):
            yield TableTruncated(captured[key].schema.table, offset, statement,
                                 dropped=statement not in ROWS_ONLY)

    def _captured(db: str, name: str) -> tuple[str, str] | None:
        """The captured table ``db.name`` names (exactly, else ignoring case)."""
        if (db, name) in captured:
            return db, name
        folded = [k for k in captured if (k[0].lower(), k[1].lower()) == (db.lower(),
                                                                            name.lower())]
        return folded[0] if len(folded) == 1 else None

    def beat(file: str, pos: int) -> Heartbeat:
        """A heartbeat at the boundary ``file:pos``, or at the last one if that is further."""
        nonlocal boundary, boundary_gtid, last_beat
        last_beat = time.monotonic()
        if position_key((file, pos, 0)) > position_key(boundary):
            boundary, boundary_gtid = (file, pos, 0), state.text if state else None
        return Heartbeat(make_offset(*boundary, boundary_gtid))

    try:
        for data in dump.packets():
            timestamp, kind, server_id, size, log_pos, _ = header(data)
            body = data[_HEADER_SIZE:len(data) - dump.checksum]
            if kind == ROTATE:
                dump.file = body[8:].decode()
                dump.pos = int.from_bytes(body[:8], "little")
                if follow and not in_txn and not log_pos:  # the fake rotate naming the next file
                    yield beat(dump.file, dump.pos)
                continue
            if log_pos:
                dump.pos = log_pos  # where a reopened connection goes on
            if kind in _ROWS:
                version = current.get(int.from_bytes(body[:6], "little"))
                if version is None:
                    after_gtid = False
                    continue  # its table map was not seen (the read started after it)
                if version.schema is None and limit is None and len(unread) < MAX_UNREAD:
                    unread.append((version, body, kind))  # counted only if a change follows
                    after_gtid = False
                    continue
                if unread:
                    index += sum(len(v.rows(b, k)) for v, b, k in unread)
                    unread.clear()
                rows = version.rows(body, kind)
                first = index
                index += len(rows)
                schema = version.schema
                if schema is not None:
                    low = max(first, skip)
                    high = index if limit is None else min(index, limit)
                    if low < high:
                        if low > first or high < index:
                            rows = rows[low - first:high - first]
                        if schema is not version.shape.schema:  # type: ignore[union-attr]
                            version.shape.schema = schema  # type: ignore[union-attr]
                            yield SchemaChange(schema, _offset(txn_file, txn_pos, low, txn_gtid))
                        yield from _changes(schema.table, version.key_of, _ROWS[kind], rows,
                                            timestamp, txn_file, txn_pos, low, txn_gtid)
                if limit is not None and index >= limit:
                    return
                after_gtid = False
                continue
            if kind == TABLE_MAP:
                version = parsed.get(body)
                if version is None:
                    if len(parsed) >= MAX_TABLE_MAPS:
                        parsed.clear()
                    table_map = parse_table_map(body, dump.mariadb, charsets.name)
                    shape = captured.get((table_map.schema, table_map.table))
                    schema = None
                    if shape is not None:
                        schema = shape.schema
                        if reshape is not None and \
                                not shaped_like(schema, table_map, charsets.collation):
                            new = reshape(table_map, schema, dump.mariadb, charsets.collation)
                            schema = schema if new == schema else new
                    version = _Version(table_map, schema, shape, zero_dates)
                    parsed[body] = version
                current[version.map.table_id] = version
                continue
            if kind in _UNREADABLE:
                raise ConfigurationError(
                    f"the binlog at {dump.file}:{log_pos - size} holds an event this dialect "
                    f"cannot read, from {_UNREADABLE[kind]}")
            query = b""
            if kind == QUERY:
                status_len = int.from_bytes(body[11:13], "little")
                query = body[13 + status_len + body[8] + 1:]
            # A transaction starts at its GTID event (MariaDB, MySQL with GTIDs), else at its
            # BEGIN (MySQL's anonymous GTID event is not decoded).
            mariadb = kind == MARIADB_GTID
            is_gtid = mariadb or kind == GTID
            if is_gtid or (query == b"BEGIN" and not after_gtid):
                txn_file = dump.file
                txn_pos, index = log_pos - size, 0
                after_gtid, in_txn, txn_mariadb = is_gtid, True, mariadb
                standalone = mariadb and bool(body[12] & _MARIADB_STANDALONE)
                if end_key is not None:
                    if txn_file != numbered_file:  # the file's number, once per file
                        numbered_file, file_number = txn_file, position_key((txn_file, 0, 0))[0]
                    if (file_number, txn_pos, 0) >= end_key:
                        return
                unread.clear()
                skip = start_n if (txn_file, txn_pos) == (start_file, start_pos) else 0
                limit = end[2] if end is not None and (txn_file, txn_pos) == end_txn else None
                if state is not None:
                    txn_gtid = state.text
                    if mariadb:
                        domain = int.from_bytes(body[8:12], "little")
                        state.add(domain, f"{domain}-{server_id}-"
                                          f"{int.from_bytes(body[:8], 'little')}")
                continue
            if kind == QUERY and (found := emptied(query)) is not None:
                # at its transaction when it began at the GTID event just before, else at itself
                at = (txn_file, txn_pos, txn_gtid) if after_gtid else \
                    (dump.file, log_pos - size, state.text if state else None)
                default = body[13 + status_len:13 + status_len + body[8]].decode()
                yield from truncations(found, default, *at)
            if not follow or kind not in (QUERY, XID, HEARTBEAT):
                if kind in (QUERY, XID):
                    after_gtid = False
                continue
            # following the log: find transaction boundaries for heartbeats
            if kind == HEARTBEAT:
                # sent only when the server has nothing more to send: the binlog's end, where
                # whole transactions are written at once, so a boundary even if the events
                # seen do not say the last transaction ended (XA PREPARE, ROLLBACK of a
                # non-transactional change)
                if log_pos:
                    in_txn = False
                    yield beat(body.decode(), log_pos)
                continue
            ends = (kind == XID or query in _COMMIT_WORDS or standalone
                    or (after_gtid and not txn_mariadb and query != b"BEGIN"))
            after_gtid = False
            if ends and in_txn:
                in_txn = False
                if time.monotonic() - last_beat >= heartbeat_seconds:
                    yield beat(dump.file, log_pos)
    except OperationalError as exc:
        code = exc.args[0] if exc.args else None
        if code == 1236:
            raise OffsetExpiredError(
                f"the binlog no longer holds {start_file}:{start_pos} ({exc.args[1]}); the "
                "server purged it: take a new snapshot and keep binlogs longer "
                "(binlog_expire_logs_seconds)") from None
        if handshake_failed(exc):  # certificates or protocol: a retry meets the same
            raise ConfigurationError(
                f"the binlog connection to {settings['host']}:{settings['port']} failed its TLS "
                f"handshake ({exc.args[-1]}): check the URL's ssl_ options") from None
        if code in CONNECTION_LOST:
            raise RetriableError(
                f"the binlog connection to {settings['host']}:{settings['port']} failed and "
                f"could not be reopened ({exc.args[-1]}; a connection silent for "
                f"read_timeout={settings.get('read_timeout')} s counts as lost): the read can "
                "be retried from its start offset") from None
        raise
    finally:
        dump.close()


def _key_getter(table: TableSchema) -> Any:
    """``table.key_of`` without its generator: it runs once or twice per change."""
    key = table.key_index
    if len(key) == 1:
        (at,) = key
        return lambda row: (row[at],)
    if key:
        return itemgetter(*key)
    return table.key_of


def _changes(table: Any, key_of: Any, op: str, rows: list[Any], timestamp: int, file: str,
             pos: int, n: int, gtid: str | None) -> Iterator[ChangeEvent]:
    """The change events (``op`` c, u or d) of ``rows`` of one rows event, the first being
    change ``n`` of the transaction at ``file:pos``."""
    commit_ts = timestamp * 1_000_000
    if op == "c":
        for after in rows:
            yield ChangeEvent(table, "c", key_of(after), after, _offset(file, pos, n, gtid),
                              None, None, commit_ts)
            n += 1
    elif op == "d":
        for before in rows:
            yield ChangeEvent(table, "d", key_of(before), None, _offset(file, pos, n, gtid),
                              before, None, commit_ts)
            n += 1
    else:
        for before, after in rows:
            key, old_key = key_of(after), key_of(before)
            yield ChangeEvent(table, "u", key, after, _offset(file, pos, n, gtid), before,
                              old_key if old_key != key else None, commit_ts)
            n += 1


def _offset(file: str, pos: int, n: int, gtid: str | None) -> Offset:
    """``make_offset`` inlined for the per-row path."""
    if gtid is None:
        return Offset.from_sorted(NAME, (("file", file), ("n", n), ("pos", pos)))
    return Offset.from_sorted(NAME, (("file", file), ("gtid", gtid), ("n", n), ("pos", pos)))
