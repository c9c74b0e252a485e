"""Binlog table maps and rows events, decoded by code compiled once per table version.

A rows event carries its rows in the server's storage format, described by the transaction's
Table_map event (column types, their metadata, and with ``binlog_row_metadata = FULL`` names,
signedness, charsets, ENUM/SET members, geometry types and the primary key). Instead of
dispatching on each column's type for every value, :func:`compile_rows` turns one table map (and
the event's present-columns bitmap) into one Python function, generated as source text, that
reads every row of an event with straight-line code: one ``struct`` call per run of fixed-width
NOT NULL columns, an inline slice per string, a helper call only for DECIMAL and temporal types.
It is built once and cached with its table map's bytes as key, so a table map the server writes
again costs a dict lookup, and any change of the table (ALTER TABLE, a table id reused after a
restart) is a new key: the cache is invalidated exactly when a table can have changed.

Rows come out in the column order of the schema they are shaped by, matched by name, and
normalised to the values the snapshot reads (see ``_types``). Which schema that is follows the
log: :func:`shaped_like` says whether a table map's columns are those of a schema (names in
order, and each storage type one the column's type produces), and :func:`describe_column`
describes a table map's column as ``describe_table`` would, when the live table no longer has
it (``_binlog`` and the dialect's ``stream_log`` build the new schema from them). The generated
source holds only integers and names of this module's helpers, never names or text from the
server.
"""

from __future__ import annotations

import codecs
import datetime as dt
import functools
import json
import re
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sdk import BadValue, Column, ConfigurationError, LogicalType, TableSchema
from sdk.dialect.temporal import Interval

from ._types import logical_column, not_a_date

# column types (binlog's enum_field_types)
DECIMAL, TINY, SHORT, LONG, FLOAT, DOUBLE, NULL, TIMESTAMP, LONGLONG, INT24 = range(10)
DATE, TIME, DATETIME, YEAR, NEWDATE, VARCHAR, BIT, TIMESTAMP2, DATETIME2, TIME2 = range(10, 20)
JSON, NEWDECIMAL, ENUM, SET = 245, 246, 247, 248
TINY_BLOB, MEDIUM_BLOB, LONG_BLOB, BLOB, VAR_STRING, STRING, GEOMETRY = range(249, 256)

# columns the signedness bitmap has a bit for: YEAR too (seen on MariaDB 10.11, and so read by
# python-mysql-replication on MySQL)
_NUMERIC = {TINY, SHORT, INT24, LONG, LONGLONG, NEWDECIMAL, FLOAT, DOUBLE, YEAR}
_CHARACTER = {STRING, VAR_STRING, VARCHAR, BLOB}
_BINARY_COLLATION = 63
_STRUCT_CODE = {(TINY, False): "b", (TINY, True): "B", (SHORT, False): "h", (SHORT, True): "H",
                (LONG, False): "i", (LONG, True): "I", (LONGLONG, False): "q",
                (LONGLONG, True): "Q", (FLOAT, False): "f", (FLOAT, True): "f",
                (DOUBLE, False): "d", (DOUBLE, True): "d"}

# optional metadata fields (binlog_row_metadata)
_SIGNEDNESS, _DEFAULT_CHARSET, _COLUMN_CHARSET, _COLUMN_NAME = 1, 2, 3, 4
_SET_STR_VALUE, _ENUM_STR_VALUE, _GEOMETRY_TYPE = 5, 6, 7
_SIMPLE_PRIMARY_KEY, _PRIMARY_KEY_WITH_PREFIX = 8, 9
_ENUM_AND_SET_DEFAULT_CHARSET, _ENUM_AND_SET_COLUMN_CHARSET = 10, 11

# MySQL character sets whose Python codec has another name (the rest share theirs, or have
# none). A single-byte set is read by the server's own table where one is given (``Tables``);
# euckr is cp949: MariaDB's takes the UHC extension (0x8141 is U+AC02), Python's euc_kr not
_CODECS = {"latin1": "cp1252", "utf8mb3": "utf-8", "utf8": "utf-8", "utf8mb4": "utf-8",
           "ucs2": "utf-16-be", "utf16": "utf-16-be", "utf16le": "utf-16-le",
           "utf32": "utf-32-be", "koi8r": "koi8-r", "koi8u": "koi8-u", "macce": "mac-latin2",
           "macroman": "mac-roman", "eucjpms": "euc-jp", "euckr": "cp949", "binary": ""}


@dataclass(frozen=True)
class BinlogColumn:
    """One column of a table map: its storage type and what the rows need to read it."""

    type: int  # the real type: STRING's metadata may say ENUM or SET
    meta: int  # the type's metadata (length, precision << 8 | scale, fsp, ...)
    nullable: bool
    name: str | None
    unsigned: bool = False
    charset: str | None = None  # character, ENUM and SET columns: the character set's name
    members: tuple[str, ...] = ()  # ENUM and SET
    collation: int | None = None  # character, ENUM and SET columns: the collation's id
    geometry: int | None = None  # GEOMETRY: the spatial type's code (0 any, 1 point, ...)


@dataclass(frozen=True)
class TableMap:
    """A Table_map event: which table a table id names and its columns in storage order."""

    table_id: int
    schema: str
    table: str
    columns: tuple[BinlogColumn, ...]
    primary_key: tuple[int, ...] | None = None  # its columns' indexes; None: not in the map


def lenenc(data: bytes, pos: int) -> tuple[int, int]:
    """A length-encoded integer at ``pos`` and the position after it."""
    first = data[pos]
    if first < 251:
        return first, pos + 1
    size = {252: 2, 253: 3, 254: 8}[first]
    return int.from_bytes(data[pos + 1:pos + 1 + size], "little"), pos + 1 + size


def _meta_size(kind: int) -> int:
    if kind in (FLOAT, DOUBLE, BLOB, GEOMETRY, JSON, TIMESTAMP2, DATETIME2, TIME2, TINY_BLOB,
                MEDIUM_BLOB, LONG_BLOB):
        return 1
    if kind in (VARCHAR, VAR_STRING, BIT, NEWDECIMAL, STRING, ENUM, SET):
        return 2
    return 0


def parse_table_map(body: bytes, mariadb: bool, charset_of: Callable[[int], str],
                    tables: Tables | None = None) -> TableMap:
    """A Table_map event's body (after the common header, before the checksum);
    ``charset_of`` names the character set of a collation id, ``tables`` gives the server's
    decoding of a single-byte one (ENUM and SET members are read with it)."""
    table_id = int.from_bytes(body[0:6], "little")
    schema, pos = _short_name(body, 8)  # after the table id and flags
    table, pos = _short_name(body, pos)
    count, pos = lenenc(body, pos)
    kinds, metas, pos = _column_types(body, pos, count)
    nulls = int.from_bytes(body[pos:pos + (count + 7) // 8], "little")
    pos += (count + 7) // 8
    optional = _Optional(kinds, mariadb)
    optional.read(body, pos)
    names, collations = optional.names, optional.collations
    charsets = [None if c is None else charset_of(c) for c in collations]
    columns = tuple(
        BinlogColumn(kinds[i], metas[i], bool(nulls >> i & 1), names[i] if names else None,
                     optional.unsigned[i], charsets[i],
                     tuple(text_in(m, charsets[i], tables) for m in optional.members[i]),
                     collations[i], optional.geometries[i])
        for i in range(count))
    return TableMap(table_id, schema, table, columns, optional.primary_key)


def text_in(raw: bytes, charset: str | None, tables: Tables | None) -> str:
    """Text the binlog holds in ``charset`` (an ENUM or SET member's name, a statement), as
    the server reads it where ``tables`` has the set, else by Python's codec, a character
    it does not read replaced (UTF-8 for a set not given)."""
    table = tables(charset) if tables is not None and charset is not None else None
    if table is not None:
        return codecs.charmap_decode(raw, None, table)[0]
    return raw.decode(_codec(charset) or "utf-8", "replace")


def _short_name(body: bytes, pos: int) -> tuple[str, int]:
    """A name of one length byte, its bytes and a NUL at ``pos``; the position after it."""
    size = body[pos]
    return body[pos + 1:pos + 1 + size].decode(), pos + size + 2


def _column_types(body: bytes, pos: int, count: int) -> tuple[list[int], list[int], int]:
    """The ``count`` column types at ``pos`` and their metadata block after them: each
    column's real type and metadata (STRING's says ENUM, SET or a CHAR's length), and the
    position after the block."""
    types = body[pos:pos + count]
    pos += count
    meta_len, pos = lenenc(body, pos)
    meta_end = pos + meta_len
    kinds, metas = [], []
    for kind in types:
        size = _meta_size(kind)
        if size == 1:
            meta = body[pos]
        elif size == 2 and kind in (STRING, ENUM, SET, NEWDECIMAL):
            # real type and length, precision and scale: big-endian
            meta = body[pos] << 8 | body[pos + 1]
        elif size == 2:
            meta = body[pos] | body[pos + 1] << 8
        else:
            meta = 0
        pos += size
        if kind == STRING:
            real, low = meta >> 8, meta & 0xFF
            if real in (ENUM, SET):
                kind, meta = real, low
            elif real & 0x30 != 0x30:  # CHAR longer than 255 bytes: two bits of its length
                meta = ((real & 0x30) ^ 0x30) << 4 | low
            else:
                meta = low
        kinds.append(kind)
        metas.append(meta)
    return kinds, metas, meta_end


class _Optional:
    """A table map's optional metadata fields (``binlog_row_metadata``), read into per-column
    lists; ENUM and SET members stay bytes until their character set is known."""

    def __init__(self, kinds: list[int], mariadb: bool) -> None:
        count = len(kinds)
        self.kinds = kinds
        self.names: list[str] | None = None
        self.unsigned = [False] * count
        self.collations: list[int | None] = [None] * count
        self.members: list[tuple[bytes, ...]] = [()] * count
        self.geometries: list[int | None] = [None] * count
        self.primary_key: tuple[int, ...] | None = None
        # the columns the charset fields list, in order
        self.character = [i for i, k in enumerate(kinds)
                          if k in _CHARACTER or (mariadb and k == GEOMETRY)]
        self.enum_set = [i for i, k in enumerate(kinds) if k in (ENUM, SET)]

    def read(self, body: bytes, pos: int) -> None:
        """Every field from ``pos`` to the end of ``body``."""
        while pos < len(body):
            field = body[pos]
            length, pos = lenenc(body, pos + 1)
            value = body[pos:pos + length]
            pos += length
            if field == _SIGNEDNESS:
                self._signedness(value)
            elif field in (_DEFAULT_CHARSET, _ENUM_AND_SET_DEFAULT_CHARSET):
                self._default_charsets(
                    value, self.character if field == _DEFAULT_CHARSET else self.enum_set)
            elif field in (_COLUMN_CHARSET, _ENUM_AND_SET_COLUMN_CHARSET):
                at = 0
                for i in self.character if field == _COLUMN_CHARSET else self.enum_set:
                    self.collations[i], at = lenenc(value, at)
            elif field == _COLUMN_NAME:
                self.names = [name.decode() for name in _strings(value)]
            elif field in (_SET_STR_VALUE, _ENUM_STR_VALUE):
                self._members(value, SET if field == _SET_STR_VALUE else ENUM)
            elif field == _GEOMETRY_TYPE:
                self._geometries(value)
            elif field in (_SIMPLE_PRIMARY_KEY, _PRIMARY_KEY_WITH_PREFIX):
                self._primary_key(value, field == _PRIMARY_KEY_WITH_PREFIX)

    def _signedness(self, value: bytes) -> None:
        """One bit per numeric column, the most significant first: set if unsigned."""
        numeric = [i for i, k in enumerate(self.kinds) if k in _NUMERIC]
        for bit, i in enumerate(numeric):
            self.unsigned[i] = bool(value[bit // 8] & (0x80 >> bit % 8))

    def _default_charsets(self, value: bytes, targets: list[int]) -> None:
        """A default collation for ``targets``, then the (index, collation) pairs that differ."""
        default, at = lenenc(value, 0)
        chosen = dict.fromkeys(range(len(targets)), default)
        while at < len(value):
            index, at = lenenc(value, at)
            chosen[index], at = lenenc(value, at)
        for index, i in enumerate(targets):
            self.collations[i] = chosen[index]

    def _members(self, value: bytes, kind: int) -> None:
        """The members of each ENUM (or each SET) column: a count, then the strings."""
        at = 0
        for i in (i for i in self.enum_set if self.kinds[i] == kind):
            n, at = lenenc(value, at)
            values = []
            for _ in range(n):
                size, at = lenenc(value, at)
                values.append(value[at:at + size])
                at += size
            self.members[i] = tuple(values)

    def _geometries(self, value: bytes) -> None:
        """The spatial type of each GEOMETRY column, as far as the field goes."""
        at = 0
        for i in (i for i, k in enumerate(self.kinds) if k == GEOMETRY):
            if at >= len(value):
                break
            self.geometries[i], at = lenenc(value, at)

    def _primary_key(self, value: bytes, with_prefix: bool) -> None:
        """The primary key's column indexes (each with its prefix length ``with_prefix``)."""
        indexes, at = [], 0
        while at < len(value):
            index, at = lenenc(value, at)
            indexes.append(index)
            if with_prefix:
                _, at = lenenc(value, at)  # the prefix length
        self.primary_key = tuple(indexes)


def _strings(value: bytes) -> list[bytes]:
    """Length-encoded strings, one after the other to the end of ``value``."""
    out, at = [], 0
    while at < len(value):
        size, at = lenenc(value, at)
        out.append(value[at:at + size])
        at += size
    return out


Tables = Callable[[str], "str | None"]
"""``tables(charset)``: how the server converts each byte of the single-byte character set
``charset`` to the text a SELECT gives (a decoding table of 256 characters), or None for a
multi-byte one (``_binlog``'s ``_Charsets.table`` reads it from the server)."""


def _decoder(charset: str, codec: str) -> Callable[[bytes], Any]:
    """Text of multi-byte character set ``charset`` by Python's ``codec``; bytes the codec
    does not read, a BadValue naming them (never an error that stops the log)."""
    def decode(raw: bytes) -> Any:
        try:
            return str(raw, codec)
        except UnicodeDecodeError as why:
            return BadValue(raw.decode(codec, "backslashreplace"),
                            f"is not {charset} text Python's {codec} codec reads (byte "
                            f"{raw[why.start]:#04x} at offset {why.start})")
    return decode


def _codec(charset: str | None) -> str | None:
    """The Python codec of a MySQL character set, "" for binary, None when Python has none."""
    if charset is None:
        return None
    codec = _CODECS.get(charset, charset)
    if codec:
        try:
            codecs.lookup(codec)
        except LookupError:
            return None
    return codec


# ---- the schema a table map's rows have ----------------------------------------------------

# the bytes a character takes at most, by character set (1 for those not listed)
_MAXLEN = {"big5": 2, "ujis": 3, "sjis": 2, "euckr": 2, "gb2312": 2, "gbk": 2, "utf8": 3,
           "utf8mb3": 3, "ucs2": 2, "utf8mb4": 4, "utf16": 4, "utf16le": 4, "utf32": 4,
           "cp932": 2, "eucjpms": 3, "gb18030": 4}
_INTEGERS = {TINY: ("tinyint", 4, 3), SHORT: ("smallint", 6, 5), INT24: ("mediumint", 9, 8),
             LONG: ("int", 11, 10), LONGLONG: ("bigint", 20, 20)}  # MariaDB's display widths
_INTEGER_NAMES = {"tinyint": TINY, "smallint": SHORT, "mediumint": INT24, "int": LONG,
                  "integer": LONG, "bigint": LONGLONG}
_TEMPORAL = {"time": TIME2, "datetime": DATETIME2, "timestamp": TIMESTAMP2}
_PACKS = ("tiny", "", "medium", "long")  # BLOB's metadata 1..4: TINYBLOB .. LONGBLOB
_GEOMETRIES = ("geometry", "point", "linestring", "polygon", "multipoint", "multilinestring",
               "multipolygon", "geometrycollection")
_SAME_STORAGE = {NEWDATE: DATE, VAR_STRING: VARCHAR, TIME: TIME2, DATETIME: DATETIME2,
                 TIMESTAMP: TIMESTAMP2, TINY_BLOB: BLOB, MEDIUM_BLOB: BLOB, LONG_BLOB: BLOB}
_TYPE_TEXT = re.compile(r"\s*([A-Za-z]+)\s*(?:\((.*)\))?\s*([A-Za-z ]*)$", re.S)
_MEMBER = re.compile(r"'((?:[^'\\]|''|\\.)*)'", re.S)

Storage = tuple[int, Any, bool, str | None]
"""What a column's type makes of its values in the binlog: the storage type (one per family:
TIME2 for TIME too), its size (DECIMAL's precision and scale, a string's bytes, a fraction's
digits, BIT's width, ENUM/SET members, a geometry's type), signedness, and the collation
(``binary`` for byte strings; None where values have none)."""


def _collation_key(name: str | None) -> str | None:
    """A collation's name as both the catalogue and the binlog spell it (``utf8_`` is
    ``utf8mb3_``)."""
    if not name:
        return None
    name = name.strip().lower()
    return "utf8mb3_" + name[5:] if name.startswith("utf8_") else name


def _maxlen(collation: str | None) -> int:
    charset = (collation or "").split("_", 1)[0]
    return _MAXLEN.get(charset, 1)


def _members(text: str) -> tuple[str, ...]:
    """ENUM/SET members from ``COLUMN_TYPE``'s list (quotes and backslashes doubled)."""
    return tuple(m.replace("''", "'").replace("\\\\", "\\") for m in _MEMBER.findall(text))


def column_storage(column: Column) -> Storage | None:
    """The storage a column of the catalogue (``describe_table``) has in the binlog, from its
    type text; None for a type this does not know (it is then taken to match any storage)."""
    text, _, collation_name = column.source_type.partition(" COLLATE ")
    found = _TYPE_TEXT.match(text)
    if found is None:
        return None
    base, params, flags = found.group(1).lower(), found.group(2), found.group(3).lower()
    unsigned = "unsigned" in flags.split()
    collation = _collation_key(collation_name)
    try:
        if base in _INTEGER_NAMES:
            return (_INTEGER_NAMES[base], None, unsigned, None)
        if base == "float":
            return (FLOAT, None, unsigned, None)
        if base in ("double", "real"):
            return (DOUBLE, None, unsigned, None)
        if base in ("decimal", "numeric"):
            precision, _, scale = (params or "10,0").partition(",")
            return (NEWDECIMAL, (int(precision), int(scale or 0)), unsigned, None)
        if base in ("year", "date"):
            return (YEAR if base == "year" else DATE, None, False, None)
        if base in _TEMPORAL:
            return (_TEMPORAL[base], int(params or 0), False, None)
        if base == "bit":
            return (BIT, int(params or 1), False, None)
        if base in ("enum", "set"):
            return (ENUM if base == "enum" else SET, _members(params or ""), False, collation)
        if base in ("char", "varchar"):
            if collation is None:
                return None
            return (STRING if base == "char" else VARCHAR, int(params or 1) * _maxlen(collation),
                    False, collation)
        if base in ("binary", "varbinary"):
            return (STRING if base == "binary" else VARCHAR, int(params or 1), False, "binary")
        if base.endswith(("text", "blob")):
            pack = base[:-4]
            if pack not in _PACKS:
                return None
            byte = base.endswith("blob")
            return (BLOB, _PACKS.index(pack) + 1, False, "binary" if byte else collation)
        if base in _GEOMETRIES:
            return (GEOMETRY, _GEOMETRIES.index(base), False, None)
        if base == "json":
            return (JSON, None, False, None)
    except ValueError:
        return None
    return None


def binlog_storage(column: BinlogColumn, collation_name: Callable[[int], str]) -> Storage:
    """A table map column's storage, as :func:`column_storage` spells it; ``collation_name``
    names a collation id."""
    kind = _SAME_STORAGE.get(column.type, column.type)
    meta = column.meta
    if kind in _INTEGERS or kind in (FLOAT, DOUBLE):
        return (kind, None, column.unsigned, None)
    if kind == NEWDECIMAL:
        return (kind, (meta >> 8, meta & 0xFF), column.unsigned, None)
    if kind in (YEAR, DATE, JSON):
        return (kind, None, False, None)
    if kind in (TIME2, DATETIME2, TIMESTAMP2):
        return (kind, meta if column.type == kind else 0, False, None)
    if kind == BIT:
        return (kind, (meta >> 8) * 8 + (meta & 0xFF), False, None)
    if kind == GEOMETRY:
        return (kind, column.geometry, False, None)
    collation = None
    if column.charset == "binary":
        collation = "binary"
    elif column.collation is not None:
        collation = _collation_key(collation_name(column.collation))
    if kind in (ENUM, SET):
        return (kind, column.members, False, collation)
    return (kind, meta, False, collation)


def storage_matches(column: Column, binlog: BinlogColumn,
                    collation_name: Callable[[int], str]) -> bool:
    """Whether ``column``'s type writes ``binlog``'s storage (its nullability aside). What one
    side does not say (an unknown type, a geometry type or collation the metadata lacks)
    matches anything."""
    expected = column_storage(column)
    if expected is None:
        return True
    found = binlog_storage(binlog, collation_name)
    for i, (a, b) in enumerate(zip(expected, found, strict=True)):
        if a != b and not (i == 3 and (a is None or b is None)) and \
                not (i == 1 and found[0] == GEOMETRY and b is None):
            return False
    return True


def shaped_like(schema: TableSchema, table_map: TableMap,
                collation_name: Callable[[int], str]) -> bool:
    """Whether the rows of ``table_map`` have ``schema``'s columns: the same names in the same
    order, each with a storage its type writes and its nullability. A map without column
    names (``binlog_row_metadata`` not FULL) is taken to match: reading it fails, naming the
    setting."""
    columns = table_map.columns
    if len(columns) != len(schema.columns):
        return False
    for binlog, column in zip(columns, schema.columns, strict=True):
        if binlog.name is None:
            return True
        if binlog.name != column.name or binlog.nullable != column.nullable or \
                not storage_matches(column, binlog, collation_name):
            return False
    return True


def _quoted_members(members: tuple[str, ...]) -> str:
    return ",".join("'" + m.replace("\\", "\\\\").replace("'", "''") + "'" for m in members)


def describe_column(column: BinlogColumn, mariadb: bool,
                    collation_name: Callable[[int], str]) -> Column:
    """A table map's column as ``describe_table`` describes it (its ``COLUMN_TYPE`` as the
    server spells it, the collation after ``COLLATE``): what the binlog does not say (an
    integer's display width, ZEROFILL, a FLOAT's declared precision) as a column declared
    without them has it."""
    kind = _SAME_STORAGE.get(column.type, column.type)
    meta = column.meta
    sign = " unsigned" if column.unsigned else ""
    precision = scale = None
    collation = None
    if column.collation is not None and column.charset != "binary":
        collation = collation_name(column.collation)
    binary = column.charset == "binary"
    if kind in _INTEGERS:
        name, signed_width, unsigned_width = _INTEGERS[kind]
        width = unsigned_width if column.unsigned else signed_width
        text = (f"{name}({width})" if mariadb else name) + sign
    elif kind in (FLOAT, DOUBLE):
        text = ("float" if kind == FLOAT else "double") + sign
    elif kind == NEWDECIMAL:
        precision, scale = meta >> 8, meta & 0xFF
        text = f"decimal({precision},{scale}){sign}"
    elif kind == YEAR:
        text = "year(4)" if mariadb else "year"
    elif kind == DATE:
        text = "date"
    elif kind in (TIME2, DATETIME2, TIMESTAMP2):
        name = {TIME2: "time", DATETIME2: "datetime", TIMESTAMP2: "timestamp"}[kind]
        fsp = meta if column.type == kind else 0
        text = f"{name}({fsp})" if fsp else name
    elif kind == BIT:
        text = f"bit({(meta >> 8) * 8 + (meta & 0xFF)})"
    elif kind in (ENUM, SET):
        text = f"{'enum' if kind == ENUM else 'set'}({_quoted_members(column.members)})"
    elif kind in (STRING, VARCHAR):
        name = "char" if kind == STRING else "varchar"
        length = meta if binary else meta // _maxlen(_collation_key(collation))
        text = f"{'var' if kind == VARCHAR else ''}binary({length})" if binary \
            else f"{name}({length})"
    elif kind == BLOB and 1 <= meta <= 4:
        text = _PACKS[meta - 1] + ("blob" if binary else "text")
    elif kind == GEOMETRY:
        geometry = column.geometry or 0
        text = _GEOMETRIES[geometry] if geometry < len(_GEOMETRIES) else "geometry"
    elif kind == JSON:
        text = "json"
    else:
        raise ConfigurationError(
            f"column {column.name!r} has binlog type {column.type}, which this dialect cannot "
            "describe")
    base = text.split("(")[0].split(" ")[0]
    source = f"{text} COLLATE {collation}" if collation and kind in (
        ENUM, SET, STRING, VARCHAR, BLOB) else text
    return logical_column(column.name or "", base, source, column.nullable, precision, scale)


# ---- value helpers the generated code calls -------------------------------------------------

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_ZERO = dt.timedelta(0)
_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


Fail = Callable[[str], Any]
"""What a date Python cannot hold (MySQL's zero date, a zero year, month or day, a day past its
month's end, a zero TIMESTAMP) reads as, given the text SELECT shows for it (with the column's
fraction digits): None under ``zero_dates=null`` (:func:`_null`), else a BadValue
(``_types.not_a_date``), as the snapshot reads it. The readers below take it when a decoder is
compiled, and call it only where Python refuses the value: a good value costs the same."""


def _null(text: str) -> None:
    """A date Python cannot hold as None (``zero_dates=null``)."""
    return None


def _datetime_text(year: int, month: int, day: int, hour: int, minute: int, second: int,
                   micros: int, fsp: int) -> str:
    """A DATETIME or TIMESTAMP as SELECT shows it: ``fsp`` fraction digits."""
    text = f"{year:04d}-{month:02d}-{day:02d} {hour:02d}:{minute:02d}:{second:02d}"
    return f"{text}.{micros // 10 ** (6 - fsp):0{fsp}d}" if fsp else text


@functools.cache
def _date(fail: Fail) -> Callable[[int], Any]:
    """The reader of DATE: day 5 bits, month 4, year the rest."""
    def read(packed: int) -> Any:
        try:
            return dt.date(packed >> 9, packed >> 5 & 15, packed & 31)
        except ValueError:
            return fail(f"{packed >> 9:04d}-{packed >> 5 & 15:02d}-{packed & 31:02d}")
    return read


@functools.cache
def _datetime2(fsp: int, fail: Fail) -> Callable[[int, int], Any]:
    """The reader of DATETIME2(``fsp``): 40 bits big-endian, offset by 2^39: year*13+month 17
    bits, day 5, hour 5, minute 6, second 6 (and the microseconds, read apart)."""
    def read(packed: int, micros: int) -> Any:
        packed -= 0x8000000000
        year_month = packed >> 22
        try:
            return dt.datetime(year_month // 13, year_month % 13, packed >> 17 & 31,
                               packed >> 12 & 31, packed >> 6 & 63, packed & 63, micros)
        except ValueError:
            return fail(_datetime_text(year_month // 13, year_month % 13, packed >> 17 & 31,
                                       packed >> 12 & 31, packed >> 6 & 63, packed & 63,
                                       micros, fsp))
    return read


@functools.cache
def _datetime_old(fail: Fail) -> Callable[[int], Any]:
    """The reader of DATETIME before MySQL 5.6: YYYYMMDDhhmmss as one integer."""
    def read(packed: int) -> Any:
        day, time = divmod(packed, 1_000_000)
        try:
            return dt.datetime(day // 10000, day // 100 % 100, day % 100, time // 10000,
                               time // 100 % 100, time % 100)
        except ValueError:
            return fail(_datetime_text(day // 10000, day // 100 % 100, day % 100,
                                       time // 10000, time // 100 % 100, time % 100, 0, 0))
    return read


@functools.cache
def _timestamp(fsp: int, fail: Fail) -> Callable[[int, int], Any]:
    """The reader of TIMESTAMP(``fsp``): an aware UTC instant; zero is no TIMESTAMP."""
    zero = _datetime_text(0, 0, 0, 0, 0, 0, 0, fsp)

    def read(seconds: int, micros: int) -> Any:
        if not seconds and not micros:
            return fail(zero)
        return _EPOCH + dt.timedelta(seconds=seconds, microseconds=micros)
    return read


def _time2(packed: int) -> Interval:
    """TIME2 as the signed 48-bit value ``seconds-part << 24 | microseconds``: its hours."""
    negative = packed < 0
    if negative:
        packed = -packed
    hms, micros = packed >> 24, packed & 0xFFFFFF
    micros += ((hms >> 12 & 0x3FF) * 3600 + (hms >> 6 & 63) * 60 + (hms & 63)) * 1_000_000
    return Interval(0, 0, -micros if negative else micros)


def _time2_packed(int_part: int, frac: int, frac_bytes: int) -> int:
    """TIME2's integer part (offset removed) and its fraction of 1 or 2 bytes, as one value."""
    if int_part < 0 and frac:
        int_part += 1
        frac -= 1 << (8 * frac_bytes)
    return (int_part << 24) + frac * (10000 if frac_bytes == 1 else 100)


def _time_old(packed: int) -> Interval:
    """TIME before MySQL 5.6: a signed hhmmss integer."""
    sign = -1 if packed < 0 else 1
    packed = abs(packed)
    seconds = packed // 10000 * 3600 + packed // 100 % 100 * 60 + packed % 100
    return Interval(0, 0, sign * seconds * 1_000_000)


def _decimal_reader(precision: int, scale: int) -> tuple[int, Callable[[bytes, int], Decimal]]:
    """The size and the reader of DECIMAL(precision, scale)'s binary form: groups of 9 digits in
    4 bytes big-endian (the leading and trailing partial groups in fewer), the sign in the top
    bit, a negative value with every bit inverted."""
    whole, lead = divmod(precision - scale, 9)
    full_frac, trail = divmod(scale, 9)
    groups = ([(_DIG2BYTES[lead], lead)] if lead else []) + [(4, 9)] * whole
    frac_groups = [(4, 9)] * full_frac + ([(_DIG2BYTES[trail], trail)] if trail else [])
    size = sum(n for n, _ in groups) + sum(n for n, _ in frac_groups)
    top = 1 << (8 * size - 1)
    ones = (1 << (8 * size)) - 1
    shifts_int, shifts_frac = [], []
    left = 8 * size
    for nbytes, digits in groups:
        left -= 8 * nbytes
        shifts_int.append((left, (1 << 8 * nbytes) - 1, 10 ** digits))
    for nbytes, digits in frac_groups:
        left -= 8 * nbytes
        shifts_frac.append((left, (1 << 8 * nbytes) - 1, 10 ** digits))

    def read(data: bytes, pos: int) -> Decimal:
        packed = int.from_bytes(data[pos:pos + size], "big")
        negative = not packed & top
        packed ^= top
        if negative:
            packed ^= ones
        integer = frac = 0
        for shift, mask, scale_by in shifts_int:
            integer = integer * scale_by + (packed >> shift & mask)
        for shift, mask, scale_by in shifts_frac:
            frac = frac * scale_by + (packed >> shift & mask)
        sign = "-" if negative else ""
        if scale:
            return Decimal(f"{sign}{integer}.{frac:0{scale}d}")
        return Decimal(f"{sign}{integer}")
    return size, read


def _json_text(data: bytes) -> str | None:
    """MySQL's binary JSON as the text SELECT gives (``_types._json_text``'s separators)."""
    if not data:
        return None
    from pymysqlreplication.json_binary import parse_json

    def plain(value: Any) -> Any:
        if isinstance(value, bytes):
            return value.decode()
        if isinstance(value, dict):
            return {plain(k): plain(v) for k, v in value.items()}
        if isinstance(value, list):
            return [plain(v) for v in value]
        return value
    return json.dumps(plain(parse_json(data[0], data[1:])), separators=(", ", ": "),
                      ensure_ascii=False)


def _set_text(members: tuple[str, ...]) -> Callable[[int], str]:
    def text(mask: int) -> str:
        return ",".join(m for i, m in enumerate(members) if mask >> i & 1)
    return text


def _enum_text(members: tuple[str, ...]) -> Callable[[int], str]:
    def text(index: int) -> str:
        return members[index - 1] if 0 < index <= len(members) else ""
    return text


# ---- the compiler ----------------------------------------------------------------------------

class _Source:
    """The generated function's source, the names it refers to, and the server's decoding
    tables of single-byte character sets (:data:`Tables`)."""

    def __init__(self, tables: Tables | None = None) -> None:
        self.tables = tables
        self.lines: list[str] = []
        self.names: dict[str, Any] = {"unpack_from": struct.unpack_from, "Decimal": Decimal,
                                      "from_bytes": int.from_bytes}

    def name(self, value: Any) -> str:
        key = f"h{len(self.names)}"
        self.names[key] = value
        return key

    def add(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)


def _read_value(src: _Source, depth: int, column: BinlogColumn, target: str,
                logical: LogicalType | None, null_dates: bool) -> None:
    """Lines that read ``column``'s value at ``pos`` into ``target`` and move ``pos`` on; a
    date Python cannot hold as None with ``null_dates``, else as a BadValue."""
    kind = column.type
    if kind in _TEMPORAL_KINDS:
        _read_temporal(src, depth, column, target, _null if null_dates else not_a_date)
    elif kind in _LENGTH_KINDS:
        _read_bytes(src, depth, column, target, logical)
    elif kind in _NUMBER_KINDS:
        _read_number(src, depth, column, target)
    else:
        raise ConfigurationError(
            f"column {column.name!r} has binlog type {kind}, which this dialect cannot decode")


_NUMBER_KINDS = {TINY, SHORT, LONG, LONGLONG, FLOAT, DOUBLE, INT24, YEAR, NEWDECIMAL, BIT, ENUM,
                 SET}
_TEMPORAL_KINDS = {DATE, NEWDATE, DATETIME2, TIMESTAMP2, TIME2, TIMESTAMP, DATETIME, TIME}
_LENGTH_KINDS = {VARCHAR, VAR_STRING, STRING, BLOB, TINY_BLOB, MEDIUM_BLOB, LONG_BLOB, GEOMETRY,
                 JSON}


def _read_number(src: _Source, depth: int, column: BinlogColumn, target: str) -> None:
    """``_read_value`` of the numeric types, BIT, ENUM and SET."""
    add = src.add
    kind, meta = column.type, column.meta
    if kind in (TINY, SHORT, LONG, LONGLONG, FLOAT, DOUBLE):
        code = _STRUCT_CODE[(kind, column.unsigned)]
        add(depth, f"{target}, = unpack_from('<{code}', data, pos); "
                   f"pos += {struct.calcsize(code)}")
    elif kind == INT24:
        add(depth, f"{target} = from_bytes(data[pos:pos + 3], 'little', "
                   f"signed={not column.unsigned}); pos += 3")
    elif kind == YEAR:
        add(depth, f"{target} = data[pos]; pos += 1")
        add(depth, f"if {target}: {target} += 1900")
    elif kind == NEWDECIMAL:
        size, read = _decimal_reader(meta >> 8, meta & 0xFF)
        add(depth, f"{target} = {src.name(read)}(data, pos); pos += {size}")
    elif kind == BIT:
        size = (meta >> 8) + (1 if meta & 0xFF else 0)
        add(depth, f"{target} = from_bytes(data[pos:pos + {size}], 'big'); pos += {size}")
    else:  # ENUM, SET
        size = meta
        convert = _enum_text(column.members) if kind == ENUM else _set_text(column.members)
        add(depth, f"{target} = {src.name(convert)}(from_bytes(data[pos:pos + {size}], "
                   f"'little')); pos += {size}")


def _read_temporal(src: _Source, depth: int, column: BinlogColumn, target: str,
                   fail: Fail) -> None:
    """``_read_value`` of the date and time types; ``fail`` gives a date Python cannot
    hold."""
    add = src.add
    kind, meta = column.type, column.meta
    if kind in (DATE, NEWDATE):
        add(depth, f"{target} = {src.name(_date(fail))}(from_bytes(data[pos:pos + 3], "
                   "'little')); pos += 3")
    elif kind == DATETIME2:
        frac = (meta + 1) // 2
        micros = _fraction(frac)
        add(depth, f"{target} = {src.name(_datetime2(meta, fail))}(from_bytes("
                   f"data[pos:pos + 5], 'big'), {micros}); pos += {5 + frac}")
    elif kind == TIMESTAMP2:
        frac = (meta + 1) // 2
        add(depth, f"{target} = {src.name(_timestamp(meta, fail))}(from_bytes("
                   f"data[pos:pos + 4], 'big'), {_fraction(frac, 4)}); pos += {4 + frac}")
    elif kind == TIME2:
        frac = (meta + 1) // 2
        if frac == 3:
            packed = "from_bytes(data[pos:pos + 6], 'big') - 0x800000000000"
        elif frac:
            packed = (f"{src.name(_time2_packed)}(from_bytes(data[pos:pos + 3], 'big') - "
                      f"0x800000, from_bytes(data[pos + 3:pos + {3 + frac}], 'big'), {frac})")
        else:
            packed = "(from_bytes(data[pos:pos + 3], 'big') - 0x800000) << 24"
        add(depth, f"{target} = {src.name(_time2)}({packed}); pos += {3 + frac}")
    elif kind == TIMESTAMP:
        add(depth, f"{target} = {src.name(_timestamp(0, fail))}(from_bytes("
                   "data[pos:pos + 4], 'little'), 0); pos += 4")
    elif kind == DATETIME:
        add(depth, f"{target} = {src.name(_datetime_old(fail))}(from_bytes("
                   "data[pos:pos + 8], 'little')); pos += 8")
    else:  # TIME
        add(depth, f"{target} = {src.name(_time_old)}(from_bytes(data[pos:pos + 3], 'little', "
                   "signed=True)); pos += 3")


def _read_bytes(src: _Source, depth: int, column: BinlogColumn, target: str,
                logical: LogicalType | None) -> None:
    """``_read_value`` of the types stored with a length: strings, BLOBs, GEOMETRY, JSON.
    Text is read as the server converts it for a SELECT: a single-byte character set by the
    server's own table of its 256 bytes (``src.tables``: Python's codecs differ, MariaDB's
    latin1 is cp1252 with the five bytes cp1252 leaves undefined as C1 controls), UTF-8 as
    is, another multi-byte set by Python's codec (:func:`_decoder`)."""
    add = src.add
    kind, meta = column.type, column.meta
    prefix = (1 if meta < 256 else 2) if kind in (VARCHAR, VAR_STRING, STRING) else meta
    if prefix == 1:
        add(depth, "n = data[pos]; pos += 1")
    else:
        add(depth, f"n = from_bytes(data[pos:pos + {prefix}], 'little'); pos += {prefix}")
    raw = "data[pos:pos + n]"
    if kind == GEOMETRY:
        add(depth, f"{target} = data[pos + 4:pos + n] if n else b''; pos += n")
        return
    if kind == JSON:
        add(depth, f"{target} = {src.name(_json_text)}({raw}); pos += n")
        return
    table = None
    if column.charset is None:  # no charset metadata: as the captured schema says
        codec: str | None = "" if logical is LogicalType.BINARY else "utf-8"
    else:
        table = src.tables(column.charset) if src.tables is not None else None
        codec = _codec(column.charset)
    if table is not None:
        add(depth, f"{target} = {src.name(codecs.charmap_decode)}({raw}, None, "
                   f"{src.name(table)})[0]; pos += n")
    elif codec is None:
        raise ConfigurationError(
            f"column {column.name!r} uses character set {column.charset}, which Python "
            "cannot decode: convert the column to utf8mb4")
    elif codec == "utf-8":
        add(depth, f"{target} = str({raw}, 'utf-8'); pos += n")
    elif codec:
        assert column.charset is not None
        add(depth, f"{target} = {src.name(_decoder(column.charset, codec))}({raw}); "
                   "pos += n")
    elif kind == STRING:  # BINARY(n): the binlog strips the zero padding SELECT keeps
        add(depth, f"{target} = {raw}.ljust({meta}, b'\\0'); pos += n")
    else:
        add(depth, f"{target} = {raw}; pos += n")


def _fraction(nbytes: int, at: int = 5) -> str:
    """The microseconds of a temporal value's fraction of ``nbytes`` big-endian bytes."""
    if not nbytes:
        return "0"
    scale = {1: " * 10000", 2: " * 100", 3: ""}[nbytes]
    return f"from_bytes(data[pos + {at}:pos + {at + nbytes}], 'big'){scale}"


def _fixed_run(columns: list[BinlogColumn]) -> str | None:
    """The ``struct`` format of columns read as one run, or None."""
    codes = [_STRUCT_CODE.get((c.type, c.unsigned)) for c in columns]
    return None if None in codes else "<" + "".join(c for c in codes if c)


@dataclass
class RowsDecoder:
    """The compiled reader of one table version's rows events with one set of present columns:
    ``read(data, pos)`` returns every row (an update's as ``(before, after)`` pairs)."""

    read: Callable[[bytes, int], list[Any]]
    source: str


def compile_rows(table_map: TableMap, schema: TableSchema | None, present: Sequence[int],
                 present_after: Sequence[int] | None, zero_dates: str = "error",
                 tables: Tables | None = None) -> RowsDecoder:
    """The decoder of rows events of ``table_map`` whose rows hold the columns ``present`` (and,
    for an update, ``present_after`` in the after image), giving rows in ``schema``'s order
    (with no schema: empty rows, to count them). ``schema`` has the table map's columns, by
    name (see :func:`shaped_like`). ``zero_dates`` (the URL option): a date Python cannot hold
    is a BadValue of its text (``error``) or None (``null``). ``tables``: the server's
    decoding of single-byte character sets (:data:`Tables`; without, Python's codecs)."""
    label = f"{table_map.schema}.{table_map.table}"
    binlog_index = {c.name: i for i, c in enumerate(table_map.columns)}
    if schema is not None and None in binlog_index:
        raise ConfigurationError(
            f"binlog rows of {label} carry no column names: the server needs "
            "binlog_row_metadata = FULL (MySQL >= 8.0.14, MariaDB >= 10.5)")
    wanted = []
    for column in schema.columns if schema is not None else ():
        at = binlog_index.get(column.name)
        if at is None:  # the schema rows are shaped by follows the table maps (shaped_like)
            raise ConfigurationError(
                f"binlog rows of {label} have no column {column.name!r} of the schema they "
                "are read with")
        wanted.append(at)
    src = _Source(tables)
    images = [present] if present_after is None else [present, present_after]
    src.add(0, "def read(data, pos):")
    src.add(1, "rows = []")
    src.add(1, "append = rows.append")
    src.add(1, "end = len(data)")
    src.add(1, "while pos < end:")
    for number, image in enumerate(images):
        _image(src, table_map, schema, wanted, set(image), f"r{number}",
               zero_dates == "null" or schema is None)
    src.add(2, "append(r0)" if present_after is None else "append((r0, r1))")
    src.add(1, "return rows")
    source = "\n".join(src.lines)
    exec(compile(source, f"<binlog rows of {label}>", "exec"), src.names)
    return RowsDecoder(src.names["read"], source)


def _image(src: _Source, table_map: TableMap, schema: TableSchema | None, wanted: list[int],
           present: set[int], target: str, null_dates: bool) -> None:
    """Lines reading one row image (its null bitmap, then each present column) into the tuple
    ``target``; a date Python cannot hold as None with ``null_dates``, else a BadValue."""
    columns = table_map.columns
    schema_columns = schema.columns if schema is not None else ()
    missing = [schema_columns[k].name for k, i in enumerate(wanted) if i not in present]
    if missing:
        raise ConfigurationError(
            f"binlog rows of {table_map.schema}.{table_map.table} lack column "
            f"{missing[0]!r}: the server needs binlog_row_image = FULL")
    order = sorted(present)
    logical = {i: schema_columns[k].type for k, i in enumerate(wanted)}
    nulls = (len(order) + 7) // 8
    if nulls == 1:
        src.add(2, "nb = data[pos]; pos += 1")
    else:
        src.add(2, f"nb = from_bytes(data[pos:pos + {nulls}], 'little'); pos += {nulls}")
    bit = 0
    k = 0
    while k < len(order):
        # a run of NOT NULL fixed-width columns: one unpack_from
        run: list[BinlogColumn] = []
        while k + len(run) < len(order):
            column = columns[order[k + len(run)]]
            if column.nullable or _fixed_run([column]) is None:
                break
            run.append(column)
        if len(run) > 1:
            fmt = _fixed_run(run)
            targets = ", ".join(f"v{order[k + j]}" for j in range(len(run)))
            src.add(2, f"{targets} = unpack_from({fmt!r}, data, pos); "
                       f"pos += {struct.calcsize(fmt or '')}")
            k += len(run)
            bit += len(run)
            continue
        i = order[k]
        column = columns[i]
        if column.nullable:
            src.add(2, f"if nb & {1 << bit}:")
            src.add(3, f"v{i} = None")
            src.add(2, "else:")
            _read_value(src, 3, column, f"v{i}", logical.get(i), null_dates)
        else:
            _read_value(src, 2, column, f"v{i}", logical.get(i), null_dates)
        k += 1
        bit += 1
    values = []
    for k, i in enumerate(wanted):
        value = f"v{i}"
        # integers SELECT reads as DECIMAL (BIGINT UNSIGNED, BIT(64))
        if schema_columns[k].type is LogicalType.DECIMAL and columns[i].type in (
                TINY, SHORT, INT24, LONG, LONGLONG, BIT):
            value = f"(None if v{i} is None else Decimal(v{i}))"
        values.append(value)
    src.add(2, f"{target} = ({', '.join(values)}{',' if len(values) == 1 else ''})")
