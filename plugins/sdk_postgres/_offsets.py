"""PostgreSQL offsets: ``(lsn, n)``, the commit LSN of the change's transaction and the change's
index in it, so changes order by commit as the log applies them. A watermark is ``(lsn, 0)``.

An LSN is kept as an int; :func:`lsn_text` and :func:`lsn_int` convert it to and from the
server's ``X/Y`` spelling (``pg_lsn``).
"""

from __future__ import annotations

from sdk import Offset

NAME = "postgres"


def lsn_text(lsn: int) -> str:
    """An LSN as ``pg_lsn`` text."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def lsn_int(text: str) -> int:
    """An LSN from ``pg_lsn`` text."""
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


def make_offset(lsn: int, n: int = 0) -> Offset:
    """The offset of change ``n`` of the transaction committed at ``lsn``."""
    return Offset.from_sorted(NAME, (("lsn", lsn), ("n", n)))


def parts(offset: Offset) -> tuple[int, int]:
    """An offset as ``(lsn, n)``, which compare as the offsets do."""
    lsn, n = offset["lsn"], offset.get("n", 0)
    assert isinstance(lsn, int) and isinstance(n, int), offset
    return lsn, n


def compare(a: Offset, b: Offset) -> int:
    """-1, 0 or 1 as ``a`` is below, at or above ``b``."""
    x, y = parts(a), parts(b)
    return (x > y) - (x < y)
