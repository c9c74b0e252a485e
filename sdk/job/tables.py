"""Choosing tables with include and exclude patterns (``shop.*``, ``!shop.audit_*``).

A pattern is ``schema.name`` or a bare ``name`` (any schema), each part a glob (``*``, ``?``,
``[abc]``, ``[!abc]``). A part in double quotes is taken literally, so names holding ``.``,
``,``, ``*``, spaces or a leading ``!`` can be chosen: ``"my.schema"."user*data"``,
``shop."odd.name"``, ``"a ""quoted"" name"`` (a ``"`` in a name is written twice). Quoted and
unquoted text can alternate within a part (``"a.b"_*``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from fnmatch import fnmatchcase

from ..dialect.errors import ConfigurationError
from ..dialect.types import TableId

_SPECIAL = re.compile(r'[.,"*?\[\]]|^\s|\s$|^!')
"""Characters that make a name need quotes in a pattern."""


def parse_patterns(text: str | Sequence[str]) -> list[str]:
    """Split ``"a.*, !a.tmp_*"`` (or take a list) into patterns; a comma inside double quotes
    belongs to the name."""
    if not isinstance(text, str):
        items = list(text)
    else:
        items, quoted = [], False
        current: list[str] = []
        for char in text:
            if char == '"':
                quoted = not quoted  # a doubled quote toggles twice: still inside
            if char == "," and not quoted:
                items.append("".join(current))
                current = []
            else:
                current.append(char)
        items.append("".join(current))
    return [p.strip() for p in items if p.strip()]


def quote_part(name: str) -> str:
    """A schema or table name as a pattern part that matches exactly it: in double quotes
    when it holds a character patterns give a meaning to."""
    return '"' + name.replace('"', '""') + '"' if _SPECIAL.search(name) else name


def table_pattern(table: TableId) -> str:
    """The pattern that chooses exactly ``table``, e.g. ``shop."odd.name"``."""
    return f"{quote_part(table.schema)}.{quote_part(table.name)}"


def _literal(text: str) -> str:
    """Quoted text as glob text matching exactly it (``*``, ``?``, ``[`` in brackets)."""
    return re.sub(r"([*?\[])", r"[\1]", text)


def compile_pattern(pattern: str) -> tuple[str | None, str]:
    """One pattern as ``fnmatch`` globs for the schema (None: any schema) and the name, its
    quoted stretches turned into literal glob text."""
    parts: list[list[str]] = [[]]
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == '"':
            literal: list[str] = []
            start = i + 1
            while True:
                close = pattern.find('"', start)
                if close < 0:
                    raise ConfigurationError(f"table pattern {pattern!r} has an unclosed '\"'")
                literal.append(pattern[start:close])
                if pattern[close + 1:close + 2] != '"':
                    break
                literal.append('"')
                start = close + 2
            parts[-1].append(_literal("".join(literal)))
            i = close + 1
            continue
        if char == ".":
            parts.append([])
        else:
            parts[-1].append(char)
        i += 1
    if len(parts) > 2:
        raise ConfigurationError(
            f"table pattern {pattern!r} has more than one '.' outside quotes: write it as "
            'schema.name and quote a name that holds a dot, e.g. shop."odd.name"')
    globs = ["".join(p) for p in parts]
    return (globs[0], globs[1]) if len(globs) == 2 else (None, globs[0])


_ESCAPED = re.compile(r"\[([*?\[])\]")
"""A wildcard character made literal in a glob (:func:`_literal`)."""


def named_table(pattern: str) -> TableId | None:
    """The one table an include pattern names, when it is ``schema.name`` without wildcards
    (``shop.items``, ``"my.db"."a*b"``); None for a glob, a bare name or an exclude."""
    if pattern.startswith("!"):
        return None
    schema, name = compile_pattern(pattern)
    if schema is None or any(re.search(r"[*?\[]", _ESCAPED.sub("", g)) for g in (schema, name)):
        return None
    return TableId(_ESCAPED.sub(r"\1", schema), _ESCAPED.sub(r"\1", name))


def select_tables(available: Iterable[TableId], patterns: Sequence[str]) -> list[TableId]:
    """The tables matching an include pattern and no exclude (``!``) pattern, in listing
    order. A bare name matches in any schema. Each include pattern must match something."""
    tables = list(available)
    includes = [p for p in patterns if not p.startswith("!")] or ["*"]
    excludes = [p[1:] for p in patterns if p.startswith("!")]
    compiled = {p: compile_pattern(p) for p in [*includes, *excludes]}

    def matches(table: TableId, pattern: str) -> bool:
        schema, name = compiled[pattern]
        return (schema is None or fnmatchcase(table.schema, schema)) and \
            fnmatchcase(table.name, name)

    for pattern in includes:
        if not any(matches(t, pattern) for t in tables):
            known = ", ".join(table_pattern(t) for t in tables[:20]) or "none"
            raise ConfigurationError(f"table pattern {pattern!r} matches no table; "
                                     f"tables here: {known}")
    return [t for t in tables
            if any(matches(t, p) for p in includes) and not any(matches(t, p) for p in excludes)]
