"""Binlog offsets: ``(file, pos, n)`` ordered by the file's sequence number, then position,
then the change's index in its transaction."""

from __future__ import annotations

from sdk import Offset

NAME = "mysql"


def make_offset(file: str, pos: int, n: int = 0) -> Offset:
    return Offset.from_sorted(NAME, (("file", file), ("n", n), ("pos", pos)))


def parts(offset: Offset) -> tuple[str, int, int]:
    file, pos, n = offset["file"], offset["pos"], offset.get("n", 0)
    assert isinstance(file, str) and isinstance(pos, int) and isinstance(n, int), offset
    return file, pos, n


def position_key(position: tuple[str, int, int]) -> tuple[int, int, int]:
    """Sort key: the binlog file's numeric suffix (``mysql-bin.000012`` -> 12), pos, n.
    File names compare by number, not as text (pipelinewise's bug)."""
    file, pos, n = position
    return int(file.rsplit(".", 1)[1]), pos, n
