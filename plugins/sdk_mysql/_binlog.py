"""Reading the binlog: between two offsets, or following the log.

An offset is ``(file, pos, n)``: ``pos`` is where the change's transaction starts in ``file``
(its GTID or BEGIN event) and ``n`` the change's index inside the transaction, so a read can
start inside a multi-row event exactly: it starts the replication stream at the transaction and
skips the first ``n`` changes. Watermarks from the server (``SHOW BINLOG STATUS``,
``Binlog_snapshot_position``) are transaction boundaries with ``n = 0``.

The replication connection is opened (and reopened) here at a file and position, as a replica
does (:class:`_Dump`); the events are read packet by packet by :class:`_Reader`, one handler per
kind of event: a transaction's start is its GTID (or BEGIN) event's own position, from the
event header, and rows are decoded by ``_rows`` (table maps parsed once, a generated reader per
table version). The end is checked once per
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
import re
import struct
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from operator import itemgetter
from typing import Any, ClassVar

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
from ._rows import (
    RowsDecoder,
    TableMap,
    Tables,
    compile_rows,
    lenenc,
    parse_table_map,
    shaped_like,
    text_in,
)
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
    ``zero_dates`` option its rows are read under, the server's decoding of single-byte
    character sets, and its compiled rows decoders (by present-columns bitmaps)."""

    __slots__ = ("decoders", "key_of", "map", "schema", "shape", "tables", "zero_dates")

    def __init__(self, table_map: TableMap, schema: TableSchema | None,
                 shape: _Shape | None = None, zero_dates: str = "error",
                 tables: Tables | None = None) -> None:
        self.map = table_map
        self.schema = schema
        self.shape = shape
        self.zero_dates = zero_dates
        self.tables = tables
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
            decoder = compile_rows(self.map, self.schema, present, after, self.zero_dates,
                                   self.tables)
            self.decoders[bitmaps] = decoder
        return decoder.read(body, end)


_STATUS_SIZES = {0: 4, 1: 8, 3: 4, 7: 2, 8: 2, 9: 8}
"""The sizes of a Query event's status variables before ``Q_CHARSET_CODE`` (4) is written, by
code (flags2, sql_mode, auto_increment, lc_time_names, charset_database,
table_map_for_update); codes 2, 5 and 6 (catalog, time zone) hold a length-prefixed text."""


def client_collation(status: bytes) -> int | None:
    """The ``character_set_client`` collation id of a Query event's status variables
    (``Q_CHARSET_CODE``: it, then the connection's and the server's); None when they do not
    hold it, or hold a variable not known before it."""
    pos = 0
    while pos < len(status):
        code = status[pos]
        pos += 1
        if code == 4:
            return int.from_bytes(status[pos:pos + 2], "little") if pos + 2 <= len(status) \
                else None
        if code in (5, 6):
            pos += 1 + status[pos]
        elif code == 2:  # the old catalog: its length, its text and a NUL
            pos += 2 + status[pos]
        elif code in _STATUS_SIZES:
            pos += _STATUS_SIZES[code]
        else:
            return None
    return None


def _bits(bitmap: bytes, count: int) -> list[int]:
    value = int.from_bytes(bitmap, "little")
    return [i for i in range(count) if value >> i & 1]


_UNICODE_SETS = frozenset({"utf8", "utf8mb3", "utf8mb4", "ucs2", "utf16", "utf16le", "utf32",
                           "binary"})
"""Character sets whose bytes Python's codecs read as the server does (``binary``: none)."""
_TABLES: dict[tuple[Any, Any, str], str | None] = {}
"""The server's decoding tables (:meth:`_Charsets.table`), by host, port and character set:
read once per process."""


class _Charsets:
    """Collation ids to character set and collation names: pymysql's table, then the server's
    own (read once, when a collation pymysql does not know appears); and how the server
    decodes each single-byte character set."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = settings
        self.server: dict[int, tuple[str, str]] | None = None

    def table(self, charset: str) -> str | None:
        """How the server converts each byte of the single-byte character set ``charset`` to
        the utf8mb4 a SELECT reads (a decoding table of 256 characters), or None for a
        multi-byte one. The binlog holds a column's bytes and the snapshot the server's
        conversion of them, which Python's codecs do not always match: MariaDB's latin1 is
        cp1252 with 0x81, 0x8D, 0x8F, 0x90 and 0x9D as the C1 controls (Python's cp1252 has
        none), its greek 0xA1 is U+02BD (Python's U+2018), a byte a set leaves undefined is
        ``?``. Read from the server, once per process."""
        if charset in _UNICODE_SETS or not re.fullmatch(r"[a-z0-9_]+", charset):
            return None
        key = (self.settings.get("host"), self.settings.get("port"), charset)
        if key not in _TABLES:
            _TABLES[key] = self._read_table(charset)
        return _TABLES[key]

    def _read_table(self, charset: str) -> str | None:
        connection = open_connection(**self.settings)
        try:
            with connection.cursor() as cur:
                cur.execute("SELECT MAXLEN FROM information_schema.CHARACTER_SETS WHERE "
                            "CHARACTER_SET_NAME = %s", (charset,))
                found = cur.fetchone()
                if found is None or int(found[0]) != 1:
                    return None
                cur.execute("SELECT " + ", ".join(
                    f"CONVERT(_{charset} 0x{byte:02X} USING utf8mb4)" for byte in range(256)))
                row = cur.fetchone()
        finally:
            connection.close()
        chars = [v.decode() if isinstance(v, bytes) else v for v in row]
        if any(not isinstance(c, str) or len(c) != 1 for c in chars):
            return None  # not one character a byte: Python's codec, as before
        return "".join(chars)

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
    ``_read_packet`` (reads one, raising the server's error packet as ``OperationalError``),
    the latter as :func:`_packet_reader` does it on the connection's socket file.
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
        self._read = _packet_reader(connection)

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
                data: bytes = self._read()
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


def _packet_reader(connection: Any) -> Callable[[], bytes]:
    """What ``connection._read_packet()._data`` returns (the same checks, errors and closing on
    a lost connection), without its per-packet objects and calls: a binlog dump is a stream of
    small packets, four a one-row transaction."""
    from pymysql.err import InternalError, OperationalError
    from pymysql.protocol import MysqlPacket

    if connection._current_timeout != connection._read_timeout:
        connection._sock.settimeout(connection._read_timeout)
        connection._current_timeout = connection._read_timeout
    read = connection._rfile.read

    def lost(detail: str = "") -> OperationalError:
        connection._force_close()
        return OperationalError(2013, "Lost connection to MySQL server during query" + detail)

    def packet() -> bytes:
        parts: list[bytes] = []
        while True:
            try:
                header: bytes = read(4)
            except OSError as exc:
                raise lost(f" ({exc})") from None
            if len(header) < 4:
                raise lost()
            if header[3] != connection._next_seq_id:
                connection._force_close()
                if header[3] == 0:  # MariaDB's error packet at a shutdown
                    raise lost()
                raise InternalError(f"Packet sequence number wrong - got {header[3]} expected "
                                    f"{connection._next_seq_id}")
            connection._next_seq_id = (header[3] + 1) % 256
            size = int.from_bytes(header[:3], "little")
            try:
                body: bytes = read(size)
            except OSError as exc:
                raise lost(f" ({exc})") from None
            if len(body) < size:
                raise lost()
            if size < 0xFFFFFF:
                break
            parts.append(body)  # a packet of 16 MB or more comes in parts
        if parts:
            body = b"".join([*parts, body])
        if body[:1] == b"\xff":
            MysqlPacket(body, connection.encoding).raise_for_error()
        return body

    return packet


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
    return _Reader(settings, tables, start, end, gtid, heartbeat_seconds, reshape,
                   zero_dates).items()


_Items = Iterable[LogItem] | None
"""What an event's handler gives: the items it yields (None: none)."""

Handler = Callable[["_Reader", int, bytes, int, int, int, int], _Items]
"""``handler(reader, kind, body, timestamp, server_id, size, log_pos)``."""


def _by_type(default: Handler, handlers: dict[int, Handler]) -> list[Handler]:
    """A list of handlers by event type, ``default`` for the types not in ``handlers``."""
    out = [default] * 256
    for kind, handler in handlers.items():
        out[kind] = handler
    return out


class _Reader:
    """One read of the binlog (see :func:`read_changes`): the state between events, and one
    handler per kind of event, called with the event's header fields and body."""

    __slots__ = (
        "after_gtid", "boundary", "boundary_gtid", "captured", "charsets", "current", "done",
        "dump", "end", "end_key", "end_txn", "file_number", "follow", "heartbeat_seconds",
        "in_txn", "index", "last_beat", "limit", "numbered_file", "parsed", "reshape",
        "settings", "skip", "standalone", "start", "state", "txn_file", "txn_gtid",
        "txn_mariadb", "txn_pos", "unread", "zero_dates")

    def __init__(self, settings: dict[str, Any], tables: Sequence[TableSchema],
                 start: tuple[str, int, int], end: tuple[str, int, int] | None,
                 gtid: str | None, heartbeat_seconds: float, reshape: Reshape | None,
                 zero_dates: str) -> None:
        self.settings = settings
        self.captured = {(t.table.schema, t.table.name): _Shape(t) for t in tables}
        self.start, self.end = start, end
        self.follow = end is None
        self.end_key = position_key(end) if end is not None else None
        self.end_txn = (end[0], end[1]) if end is not None else None
        self.heartbeat_seconds = heartbeat_seconds
        self.reshape = reshape
        self.zero_dates = zero_dates
        self.dump = _Dump(settings, start[0], start[1], self.follow, heartbeat_seconds)
        self.charsets = _Charsets(settings)
        self.parsed: dict[bytes, _Version] = {}  # table map bodies seen, parsed
        self.current: dict[int, _Version] = {}  # table id -> its latest table map
        self.state = MariadbGtidState(gtid) if gtid is not None else None
        # the transaction read: where it starts, its GTID state, the changes before the start
        # in it (skip) and the end's index when the end lies in it (limit)
        self.txn_gtid = gtid
        self.txn_file, self.txn_pos = start[0], start[1]
        self.skip = start[2]
        self.limit: int | None = None
        self.after_gtid = self.standalone = self.in_txn = self.txn_mariadb = False
        self.index = 0  # the next change's index in the transaction
        self.unread: list[tuple[_Version, bytes, int]] = []  # other tables' rows, not decoded
        self.numbered_file, self.file_number = "", 0  # the last file compared with the end
        # following: the last transaction boundary passed (never behind start) and its GTID
        self.boundary, self.boundary_gtid = start, gtid
        self.last_beat = time.monotonic()
        self.done = False  # the end is reached

    def items(self) -> Iterator[LogItem]:
        """The read's items; the driver's errors as the SDK's (see :meth:`_failure`)."""
        from pymysql.err import OperationalError

        dump = self.dump
        handlers = self.HANDLERS
        header = _HEADER.unpack_from
        try:
            for data in dump.packets():
                timestamp, kind, server_id, size, log_pos, _ = header(data)
                if log_pos:
                    dump.pos = log_pos  # where a reopened connection goes on
                out = handlers[kind](
                    self, kind, data[_HEADER_SIZE:len(data) - dump.checksum], timestamp,
                    server_id, size, log_pos)
                if out is not None:
                    yield from out
                    if self.done:
                        return
        except OperationalError as exc:
            failure = self._failure(exc)
            if failure is None:
                raise
            raise failure from None
        finally:
            dump.close()

    def _failure(self, exc: Exception) -> Exception | None:
        """The error to raise for the driver's ``exc``: a purged position, a failed TLS
        handshake, a connection that cannot be reopened; None: ``exc`` itself."""
        settings = self.settings
        code = exc.args[0] if exc.args else None
        if code == 1236:
            return OffsetExpiredError(
                f"the binlog no longer holds {self.start[0]}:{self.start[1]} ({exc.args[1]}); "
                "the server purged it: take a new snapshot and keep binlogs longer "
                "(binlog_expire_logs_seconds)")
        if handshake_failed(exc):  # certificates or protocol: a retry meets the same
            return ConfigurationError(
                f"the binlog connection to {settings['host']}:{settings['port']} failed its TLS "
                f"handshake ({exc.args[-1]}): check the URL's ssl_ options")
        if code in CONNECTION_LOST:
            return RetriableError(
                f"the binlog connection to {settings['host']}:{settings['port']} failed and "
                f"could not be reopened ({exc.args[-1]}; a connection silent for "
                f"read_timeout={settings.get('read_timeout')} s counts as lost): the read can "
                "be retried from its start offset")
        return None

    # ---- the handlers: (kind, body, timestamp, server_id, size, log_pos) -> items or None

    def _other(self, kind: int, body: bytes, timestamp: int, server_id: int, size: int,
               log_pos: int) -> _Items:
        """An event the read needs nothing of: format description (the checksum is known from
        the session), MySQL's anonymous GTID, MariaDB's annotations and GTID lists, ..."""
        return None

    def _unreadable(self, kind: int, body: bytes, timestamp: int, server_id: int, size: int,
                    log_pos: int) -> _Items:
        """An event of a server feature this decoder does not read: the setting to change."""
        raise ConfigurationError(
            f"the binlog at {self.dump.file}:{log_pos - size} holds an event this dialect "
            f"cannot read, from {_UNREADABLE[kind]}")

    def _rotate(self, kind: int, body: bytes, timestamp: int, server_id: int, size: int,
                log_pos: int) -> _Items:
        """The next events are in another file (or, at the stream's start, in this one)."""
        dump = self.dump
        dump.file = body[8:].decode()
        dump.pos = int.from_bytes(body[:8], "little")
        if self.follow and not self.in_txn and not log_pos:  # the fake one naming the next file
            return (self._beat(dump.file, dump.pos),)
        return None

    def _table_map(self, kind: int, body: bytes, timestamp: int, server_id: int, size: int,
                   log_pos: int) -> _Items:
        """The table a table id names, parsed once per distinct event (see :class:`_Version`)."""
        version = self.parsed.get(body)
        if version is None:
            version = self._version(body)
        self.current[version.map.table_id] = version
        return None

    def _version(self, body: bytes) -> _Version:
        """A table map event's parse, with the schema its rows are shaped by if it is read."""
        parsed, charsets, mariadb = self.parsed, self.charsets, self.dump.mariadb
        if len(parsed) >= MAX_TABLE_MAPS:
            parsed.clear()
        table_map = parse_table_map(body, mariadb, charsets.name, charsets.table)
        shape = self.captured.get((table_map.schema, table_map.table))
        schema = None
        if shape is not None:
            schema = shape.schema
            if self.reshape is not None and \
                    not shaped_like(schema, table_map, charsets.collation):
                new = self.reshape(table_map, schema, mariadb, charsets.collation)
                schema = schema if new == schema else new
        version = parsed[body] = _Version(table_map, schema, shape, self.zero_dates,
                                          charsets.table)
        return version

    def _rows(self, kind: int, body: bytes, timestamp: int, server_id: int, size: int,
              log_pos: int) -> _Items:
        """A rows event: its changes within the read, each at its index in the transaction."""
        self.after_gtid = False
        version = self.current.get(int.from_bytes(body[:6], "little"))
        if version is None:
            return None  # its table map was not seen (the read started after it)
        unread, limit = self.unread, self.limit
        if version.schema is None and limit is None and len(unread) < MAX_UNREAD:
            unread.append((version, body, kind))  # counted only if a change follows
            return None
        first = self.index
        if unread:
            first += sum(len(v.rows(b, k)) for v, b, k in unread)
            unread.clear()
        rows = version.rows(body, kind)
        index = self.index = first + len(rows)
        out: _Items = None
        schema = version.schema
        if schema is not None:
            low = max(first, self.skip)
            high = index if limit is None else min(index, limit)
            if low < high:
                if low > first or high < index:
                    rows = rows[low - first:high - first]
                out = _changes(schema.table, version.key_of, _ROWS[kind], rows, timestamp,
                               self.txn_file, self.txn_pos, low, self.txn_gtid)
                shape = version.shape
                if schema is not shape.schema:  # type: ignore[union-attr]
                    shape.schema = schema  # type: ignore[union-attr]
                    out = _chain(SchemaChange(schema, _offset(self.txn_file, self.txn_pos, low,
                                                              self.txn_gtid)), out)
        if limit is not None and index >= limit:
            self.done = True
            return out or ()
        return out

    def _begin(self, kind: int, body: bytes, timestamp: int, server_id: int, size: int,
               log_pos: int) -> _Items:
        """A transaction starts: at its GTID event (MariaDB's or MySQL's), else at its BEGIN
        (a Query event); ``()`` when that is at or past the end. MariaDB's GTID moves the GTID
        state on."""
        pos = log_pos - size
        mariadb = kind == MARIADB_GTID
        txn_file = self.txn_file = self.dump.file
        self.txn_pos, self.index = pos, 0
        self.after_gtid, self.in_txn, self.txn_mariadb = kind != QUERY, True, mariadb
        self.standalone = mariadb and bool(body[12] & _MARIADB_STANDALONE)
        if self.end_key is not None:
            if txn_file != self.numbered_file:  # the file's number, once per file
                self.numbered_file = txn_file
                self.file_number = position_key((txn_file, 0, 0))[0]
            if (self.file_number, pos, 0) >= self.end_key:
                self.done = True
                return ()
        self.unread.clear()
        start, end = self.start, self.end
        self.skip = start[2] if (txn_file, pos) == (start[0], start[1]) else 0
        self.limit = end[2] if end is not None and (txn_file, pos) == self.end_txn else None
        state = self.state
        if state is not None:
            self.txn_gtid = state.text
            if mariadb:
                domain = int.from_bytes(body[8:12], "little")
                state.add(domain, f"{domain}-{server_id}-{int.from_bytes(body[:8], 'little')}")
        return None

    def _query(self, kind: int, body: bytes, timestamp: int, server_id: int, size: int,
               log_pos: int) -> _Items:
        """A statement: BEGIN (a transaction's start when no GTID event came just before),
        COMMIT, ROLLBACK or a DDL statement, which may empty captured tables."""
        status_len = int.from_bytes(body[11:13], "little")
        query = body[13 + status_len + body[8] + 1:]
        if query == b"BEGIN" and not self.after_gtid:
            # a transaction starts at its BEGIN where no GTID event is decoded (MySQL's
            # anonymous GTID event is not)
            return self._begin(kind, body, timestamp, server_id, size, log_pos)
        found = emptied(query, self._statement_text(body[13:13 + status_len]))
        if found is not None:
            return self._ddl(found, body, status_len, query, size, log_pos)
        return self._statement_end(query, log_pos)

    def _statement_text(self, status: bytes) -> Callable[[bytes], str] | None:
        """How to read the text of a statement whose Query event has the status variables
        ``status``: in its session's ``character_set_client`` (the binlog keeps a statement
        as the client sent it); None (UTF-8) when they do not say."""
        collation = client_collation(status)
        if collation is None:
            return None
        charset, tables = self.charsets.name(collation), self.charsets.table
        return lambda query: text_in(query, charset, tables)

    def _ddl(self, found: tuple[str, list[Name], list[str]], body: bytes, status_len: int,
             query: bytes, size: int, log_pos: int) -> Iterator[LogItem]:
        """A statement that empties or replaces tables: their truncations, then as any
        statement. It is at its transaction when that began at the GTID event just before,
        else at itself."""
        state = self.state
        at = (self.txn_file, self.txn_pos, self.txn_gtid) if self.after_gtid else \
            (self.dump.file, log_pos - size, state.text if state else None)
        default = body[13 + status_len:13 + status_len + body[8]].decode()
        yield from self._truncations(found, default, *at)
        out = self._statement_end(query, log_pos)
        if out is not None:
            yield from out

    def _statement_end(self, query: bytes, log_pos: int) -> _Items:
        """After a statement: following the log, one that ends a transaction (COMMIT,
        ROLLBACK, MariaDB's standalone statement, MySQL's DDL after its GTID event) is a
        boundary."""
        if not self.follow:
            self.after_gtid = False
            return None
        ends = (query in _COMMIT_WORDS or self.standalone
                or (self.after_gtid and not self.txn_mariadb and query != b"BEGIN"))
        return self._boundary(ends, log_pos)

    def _xid(self, kind: int, body: bytes, timestamp: int, server_id: int, size: int,
             log_pos: int) -> _Items:
        """A transaction's commit."""
        if not self.follow:
            self.after_gtid = False
            return None
        return self._boundary(True, log_pos)

    def _boundary(self, ends: bool, log_pos: int) -> _Items:
        """Following the log: a heartbeat at the end of a transaction (``ends``), when the last
        one is ``heartbeat_seconds`` old."""
        self.after_gtid = False
        if ends and self.in_txn:
            self.in_txn = False
            if time.monotonic() - self.last_beat >= self.heartbeat_seconds:
                return (self._beat(self.dump.file, log_pos),)
        return None

    def _heartbeat(self, kind: int, body: bytes, timestamp: int, server_id: int, size: int,
                   log_pos: int) -> _Items:
        """The server's heartbeat, sent only when it has nothing more to send: the binlog's
        end, where whole transactions are written at once, so a boundary even if the events
        seen do not say the last transaction ended (XA PREPARE, ROLLBACK of a
        non-transactional change)."""
        if not self.follow or not log_pos:
            return None
        self.in_txn = False
        return (self._beat(body.decode(), log_pos),)

    # ---- helpers

    def _beat(self, file: str, pos: int) -> Heartbeat:
        """A heartbeat at the boundary ``file:pos``, or at the last one if that is further."""
        self.last_beat = time.monotonic()
        if position_key((file, pos, 0)) > position_key(self.boundary):
            state = self.state
            self.boundary, self.boundary_gtid = (file, pos, 0), state.text if state else None
        return Heartbeat(make_offset(*self.boundary, self.boundary_gtid))

    def _truncations(self, found: tuple[str, list[Name], list[str]], default: str, file: str,
                     pos: int, gtid: str | None) -> Iterator[TableTruncated]:
        """The captured tables a DDL statement at ``file:pos`` empties or replaces (names
        unqualified are in database ``default``), if it lies within the read."""
        statement, names, databases = found
        captured = self.captured
        hit = [key for db, name in names
               if (key := self._captured(db or default, name)) is not None]
        hit += [key for key in captured if key[0] in databases]
        at = position_key((file, pos, 0))
        if not hit or at < position_key(self.start) or \
                (self.end_key is not None and at >= self.end_key):
            return
        offset = _offset(file, pos, 0, gtid)
        for key in dict.fromkeys(hit):
            yield TableTruncated(captured[key].schema.table, offset, statement,
                                 dropped=statement not in ROWS_ONLY)

    def _captured(self, db: str, name: str) -> tuple[str, str] | None:
        """The captured table ``db.name`` names (exactly, else ignoring case)."""
        captured = self.captured
        if (db, name) in captured:
            return db, name
        folded = [k for k in captured if (k[0].lower(), k[1].lower()) == (db.lower(),
                                                                            name.lower())]
        return folded[0] if len(folded) == 1 else None


    # the handler of each event type (a byte), in a list: the quickest lookup
    HANDLERS: ClassVar[list[Handler]] = _by_type(_other, {
        ROTATE: _rotate, TABLE_MAP: _table_map, GTID: _begin, MARIADB_GTID: _begin,
        QUERY: _query, XID: _xid, HEARTBEAT: _heartbeat, **dict.fromkeys(_ROWS, _rows),
        **dict.fromkeys(_UNREADABLE, _unreadable)})


def _chain(first: LogItem, rest: Iterable[LogItem]) -> Iterator[LogItem]:
    yield first
    yield from rest


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
