"""Binlog offsets: ``(file, pos, n)`` ordered by the file's sequence number, then position,
then the change's index in its transaction.

An offset may also carry ``gtid``: the server's GTID position at ``(file, pos)``, for finding
the same point on a replica after a failover. It is informational: ``compare_offset`` ignores
it, and two offsets at one position with and without it are the same point of the log. On
MariaDB it is ``@@gtid_binlog_pos`` as of that position (``BINLOG_GTID_POS(file, pos)``): the
last ``domain-server-seq`` of each replication domain, comma-separated in domain order, so one
entry per domain however long the log. On MySQL it is the executed GTID set.
"""

from __future__ import annotations

from sdk import Offset

NAME = "mysql"


def make_offset(file: str, pos: int, n: int = 0, gtid: str | None = None) -> Offset:
    """The offset of change ``n`` of the transaction starting at ``file:pos``; ``gtid`` the GTID
    position there, when known."""
    if gtid is None:
        return Offset.from_sorted(NAME, (("file", file), ("n", n), ("pos", pos)))
    return Offset.from_sorted(NAME, (("file", file), ("gtid", gtid), ("n", n), ("pos", pos)))


def parts(offset: Offset) -> tuple[str, int, int]:
    file, pos, n = offset["file"], offset["pos"], offset.get("n", 0)
    assert isinstance(file, str) and isinstance(pos, int) and isinstance(n, int), offset
    return file, pos, n


def gtid_of(offset: Offset) -> str | None:
    """The offset's GTID position, or None when it has none (older offsets, MySQL events)."""
    gtid = offset.get("gtid")
    return gtid if isinstance(gtid, str) else None


def position_key(position: tuple[str, int, int]) -> tuple[int, int, int]:
    """Sort key: the binlog file's numeric suffix (``mysql-bin.000012`` -> 12), pos, n.
    File names compare by number, not as text (pipelinewise's bug)."""
    file, pos, n = position
    return int(file.rsplit(".", 1)[1]), pos, n


class MariadbGtidState:
    """MariaDB's GTID position (``@@gtid_binlog_pos``) followed along the binlog: the last GTID
    of each domain. ``text`` is its canonical spelling, kept up to date on each ``add`` (once
    per transaction, not per row)."""

    __slots__ = ("domains", "text")

    def __init__(self, position: str) -> None:
        self.domains: dict[int, str] = {}
        for gtid in position.split(","):
            gtid = gtid.strip()
            if gtid:
                self.domains[int(gtid.split("-", 1)[0])] = gtid
        self.text = self._spell()

    def _spell(self) -> str:
        return ",".join(self.domains[d] for d in sorted(self.domains))

    def add(self, domain: int, gtid: str) -> None:
        """Record that transaction ``gtid`` of ``domain`` is now in the log."""
        self.domains[domain] = gtid
        self.text = gtid if len(self.domains) == 1 else self._spell()


def canonical_mariadb_gtid(position: str) -> str:
    """``@@gtid_binlog_pos`` text with its domains in numeric order."""
    return MariadbGtidState(position).text
