"""The incremental filter: which log events to emit after a snapshot (docs/design.md, 'The log
phase').

One log reader starts at the smallest split watermark. An event of table T at offset p for
key k is emitted when p is at or above T's largest watermark (T is then in its pure-log phase
and its splits are forgotten), or else when p is at or above the watermark of the split whose
range holds k (found by binary search over the split boundaries). An update that moved the key
is judged as a delete of the old key and an insert of the new one, each against its own split.

A table added while the log flows (``pending``: its splits are still being read, between log
batches) has only some splits read: an event for a key of a split not read yet is not emitted
(that split's read, later, at a watermark above the event, brings the key's state), one for a
key of a read split is judged against that split's watermark as above. A table read again
while its changes flow (``open``: a snapshot on demand) differs in one point: an event for a
key of a split not read yet is emitted (the sync streamed the table until then; the split's
read later sends its keys as at its watermark).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from ..dialect.types import ChangeEvent, FinishedSplit, Key, Offset, TableId

Compare = Callable[[Offset, Offset], int]


@dataclass(slots=True)
class _TableSplits:
    boundaries: list[Key]
    """Start keys of splits 1..n-1 (split 0 starts unbounded)."""
    watermarks: list[Offset]
    max_watermark: Offset

    def watermark_of(self, key: Key) -> Offset:
        return self.watermarks[bisect_right(self.boundaries, key)]


def table_splits(finished: Sequence[FinishedSplit], compare: Compare) -> _TableSplits:
    """Index one table's finished splits for lookup by key."""
    ordered = sorted(finished, key=lambda f: f.split.index)
    for before, after in pairwise(ordered):
        if before.split.end != after.split.start:
            raise ValueError(f"splits {before.split.split_id} and {after.split.split_id} do "
                             "not meet: the split plan is incomplete")
    if not ordered or ordered[0].split.start is not None or ordered[-1].split.end is not None:
        raise ValueError("a table's finished splits must cover every key")
    watermarks = [f.watermark for f in ordered]
    highest = watermarks[0]
    for mark in watermarks[1:]:
        if compare(mark, highest) > 0:
            highest = mark
    return _TableSplits([f.split.start for f in ordered[1:]],  # type: ignore[misc]
                        watermarks, highest)


@dataclass(slots=True)
class _ReadSplits:
    """The splits read so far of a table added while the log flows (keys in no read split have
    no watermark yet): the bounded-start ones by start, and the first (unbounded start)."""

    starts: list[Key]
    ends: list[Key | None]
    watermarks: list[Offset]
    first_end: Key | None
    first_watermark: Offset | None
    """The first split's end and watermark; no watermark while it is not read."""

    def watermark_of(self, key: Key) -> Offset | None:
        at = bisect_right(self.starts, key) - 1
        if at >= 0:
            end = self.ends[at]
            return self.watermarks[at] if end is None or key < end else None
        if self.first_watermark is not None and (self.first_end is None or key < self.first_end):
            return self.first_watermark
        return None


def read_splits(finished: Sequence[FinishedSplit]) -> _ReadSplits:
    """Index the splits of a table read so far, for lookup by key."""
    bounded = sorted((f for f in finished if f.split.start is not None),
                     key=lambda f: f.split.index)
    first = next((f for f in finished if f.split.start is None), None)
    return _ReadSplits([f.split.start for f in bounded],  # type: ignore[misc]
                       [f.split.end for f in bounded], [f.watermark for f in bounded],
                       first.split.end if first else None, first.watermark if first else None)


class IncrementalFilter:
    """Decides, per event, what the log phase emits. Tables absent from ``finished`` emit
    everything (they had no snapshot, or are already in their pure-log phase); tables in
    ``pending`` were added while the log flows and have some splits read (see above)."""

    def __init__(self, finished: Mapping[TableId, Sequence[FinishedSplit]], compare: Compare,
                 pending: Iterable[TableId] = (), open: Iterable[TableId] = ()):
        self.compare = compare
        pending = set(pending)
        self._open = set(open) & pending
        self._tables = {table: table_splits(splits, compare)
                        for table, splits in finished.items() if table not in pending}
        self._partial = {table: read_splits(finished.get(table, ())) for table in pending}

    @property
    def filtered_tables(self) -> set[TableId]:
        """Tables still in their snapshot-overlap phase."""
        return set(self._tables) | set(self._partial)

    def start_offset(self) -> Offset | None:
        """The smallest watermark: where the log reader must start."""
        lowest: Offset | None = None
        for splits in self._tables.values():
            for mark in splits.watermarks:
                if lowest is None or self.compare(mark, lowest) < 0:
                    lowest = mark
        return lowest

    def pure_at(self, position: Offset) -> list[TableId]:
        """Tables whose every watermark is at or below ``position``: their pure-log phase
        starts there (every later change is emitted)."""
        return [t for t, s in self._tables.items() if self.compare(position, s.max_watermark) >= 0]

    def from_position(self, position: Offset) -> None:
        """Forget the tables already pure at ``position``, for a read of the events from there
        on: :meth:`route` would pass each of their events on after comparing its offset."""
        for table in self.pure_at(position):
            del self._tables[table]

    def route(self, event: ChangeEvent) -> ChangeEvent | None:
        """The event to emit for ``event`` (itself, or the half of a key-moving update that is
        still due), or None."""
        splits = self._tables.get(event.table)
        compare = self.compare
        if splits is None:
            partial = self._partial.get(event.table)
            if partial is None:
                return event
            return self._route_partial(partial, event)
        if compare(event.offset, splits.max_watermark) >= 0:
            return event
        new_due = compare(event.offset, splits.watermark_of(event.key)) >= 0
        if event.old_key is None:
            return event if new_due else None
        old_due = compare(event.offset, splits.watermark_of(event.old_key)) >= 0
        return self._halves(event, new_due, old_due)

    def _route_partial(self, partial: _ReadSplits, event: ChangeEvent) -> ChangeEvent | None:
        unread = event.table in self._open  # a key of a split not read yet: emitted or not

        def due(key: Key) -> bool:
            mark = partial.watermark_of(key)
            return unread if mark is None else self.compare(event.offset, mark) >= 0
        new_due = due(event.key)
        if event.old_key is None:
            return event if new_due else None
        return self._halves(event, new_due, due(event.old_key))

    @staticmethod
    def _halves(event: ChangeEvent, new_due: bool, old_due: bool) -> ChangeEvent | None:
        """A key-moving update whose old and new key are due or not: itself, one half, or
        nothing."""
        assert event.old_key is not None
        if new_due and old_due:
            return event
        if old_due:
            return ChangeEvent(event.table, "d", event.old_key, None, event.offset,
                               event.before, None, event.commit_ts)
        if new_due:
            return ChangeEvent(event.table, "c", event.key, event.after, event.offset,
                               None, None, event.commit_ts)
        return None

    def filter(self, events: Iterable[ChangeEvent]) -> list[ChangeEvent]:
        """Route a batch of events."""
        out = []
        for event in events:
            routed = self.route(event)
            if routed is not None:
                out.append(routed)
        return out
