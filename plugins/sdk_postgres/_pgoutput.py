"""A decoder of the ``pgoutput`` logical replication protocol (version 1).

psycopg 3 has no replication stream, so the dialect polls
``pg_logical_slot_peek_binary_changes`` and decodes each message here: Begin, Commit, Relation,
Insert, Update, Delete, Truncate, Type and Origin. Column values arrive as text and are turned
into Python values by the caller (with psycopg's own loaders, so they equal what a SELECT gives).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from sdk import ConfigurationError

UNCHANGED = object()
"""An unchanged TOASTed value the message does not carry (tuple marker ``u``)."""


@dataclass
class Relation:
    relid: int
    schema: str
    name: str
    replica_identity: str
    columns: list[tuple[str, int, bool]] = field(default_factory=list)
    """(name, type oid, part of the key)"""
    modifiers: dict[int, int] = field(default_factory=dict)
    """The type modifier (``atttypmod``: ``varchar(10)`` has 14, ``numeric(10,2)`` 655366)
    of each column that has one, by its index in ``columns``; the others have -1."""

    def modifier(self, index: int) -> int:
        """The type modifier of column ``index`` (-1: none)."""
        return self.modifiers.get(index, -1)


@dataclass
class Begin:
    final_lsn: int
    commit_ts: int
    """Microseconds since 2000-01-01 UTC."""
    xid: int


@dataclass
class Commit:
    commit_lsn: int
    end_lsn: int


@dataclass
class Change:
    op: str  # c, u, d
    relid: int
    new: list[bytes | object | None] | None
    old: list[bytes | object | None] | None
    old_is_key: bool = False
    unchanged: bool = False
    """``new`` holds UNCHANGED values (an update that kept a TOASTed value)."""


@dataclass
class Truncate:
    relids: list[int]


Message = Begin | Commit | Relation | Change | Truncate | None


class Reader:
    """Reads big-endian fields from one message."""

    __slots__ = ("data", "pos", "unchanged")

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = data
        self.pos = pos
        self.unchanged = False
        """Set when a tuple held an UNCHANGED value."""

    def byte(self) -> str:
        value = chr(self.data[self.pos])
        self.pos += 1
        return value

    def int8(self) -> int:
        value = self.data[self.pos]
        self.pos += 1
        return value

    def int16(self) -> int:
        (value,) = struct.unpack_from(">h", self.data, self.pos)
        self.pos += 2
        return int(value)

    def int32(self) -> int:
        (value,) = struct.unpack_from(">i", self.data, self.pos)
        self.pos += 4
        return int(value)

    def uint32(self) -> int:
        (value,) = struct.unpack_from(">I", self.data, self.pos)
        self.pos += 4
        return int(value)

    def string(self) -> str:
        """A name (of a schema, table or column), in the session's UTF-8; a ``SQL_ASCII``
        database sends the bytes it stored, which may not be UTF-8."""
        end = self.data.index(b"\0", self.pos)
        raw = self.data[self.pos:end]
        self.pos = end + 1
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise ConfigurationError(
                f"the log names a schema, table or column {raw.decode(errors='replace')!r} "
                "whose name is not UTF-8 (a SQL_ASCII database stores names unchecked): "
                "rename it in UTF-8 (ALTER ... RENAME), then take a new snapshot") from None

    def tuple_data(self) -> list[bytes | object | None]:
        """A TupleData (:func:`tuple_at`)."""
        values, self.pos, unchanged = tuple_at(self.data, self.pos)
        self.unchanged |= unchanged
        return values


def tuple_at(data: bytes, pos: int) -> tuple[list[bytes | object | None], int, bool]:
    """The TupleData at ``pos``: per column ``n`` (NULL), ``u`` (unchanged TOAST) or ``t`` and
    the text; with the position after it and whether a value was ``u``. Runs per change, so
    it reads the buffer directly."""
    (count,) = _INT16.unpack_from(data, pos)
    pos += 2
    values: list[bytes | object | None] = []
    append = values.append
    unpack = _INT32.unpack_from
    unchanged = False
    for _ in range(count):
        kind = data[pos]
        if kind == 0x6E:  # 'n'
            append(None)
            pos += 1
        elif kind == 0x75:  # 'u'
            append(UNCHANGED)
            unchanged = True
            pos += 1
        else:  # 't' text (or 'b' binary, not requested)
            (length,) = unpack(data, pos + 1)
            pos += 5 + length
            append(data[pos - length:pos])
    return values, pos, unchanged


_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


UINT32 = struct.Struct(">I")
"""A change's relation id, after its kind byte."""
BEGIN = struct.Struct(">qqI")
"""A Begin message's fields after its kind byte: final LSN, commit time, xid."""
_COMMIT = struct.Struct(">bqq")
_INSERT, _UPDATE, _DELETE, _NEW, _KEY = b"IUDNK"
CHANGES = frozenset(b"IUD")
"""The kind bytes of Insert, Update and Delete messages."""
BEGIN_KIND, COMMIT_KIND = b"BC"
"""The kind bytes of Begin and Commit messages."""
INSERT_KIND, NEW_MARKER = _INSERT, _NEW
"""An Insert's kind byte; the byte after a change's relation id when a new tuple follows at
once (an Insert, or an Update that logged no old tuple)."""


def decode(data: bytes) -> Message:
    """One pgoutput message; None for those the dialect does not need (Type, Origin,
    Message)."""
    kind = data[0]
    if kind in CHANGES:
        return decode_change(data)
    if kind == BEGIN_KIND:  # once a transaction: one unpack
        return Begin(*BEGIN.unpack_from(data, 1))
    if kind == COMMIT_KIND:
        return Commit(*_COMMIT.unpack_from(data, 1)[1:])
    reader = Reader(data, 1)
    if kind == ord("R"):
        relation = Relation(reader.uint32(), reader.string(), reader.string(), reader.byte())
        for i in range(reader.int16()):
            flags = reader.int8()
            name = reader.string()
            oid = reader.uint32()
            modifier = reader.int32()
            relation.columns.append((name, oid, bool(flags & 1)))
            if modifier != -1:
                relation.modifiers[i] = modifier
        return relation
    if kind == ord("T"):
        count = reader.int32()
        reader.int8()  # options
        return Truncate([reader.uint32() for _ in range(count)])
    return None


def decode_change(data: bytes) -> Change:
    """An Insert, Update or Delete message (kind byte in :data:`CHANGES`): runs per change,
    so it reads the buffer directly."""
    kind = data[0]
    (relid,) = UINT32.unpack_from(data, 1)
    marker = data[5]  # N (new tuple), K (key-only old tuple) or O (whole old tuple)
    reader = Reader(data, 6)
    if kind == _INSERT:
        return Change("c", relid, reader.tuple_data(), None)
    if kind == _DELETE:
        return Change("d", relid, None, reader.tuple_data(), marker == _KEY)
    old = None
    if marker != _NEW:
        old = reader.tuple_data()
        reader.pos += 1  # 'N'
        reader.unchanged = False
    new = reader.tuple_data()
    return Change("u", relid, new, old, marker == _KEY, reader.unchanged)
