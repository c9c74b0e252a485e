"""The incremental filter: which log events to emit after a snapshot (docs/design.md, 'The log
phase').

One log reader starts at the smallest split watermark. An event of table T at offset p for
key k is emitted when p is at or above T's largest watermark (T is then in its pure-log phase
and its splits are forgotten), or else when p is at or above the watermark of the split whose
range holds k (found by binary search over the split boundaries). An update that moved the key
is judged as a delete of the old key and an insert of the new one, each against its own split.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from ..types import ChangeEvent, FinishedSplit, Key, Offset, TableId

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


class IncrementalFilter:
    """Decides, per event, what the log phase emits. Tables absent from ``finished`` emit
    everything (they had no snapshot, or are already in their pure-log phase)."""

    def __init__(self, finished: Mapping[TableId, Sequence[FinishedSplit]], compare: Compare):
        self.compare = compare
        self._tables = {table: table_splits(splits, compare) for table, splits in finished.items()}

    @property
    def filtered_tables(self) -> set[TableId]:
        """Tables still in their snapshot-overlap phase."""
        return set(self._tables)

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

    def route(self, event: ChangeEvent) -> ChangeEvent | None:
        """The event to emit for ``event`` (itself, or the half of a key-moving update that is
        still due), or None."""
        splits = self._tables.get(event.table)
        compare = self.compare
        if splits is None or compare(event.offset, splits.max_watermark) >= 0:
            return event
        new_due = compare(event.offset, splits.watermark_of(event.key)) >= 0
        if event.old_key is None:
            return event if new_due else None
        old_due = compare(event.offset, splits.watermark_of(event.old_key)) >= 0
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
