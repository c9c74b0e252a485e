"""Which tables a DDL statement in the redo empties or replaces.

``TRUNCATE``, ``DROP TABLE``, ``RENAME``, ``ALTER TABLE ... RENAME TO``, the partition
maintenance that removes or swaps rows (``TRUNCATE``, ``DROP`` or ``EXCHANGE`` of a partition
or subpartition) and ``DROP USER ... CASCADE`` change a table's rows without a row change in
the redo: LogMiner shows one DDL row whose ``SQL_REDO`` is the statement exactly as issued (the
19c reference says so). A table they hit no longer holds the rows the log gave before, so the
reader reports each captured table they name (:class:`sdk.TableTruncated`). Only the
statement's head is parsed: its names, quoted (case kept) or not (upper-cased, as Oracle
folds them), qualified or in the schema of the object the row names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sdk.dialect.sql import StatementHead

_TOKEN = re.compile(
    r"\s+|/\*.*?\*/|--[^\n]*"  # space and comments
    r"|\"((?:[^\"]|\"\")*)\""  # a quoted identifier
    r"|'(?:[^']|'')*'"  # a string
    r"|([A-Za-z0-9_$#]+)"  # a word
    r"|(.)", re.S)
_HEADS = ("TRUNCATE", "DROP", "RENAME", "ALTER")

Name = tuple[str, str]
"""A table: (schema, name), as the catalog spells them."""


@dataclass(frozen=True)
class Emptied:
    """What a statement does to tables, when it empties or replaces some."""

    statement: str
    """``TRUNCATE``, ``DROP TABLE``, ``ALTER TABLE ... DROP PARTITION``..., for messages."""
    tables: list[Name]
    """The tables it names."""
    users: list[str]
    """The schemas it drops, every table in them (``DROP USER ... CASCADE``)."""
    dropped: bool
    """The tables themselves went away (dropped, renamed), not only rows."""


class _Cursor(StatementHead):
    def __init__(self, sql: str) -> None:
        super().__init__(sql, _TOKEN, ('"',), str.upper)

    def table(self, schema: str | None) -> Name | None:
        """``name`` (in ``schema``; None without one) or ``schema.name``."""
        name = self.qualified(schema)
        return (name[0], name[1]) if name is not None and name[0] is not None else None


def emptied(sql: str, schema: str | None) -> Emptied | None:
    """What DDL statement ``sql`` does to tables, when it empties or replaces some, its
    unqualified names read in ``schema`` (the owner of the object LogMiner's row names); None
    for any other statement. Cheap for the common ones (a look at the first word)."""
    head = sql.lstrip()[:8].upper()
    if not head.startswith(_HEADS) and not head.startswith(("/*", "--")):
        return None
    cursor = _Cursor(sql)
    verb = cursor.word(*_HEADS)
    if verb == "TRUNCATE":
        if not cursor.word("TABLE"):
            return None  # TRUNCATE CLUSTER: clusters hold no captured table's identity
        name = cursor.table(schema)
        return Emptied("TRUNCATE", [name], [], False) if name is not None else None
    if verb == "DROP":
        if cursor.word("USER"):
            user = cursor.identifier()
            return Emptied("DROP USER", [], [user], True) if user is not None else None
        if not cursor.word("TABLE"):
            return None
        name = cursor.table(schema)
        return Emptied("DROP TABLE", [name], [], True) if name is not None else None
    if verb == "RENAME":  # RENAME old TO new: both in the issuing schema
        old = cursor.table(schema)
        if old is None or not cursor.word("TO"):
            return None
        new = cursor.table(old[0])
        return Emptied("RENAME", [old, new], [], True) if new is not None else None
    if verb == "ALTER":
        if not cursor.word("TABLE"):
            return None
        name = cursor.table(schema)
        if name is None:
            return None
        action = cursor.word("RENAME", "TRUNCATE", "DROP", "EXCHANGE")
        if action == "RENAME":  # not RENAME COLUMN / CONSTRAINT / PARTITION
            if not cursor.word("TO"):
                return None
            new = cursor.table(name[0])
            if new is None:
                return None
            return Emptied("ALTER TABLE ... RENAME", [name, new], [], True)
        part = cursor.word("PARTITION", "SUBPARTITION", "PARTITIONS", "SUBPARTITIONS")
        if action is None or part is None:
            return None
        statement = f"ALTER TABLE ... {action} {part.removesuffix('S')}"
        if action != "EXCHANGE":
            return Emptied(statement, [name], [], False)
        if cursor.skip_to("WITH") is None or not cursor.word("TABLE"):
            return None
        other = cursor.table(name[0])
        return Emptied(statement, [name] + ([other] if other is not None else []), [], False)
    return None
