"""Which tables a DDL statement in the binlog empties or replaces.

Row-based logging writes no row events for ``TRUNCATE``, ``DROP TABLE``, ``RENAME TABLE``,
MariaDB's ``CREATE OR REPLACE TABLE``, or the partition operations that remove or swap rows
(``ALTER TABLE ... TRUNCATE``, ``DROP``, ``EXCHANGE`` or MariaDB's ``CONVERT`` ``PARTITION``,
``CONVERT TABLE ... TO PARTITION``): they are Query events holding the statement's text. A
table they hit no longer holds the rows the log gave before (a table created again under its
name starts empty), so the reader reports each captured table they name
(:class:`sdk.TableTruncated`). Only the statement's head is parsed: its names, quoted or not,
qualified or in the event's default database.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from sdk.dialect.sql import StatementHead

_TOKEN = re.compile(
    r"\s+|/\*.*?\*/|--[^\n]*|#[^\n]*"  # space and comments
    r"|`((?:[^`]|``)*)`"  # a quoted identifier
    r"|\"((?:[^\"\\]|\\.|\"\")*)\"|'(?:[^'\\]|\\.|'')*'"  # strings (ANSI_QUOTES: names)
    r"|([^\s`\"'.,;()/#-]+)"  # a word
    r"|(.)", re.S)
_HEADS = (b"TRUNCATE", b"DROP", b"RENAME", b"CREATE", b"ALTER")

Name = tuple[str | None, str]
"""A table as a statement names it: (database or None for the default, table)."""


class _Cursor(StatementHead):
    def __init__(self, sql: str) -> None:
        super().__init__(sql, _TOKEN, ("`", '"'))

    def if_exists(self) -> None:
        if self.word("IF"):
            self.word("EXISTS")

    def table(self) -> Name | None:
        """``name`` or ``db.name``."""
        return self.qualified()

    def tables(self) -> list[Name]:
        """A comma-separated list of table names."""
        out = []
        while (name := self.table()) is not None:
            out.append(name)
            if not self.punct(","):
                break
        return out


ROWS_ONLY = ("TRUNCATE", "ALTER TABLE ... TRUNCATE PARTITION", "ALTER TABLE ... DROP PARTITION",
             "ALTER TABLE ... EXCHANGE PARTITION", "ALTER TABLE ... CONVERT PARTITION",
             "ALTER TABLE ... CONVERT TABLE")
"""The statements of :func:`emptied` that change rows, not a table's existence: each table
they name stays (the others drop, rename or replace a table)."""


Emptied = tuple[str, list[Name], list[str]]
"""What a statement empties or replaces: its kind, the tables it names, the databases it
drops."""


def emptied(query: bytes, text: Callable[[bytes], str] | None = None) -> Emptied | None:
    """What ``query`` does to tables, when it empties or replaces some: the statement
    (``TRUNCATE``, ``DROP TABLE``...), the tables it names and the databases it drops; None
    for any other statement. Cheap for the common ones (a look at the first word). ``text``
    reads the statement in the character set its session sent it in (a latin1 client's
    ``tàble`` is other bytes than a utf8mb4 one's); UTF-8 without."""
    head = query.lstrip()[:8].upper()
    if not head.startswith(_HEADS) and not head.startswith((b"/*", b"--", b"#")):
        return None
    cursor = _Cursor(text(query) if text is not None else query.decode("utf-8", "replace"))
    verb = cursor.word("TRUNCATE", "DROP", "RENAME", "CREATE", "ALTER")
    if verb == "TRUNCATE":
        cursor.word("TABLE")
        name = cursor.table()
        return ("TRUNCATE", [name], []) if name is not None else None
    if verb == "DROP":
        return _drop(cursor)
    if verb == "RENAME":
        return _rename(cursor)
    if verb == "CREATE":  # MariaDB's CREATE OR REPLACE TABLE drops the table of its name
        if not (cursor.word("OR") and cursor.word("REPLACE")):
            return None
        if cursor.word("TEMPORARY") or not cursor.word("TABLE"):
            return None
        name = cursor.table()
        return ("CREATE OR REPLACE TABLE", [name], []) if name is not None else None
    if verb == "ALTER":
        return _alter(cursor)
    return None


def _drop(cursor: _Cursor) -> Emptied | None:
    """``DROP DATABASE`` or ``DROP TABLE``, after the ``DROP``."""
    if cursor.word("DATABASE", "SCHEMA"):
        cursor.if_exists()
        db = cursor.identifier()
        return ("DROP DATABASE", [], [db]) if db is not None else None
    if cursor.word("TEMPORARY"):
        return None  # a session's own table: never captured
    if not cursor.word("TABLE", "TABLES"):
        return None
    cursor.if_exists()
    names = cursor.tables()
    return ("DROP TABLE", names, []) if names else None


def _rename(cursor: _Cursor) -> Emptied | None:
    """``RENAME TABLE a TO b, c TO d``, after the ``RENAME``: the old names and the new
    ones."""
    if not cursor.word("TABLE", "TABLES"):
        return None
    cursor.if_exists()
    names = []
    while (old := cursor.table()) is not None:
        cursor.word("WAIT", "NOWAIT")  # MariaDB: RENAME TABLE t [WAIT n | NOWAIT] TO ...
        if cursor.i < len(cursor.tokens) and cursor.tokens[cursor.i][0] == "word" and \
                cursor.tokens[cursor.i][1].isdigit():
            cursor.i += 1
        if not cursor.word("TO"):
            break
        new = cursor.table()
        if new is None:
            break
        names += [old, new]
        if not cursor.punct(","):
            break
    return ("RENAME TABLE", names, []) if names else None


def _alter(cursor: _Cursor) -> Emptied | None:
    """``ALTER TABLE a ...`` after the ``ALTER``: the partition operations that remove or swap
    rows, and a rename (``..., RENAME [TO | AS] b``)."""
    cursor.word("ONLINE")
    cursor.word("IGNORE")
    if not cursor.word("TABLE"):
        return None
    cursor.if_exists()
    old = cursor.table()
    if old is None:
        return None
    start = cursor.i
    action = cursor.word("TRUNCATE", "DROP", "EXCHANGE", "CONVERT")
    if action is not None and cursor.word("PARTITION"):
        # rows removed or swapped a partition at a time; an EXCHANGE swaps the other
        # table's too (CONVERT's other table is made, or dropped, by the statement)
        statement = f"ALTER TABLE ... {action} PARTITION"
        if action == "EXCHANGE" and cursor.skip_to("WITH") and cursor.word("TABLE") and \
                (other := cursor.table()) is not None:
            return statement, [old, other], []
        return statement, [old], []
    if action == "CONVERT" and cursor.word("TABLE"):  # CONVERT TABLE t2 TO PARTITION p
        return "ALTER TABLE ... CONVERT TABLE", [old], []
    cursor.i = start
    new = _renamed_to(cursor)
    return ("ALTER TABLE ... RENAME", [old, new], []) if new is not None else None


def _renamed_to(cursor: _Cursor) -> Name | None:
    """The new name an ALTER TABLE's actions give the table (an action ``RENAME [TO | AS]``,
    not ``RENAME COLUMN``, ``INDEX``, ``KEY`` or ``CONSTRAINT``), from the first action on."""
    tokens, first = cursor.tokens, cursor.i
    for i in range(first, len(tokens) - 1):
        if tokens[i][0] == "word" and tokens[i][1].upper() == "RENAME" and \
                (i == first or tokens[i - 1] == ("punct", ",")):
            cursor.i = i + 1
            if cursor.word("COLUMN", "INDEX", "KEY", "CONSTRAINT"):
                continue
            cursor.word("TO", "AS")
            new = cursor.table()
            if new is not None:
                return new
    return None
