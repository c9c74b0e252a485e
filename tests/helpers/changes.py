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


def delivered_twice(path: Path | str, dialect: str, key: str | None = None,
                    reads_again: bool = False) -> dict[str, list[Any]]:
    """What a sync delivered twice, across all its batches:

    - snapshot rows of a key at one watermark that arrived more than once (a table read
      again sends its keys once more, at a later watermark: not a repeat);
    - log changes (offset, op, key) that arrived more than once;
    - log changes older than a snapshot row of their key delivered in an earlier batch
      (offset below its watermark): the row already holds their effect, so applying them
      again applies them twice.

    ``dialect`` orders the offsets; ``key``: the key column of a single-table log, None for the
    multi-table envelope (``table``, ``op``, ``key``, ``offset``). ``reads_again``: the sync
    read tables again on its own (after schema changes), maybe twice at one watermark when
    nothing changed in between: snapshot rows repeat only within one batch."""
    compare = get_dialect(dialect).compare_offset
    columns = ["table", "op", "key", "offset"] if key is None else ["_op", "_offset", key]
    rows = ds.dataset(str(path), format="parquet", partitioning="hive").to_table(
        columns=[*columns, "batch_id"]).to_pylist()
    if key is None:
        items = [(r["op"], r["offset"], (r["table"], r["key"]), r["batch_id"]) for r in rows]
    else:
        items = [(r["_op"], r["_offset"], r[key], r["batch_id"]) for r in rows]
    snapshot = Counter((k, o, b if reads_again else 0) for op, o, k, b in items if op == "r")
    reads: dict[Any, list[tuple[int, Offset]]] = {}
    for op, offset, k, batch in items:
        if op == "r":
            reads.setdefault(k, []).append((batch, Offset.from_json(json.loads(offset))))
    changes = Counter((offset, op, k) for op, offset, k, _ in items if op != "r")
    stale = [(offset, op, k) for op, offset, k, batch in items if op != "r" and any(
        earlier <= batch and compare(Offset.from_json(json.loads(offset)), mark) < 0
        for earlier, mark in reads.get(k, ()))]
    return {"snapshot rows": [k for k, n in snapshot.items() if n > 1],
            "changes": [c for c, n in changes.items() if n > 1],
            "changes before their snapshot row": stale,
            "delivered": [sum(snapshot.values()), sum(changes.values())]}


def snapshot_keys(path: Path | str, key: str) -> set[Any]:
    """The keys of the snapshot rows a sync delivered to the change log of a single table."""
    rows = ds.dataset(str(path), format="parquet", partitioning="hive").to_table(
        columns=["_op", key]).to_pylist()
    return {r[key] for r in rows if r["_op"] == "r"}


def assert_once(path: Path | str, dialect: str, key: str | None = None,
                reads_again: bool = False) -> tuple[int, int]:
    """Fail naming what a sync delivered twice; returns (snapshot rows, changes)."""
    found = delivered_twice(path, dialect, key, reads_again)
    twice = {what: items for what, items in found.items() if what != "delivered" and items}
    assert not twice, "delivered twice: " + "; ".join(
        f"{len(items)} {what}, e.g. {items[:3]}" for what, items in twice.items())
    snapshot, changes = found["delivered"]
    return snapshot, changes
