"""What to read next: choosing each table's key and cutting it into snapshot splits, lazily.

A table is cut as readers ask for work, never all at once: the planner keeps one cursor per
table (the next split's start), so it holds no split list, and the open-ended last split is cut
only when handed out: a table that grew during a long snapshot gets more splits, not one giant
tail (a split list fixed at the start leaves every row added since in its last split).

Two ways to cut: a single integer key whose values are dense enough ((max - min + 1) / rows
within the even-distribution bounds) is cut arithmetically from MIN/MAX with no query per
split; anything else (skewed, sparse, text, compound) by index seeks, ``next_boundary``, so
every split holds ``split.size`` rows.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from ..dialect.codec import decode_key, encode_key
from ..dialect.errors import ConfigurationError, MissingKeyError
from ..dialect.manager import Dialect
from ..dialect.types import Connection, Key, LogicalType, SnapshotSplit, TableId, TableSchema
from .settings import SyncOptions

log = logging.getLogger(__name__)

_INTEGER_TYPES = {LogicalType.INT8, LogicalType.INT16, LogicalType.INT32, LogicalType.INT64}


def choose_key(schema: TableSchema, options: SyncOptions) -> TableSchema:
    """Set ``schema.key``: the user's ``chunk-key.column`` for the table, else the primary key.

    The key splits the table and identifies rows when merging and mirroring. A chosen key that
    is the primary key or a non-null unique key is safe. Other NOT NULL columns are accepted
    as the user's assertion that their values are unique (nothing enforces it, so rows sharing
    a value would be taken for one row: a warning says so); the dialect checks that the log's
    old rows carry them. A key that may be NULL, or a table with no key at all, is refused.
    """
    chosen = options.chunk_key.get(str(schema.table)) or options.chunk_key.get(schema.table.name)
    if chosen:
        candidates = [schema.primary_key, *schema.unique_keys]
        if tuple(chosen) in candidates or schema.key == tuple(chosen):  # or chosen already
            return replace(schema, key=tuple(chosen))
        keys = " or ".join(", ".join(k) for k in candidates if k) or "none"
        where = (f"chunk-key.column for table {schema.table} is ({', '.join(chosen)}), which "
                 f"is not its primary key or a non-null unique key (it has: {keys})")
        by_name = {c.name: c for c in schema.columns}
        unknown = [c for c in chosen if c not in by_name]
        if unknown:
            raise ConfigurationError(f"{where}, and the table has no column "
                                     f"{', '.join(map(repr, unknown))}")
        nullable = [c for c in chosen if by_name[c].nullable]
        if nullable:
            raise ConfigurationError(
                f"{where}, and {', '.join(nullable)} may be NULL: a NULL key neither splits "
                "nor identifies a row; declare the column(s) NOT NULL (or choose others)")
        log.warning(
            "%s: its values are trusted to be unique, since no constraint makes them so. Rows "
            "sharing a value would be one row to the sync (merged in the snapshot, overwriting "
            "each other in the mirror): exactly-once holds only while they are unique", where)
        return replace(schema, key=tuple(chosen))
    if schema.primary_key:
        return replace(schema, key=schema.primary_key)
    hint = (f"; or choose its unique key: chunk-key.column={schema.table}:"
            f"{','.join(schema.unique_keys[0])}" if schema.unique_keys else
            f"; or name NOT NULL columns whose values are unique: chunk-key.column="
            f"{schema.table}:COLUMN (see the caveats of chunk-key.column)")
    raise MissingKeyError(
        f"table {schema.table} has no primary key and no chosen unique key to split and merge "
        f"on: add a primary key{hint}, or exclude the table")


@dataclass
class TablePlan:
    """One table's split cursor: the next split's index and start, and how to cut it.

    While cutting arithmetically, ``next_end`` is the next split's end and grows by ``step``
    until it passes ``stop`` (the largest key at planning time); from there the planner seeks,
    so rows added at the end during the snapshot get splits of their own. ``done`` once the
    open-ended last split was handed out.
    """

    table: TableId
    next_index: int = 0
    next_start: Key | None = None
    next_end: int | None = None
    step: int = 0
    stop: int = 0
    done: bool = False
    approx_rows: int = 0
    """The table's estimated size when planned, for progress (splits left ~ rows / size)."""

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table.to_json(), "next_index": self.next_index,
                "next_start": encode_key(self.next_start), "next_end": self.next_end,
                "step": self.step, "stop": self.stop, "done": self.done,
                "approx_rows": self.approx_rows}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TablePlan:
        return cls(TableId.from_json(data["table"]), data["next_index"],
                   decode_key(data["next_start"]), data["next_end"], data["step"],
                   data["stop"], data["done"], data.get("approx_rows", 0))


class SplitAssigner:
    """Plans tables and hands out their splits one at a time."""

    def __init__(self, dialect: Dialect, options: SyncOptions) -> None:
        self.dialect = dialect
        self.options = options

    def plan(self, conn: Connection, schema: TableSchema) -> TablePlan:
        """Start a table's plan: decide between arithmetic and index-seek cuts."""
        stats = self.dialect.table_stats(conn, schema)
        plan = TablePlan(schema.table, approx_rows=stats.approx_rows)
        if len(schema.key) != 1:
            return plan
        column = next(c for c in schema.columns if c.name == schema.key[0])
        if column.type not in _INTEGER_TYPES:
            return plan
        if stats.min_key is None or stats.max_key is None or stats.approx_rows <= 0:
            return plan
        lo, hi = stats.min_key[0], stats.max_key[0]
        factor = (hi - lo + 1) / stats.approx_rows
        if self.options.even_factor_lower <= factor <= self.options.even_factor_upper:
            plan.step = max(1, round(self.options.split_size * factor))
            plan.next_end, plan.stop = lo + plan.step, hi
            log.info("table %s: arithmetic splits of %d keys (distribution factor %.3f)",
                     schema.table, plan.step, factor)
        else:
            log.info("table %s: index-seek splits (distribution factor %.3f outside "
                     "[%s, %s])", schema.table, factor, self.options.even_factor_lower,
                     self.options.even_factor_upper)
        return plan

    def next_split(self, conn: Connection, schema: TableSchema, plan: TablePlan
                   ) -> tuple[SnapshotSplit, TablePlan] | None:
        """The table's next split and the advanced plan, or None when every split was given."""
        if plan.done:
            return None
        start = plan.next_start
        arithmetic = plan.next_end is not None and plan.next_end <= plan.stop
        if arithmetic:
            assert plan.next_end is not None
            end: Key | None = (plan.next_end,)
        else:
            end = self.dialect.next_boundary(conn, schema, start, self.options.split_size)
        if end is not None and start is not None and not end > start:
            raise ConfigurationError(
                f"dialect {self.dialect.name!r} returned split boundary {end!r} not after "
                f"{start!r} for table {schema.table}: next_boundary must move forward")
        split = SnapshotSplit(schema.table, plan.next_index, start, end)
        next_end = plan.next_end + plan.step if arithmetic and plan.next_end is not None \
            else None
        advanced = replace(plan, next_index=plan.next_index + 1, next_start=end,
                           next_end=next_end, done=end is None)
        return split, advanced
