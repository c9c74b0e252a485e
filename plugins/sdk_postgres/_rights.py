"""What a target user needs to mirror into PostgreSQL, asked of the catalog before a sync makes
anything: each missing right named with the GRANT that gives it (``target_preflight``).

A table that exists needs its rows read and written (the apply deletes and upserts; the
ledger is claimed, read and trimmed); one that is missing, ``CREATE`` on its schema, or on the
database when the schema is missing too. The set-based apply stages rows in temporary tables:
``TEMPORARY`` on the database (PostgreSQL grants it to every user unless revoked)."""

from __future__ import annotations

from collections.abc import Sequence

from sdk import Requirement, TableId, TableSchema
from sdk.dialect.apply import LEDGER, LEDGER_RIGHTS, ROW_RIGHTS

from ._connection import PgConnection, q, qualified


def target_rights(conn: PgConnection, tables: Sequence[TableSchema]) -> list[Requirement]:
    """The rights this session's user needs to mirror into ``tables`` (and each of their
    schemas' ledger), one :class:`Requirement` each, missing ones with their GRANT."""
    user, database = conn.raw.info.user, conn.raw.info.dbname
    ((temporary, create_schema),) = conn.query(
        "SELECT has_database_privilege(current_database(), 'TEMPORARY'), "
        "has_database_privilege(current_database(), 'CREATE')")
    checks = [Requirement(f"TEMPORARY on database {database}", bool(temporary),
                          "the apply stages each batch in temporary tables",
                          f"GRANT TEMPORARY ON DATABASE {q(database)} TO {q(user)}")]
    schemas: dict[str, list[TableId]] = {}
    for table in tables:
        schemas.setdefault(table.table.schema, []).append(table.table)
    for schema, names in schemas.items():
        checks += _schema_rights(conn, user, database, schema, names, bool(create_schema))
    return checks


def _schema_rights(conn: PgConnection, user: str, database: str, schema: str,
                   names: list[TableId], create_schema: bool) -> list[Requirement]:
    """The rights to mirror tables ``names`` of ``schema`` (and its ledger)."""
    ((exists, usage, create),) = conn.query(
        "SELECT s IS NOT NULL, has_schema_privilege(s, 'USAGE'), "
        "has_schema_privilege(s, 'CREATE') FROM to_regnamespace(%s) AS s", (q(schema),))
    if not exists:  # the sync makes the schema, and so owns all it makes in it
        return [Requirement(f"CREATE on database {database}", create_schema,
                            f"schema {schema} is missing: the sync makes it",
                            f"GRANT CREATE ON DATABASE {q(database)} TO {q(user)}")]
    if not usage:
        return [Requirement(f"USAGE on schema {schema}", False, "",
                            f"GRANT USAGE ON SCHEMA {q(schema)} TO {q(user)}")]
    ledger = TableId(schema, LEDGER)
    wanted = {**{n: ROW_RIGHTS for n in names}, ledger: LEDGER_RIGHTS}
    rows = conn.query(
        "SELECT n, c IS NOT NULL, array_remove(ARRAY[" + ", ".join(
            f"CASE WHEN has_table_privilege(c, '{r}') THEN NULL ELSE '{r}' END"
            for r in ROW_RIGHTS) + "], NULL) "
        "FROM unnest(%s::text[]) WITH ORDINALITY AS u(n, i), LATERAL to_regclass(n) AS c "
        "ORDER BY i", ([qualified(n) for n in wanted],))
    checks, missing = [], []
    for name, (_, found, lacking) in zip(wanted, rows, strict=True):
        if not found:
            missing.append(name)
            continue
        lacks = [r for r in wanted[name] if r in lacking]
        checks.append(Requirement(
            f"{', '.join(wanted[name])} on {name}", not lacks,
            f"lacks {', '.join(lacks)}" if lacks else "",
            f"GRANT {', '.join(lacks)} ON TABLE {qualified(name)} TO {q(user)}"))
    if missing:
        made = ", ".join(str(n) for n in missing)
        checks.insert(0, Requirement(
            f"CREATE on schema {schema}", bool(create), f"the sync makes {made}",
            f"GRANT CREATE ON SCHEMA {q(schema)} TO {q(user)}, or make "
            f"{'them' if len(missing) > 1 else 'it'} beforehand as a user who may (the sync "
            "then writes the tables as they are)"))
    return checks
