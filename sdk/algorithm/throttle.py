"""Pacing a reader to a rate (``snapshot.rows-per-second``, ``log.changes-per-second``), for a
source that must not be read faster: after each batch of ``n`` items, wait until the items so
far would have taken the rate's time. Only the reading waits; what is read, and its offsets,
do not change, so exactly-once holds whatever the rate."""

from __future__ import annotations

import time


class Throttle:
    """Keeps ``take``'s callers at ``rate`` items per second on average from the first call,
    or from ``since`` (a wall-clock time, ``time.time()``: when a micro-batch was planned, so
    the time its task took to start counts against the schedule and is read up). A ``since``
    more than :data:`MOST_CREDIT` seconds back (a task that waited for a free core, a clock
    on another machine) counts as that many: a reader never runs ahead of the rate by more."""

    def __init__(self, rate: float, since: float | None = None) -> None:
        if rate <= 0:
            raise ValueError(f"a rate is positive, not {rate}")
        self.rate = rate
        self.since = since
        self.taken = 0
        self.started: float | None = None

    def take(self, items: int) -> None:
        """Count ``items`` just read; sleep while the reader is ahead of the rate."""
        now = time.monotonic()
        if self.started is None:
            late = 0.0 if self.since is None else time.time() - self.since
            self.started = now - min(max(late, 0.0), MOST_CREDIT)
        self.taken += items
        ahead = self.taken / self.rate - (now - self.started)
        if ahead > 0:
            time.sleep(ahead)


MOST_CREDIT = 5.0
"""Seconds of a late start a throttle reads up at most (see :class:`Throttle`)."""


def throttle(rate: float | None, share: float = 1.0, since: float | None = None
             ) -> Throttle | None:
    """A throttle at ``rate * share`` (the share of one of several readers) from ``since``
    (see :class:`Throttle`), or None for no limit."""
    return None if rate is None else Throttle(rate * share, since)
