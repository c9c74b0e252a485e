"""``sdk verify``'s work on one chunk: is the mirror's chunk the source's, and if not, which rows
differ. Spark-free: the chunks run in the driver's threads or as Spark tasks alike.

A chunk is a key range of one table, cut as the snapshot cuts splits. Its source checksum is
taken, then the log's position (the chunk's high watermark, ``current_offset``), and the
target's once the running sync has applied the log past that watermark
(:attr:`Verifier.wait_past`): a change made before the source was read is then in the target
too, so it is no difference. Where the two differ the chunk is cut smaller and compared again,
down to each row's hash; a row that differs is read again on both sides in a few rounds, and
is reported only when the target still differs from a source value that held over two rounds
(a row changed between the reads, the sync not yet past it, settles). A row that never holds
still is reported apart, as unsettled, not as a difference.
"""

from __future__ import annotations

import contextlib
import functools
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
NARROW_ROWS = 2_000
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

    def hashes(self, table: TableSchema, split: SnapshotSplit) -> dict[str, tuple[Key, int]]:
        """Each row's hash by the canonical text of its key."""
        key_types = [table.columns[i].type for i in table.key_index]
        with self.dialect.passing_faults():
            found = self.dialect.row_hashes(self.conn(), table, split)
            if found is None:
                types = [c.type for c in table.columns]
                found = ((table.key_of(r), row_hash(r, types)) for r in self.rows(table, split))
            return {canonical_row(key, key_types): (key, value) for key, value in found}

    def row_map(self, table: TableSchema, split: SnapshotSplit, wanted: set[str]
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
        result = ChunkResult(chunk)
        self._compare(chunk, result, top=True)
        return result

    def _window(self, read: Callable[[], Any]) -> Any:
        """``read`` the source between two watermarks, then wait for the sync to pass the
        high one."""
        found = read()
        if self.wait_past is not None:
            self.wait_past(self.source.offset())
        return found

    def _compare(self, chunk: Chunk, result: ChunkResult, top: bool = False) -> None:
        table, mirror, split = chunk.table, chunk.mirror, chunk.split
        source, in_source = self._window(lambda: self.source.checksum(table, split))
        self.took(source.rows)
        target, in_target = self.target.checksum(mirror, split)
        if top:
            result.rows, result.in_server = source.rows, in_source and in_target
        if source == target:
            return
        parts = self._parts(chunk, max(source.rows, target.rows))
        if len(parts) > 1:
            for part in parts:
                self._compare(part, result)
            return
        self._rows(chunk, result)

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
        """Find the rows of a small chunk that differ, then settle them."""
        table, mirror, split = chunk.table, chunk.mirror, chunk.split
        source = self._window(lambda: self.source.hashes(table, split))
        target = self.target.hashes(mirror, split)
        differing = {k for k in source.keys() | target.keys()
                     if source.get(k, (None, None))[1] != target.get(k, (None, None))[1]}
        if not differing:
            return  # the chunk's checksums differed by rows changed since: settled
        found = self._settle(chunk, differing)
        result.differences.extend(found[0])
        result.unsettled.extend(found[1])
        if found[0]:
            result.ranges.append((split.start, split.end))

    def _settle(self, chunk: Chunk, keys: set[str]) -> tuple[list[Difference], list[Key]]:
        """Read rows ``keys`` of ``chunk`` again, in rounds; those whose target differs from a
        source value that held over two rounds are differences (each round's first, when
        ``--static``), those still moving at the end are unsettled."""
        table, mirror, split = chunk.table, chunk.mirror, chunk.split
        types = [c.type for c in table.columns]
        last: dict[str, int | None] = {}
        seen: dict[str, Key] = {}
        found: list[Difference] = []
        pause = self.pause
        for round_ in range(self.rounds + 1):
            source = self._window(functools.partial(self.source.row_map, table, split, keys))
            target = self.target.row_map(mirror, split, keys)
            moving = set()
            for text in sorted(keys):
                s, t = source.get(text), target.get(text)
                if s is not None or t is not None:
                    seen[text] = table.key_of(s if s is not None else t)  # type: ignore[arg-type]
                s_hash = None if s is None else row_hash(s, types)
                if s_hash == (None if t is None else row_hash(t, types)):
                    continue  # equal now: it was a change in flight
                if self.wait_past is None or (round_ > 0 and last.get(text, -1) == s_hash):
                    row = s if s is not None else t
                    assert row is not None
                    kind = "missing" if t is None else "extra" if s is None else "changed"
                    found.append(Difference(str(table.table), table.key_of(row), kind, s, t))
                else:
                    moving.add(text)
                last[text] = s_hash
            keys = moving
            if not keys:
                break
            time.sleep(pause)
            pause *= 2
        return found, [seen[text] for text in sorted(keys) if text in seen]
