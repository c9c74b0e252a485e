"""The pgoutput decoder on messages built byte by byte from the protocol's documentation
(the real server's messages are decoded in test_postgres_dialect.py): the shapes a server
sends rarely, or only under settings the live tests do not reach."""

from __future__ import annotations

import struct

from sdk_postgres import _pgoutput as pgo


def tuple_data(*values: bytes | object | None) -> bytes:
    out = struct.pack(">h", len(values))
    for value in values:
        if value is None:
            out += b"n"
        elif value is pgo.UNCHANGED:
            out += b"u"
        else:
            assert isinstance(value, bytes)
            out += b"t" + struct.pack(">i", len(value)) + value
    return out


def test_insert_update_delete_with_every_tuple_marker() -> None:
    insert = pgo.decode(b"I" + struct.pack(">I", 16384) + b"N" + tuple_data(b"1", None, b""))
    assert insert == pgo.Change("c", 16384, [b"1", None, b""], None)
    plain = pgo.decode(b"U" + struct.pack(">I", 7) + b"N" + tuple_data(b"2", pgo.UNCHANGED))
    assert plain == pgo.Change("u", 7, [b"2", pgo.UNCHANGED], None, False, True)
    keyed = pgo.decode(b"U" + struct.pack(">I", 7) + b"K" + tuple_data(b"1", None) + b"N"
                       + tuple_data(b"2", b"x"))
    assert keyed == pgo.Change("u", 7, [b"2", b"x"], [b"1", None], True, False)
    full = pgo.decode(b"U" + struct.pack(">I", 7) + b"O" + tuple_data(b"1", b"big") + b"N"
                      + tuple_data(b"1", pgo.UNCHANGED))
    assert full == pgo.Change("u", 7, [b"1", pgo.UNCHANGED], [b"1", b"big"], False, True)
    delete = pgo.decode(b"D" + struct.pack(">I", 2**32 - 1) + b"O" + tuple_data(b"9", b"z"))
    assert delete == pgo.Change("d", 2**32 - 1, None, [b"9", b"z"], False)


def test_transaction_relation_and_truncate_messages() -> None:
    begin = pgo.decode(b"B" + struct.pack(">qqI", 0x1_0000_0010, 42, 777))
    assert begin == pgo.Begin(0x1_0000_0010, 42, 777)
    commit = pgo.decode(b"C" + b"\0" + struct.pack(">qq", 0x10, 0x20))
    assert commit == pgo.Commit(0x10, 0x20)
    relation = pgo.decode(b"R" + struct.pack(">I", 5) + b"public\0caf\xc3\xa9\0d"
                          + struct.pack(">h", 2)
                          + b"\x01id\0" + struct.pack(">Ii", 23, -1)
                          + b"\x00name\0" + struct.pack(">Ii", 25, -1))
    assert relation == pgo.Relation(5, "public", "café", "d",
                                     [("id", 23, True), ("name", 25, False)])
    truncate = pgo.decode(b"T" + struct.pack(">i", 2) + b"\x01" + struct.pack(">II", 5, 6))
    assert truncate == pgo.Truncate([5, 6])
    assert pgo.decode(b"Y" + struct.pack(">I", 99) + b"pg_catalog\0mood\0") is None
    assert pgo.decode(b"O" + struct.pack(">q", 1) + b"origin\0") is None
