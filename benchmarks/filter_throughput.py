"""Events per second through the incremental filter with 10,000 finished splits.

    python benchmarks/filter_throughput.py [--splits 10000] [--events 1000000]

Uses the reference SQLite dialect's compare_offset (the plugin function itself, as the engine
calls it). Half the events fall below their table's largest watermark, so they take the binary
search over split boundaries; the rest take the pure-log fast path.
"""

from __future__ import annotations

import argparse
import random
import time

from sdk import ChangeEvent, FinishedSplit, Offset, SnapshotSplit, TableId, get_dialect
from sdk.algorithm import IncrementalFilter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--splits", type=int, default=10_000)
    parser.add_argument("--events", type=int, default=1_000_000)
    args = parser.parse_args()
    rng = random.Random(1)
    table = TableId("main", "t")
    width = 1000
    marks = [rng.randrange(1_000_000, 2_000_000) for _ in range(args.splits)]
    finished = [FinishedSplit(SnapshotSplit(table, i, (i * width,) if i else None,
                                            ((i + 1) * width,) if i < args.splits - 1 else None),
                              Offset("sqlite", seq=marks[i]))
                for i in range(args.splits)]
    compare = get_dialect("sqlite").compare_offset
    flt = IncrementalFilter({table: finished}, compare)
    top = max(marks)
    events = [ChangeEvent(table, "u", (rng.randrange(args.splits * width),), (0,),
                          Offset("sqlite", seq=rng.randrange(1_000_000, 2 * top - 1_000_000)))
              for _ in range(args.events)]
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        kept = flt.filter(events)
        best = min(best, time.perf_counter() - t0)
    print(f"splits={args.splits} events={args.events} kept={len(kept)} "
          f"best={best:.3f}s rate={args.events / best:,.0f} events/s")


if __name__ == "__main__":
    main()
