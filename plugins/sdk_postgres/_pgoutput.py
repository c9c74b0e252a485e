"""A decoder of the ``pgoutput`` logical replication protocol (version 1).

psycopg 3 has no replication stream, so the dialect polls
``pg_logical_slot_peek_binary_changes`` and decodes each message here: Begin, Commit, Relation,
Insert, Update, Delete, Truncate, Type and Origin. Column values arrive as text and are turned
into Python values by the caller (with psycopg's own loaders, so they equal what a SELECT gives).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

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


@dataclass
class Truncate:
    relids: list[int]


Message = Begin | Commit | Relation | Change | Truncate | None


class Reader:
    """Reads big-endian fields from one message."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

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

    def int64(self) -> int:
        (value,) = struct.unpack_from(">q", self.data, self.pos)
        self.pos += 8
        return int(value)

    def string(self) -> str:
        end = self.data.index(b"\0", self.pos)
        value = self.data[self.pos:end].decode()
        self.pos = end + 1
        return value

    def tuple_data(self) -> list[bytes | object | None]:
        values: list[bytes | object | None] = []
        for _ in range(self.int16()):
            kind = self.byte()
            if kind == "n":
                values.append(None)
            elif kind == "u":
                values.append(UNCHANGED)
            else:  # 't' text (or 'b' binary, not requested)
                length = self.int32()
                values.append(self.data[self.pos:self.pos + length])
                self.pos += length
        return values


def decode(data: bytes) -> Message:
    """One pgoutput message; None for those the dialect does not need (Type, Origin,
    Message)."""
    reader = Reader(data)
    kind = reader.byte()
    if kind == "B":
        return Begin(reader.int64(), reader.int64(), reader.uint32())
    if kind == "C":
        reader.int8()
        return Commit(reader.int64(), reader.int64())
    if kind == "R":
        relation = Relation(reader.uint32(), reader.string(), reader.string(), reader.byte())
        for _ in range(reader.int16()):
            flags = reader.int8()
            name = reader.string()
            oid = reader.uint32()
            reader.int32()  # type modifier
            relation.columns.append((name, oid, bool(flags & 1)))
        return relation
    if kind == "I":
        relid = reader.uint32()
        reader.byte()  # 'N'
        return Change("c", relid, reader.tuple_data(), None)
    if kind == "U":
        relid = reader.uint32()
        marker = reader.byte()
        old = None
        old_is_key = False
        if marker in ("K", "O"):
            old_is_key = marker == "K"
            old = reader.tuple_data()
            reader.byte()  # 'N'
        return Change("u", relid, reader.tuple_data(), old, old_is_key)
    if kind == "D":
        relid = reader.uint32()
        marker = reader.byte()
        return Change("d", relid, None, reader.tuple_data(), marker == "K")
    if kind == "T":
        count = reader.int32()
        reader.int8()  # options
        return Truncate([reader.uint32() for _ in range(count)])
    return None
