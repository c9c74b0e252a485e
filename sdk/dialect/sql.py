"""SQL text helpers for dialects: the half-open key range of a split, and a cursor over the
tokens of a statement's head (the DDL a dialect finds in its log).

Column expressions are passed in already quoted (and collated) by the dialect; only the shape of
the predicate is shared.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
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


class StatementHead:
    """A cursor over a statement's tokens, ``(kind, text)`` with kind ``name`` (a quoted
    identifier, unquoted already), ``word`` or ``punct``, made by the dialect's ``token``
    pattern: its groups, in order, are quoted names (a doubled quote in one is read as the
    quote of ``quotes`` at the same index), then the word, then one punctuation character;
    text the groups leave out (space, comments, strings) is skipped. Unquoted names go
    through ``fold``, as the database folds them."""

    def __init__(self, sql: str, token: re.Pattern[str], quotes: Sequence[str],
                 fold: Callable[[str], str] = str) -> None:
        self.tokens: list[tuple[str, str]] = []
        for match in token.finditer(sql):
            *names, word, punct = match.groups()
            for quote, name in zip(quotes, names, strict=True):
                if name is not None:
                    self.tokens.append(("name", name.replace(quote * 2, quote)))
                    break
            else:
                if word is not None:
                    self.tokens.append(("word", word))
                elif punct is not None:
                    self.tokens.append(("punct", punct))
        self.fold = fold
        self.i = 0

    def word(self, *choices: str) -> str | None:
        """The next token when it is one of the (upper-case) words ``choices``, consumed."""
        if self.i < len(self.tokens):
            kind, text = self.tokens[self.i]
            if kind == "word" and text.upper() in choices:
                self.i += 1
                return text.upper()
        return None

    def punct(self, char: str) -> bool:
        """Consume the punctuation ``char`` when it comes next."""
        if self.i < len(self.tokens) and self.tokens[self.i] == ("punct", char):
            self.i += 1
            return True
        return False

    def identifier(self) -> str | None:
        """The next name: a quoted one as written, a word through ``fold``."""
        if self.i < len(self.tokens):
            kind, text = self.tokens[self.i]
            if kind in ("name", "word"):
                self.i += 1
                return text if kind == "name" else self.fold(text)
        return None

    def qualified(self, default: str | None = None) -> tuple[str | None, str] | None:
        """A ``schema.name`` or a ``name`` (then in schema ``default``)."""
        first = self.identifier()
        if first is None:
            return None
        if self.punct("."):
            second = self.identifier()
            return (first, second) if second is not None else None
        return default, first

    def skip_to(self, *words: str) -> str | None:
        """Consume tokens up to and including the next of ``words``."""
        while self.i < len(self.tokens):
            found = self.word(*words)
            if found is not None:
                return found
            self.i += 1
        return None
