"""The privileges a session's account holds (``SHOW GRANTS``), and what a target user needs to
mirror into MySQL/MariaDB, asked before a sync makes anything (``target_preflight``).

A table that exists needs its rows read and written (the apply deletes and upserts; the
ledger is claimed, read and trimmed); one that is missing, ``CREATE`` on its database, which
also makes a missing database. Each fix names the account as the server knows it
(``CURRENT_USER()``), so that it pastes and works."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from sdk import Requirement, TableId, TableSchema
from sdk.dialect.apply import LEDGER, LEDGER_RIGHTS, ROW_RIGHTS

from ._names import _table, q

if TYPE_CHECKING:
    from . import MySqlConnection

_OBJECT = re.compile(r"^`((?:[^`]|``)*)`\.(?:\*|`((?:[^`]|``)*)`)$")
"""A grant's object as ``SHOW GRANTS`` prints it: ```db`.*`` or ```db`.`table```."""


def _grants(conn: MySqlConnection) -> dict[str, set[str]]:
    """What the session may do, as {object: privileges}, objects upper-cased (``*.*``,
    ```db`.*``): ``SHOW GRANTS``, its active roles' privileges included (MariaDB lists them
    with the user's; MySQL 8 only when asked ``USING`` them). A role granted but not active
    gives the session nothing, and counts for nothing."""
    statement = "SHOW GRANTS"
    if not conn.mariadb:
        rows = conn.query("SELECT CURRENT_ROLE()")  # "`r`@`%`,..." as USING takes it
        active = str(rows[0][0]) if rows and rows[0][0] is not None else "NONE"
        if active.upper() != "NONE":
            statement = f"SHOW GRANTS FOR CURRENT_USER() USING {active}"
    out: dict[str, set[str]] = {}
    for (line,) in conn.query(statement):
        text = line.upper()
        if not text.startswith("GRANT ") or " ON " not in text:
            continue
        privileges, _, rest = text[6:].partition(" ON ")
        target = rest.split(" TO ", 1)[0].strip()
        out.setdefault(target, set()).update(p.strip() for p in privileges.split(","))
    return out


def _account(conn: MySqlConnection) -> str:
    """The account the server says the session is (``CURRENT_USER()``), quoted as GRANT
    takes it: ``'cdc'@'127.0.0.1'``, not the ``'%'`` host a grant names by habit."""
    rows = conn.query("SELECT CURRENT_USER()")
    current = str(rows[0][0]) if rows else f"{conn.settings.get('user', '')}@%"
    user, _, host = current.rpartition("@")
    return "'{}'@'{}'".format(user.replace("'", "''"), host.replace("'", "''"))


def _like(pattern: str) -> re.Pattern[str]:
    """A database grant's name as the server matches it: ``%`` and ``_`` are wildcards,
    ``\\_`` and ``\\%`` themselves."""
    parts = re.split(r"(\\.|%|_)", pattern)
    return re.compile("".join(
        ".*" if p == "%" else "." if p == "_" else re.escape(p[1:] if p.startswith("\\") else p)
        for p in parts) + r"\Z", re.DOTALL)


def held(grants: Mapping[str, set[str]], schema: str, table: str | None = None) -> set[str]:
    """The privileges ``grants`` give on ``schema``'s table ``table`` (None: on the database
    itself): global ones, those of every database grant whose name (a pattern) matches, and
    the table's own."""
    out = set(grants.get("*.*", set()))
    for key, privileges in grants.items():
        match = _OBJECT.match(key)
        if match is None:
            continue
        database, name = (g.replace("``", "`") if g else g for g in match.groups())
        whole = name is None and _like(database).match(schema.upper()) is not None
        if whole or (table is not None and (database, name) == (schema.upper(), table.upper())):
            out |= privileges
    if out & {"ALL", "ALL PRIVILEGES"}:
        out |= {*ROW_RIGHTS, "CREATE"}
    return out


def target_rights(conn: MySqlConnection, tables: Sequence[TableSchema]) -> list[Requirement]:
    """The privileges this session's account needs to mirror into ``tables`` (and each of
    their databases' ledger), one :class:`Requirement` each, missing ones with their GRANT."""
    grants, account = _grants(conn), _account(conn)
    schemas: dict[str, list[str]] = {}
    for table in tables:
        schemas.setdefault(table.table.schema, []).append(table.table.name)
    checks: list[Requirement] = []
    for schema, names in schemas.items():
        wanted = {**{n: ROW_RIGHTS for n in names}, LEDGER: LEDGER_RIGHTS}
        found = {name for (name,) in conn.query(
            "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND "
            "TABLE_NAME IN (" + ", ".join(["%s"] * len(wanted)) + ")", (schema, *wanted))}
        missing = [n for n in wanted if n not in found]
        if missing:
            made = ", ".join(f"{schema}.{n}" for n in missing) if found or conn.query(
                "SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (schema,)
            ) else f"database {schema} and its tables"
            checks.append(Requirement(
                f"CREATE on {schema}.*", "CREATE" in held(grants, schema),
                f"the sync makes {made}",
                f"GRANT CREATE ON {q(schema)}.* TO {account}, or make "
                f"{'them' if len(missing) > 1 else 'it'} beforehand as a user who may (the "
                "sync then writes the tables as they are)"))
            # MySQL gives the maker of a table no rights on it: they come from the database
            lacks = [r for r in ROW_RIGHTS if any(
                r in wanted[n] and r not in held(grants, schema, n) for n in missing)]
            checks.append(Requirement(
                f"{', '.join(ROW_RIGHTS)} on the tables the sync makes in {schema}", not lacks,
                f"lacks {', '.join(lacks)}" if lacks else "",
                f"GRANT {', '.join(lacks)} ON {q(schema)}.* TO {account}"))
        for name in (n for n in wanted if n in found):
            lacks = [r for r in wanted[name] if r not in held(grants, schema, name)]
            checks.append(Requirement(
                f"{', '.join(wanted[name])} on {schema}.{name}", not lacks,
                f"lacks {', '.join(lacks)}" if lacks else "",
                f"GRANT {', '.join(lacks)} ON {_table(TableId(schema, name))} TO {account}"))
    return checks
