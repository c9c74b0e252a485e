"""Arrow columns as ``COPY ... (FORMAT binary)`` data, built a column at a time by numpy.

PostgreSQL parses a binary field by copying its bytes (an integer, a float, a date, a
timestamp, text) where the text format makes it parse digits, dates and escapes: loading
benchmarks/e2e_sync.py's table took ~25% less of the server's CPU in binary. A binary field
must be exactly its column's type, so a table is written in binary only when every column's
logical type maps to one :data:`TYPNAMES` names and the target's column has that type (the
caller checks the catalog); anything else (a real, a time, an interval, JSON, a decimal of
more than 18 digits or a scale over 16, a date or timestamp outside years 1-9999, which the
text path also leaves to the row path) keeps the text format.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sdk import Column, LogicalType

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

L = LogicalType

TYPNAMES: dict[LogicalType, tuple[str, ...]] = {
    L.BOOLEAN: ("bool",), L.INT8: ("int2",), L.INT16: ("int2",), L.INT32: ("int4",),
    L.INT64: ("int8",), L.FLOAT64: ("float8",), L.STRING: ("text", "varchar"),
    L.BINARY: ("bytea",), L.DATE: ("date",), L.TIMESTAMP: ("timestamp",),
    L.TIMESTAMP_TZ: ("timestamptz",), L.DECIMAL: ("numeric",),
}
"""The PostgreSQL types (``pg_type.typname``) whose binary form is written here for a logical
type: the one :func:`._target.target_type` creates, and for text also ``varchar``, which
reads the same bytes."""

_WIDTHS = {L.INT8: 2, L.INT16: 2, L.INT32: 4, L.INT64: 8}
_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # signature, flags, no header extension
_DAYS_1970_TO_2000 = 10_957
_MICROS_1970_TO_2000 = _DAYS_1970_TO_2000 * 86_400_000_000
_MAX_DIGITS = 18  # an unscaled decimal that fits int64
_MAX_SCALE = 16  # its fraction scaled to whole base-10000 digits fits uint64 too


def binary_types(columns: Sequence[Column]) -> bool:
    """Whether every one of ``columns`` has a type written here (its values may still send
    the table to the text format: :func:`copy_binary` says)."""
    return all(c.type in TYPNAMES and not (c.type is L.DECIMAL and not _narrow(c))
               for c in columns)


def _narrow(column: Column) -> bool:
    return column.precision is not None and column.precision <= _MAX_DIGITS


def copy_binary(rows: pa.Table, columns: Sequence[Column]) -> bytes | None:
    """``rows`` (whose columns are ``columns``, in order) as one ``COPY`` binary stream, or
    None when a column or value is not written here (the text format then). Each column
    becomes an Arrow array of its fields' bytes (length and value, or the NULL mark), and
    Arrow's join kernel lays the rows end to end, as :func:`._target.copy_text` does."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not binary_types(columns):
        return None
    fields = []
    for array, column in zip(rows.columns, columns, strict=True):
        field = _field(array.combine_chunks(), column)
        if field is None:
            return None
        fields.append(field)
    count = pa.scalar(len(fields).to_bytes(2, "big"), pa.binary())
    lines = pc.binary_join_element_wise(count, *fields, pa.scalar(b"", pa.binary()))
    return b"".join((_HEADER, end_to_end(lines), b"\xff\xff"))  # trailer: field count -1


def end_to_end(values: pa.Array) -> memoryview:
    """A string or binary array's values as they lie end to end in its data buffer, with no
    copy (a ``COPY`` stream of its rows)."""
    if not len(values):
        return memoryview(b"")
    _, offsets, data = values.buffers()
    ends = memoryview(offsets).cast("i")
    return memoryview(data)[ends[values.offset]:ends[values.offset + len(values)]]


_NULL = b"\xff\xff\xff\xff"
"""A NULL field: its length -1, no value."""


def _fixed_fields(values: np.ndarray, valid: pa.Array) -> pa.Array:
    """Fields of one width: ``values`` (a row of bytes each, a NULL's anything) after their
    length, or the NULL mark where ``valid`` is false."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n, width = values.shape
    prefixed = np.empty((n, 4 + width), dtype=np.uint8)
    prefixed[:, :4] = np.frombuffer(width.to_bytes(4, "big"), dtype=np.uint8)
    prefixed[:, 4:] = values
    fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(4 + width), n,
                                                 [None, pa.py_buffer(prefixed)])
    return pc.if_else(valid, fixed.cast(pa.binary()), pa.scalar(_NULL, pa.binary()))


def _field(array: pa.Array, column: Column) -> pa.Array | None:
    """``array``'s binary fields as PostgreSQL reads ``column``'s type, or None."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from sdk.dialect.arrow import python_units

    kind, logical = array.type, column.type
    valid = array.is_valid()
    n = len(array)
    if logical in (L.STRING, L.BINARY):
        if not (pa.types.is_string(kind) or pa.types.is_binary(kind)):
            return None
        values = array.cast(pa.binary())
        lengths = pc.binary_length(values).fill_null(0).to_numpy().astype(">i4")
        prefix = pa.FixedSizeBinaryArray.from_buffers(
            pa.binary(4), n, [None, pa.py_buffer(lengths.view(np.uint8))]).cast(pa.binary())
        joined = pc.binary_join_element_wise(prefix, values, pa.scalar(b"", pa.binary()))
        return pc.fill_null(joined, pa.scalar(_NULL, pa.binary()))
    if logical is L.DECIMAL:
        digits = _numeric(array, column)
        return None if digits is None else _fixed_fields(digits, valid)
    if logical in (L.DATE, L.TIMESTAMP, L.TIMESTAMP_TZ):
        units = python_units(array, logical)  # years 1-9999, as the text path
        if units is None:
            return None
        if logical is L.DATE:
            days = units.fill_null(0).to_numpy().astype(np.int64) - _DAYS_1970_TO_2000
            return _fixed_fields(_bytes(days, ">i4"), valid)
        micros = units.fill_null(0).to_numpy() - _MICROS_1970_TO_2000
        return _fixed_fields(_bytes(micros, ">i8"), valid)
    if logical is L.BOOLEAN:
        if not pa.types.is_boolean(kind):
            return None
        flags = array.fill_null(False).to_numpy(zero_copy_only=False)
        return _fixed_fields(flags.astype(np.uint8).reshape(n, 1), valid)
    if logical is L.FLOAT64:
        if not pa.types.is_floating(kind):
            return None
        doubles = array.cast(pa.float64()).fill_null(0).to_numpy()
        return _fixed_fields(_bytes(doubles, ">f8"), valid)
    width = _WIDTHS.get(logical)
    if width is None or not pa.types.is_integer(kind):
        return None
    try:  # a value out of the target's range is left to the text path, which refuses it
        typed = pc.cast(array, pa.int64() if width == 8 else pa.int32() if width == 4
                        else pa.int16())
    except pa.ArrowInvalid:
        return None
    return _fixed_fields(_bytes(typed.fill_null(0).to_numpy(), f">i{width}"), valid)


def _bytes(values: np.ndarray, dtype: str) -> np.ndarray:
    """``values`` big-endian as ``dtype``, a row of bytes each."""
    import numpy as np

    typed = values.astype(dtype)
    return typed.view(np.uint8).reshape(len(values), typed.dtype.itemsize)


def _numeric(array: pa.Array, column: Column) -> np.ndarray | None:
    """A decimal column as ``numeric``'s binary form: base-10000 digits, a weight (the
    first digit's power of 10000), a sign and the display scale. Each value is written with
    the same digits (leading and trailing zero ones included), which the server strips."""
    import numpy as np
    import pyarrow as pa

    kind = array.type
    if not pa.types.is_decimal128(kind) or kind.precision > _MAX_DIGITS or \
            not 0 <= kind.scale <= _MAX_SCALE or \
            kind.scale != (column.scale or 0):
        return None
    scale = kind.scale
    words = np.frombuffer(array.buffers()[1], dtype="<i8", count=2 * len(array),
                          offset=array.offset * 16)
    unscaled = words[0::2]  # 18 digits or fewer lie in the low word (a NULL's: anything)
    negative = unscaled < 0
    magnitude = np.abs(unscaled).astype(np.uint64)
    whole, fraction = np.divmod(magnitude, np.uint64(10 ** scale))
    fraction_digits = -(-scale // 4)
    whole_digits = max(1, -(-(kind.precision - scale) // 4))
    fraction = fraction * np.uint64(10 ** (4 * fraction_digits - scale))
    count = whole_digits + fraction_digits
    digits = np.empty((len(unscaled), count), dtype=">i2")
    for i in range(fraction_digits - 1, -1, -1):
        fraction, digits[:, whole_digits + i] = np.divmod(fraction, np.uint64(10_000))
    for i in range(whole_digits - 1, -1, -1):
        whole, digits[:, i] = np.divmod(whole, np.uint64(10_000))
    head = np.empty((len(unscaled), 4), dtype=">i2")
    head[:, 0], head[:, 1], head[:, 3] = count, whole_digits - 1, scale
    head[:, 2] = np.where(negative, 0x4000, 0)
    values = np.concatenate([head, digits], axis=1).astype(">i2")  # concatenated: native
    return values.view(np.uint8).reshape(len(unscaled), values.shape[1] * 2)
