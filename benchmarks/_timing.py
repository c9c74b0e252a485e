"""Timing shared by the benchmark scripts."""

from __future__ import annotations

import time
from collections.abc import Callable


def best_of(runs: int, fn: Callable[[], int]) -> tuple[float, int]:
    """The fastest of ``runs`` calls of ``fn`` (seconds) and the count it returned."""
    best, count = float("inf"), 0
    for _ in range(runs):
        t0 = time.perf_counter()
        count = fn()
        best = min(best, time.perf_counter() - t0)
    return best, count
