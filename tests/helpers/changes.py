"""Counting what a sync delivered, from the change log it kept (Parquet, one folder per
micro-batch, a replayed batch rewriting its own folder): a mirror that upserts hides a change
delivered twice, this does not."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds

from sdk import Offset, get_dialect


def delivered_twice(path: Path | str, dialect: str, key: str | None = None
                    ) -> dict[str, list[Any]]:
    """What a sync delivered twice, across all its batches:

    - snapshot rows whose key arrived more than once;
    - log changes (offset, op, key) that arrived more than once;
    - log changes older than their key's snapshot row (offset below its watermark): the row
      already holds their effect, so applying them again applies them twice.

    ``dialect`` orders the offsets; ``key``: the key column of a single-table log, None for the
    multi-table envelope (``table``, ``op``, ``key``, ``offset``)."""
    compare = get_dialect(dialect).compare_offset
    columns = ["table", "op", "key", "offset"] if key is None else ["_op", "_offset", key]
    rows = ds.dataset(str(path), format="parquet", partitioning="hive").to_table(
        columns=columns).to_pylist()
    if key is None:
        items = [(r["op"], r["offset"], (r["table"], r["key"])) for r in rows]
    else:
        items = [(r["_op"], r["_offset"], r[key]) for r in rows]
    snapshot = Counter(k for op, _, k in items if op == "r")
    watermarks = {k: Offset.from_json(json.loads(o)) for op, o, k in items if op == "r"}
    changes = Counter((offset, op, k) for op, offset, k in items if op != "r")
    stale = [(offset, op, k) for offset, op, k in changes if k in watermarks
             and compare(Offset.from_json(json.loads(offset)), watermarks[k]) < 0]
    return {"snapshot rows": [k for k, n in snapshot.items() if n > 1],
            "changes": [c for c, n in changes.items() if n > 1],
            "changes before their snapshot row": stale,
            "delivered": [sum(snapshot.values()), sum(changes.values())]}


def assert_once(path: Path | str, dialect: str, key: str | None = None) -> tuple[int, int]:
    """Fail naming what a sync delivered twice; returns (snapshot rows, changes)."""
    found = delivered_twice(path, dialect, key)
    twice = {what: items for what, items in found.items() if what != "delivered" and items}
    assert not twice, "delivered twice: " + "; ".join(
        f"{len(items)} {what}, e.g. {items[:3]}" for what, items in twice.items())
    snapshot, changes = found["delivered"]
    return snapshot, changes
