"""Identifiers quoted as MySQL takes them, in statements and in the messages that show them."""

from __future__ import annotations

from sdk import TableId


def q(name: str) -> str:
    """Quote an identifier with backticks (an inner one doubled): for statements run without
    parameters, and for the statements messages show."""
    return "`" + name.replace("`", "``") + "`"


def qp(name: str) -> str:
    """An identifier quoted for a statement run with parameters: pymysql formats such a
    statement with ``%``, so a ``%`` in the name is doubled."""
    return q(name).replace("%", "%%")


def _table(table: TableId, params: bool = False) -> str:
    """A table's quoted ``schema.name``; ``params``: for a statement run with parameters."""
    quote = qp if params else q
    return f"{quote(table.schema)}.{quote(table.name)}"
