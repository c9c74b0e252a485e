"""SQL text helpers for dialects: the half-open key range of a split.

Column expressions are passed in already quoted (and collated) by the dialect; only the shape of
the predicate is shared.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .types import Key


def row_range(columns: Sequence[str], start: Key | None, end: Key | None, mark: str = "%s",
              always: str = "TRUE") -> tuple[str, list[Any]]:
    """``(c1, c2) >= (start) AND (c1, c2) < (end)`` as row-value comparisons, with its
    parameters; ``always`` when both bounds are open."""
    keys = "(" + ", ".join(columns) + ")"
    marks = "(" + ", ".join([mark] * len(columns)) + ")"
    clauses: list[str] = []
    args: list[Any] = []
    if start is not None:
        clauses.append(f"{keys} >= {marks}")
        args.extend(start)
    if end is not None:
        clauses.append(f"{keys} < {marks}")
        args.extend(end)
    return (" AND ".join(clauses) or always), args


def lexicographic_range(columns: Sequence[str], start: Key | None, end: Key | None,
                        mark: str = "%s", always: str = "TRUE") -> tuple[str, list[Any]]:
    """The same range spelled out (``a > x OR (a = x AND b >= y)``), for servers whose range
    optimiser does not use an index for row-value comparisons (MySQL, MariaDB)."""
    clauses: list[str] = []
    args: list[Any] = []
    for bound, last_op in ((start, ">="), (end, "<")):
        if bound is None:
            continue
        strict = ">" if last_op == ">=" else "<"
        alternatives = []
        for i in range(len(columns)):
            terms = [f"{columns[j]} = {mark}" for j in range(i)]
            terms.append(f"{columns[i]} {last_op if i == len(columns) - 1 else strict} {mark}")
            alternatives.append("(" + " AND ".join(terms) + ")")
            args.extend([*bound[:i], bound[i]])
        clauses.append("(" + " OR ".join(alternatives) + ")")
    return (" AND ".join(clauses) or always), args


def with_condition(where: str, condition: str | None, mark: str = "%s") -> str:
    """``where`` and a user's SQL ``condition`` (the predicate of a snapshot on demand, a
    split's ``where``), its ``%`` doubled for drivers that format ``%s`` parameters."""
    if condition is None:
        return where
    text = condition.replace("%", "%%") if mark == "%s" else condition
    return f"({where}) AND ({text})"
