"""``sdk verify``'s work on one chunk: is the mirror's chunk the source's, and if not, which rows
differ. Spark-free: the chunks run in the driver's threads or as Spark tasks alike.

A chunk is a key range of one table, cut as the snapshot cuts splits. Its source checksum is
taken, then the log's position (the chunk's high watermark, ``current_offset``), and the
target's once the running sync has applied the log past that watermark
(:attr:`Verifier.wait_past`): a change made before the source was read is then in the target
too, so it is no difference. Where the two differ the chunk is cut smaller and compared again,
down to each row's hash; a row that differs is compared again in a few rounds, and is reported
only when the target still differs from a source hash that held over two rounds (a row changed
between the reads, the sync not yet past it, settles). A row that never holds
still is reported apart, as unsettled, not as a difference.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..dialect.checksum import Checksum, canonical_row, checksum_rows, row_hash
from ..dialect.codec import encode_key
from ..dialect.config import ConnectionConfig
from ..dialect.manager import Dialect
from ..dialect.types import Connection, Key, Offset, Row, SnapshotSplit, TableSchema

FETCH_ROWS = 5_000
NARROW_ROWS = 10_000
"""A differing chunk of more rows than this is cut into :data:`NARROW_PARTS` and each part
compared again; one of at most this many is compared row by row."""
NARROW_PARTS = 8
ROUNDS = 5
"""Reads of a differing row (after the one that found it) before it is called unsettled."""
ROUND_PAUSE = 0.5
"""Seconds between two rounds, doubling each round: time for the sync to apply a change in
flight."""
SHOWN_CHARS = 120
"""A value in the report is cut to this many characters."""


@dataclass(frozen=True)
class Chunk:
    """One key range to compare: ``split`` of source table ``table``, mirrored as ``mirror``."""

    table: TableSchema
    mirror: TableSchema
    split: SnapshotSplit

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table.to_json(), "mirror": self.mirror.to_json(),
                "split": self.split.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Chunk:
        return cls(TableSchema.from_json(data["table"]), TableSchema.from_json(data["mirror"]),
                   SnapshotSplit.from_json(data["split"]))


@dataclass(frozen=True)
class Difference:
    """A row that differs: ``missing`` from the target, ``extra`` in it, or ``changed``."""

    table: str
    key: Key
    kind: str
    source: Row | None
    target: Row | None

    def to_json(self, columns: Sequence[str]) -> dict[str, Any]:
        def shown(row: Row | None) -> dict[str, Any] | None:
            if row is None:
                return None
            return {name: _shown(value) for name, value in zip(columns, row, strict=True)}
        return {"table": self.table, "key": encode_key(self.key), "kind": self.kind,
                "source": shown(self.source), "target": shown(self.target)}


def _shown(value: Any) -> Any:
    """A value as the report shows it: JSON's own types as they are, others as text, cut."""
    if value is None or isinstance(value, bool | int | float):
        return value
    text = value.hex() if isinstance(value, bytes | bytearray | memoryview) else str(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "..."


@dataclass
class ChunkResult:
    """What comparing one chunk found."""

    chunk: Chunk
    rows: int = 0
    """Rows of the source's chunk (as first read)."""
    differences: list[Difference] = field(default_factory=list)
    unsettled: list[Key] = field(default_factory=list)
    ranges: list[tuple[Key | None, Key | None]] = field(default_factory=list)
    """The parts of the chunk found to differ, as key ranges (what ``--repair`` reads
    again)."""
    in_server: bool = True
    """Both sides hashed the chunk in their servers (no rows read into the task)."""


class Side:
    """One database of a comparison, the source or the target, with a connection per thread."""

    def __init__(self, dialect: Dialect, config: ConnectionConfig, target: bool) -> None:
        self.dialect = dialect
        self.config = config
        self.target = target
        self._local = threading.local()
        self._all: list[Connection] = []
        self._lock = threading.Lock()

    def conn(self) -> Connection:
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self.dialect.connect(self.config)
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def close(self) -> None:
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            with contextlib.suppress(Exception):  # closing what may be broken already
                conn.close()

    def offset(self) -> Offset:
        return self.dialect.current_offset(self.conn())

    def rows(self, table: TableSchema, split: SnapshotSplit) -> Iterator[Row]:
        """The rows of ``split`` as the source's ``read_range`` gives them."""
        read = self.dialect.read_target_range if self.target else self.dialect.read_range
        batches = read(self.conn(), table, split, FETCH_ROWS)
        try:
            for batch in batches:
                yield from batch
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()

    def checksum(self, table: TableSchema, split: SnapshotSplit) -> tuple[Checksum, bool]:
        """The chunk's checksum, and whether the server computed it (else the rows were
        read and hashed here)."""
        with self.dialect.passing_faults():
            found = self.dialect.checksum_range(self.conn(), table, split)
            if found is not None:
                return found, True
            return checksum_rows(table, self.rows(table, split)), False

    def hashes(self, table: TableSchema, split: SnapshotSplit) -> Hashes:
        """Each row's hash by the canonical text of its key."""
        key_types = [table.columns[i].type for i in table.key_index]
        with self.dialect.passing_faults():
            found = self.dialect.row_hashes(self.conn(), table, split)
            if found is None:
                types = [c.type for c in table.columns]
                found = ((table.key_of(r), row_hash(r, types)) for r in self.rows(table, split))
            return {canonical_row(key, key_types): (key, value) for key, value in found}

    def row_map(self, table: TableSchema, split: SnapshotSplit, wanted: Mapping[str, Key]
                ) -> dict[str, Row]:
        """The rows of ``split`` whose key text is in ``wanted``, by key text."""
        key_types = [table.columns[i].type for i in table.key_index]
        out = {}
        with self.dialect.passing_faults():
            for row in self.rows(table, split):
                text = canonical_row(table.key_of(row), key_types)
                if text in wanted:
                    out[text] = row
        return out


@dataclass(frozen=True)
class SourceRead:
    """A chunk's source checksum, whether its server computed it, and the log's position
    after (None when ``--static``)."""

    checksum: Checksum
    in_server: bool
    high: Offset | None


WaitPast = Callable[[Offset], None]
"""Returns once the running sync has applied the log up to ``offset`` (raises when it does not
in time); does nothing for a source whose writes are stopped (``--static``)."""


@dataclass
class Verifier:
    """Compares chunks of ``source`` with ``target``; ``wait_past`` is None for ``--static``
    (the source's writes stopped: one read of each side, no rounds)."""

    source: Side
    target: Side
    wait_past: WaitPast | None
    took: Callable[[int], None] = lambda rows: None
    """Told the rows each source read covered (the ``--rows-per-second`` throttle)."""
    rounds: int = ROUNDS
    pause: float = ROUND_PAUSE

    def check(self, chunk: Chunk) -> ChunkResult:
        """Compare ``chunk``; the differing rows, narrowed down to their keys."""
        return self.finish(chunk, self.read_source(chunk))

    def read_source(self, chunk: Chunk) -> SourceRead:
        """The first half of :meth:`check`: the source's checksum of ``chunk`` and its high
        watermark (run ahead of :meth:`finish`, so the sync's lag is waited for once, not
        once a chunk)."""
        checksum, in_server = self.source.checksum(chunk.table, chunk.split)
        self.took(checksum.rows)
        high = None if self.wait_past is None else self.source.offset()
        return SourceRead(checksum, in_server, high)

    def finish(self, chunk: Chunk, read: SourceRead) -> ChunkResult:
        """The second half of :meth:`check`: once the sync is past ``read``'s watermark,
        the target's checksum, and where it differs, the rows that do."""
        if self.wait_past is not None and read.high is not None:
            self.wait_past(read.high)
        target, in_target = self.target.checksum(chunk.mirror, chunk.split)
        result = ChunkResult(chunk, read.checksum.rows, in_server=read.in_server and in_target)
        if read.checksum != target:
            self._narrow(chunk, max(read.checksum.rows, target.rows), result)
        return result

    def _window(self, read: Callable[[], Any]) -> Any:
        """``read`` the source, then wait for the sync to pass the log's position."""
        found = read()
        if self.wait_past is not None:
            self.wait_past(self.source.offset())
        return found

    def _narrow(self, chunk: Chunk, rows: int, result: ChunkResult) -> None:
        """Cut a differing chunk and compare its parts (all the parts' source checksums in
        one window), down to its rows."""
        parts = self._parts(chunk, rows)
        if len(parts) == 1:
            self._rows(chunk, result)
            return
        sources = self._window(lambda: [self.source.checksum(p.table, p.split)[0]
                                        for p in parts])
        for part, source in zip(parts, sources, strict=True):
            target = self.target.checksum(part.mirror, part.split)[0]
            if source != target:
                self._narrow(part, max(source.rows, target.rows), result)

    def _parts(self, chunk: Chunk, rows: int) -> list[Chunk]:
        """``chunk`` cut into about :data:`NARROW_PARTS` by the source's keys; itself when it
        is small, or when the source has too few rows in it to cut by."""
        if rows <= NARROW_ROWS:
            return [chunk]
        size = max(1, rows // NARROW_PARTS)
        split, dialect = chunk.split, self.source.dialect
        bounds: list[Key | None] = [split.start]
        while True:
            with dialect.passing_faults():
                end = dialect.next_boundary(self.source.conn(), chunk.table, bounds[-1], size)
            if end is None or (split.end is not None and not end < split.end):
                break
            bounds.append(end)
        bounds.append(split.end)
        return [replace(chunk, split=replace(split, start=lo, end=hi))
                for lo, hi in itertools.pairwise(bounds)]

    def _rows(self, chunk: Chunk, result: ChunkResult) -> None:
        """Find the rows of a small chunk that differ by their hashes, settle them, and read
        the values of those that still differ (for the report)."""
        table, mirror, split = chunk.table, chunk.mirror, chunk.split
        source = self._window(lambda: self.source.hashes(table, split))
        target = self.target.hashes(mirror, split)
        keys = _differing(source, target)
        if keys and self.wait_past is not None:
            keys = self._settle(chunk, keys, source, result)
        if not keys:
            return
        rows = self.source.row_map(table, split, keys), self.target.row_map(mirror, split, keys)
        for text in sorted(keys):
            s, t = rows[0].get(text), rows[1].get(text)
            if s is None and t is None:
                continue  # gone from both since: nothing to show or repair
            kind = "missing" if t is None else "extra" if s is None else "changed"
            result.differences.append(Difference(str(table.table), keys[text], kind, s, t))
        result.ranges.append((split.start, split.end))

    def _settle(self, chunk: Chunk, keys: dict[str, Key], first: Hashes, result: ChunkResult
                ) -> dict[str, Key]:
        """Compare the hashes of rows ``keys`` again, in rounds: those whose target differs
        from a source hash that held over two rounds are differences; those equal by now were
        changes in flight; those still moving after :attr:`rounds` are ``unsettled``."""
        table, mirror, split = chunk.table, chunk.mirror, chunk.split
        last = {text: first.get(text, (None, None))[1] for text in keys}
        found: dict[str, Key] = {}
        pause = self.pause
        for _ in range(self.rounds):
            time.sleep(pause)
            pause *= 2
            source = self._window(lambda: self.source.hashes(table, split))
            target = self.target.hashes(mirror, split)
            now = _differing(source, target, keys)
            for text, key in now.items():
                if last[text] == source.get(text, (None, None))[1]:
                    found[text] = key
                last[text] = source.get(text, (None, None))[1]
            keys = {text: key for text, key in now.items() if text not in found}
            if not keys:
                break
        result.unsettled.extend(keys.values())
        return found


Hashes = dict[str, tuple[Key, int]]
"""Each row's key and hash, by the canonical text of its key."""


def _differing(source: Hashes, target: Hashes, among: Mapping[str, Key] | None = None
               ) -> dict[str, Key]:
    """The rows (of ``among``, else all) whose hashes differ or that one side lacks."""
    texts = source.keys() | target.keys() if among is None else among.keys()
    out = {}
    for text in texts:
        s, t = source.get(text), target.get(text)
        if (s is None) != (t is None) or (s is not None and t is not None and s[1] != t[1]):
            found = s if s is not None else t
            out[text] = found[0] if found is not None else among[text]  # type: ignore[index]
    return out
