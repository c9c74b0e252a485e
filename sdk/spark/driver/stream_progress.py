"""What a stream's driver knows of the log's head and tells of its progress: the head, asked at
most every ``log.poll-interval.ms`` (and never past a Trigger.AvailableNow target), and the
progress report ``sdk status`` and :func:`sdk.spark.progress` read, written at each batch."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ...algorithm import Phase, SyncState
from ...algorithm.lineage import check_not_past_head
from ...algorithm.progress import ProgressReport, progress_of
from ...dialect.codec import dumps
from ...dialect.types import Connection, Offset, SnapshotSplit
from ...job.spec import SourceSpec
from ..state.engine_state import read_progress, write_progress
from ..state.statestore import StateStore

REQUESTS_SHOWN = 20
"""The snapshot requests a report lists: the last ones taken up."""


CAUGHT_UP_AT = "caught_up_at"
"""The report's key for :attr:`StreamProgress.caught_up_at`: what bounds the lag a report
shows while the head moved past the applied position (WAL other databases wrote, say)."""


class StreamProgress:
    """The log head as the driver last asked it, the Trigger.AvailableNow target, and the
    progress report it wrote last (with the snapshot requests ``outcomes`` it took up)."""

    def __init__(self, spec: SourceSpec, store: StateStore,
                 outcomes: Mapping[str, Mapping[str, Any]]) -> None:
        self.spec, self.store, self.outcomes = spec, store, outcomes
        self.head: tuple[float, Offset | None] = (0.0, None)
        """When the head was asked (``time.monotonic()``), and what it was."""
        self.target: Offset | None = None
        """Under Trigger.AvailableNow: where the run ends (the head when it began, or later)."""
        self.report: ProgressReport | None = None
        self.caught_up_at: float | None = None
        """When (seconds since the epoch) the head was read that the applied position last
        reached: every change not applied yet committed after it (kept across runs)."""
        self.tables: Mapping[str, Any] | None = None
        """The per-table progress written last (written again only when changed)."""

    def log_head(self, conn: Connection, position: Offset) -> Offset:
        """The log head, asked at most every ``log.poll-interval.ms``; never past the
        Trigger.AvailableNow target."""
        dialect = self.spec.dialect_obj
        at, head = self.head
        if head is None or time.monotonic() - at >= self.spec.head_poll_seconds:
            head = dialect.current_offset(conn)
            self.head = (time.monotonic(), head)
            check_not_past_head(dialect, position, head, self.spec.config.masked_url)
        if self.target is not None and dialect.compare_offset(head, self.target) > 0:
            return self.target
        return head

    def extend_target(self, sync: SyncState) -> None:
        """Under Trigger.AvailableNow, read the log up to the highest watermark of the
        splits still filtered too: a table read again (or snapshotted) after the target was
        taken then reaches its pure-log phase in this run, and requests waiting for it (a
        table read again after a schema change) are served before the run ends."""
        if self.target is None:
            return
        compare = self.spec.dialect_obj.compare_offset
        for splits in sync.finished.values():
            for split in splits:
                if compare(split.watermark, self.target) > 0:
                    self.target = split.watermark

    def write(self, sync: SyncState, counted: int, applied: Offset | None,
              inflight: Sequence[SnapshotSplit] = ()) -> None:
        """Write the progress report that ``sdk status`` and :func:`sdk.spark.progress` read:
        ``sync`` counts the splits of the states up to number ``counted``; those of a later
        batch are counted as they are staged (:func:`.engine_state.live_progress`). Its log
        position is ``applied`` (where the last committed batch ended, None before one), not
        the end of a batch planned: caught up once that reaches the head."""
        head = self.head[1]
        caught_up = None
        if head is not None and sync.position is not None:
            compare = self.spec.dialect_obj.compare_offset
            if self.target is not None and compare(head, self.target) > 0:
                head = self.target  # Trigger.AvailableNow: caught up means at its target
            caught_up = applied is not None and compare(applied, head) >= 0
        previous = self.report
        if previous is None:  # a new driver: the report on disk, its tables written already
            previous = read_progress(self.store)
            if previous is not None:
                self.tables = previous.tables
                at = previous.extra.get(CAUGHT_UP_AT)
                self.caught_up_at = None if at is None else float(at)
        if caught_up:
            self.caught_up_at = time.time() - (time.monotonic() - self.head[0])
        report = progress_of(replace(sync, position=applied), self.spec.options.split_size,
                             previous, head, caught_up, inflight)
        requests = {**(previous.requests if previous else {}), **self.outcomes}
        extra = {**report.extra}
        if self.caught_up_at is not None:
            extra[CAUGHT_UP_AT] = self.caught_up_at
        self.report = replace(report, counted=counted, extra=extra,
                              requests=dict(list(requests.items())[-REQUESTS_SHOWN:]))
        self.tables = write_progress(self.store, self.report, self.tables)

    def write_if_moved(self, sync: SyncState, counted: int) -> None:
        """With no new batch: report again when the log head moved relative to what was
        applied (caught up now, or fallen behind), not at every poll."""
        head = self.head[1]
        if head is None or sync.position is None or sync.phase is not Phase.LOG:
            return
        caught_up = self.spec.dialect_obj.compare_offset(sync.position, head) >= 0
        if self.report is None or self.report.reached_head != caught_up or \
                self.report.position != dumps(sync.position.to_json()):
            self.write(sync, counted, sync.position)

    def shown(self) -> dict[str, Any] | None:
        """What the streaming query's progress shows as the source's ``latestOffset``."""
        report = self.report
        if report is None:
            return None
        tables = {name: f"{t.splits_done}/{t.splits_estimated} splits, {t.rows} rows"
                  for name, t in report.tables.items()}
        return {"phase": report.phase_name, "rows": report.rows, "tables": tables,
                "caught_up": bool(report.caught_up)}
