"""Helpers for dialects that can be sync targets (``apply_changes``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from .errors import ConfigurationError
from .types import ChangeEvent, TableSchema

Kind = Literal["delete", "upsert"]


def change_runs(events: Sequence[ChangeEvent], convert: Callable[[Any], Any] | None = None
                ) -> list[tuple[Kind, list[tuple[Any, ...]]]]:
    """The events as runs of deletes (key values) and upserts (after images), in order, so a
    target can ``executemany`` each run. An update that moved its key deletes the old key
    first. ``convert`` maps each value to what the driver should send."""
    out: list[tuple[Kind, list[tuple[Any, ...]]]] = []

    def add(kind: Kind, values: tuple[Any, ...]) -> None:
        row = tuple(convert(v) for v in values) if convert is not None else values
        if out and out[-1][0] == kind:
            out[-1][1].append(row)
        else:
            out.append((kind, [row]))

    for event in events:
        if event.op == "d":
            add("delete", event.key)
            continue
        if event.old_key is not None:
            add("delete", event.old_key)
        assert event.after is not None
        add("upsert", event.after)
    return out


def check_target_columns(existing: Sequence[str], table: TableSchema) -> None:
    """Refuse a target table that exists with other columns than the source table's (an empty
    ``existing`` means it does not exist yet)."""
    if existing and list(existing) != list(table.column_names):
        raise ConfigurationError(
            f"target table {table.table} exists with columns {list(existing)}, not "
            f"{list(table.column_names)}: drop it or choose another target")
