"""Schema changes of a captured table: what changed between two schemas, whether a sync can
follow it without losing values, and rows of one shape read as another. Pure logic: the
log batches (``sdk.spark.executor.reads``), the split reads and the targets use it."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..dialect.types import Column, LogicalType, Row, TableSchema

POLICIES = ("evolve", "stop", "ignore")
"""``schema.changes``: follow a change (alter the target, carry the new columns), stop with
an error naming it, or keep the columns the sync started with."""

_INTEGERS = (LogicalType.INT8, LogicalType.INT16, LogicalType.INT32, LogicalType.INT64)
_DIGITS = {LogicalType.INT8: 3, LogicalType.INT16: 5, LogicalType.INT32: 10,
           LogicalType.INT64: 19}
_SIZED = (LogicalType.STRING, LogicalType.BINARY, LogicalType.TIME, LogicalType.TIMESTAMP,
          LogicalType.TIMESTAMP_TZ)


def _size(column: Column) -> int | None:
    """The length or fractional-second precision in a type's text (``varchar(30)``,
    ``timestamp(3)``), None when it has none (unbounded, or the type's default)."""
    found = re.search(r"\((\d+)", column.source_type)
    return int(found.group(1)) if found else None


def widens(old: Column, new: Column) -> bool:
    """Whether every value of ``old`` is a value of ``new``, unchanged."""
    if old.type is LogicalType.DECIMAL and new.type is LogicalType.DECIMAL:
        if new.precision is None:
            return True
        if old.precision is None:
            return False
        old_scale, new_scale = old.scale or 0, new.scale or 0
        return new_scale >= old_scale and \
            new.precision - new_scale >= old.precision - old_scale
    if old.type in _INTEGERS and new.type in _INTEGERS:
        return _INTEGERS.index(new.type) >= _INTEGERS.index(old.type)
    if old.type in _INTEGERS and new.type is LogicalType.DECIMAL:
        return new.precision is None or \
            new.precision - (new.scale or 0) >= _DIGITS[old.type]
    if (old.type, new.type) == (LogicalType.FLOAT32, LogicalType.FLOAT64):
        return True
    if old.type is not new.type:
        return False
    if old.type in _SIZED:
        before, after = _size(old), _size(new)
        return after is None or (before is not None and after >= before) or \
            old.source_type == new.source_type
    return True


@dataclass(frozen=True)
class SchemaDiff:
    """What changed from ``old`` to ``new`` (the same table)."""

    old: TableSchema
    new: TableSchema
    added: tuple[str, ...]
    dropped: tuple[str, ...]
    retyped: tuple[tuple[Column, Column], ...]

    @property
    def key_changed(self) -> bool:
        old_key = [self.old.columns[i] for i in self.old.key_index]
        new_key = {c.name: c for c in self.new.columns}
        return tuple(self.new.key) != tuple(self.old.key) or \
            any(new_key[c.name].type is not c.type for c in old_key)

    @property
    def quiet(self) -> bool:
        """Nothing a sync's output carries changed (a column's nullability, say): the schema
        version stays."""
        return not (self.added or self.dropped or self.retyped or self.key_changed)

    @property
    def needs_reread(self) -> bool:
        """A column was added (or renamed): the rows the log does not touch hold values the
        target does not have yet (a default, the renamed column's), so the table is read
        again."""
        return bool(self.added)

    def describe(self) -> str:
        parts = [f"added {', '.join(self.added)}" if self.added else "",
                 f"dropped {', '.join(self.dropped)}" if self.dropped else "",
                 *(f"{a.name} {a.source_type} -> {b.source_type}" for a, b in self.retyped)]
        return "; ".join(p for p in parts if p) or "no column changed"

    def refusal(self) -> str | None:
        """Why following this change would lose values or identity, or None."""
        if self.key_changed:
            return (f"its key changed ({', '.join(self.old.key)} -> "
                    f"{', '.join(self.new.key)})")
        narrowed = [f"{a.name} {a.source_type} -> {b.source_type}" for a, b in self.retyped
                    if not widens(a, b)]
        if narrowed:
            return f"a type changed in a way that can lose values ({'; '.join(narrowed)})"
        return None


def diff(old: TableSchema, new: TableSchema) -> SchemaDiff:
    """The changes from ``old`` to ``new``."""
    before = {c.name: c for c in old.columns}
    after = {c.name: c for c in new.columns}
    return SchemaDiff(
        old, new,
        added=tuple(n for n in after if n not in before),
        dropped=tuple(n for n in before if n not in after),
        retyped=tuple((before[n], after[n]) for n in after if n in before and
                      (before[n].type, before[n].source_type, before[n].precision,
                       before[n].scale) != (after[n].type, after[n].source_type,
                                            after[n].precision, after[n].scale)))


def projector(source: TableSchema, shape: TableSchema) -> Callable[[Row | None], Row | None]:
    """Rows of ``source``'s columns read as ``shape``'s, by column name (a column ``source``
    lacks is None)."""
    at = {c.name: i for i, c in enumerate(source.columns)}
    picks: Sequence[int | None] = [at.get(c.name) for c in shape.columns]

    def project(row: Row | None) -> Row | None:
        if row is None:
            return None
        return tuple(None if i is None else row[i] for i in picks)
    return project
