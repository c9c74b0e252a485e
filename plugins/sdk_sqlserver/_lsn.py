"""SQL Server offsets: ``(lsn, seq, op)`` from the change tables.

``lsn`` is the change's commit LSN (``__$start_lsn``), ``seq`` its ``__$seqval`` (the order of
changes inside the transaction) and ``op`` its ``__$operation``. Both LSNs are the documented
``binary(10)`` values (VLF sequence, log block, slot, big-endian), stored as 20 lower-case hex
digits: fixed-width hex compares like the bytes, so the order is a plain tuple comparison.
A watermark is ``(lsn, 0, 0)``: below every change committed at ``lsn``.
"""

from __future__ import annotations

from sdk import Offset

NAME = "sqlserver"
ZERO = "0" * 20
LSN_BYTES = 10


def lsn_hex(lsn: bytes | str) -> str:
    """An LSN as 20 lower-case hex digits, from the driver's bytes or hex text (``0x...`` ok)."""
    if isinstance(lsn, (bytes, bytearray)):
        if len(lsn) != LSN_BYTES:
            raise ValueError(f"an LSN is binary(10), got {len(lsn)} bytes")
        return bytes(lsn).hex()
    text = lsn[2:] if lsn[:2].lower() == "0x" else lsn
    if len(text) != 2 * LSN_BYTES:
        raise ValueError(f"an LSN is 20 hex digits, got {lsn!r}")
    int(text, 16)  # rejects non-hex
    return text.lower()


def lsn_bytes(lsn: str) -> bytes:
    """The ``binary(10)`` value to send as a query parameter."""
    return bytes.fromhex(lsn_hex(lsn))


def make_offset(lsn: bytes | str, seq: bytes | str = ZERO, op: int = 0) -> Offset:
    """The offset of a change (or, with the defaults, the watermark just below ``lsn``)."""
    return Offset.from_sorted(NAME, (("lsn", lsn_hex(lsn)), ("op", op), ("seq", lsn_hex(seq))))


def parts(offset: Offset) -> tuple[str, str, int]:
    """``(lsn, seq, op)``; hex strings of equal width, so tuples order like the log."""
    lsn, seq, op = offset["lsn"], offset.get("seq", ZERO), offset.get("op", 0)
    assert isinstance(lsn, str) and isinstance(seq, str) and isinstance(op, int), offset
    return lsn, seq, op


def from_numeric(value: int | str) -> str:
    """The hex LSN of a ``numeric(25,0)`` LSN as the DMVs give it (``database_transaction_begin
    _lsn``): decimal digits VLF * 10^15 + block * 10^5 + slot."""
    n = int(value)
    vlf, rest = divmod(n, 10**15)
    block, slot = divmod(rest, 10**5)
    if vlf >= 1 << 32 or block >= 1 << 32 or slot >= 1 << 16:
        raise ValueError(f"not a numeric LSN: {value!r}")
    return f"{vlf:08x}{block:08x}{slot:04x}"


def from_colon_text(text: str) -> str:
    """The hex LSN of the ``VLF:block:slot`` hex text some DMVs give (``sys.dm_cdc_log_scan
    _sessions.end_lsn``, ``sys.dm_db_log_stats.log_end_lsn``)."""
    vlf, block, slot = (int(p, 16) for p in text.strip().split(":"))
    return f"{vlf:08x}{block:08x}{slot:04x}"


def increment(lsn: str) -> str:
    """The next ``binary(10)`` value as an 80-bit number: no LSN lies strictly between ``lsn``
    and it, so it is a valid exclusive bound computed without I/O."""
    return f"{int(lsn_hex(lsn), 16) + 1:020x}"
