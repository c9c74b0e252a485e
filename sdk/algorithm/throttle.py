"""Pacing a reader to a rate (``snapshot.rows-per-second``, ``log.changes-per-second``), for a
source that must not be read faster: after each batch of ``n`` items, wait until the items so
far would have taken the rate's time. Only the reading waits; what is read, and its offsets,
do not change, so exactly-once holds whatever the rate."""

from __future__ import annotations

import time


class Throttle:
    """Keeps ``take``'s callers at ``rate`` items per second on average from the first call."""

    def __init__(self, rate: float) -> None:
        if rate <= 0:
            raise ValueError(f"a rate is positive, not {rate}")
        self.rate = rate
        self.taken = 0
        self.started: float | None = None

    def take(self, items: int) -> None:
        """Count ``items`` just read; sleep while the reader is ahead of the rate."""
        now = time.monotonic()
        if self.started is None:
            self.started = now
        self.taken += items
        ahead = self.taken / self.rate - (now - self.started)
        if ahead > 0:
            time.sleep(ahead)


def throttle(rate: float | None, share: float = 1.0) -> Throttle | None:
    """A throttle at ``rate * share`` (the share of one of several readers), or None for no
    limit."""
    return None if rate is None else Throttle(rate * share)
