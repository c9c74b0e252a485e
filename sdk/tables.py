"""Choosing tables with include and exclude patterns (``shop.*``, ``!shop.audit_*``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fnmatch import fnmatchcase

from .errors import ConfigurationError
from .types import TableId


def parse_patterns(text: str | Sequence[str]) -> list[str]:
    """Split ``"a.*, !a.tmp_*"`` (or take a list) into patterns."""
    items = text.split(",") if isinstance(text, str) else list(text)
    return [p.strip() for p in items if p.strip()]


def select_tables(available: Iterable[TableId], patterns: Sequence[str]) -> list[TableId]:
    """The tables matching an include pattern and no exclude (``!``) pattern, in listing
    order. A bare name matches in any schema. Each include pattern must match something."""
    tables = list(available)
    includes = [p for p in patterns if not p.startswith("!")] or ["*"]
    excludes = [p[1:] for p in patterns if p.startswith("!")]

    def matches(table: TableId, pattern: str) -> bool:
        target = str(table) if "." in pattern else table.name
        return fnmatchcase(target, pattern)

    for pattern in includes:
        if not any(matches(t, pattern) for t in tables):
            known = ", ".join(str(t) for t in tables[:20]) or "none"
            raise ConfigurationError(f"table pattern {pattern!r} matches no table; "
                                     f"tables here: {known}")
    return [t for t in tables
            if any(matches(t, p) for p in includes) and not any(matches(t, p) for p in excludes)]
