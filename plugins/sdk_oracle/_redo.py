"""A parser for LogMiner's ``SQL_REDO`` text: the DML statements LogMiner reconstructs from redo.

LogMiner writes one statement per row change, with every value as a literal::

    insert into "S"."T"("ID","NAME") values ('1','it''s');
    update "S"."T" set "NAME" = 'b' where "ID" = '1' and "NAME" = 'a';
    delete from "S"."T" where "ID" = '1' and "NAME" IS NULL;

Numbers come quoted, temporal values as ``TO_DATE``/``TO_TIMESTAMP``/``TO_TIMESTAMP_TZ`` calls in
the session's NLS formats, ``RAW`` as ``HEXTORAW('..')``, national text as ``UNISTR('\\00E9')``,
and types LogMiner cannot render as ``Unsupported Type``. The parser keeps values *raw* (a
:class:`Call`, a string, or None for NULL): :mod:`._types` turns them into typed values knowing the
column's type, so one place decides every value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

RedoOp = Literal["c", "u", "d"]


class RedoSyntaxError(ValueError):
    """``SQL_REDO`` text the parser does not understand (the message quotes where)."""


@dataclass(frozen=True, slots=True)
class Call:
    """A function call in a value position: ``TO_DATE('...', 'fmt')``, ``HEXTORAW('00')``,
    ``EMPTY_CLOB()``. ``args`` are raw values themselves."""

    name: str
    args: tuple[RawValue, ...]


@dataclass(frozen=True, slots=True)
class Bare:
    """An unquoted token in a value position: a number (``1.5``) or a keyword."""

    text: str


UNSUPPORTED = Bare("Unsupported Type")
"""What LogMiner writes for a value of a type it cannot render (LOBs, XMLType, ADTs...)."""

RawValue = str | Call | Bare | None


@dataclass(slots=True)
class Redo:
    """One parsed statement: the operation, the table, and the column values it names.

    ``new`` holds an insert's VALUES or an update's SET; ``old`` the WHERE clause of an update or
    delete (the before image: with ``ALL COLUMNS`` supplemental logging, every column)."""

    op: RedoOp
    owner: str
    table: str
    new: dict[str, RawValue] = field(default_factory=dict)
    old: dict[str, RawValue] = field(default_factory=dict)


_TOKEN = re.compile(r"""
    \s*(?:
      (?P<qid>"(?:[^"]|"")*")
    | (?P<str>'(?:[^']|'')*')
    | (?P<num>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)
    | (?P<word>[A-Za-z_][A-Za-z0-9_$#]*)
    | (?P<concat>\|\|)
    | (?P<punct>[(),=;.])
    )""", re.VERBOSE | re.DOTALL)

Token = tuple[str, str]


def _tokens(sql: str) -> list[Token]:
    out: list[Token] = []
    pos, end = 0, len(sql)
    while pos < end:
        m = _TOKEN.match(sql, pos)
        if m is None or m.end() == pos:
            if sql[pos:].strip() == "":
                break
            raise RedoSyntaxError(f"unexpected text at {pos}: {sql[pos:pos + 40]!r}")
        kind = m.lastgroup
        assert kind is not None
        text = m.group(kind)
        if kind == "qid":
            out.append(("id", text[1:-1].replace('""', '"')))
        elif kind == "str":
            out.append(("str", text[1:-1].replace("''", "'")))
        elif kind in ("punct", "concat"):
            out.append(("p", text))
        else:
            out.append((kind, text))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, sql: str) -> None:
        self.sql = sql
        self.toks = _tokens(sql)
        self.i = 0

    def peek(self, ahead: int = 0) -> Token | None:
        j = self.i + ahead
        return self.toks[j] if j < len(self.toks) else None

    def take(self) -> Token:
        tok = self.peek()
        if tok is None:
            raise RedoSyntaxError(f"statement ends too early: {self.sql[:200]!r}")
        self.i += 1
        return tok

    def fail(self, expected: str) -> RedoSyntaxError:
        got = self.peek()
        return RedoSyntaxError(f"expected {expected}, got {got!r} (token {self.i}) in "
                               f"{self.sql[:200]!r}")

    def keyword(self, *words: str) -> None:
        for word in words:
            tok = self.peek()
            if tok is None or tok[0] != "word" or tok[1].lower() != word:
                raise self.fail(repr(word))
            self.i += 1

    def is_keyword(self, word: str) -> bool:
        tok = self.peek()
        return tok is not None and tok[0] == "word" and tok[1].lower() == word

    def punct(self, char: str) -> None:
        if self.peek() != ("p", char):
            raise self.fail(repr(char))
        self.i += 1

    def is_punct(self, char: str) -> bool:
        return self.peek() == ("p", char)

    def ident(self) -> str:
        tok = self.take()
        if tok[0] == "id":
            return tok[1]
        if tok[0] == "word":
            return tok[1].upper()
        self.i -= 1
        raise self.fail("an identifier")

    def table(self) -> tuple[str, str]:
        first = self.ident()
        if self.is_punct("."):
            self.i += 1
            return first, self.ident()
        return "", first

    def value(self) -> RawValue:
        parts = [self.term()]
        while self.is_punct("||"):
            self.i += 1
            parts.append(self.term())
        if len(parts) == 1:
            return parts[0]
        return Call("||", tuple(parts))

    def term(self) -> RawValue:
        tok = self.take()
        kind, text = tok
        if kind == "str":
            return text
        if kind == "num":
            return Bare(text)
        if kind == "word":
            upper = text.upper()
            if upper == "NULL":
                return None
            if upper == "UNSUPPORTED" and self.is_keyword("type"):
                self.i += 1
                return UNSUPPORTED
            if self.is_punct("("):
                self.i += 1
                args: list[RawValue] = []
                if not self.is_punct(")"):
                    args.append(self.value())
                    while self.is_punct(","):
                        self.i += 1
                        args.append(self.value())
                self.punct(")")
                return Call(upper, tuple(args))
            return Bare(text)
        self.i -= 1
        raise self.fail("a value")

    def conditions(self, into: dict[str, RawValue]) -> None:
        """``"A" = v and "B" IS NULL and ROWID = '...'`` (ROWID is dropped)."""
        while True:
            tok = self.peek()
            name = self.ident()
            if self.is_keyword("is"):
                self.i += 1
                self.keyword("null")
                value: RawValue = None
            else:
                self.punct("=")
                value = self.value()
            if not (tok is not None and tok[0] == "word" and tok[1].upper() == "ROWID"):
                into[name] = value
            if not self.is_keyword("and"):
                return
            self.i += 1

    def end(self) -> None:
        if self.is_punct(";"):
            self.i += 1
        if self.peek() is not None:
            raise self.fail("the end of the statement")


def parse(sql: str) -> Redo:
    """Parse one ``SQL_REDO`` statement (CSF continuation rows already joined)."""
    p = _Parser(sql)
    if p.is_keyword("insert"):
        p.keyword("insert", "into")
        owner, table = p.table()
        redo = Redo("c", owner, table)
        p.punct("(")
        names = [p.ident()]
        while p.is_punct(","):
            p.i += 1
            names.append(p.ident())
        p.punct(")")
        p.keyword("values")
        p.punct("(")
        values = [p.value()]
        while p.is_punct(","):
            p.i += 1
            values.append(p.value())
        p.punct(")")
        if len(names) != len(values):
            raise RedoSyntaxError(f"{len(names)} columns but {len(values)} values in "
                                  f"{sql[:200]!r}")
        redo.new = dict(zip(names, values, strict=True))
    elif p.is_keyword("update"):
        p.keyword("update")
        owner, table = p.table()
        redo = Redo("u", owner, table)
        p.keyword("set")
        while True:
            name = p.ident()
            p.punct("=")
            redo.new[name] = p.value()
            if not p.is_punct(","):
                break
            p.i += 1
        if p.is_keyword("where"):
            p.i += 1
            p.conditions(redo.old)
    elif p.is_keyword("delete"):
        p.keyword("delete", "from")
        owner, table = p.table()
        redo = Redo("d", owner, table)
        if p.is_keyword("where"):
            p.i += 1
            p.conditions(redo.old)
    else:
        raise p.fail("insert, update or delete")
    p.end()
    return redo


def unistr(text: str) -> str:
    """Decode ``UNISTR``'s argument: ``\\XXXX`` is a UTF-16 code unit (surrogate pairs make one
    character), ``\\\\`` a backslash, anything else itself."""
    units: list[int] = []
    out: list[str] = []

    def flush() -> None:
        if units:
            out.append(b"".join(u.to_bytes(2, "big") for u in units).decode("utf-16-be"))
            units.clear()

    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\":
            if text.startswith("\\", i + 1):
                flush()
                out.append("\\")
                i += 2
                continue
            hexa = text[i + 1:i + 5]
            if len(hexa) == 4 and all(c in "0123456789abcdefABCDEF" for c in hexa):
                units.append(int(hexa, 16))
                i += 5
                continue
        flush()
        out.append(char)
        i += 1
    flush()
    return "".join(out)
