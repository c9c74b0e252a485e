"""Snapshot splits read straight into Arrow (``read_range_arrow``).

pymysql decodes a row of the text protocol in Python, a value at a time (7 us a row for
benchmarks/e2e_sync.py's six columns, most of a MariaDB snapshot's CPU). Here the split's row
packets are taken off the socket as they are, cut into columns by numpy (the protocol writes
each value as a length and its text, so the column's values are found for all rows at once)
and each column is cast by Arrow: ~1.5 us a row, and no Python value per cell downstream.

Only columns whose text Arrow reads as pymysql and :func:`._types.normalizer` do are taken:
integers, DOUBLE, decimals that fit ``decimal128``, text, variable-length bytes, DATE,
DATETIME and TIMESTAMP. A zero date, or a date Python cannot hold, becomes NULL as there under
``zero_dates=null``; under ``zero_dates=error`` (the default) the row path reads it as a
``BadValue``, which Arrow cannot carry, so a split holding one is left to it. A table with
another column, or a value Arrow refuses, is read by ``read_range`` instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sdk import Column, LogicalType, TableSchema
from sdk.dialect.arrow import MAX_DECIMAL, arrow_type

from ._types import _BINARY, _TEXT

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

L = LogicalType
_INTEGERS = {L.INT8, L.INT16, L.INT32, L.INT64}
_INTEGER_TYPES = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint"}
_DATES = {L.DATE, L.TIMESTAMP, L.TIMESTAMP_TZ}
_NOT_A_DATE = r"^0000-|^\d{4}-00-|^\d{4}-\d{2}-00"
"""Dates Python cannot hold (year 0, a zero month or day), which pymysql gives as text and
the dialect reads as NULL (``zero_dates=null``) or a BadValue; Arrow would read year 0 as a
date. (A day past its month's end Arrow refuses: the row path reads that split.)"""
_MAX_PACKET = 0xFFFFFF
_HEAD = 12
"""The bytes of a value a binary view holds itself (all of a value that short)."""


def _base(column: Column) -> str:
    return column.source_type.lower().split("(")[0].split(" ")[0]


def readable(column: Column) -> bool:
    """Whether the column's text is read as Arrow here exactly as the row path reads it."""
    base = _base(column)
    if column.type in _INTEGERS:
        return base in _INTEGER_TYPES
    if column.type is L.DECIMAL:
        return base in ("decimal", "numeric", "bigint") and \
            (column.precision or MAX_DECIMAL + 1) <= MAX_DECIMAL
    if column.type is L.FLOAT64:
        return base in ("double", "real")
    if column.type is L.STRING:
        return base in _TEXT
    if column.type is L.BINARY:
        return base in _BINARY
    return column.type in _DATES and base in ("date", "datetime", "timestamp")


def read_split(raw: Any, table: TableSchema, sql: str, args: list[Any],
               zero_dates: str = "error") -> pa.Table | None:
    """Run ``sql`` (the split's SELECT of ``table``'s columns, ``args`` its parameters) on
    pymysql connection ``raw`` and return its rows as Arrow, or None when a value does not
    convert, or is a date Python cannot hold under ``zero_dates`` ``error`` (every row is read
    off the socket either way)."""
    packets = _row_packets(raw, raw.cursor().mogrify(sql, args))
    try:
        return _columns(table, packets, zero_dates == "null")
    except _NotArrowError:
        return None


class _NotArrowError(Exception):
    """A value the Arrow path cannot read as the row path does."""


def _row_packets(raw: Any, sql: str) -> list[bytes]:
    """The row packets of ``sql``'s result, read off the socket unparsed. Mirrors pymysql's
    unbuffered reading: a lost connection closes it and raises its OperationalError, an
    error packet raises the server's error."""
    from pymysql import err
    from pymysql.constants import CR
    from pymysql.protocol import MysqlPacket

    raw.query(sql, unbuffered=True)
    result = raw._result  # the columns are read; the rows are on the socket
    read = raw._rfile.read
    rows: list[bytes] = []
    append = rows.append
    try:
        while True:
            header = read(4)
            size = header[0] | header[1] << 8 | header[2] << 16 if len(header) == 4 else -1
            data = read(size) if size >= 0 else b""
            if len(data) != size:
                raise OSError("short read")
            while size == _MAX_PACKET:  # a row of 16 MB or more comes in several packets
                header = read(4)
                size = header[0] | header[1] << 8 | header[2] << 16
                more = read(size)
                if len(more) != size:
                    raise OSError("short read")
                data += more
            if data[0] == 0xFE and len(data) < 9:  # EOF
                result._check_packet_is_eof(MysqlPacket(data, raw.encoding))
                result.unbuffered_active = False
                result.connection = None
                return rows
            if data[0] == 0xFF:
                result.unbuffered_active = False
                MysqlPacket(data, raw.encoding).raise_for_error()
            append(data)
    except OSError as exc:
        raw._force_close()
        raise err.OperationalError(CR.CR_SERVER_LOST,
                                   f"Lost connection to MySQL server during query ({exc})"
                                   ) from None


def _columns(table: TableSchema, packets: list[bytes], null_dates: bool) -> pa.Table:
    """The rows' values, column by column: each row is a run of length-prefixed values (a
    length byte below 251, or 252/253/254 and a 2/3/8-byte length; 251 is NULL); a date
    Python cannot hold as NULL with ``null_dates``, else refused."""
    import numpy as np
    import pyarrow as pa

    n = len(packets)
    sizes = np.fromiter(map(len, packets), dtype=np.int64, count=n)
    # _HEAD zero bytes after the rows: each value's first _HEAD bytes are in ``heads``
    data = np.frombuffer(b"".join([*packets, bytes(_HEAD)]), dtype=np.uint8)
    heads = np.lib.stride_tricks.as_strided(data, shape=(len(data) - _HEAD + 1, _HEAD),
                                            strides=(1, 1), writeable=False)
    position = np.zeros(n, dtype=np.int64)
    if n:
        np.cumsum(sizes[:-1], out=position[1:])
    columns = []
    for column in table.columns:
        first = data[position].astype(np.int64) if n else np.zeros(0, dtype=np.int64)
        null = first == 251
        width = np.where(first < 251, 0, np.select([first == 252, first == 253, first == 254],
                                                   [2, 3, 8], 0))
        length = np.where(first < 251, first, 0)
        for byte in range(8):  # the longer lengths, little-endian
            wide = width > byte
            if wide.any():
                at = position[wide] + 1 + byte
                length[wide] |= data[at].astype(np.int64) << (8 * byte)
        start = position + 1 + width
        columns.append(_column(column, _texts(data, heads, start, length, null), null_dates))
        position = start + length
    return pa.Table.from_arrays(columns, names=list(table.column_names))


def _texts(data: np.ndarray, heads: np.ndarray, start: np.ndarray, length: np.ndarray,
           null: np.ndarray) -> pa.Array:
    """One column's values as a binary view array over ``data`` (the bytes at ``start`` for
    ``length``; ``heads[i]`` the _HEAD bytes from ``data[i]``): 16 bytes a row, however long
    the values, and nothing copied but a value of at most 12 bytes, which a view holds itself
    (Arrow's layout: the length, then the bytes zero-padded, or their first four, a buffer
    index and the offset)."""
    import numpy as np
    import pyarrow as pa

    n = len(start)
    if int(length.sum()) >= 2**31 or len(data) >= 2**31:
        raise _NotArrowError("a column of 2 GB or more")  # views hold 32-bit offsets
    head = heads[start]  # a copy: 12 bytes a row
    head *= np.arange(_HEAD)[None, :] < length[:, None]  # the bytes past a value zeroed
    views = np.empty((n, 16), dtype=np.uint8)
    views[:, 4:16] = head
    words = views.view("<i4")  # four 32-bit words a row
    words[:, 0] = length
    long = length > _HEAD
    if long.any():  # the prefix stays; buffer 0 at the value's offset
        words[long, 2] = 0
        words[long, 3] = start[long]
    valid = pa.py_buffer(np.packbits(~null, bitorder="little")) if null.any() else None
    return pa.Array.from_buffers(pa.binary_view(), n,
                                 [valid, pa.py_buffer(views), pa.py_buffer(data)],
                                 null_count=int(null.sum()))


def _column(column: Column, values: pa.Array, null_dates: bool) -> pa.Array:
    """A column's values, read from their text as the row path reads them (a date Python
    cannot hold: NULL with ``null_dates``, else refused)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = arrow_type(column)
    try:
        if column.type is L.BINARY:
            return values.cast(pa.binary())
        text = values.cast(pa.large_string())  # checks the text is UTF-8, as pymysql does
        if column.type is L.STRING:
            return text.cast(pa.string())
        if column.type in _DATES:
            not_a_date = pc.match_substring_regex(text, _NOT_A_DATE)
            if null_dates:
                text = pc.if_else(not_a_date, pa.scalar(None, pa.large_string()), text)
            elif pc.any(not_a_date).as_py():
                raise _NotArrowError("a date Python cannot hold: the row path reads a BadValue")
            if column.type is L.DATE:
                return text.cast(pa.date32())
            return text.cast(pa.timestamp("us")).cast(kind)
        return text.cast(kind)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise _NotArrowError(str(exc)) from None
