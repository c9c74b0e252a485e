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


def best_of_interleaved(runs: int, *fns: Callable[[], int]) -> list[tuple[float, float, int]]:
    """``best_of`` for functions run in turn (first, second, first, ...), so a slow spell of
    the machine or the server (autovacuum, a checkpoint, a busy neighbour) falls on all alike.
    Per function: the fastest wall-clock seconds, the least CPU seconds of this process (the
    client's own work, unmoved by the server's share and by the machine's noise), the count."""
    wall = [float("inf")] * len(fns)
    cpu = [float("inf")] * len(fns)
    counts = [0] * len(fns)
    for _ in range(runs):
        for i, fn in enumerate(fns):
            t0, c0 = time.perf_counter(), time.process_time()
            counts[i] = fn()
            wall[i] = min(wall[i], time.perf_counter() - t0)
            cpu[i] = min(cpu[i], time.process_time() - c0)
    return list(zip(wall, cpu, counts, strict=True))
