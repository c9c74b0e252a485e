"""What capture needs of each table, checked before anything is created: the publication
(which tables it holds, which ones the sync may add itself, partitions published through their
root) and the replica identity (the old rows the log carries, partitions included).

Preflight and ``sdk check`` report what ``sdk sync`` would do: a table the sync's role may add
to the publication itself is OK ("will be added by sdk sync"); only one it cannot add is missing,
with the statement its owner must run.

A partitioned table is captured as one table: the publication is created with
``publish_via_partition_root = true`` (PostgreSQL 13+), so pgoutput reports every partition's
changes under the root, and an UPDATE that moves a row to another partition arrives as a delete
of the old key and an insert of the new one. Each partition keeps its own replica identity
(``ALTER TABLE parent REPLICA IDENTITY`` does not reach the partitions), yet pgoutput labels
their old rows with the root's: a partition under DEFAULT below a FULL root would hand key-only
old rows over as whole ones, so the root and every partition must agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sdk import PreflightError, Requirement, TableId, TableSchema

from ._connection import PgConnection, q, qualified

VIA_ROOT = "publish_via_partition_root = true"
IDENTITY_NAMES = {"d": "DEFAULT", "f": "FULL", "i": "USING INDEX", "n": "NOTHING"}


@dataclass(frozen=True)
class Publication:
    """The sync's publication as this role sees it."""

    name: str
    exists: bool
    via_root: bool
    """Partitions are published through their root (``publish_via_partition_root``)."""
    mine: bool
    """This role may alter it (owns it, or is a superuser), or may create it when missing."""
    owner: str

    def sql_for(self, tables: Sequence[Captured]) -> str:
        """The one statement that puts ``tables`` in the publication (pasted once: a
        ``CREATE PUBLICATION`` per table would fail from the second on)."""
        name, targets = q(self.name), ", ".join(qualified(t.table) for t in tables)
        if self.exists:
            return f"ALTER PUBLICATION {name} ADD TABLE {targets}"
        return f"CREATE PUBLICATION {name} FOR TABLE {targets}" + (
            f" WITH ({VIA_ROOT})" if any(t.partitioned for t in tables) else "")


@dataclass(frozen=True)
class Relation:
    """One relation of a captured table's partition tree: the table itself, or a partition."""

    table: TableId
    identity: str
    """``relreplident``: d (default), f (full), i (index), n (nothing)."""
    primary_key: tuple[str, ...]
    identity_index: tuple[str, ...]
    """The columns of the replica identity index (identity ``i``)."""
    leaf: bool

    def old_key_columns(self) -> set[str] | None:
        """The columns the log's old rows carry; None for the whole row."""
        if self.identity == "f":
            return None
        if self.identity == "i":
            return set(self.identity_index)
        return set(self.primary_key) if self.identity == "d" else set()


@dataclass(frozen=True)
class Captured:
    """A captured table: its owner, whether it is in the publication, its partition tree."""

    table: TableId
    owner: str
    owned: bool
    published: bool
    partitioned: bool
    relations: tuple[Relation, ...]
    """The table first, then its leaf partitions (a plain table: itself only)."""


def publication(conn: PgConnection) -> Publication:
    """The publication named in the URL, and what this role may do with it."""
    rows = conn.query(
        "SELECT coalesce((to_jsonb(p) ->> 'pubviaroot')::bool, false), "
        "pg_has_role(p.pubowner, 'USAGE'), p.pubowner::regrole::text FROM pg_publication p "
        "WHERE p.pubname = %s", (conn.publication,))
    if rows:
        via_root, mine, owner = rows[0]
        return Publication(conn.publication, True, via_root, mine, owner)
    (create,) = conn.query("SELECT has_database_privilege(current_database(), 'CREATE')")[0]
    return Publication(conn.publication, False, False, create, "")


_KEY_COLUMNS = ("coalesce((SELECT array_agg(a.attname::text ORDER BY a.attnum) FROM pg_index i "
                "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
                "WHERE i.indrelid = c.oid AND i.{flag}), '{{}}')")


def captured_all(conn: PgConnection, tables: Sequence[TableId]
                 ) -> dict[TableId, Captured | None]:
    """Each of ``tables`` as capture sees it (None: it does not exist), in two queries
    whatever their number: a sync of a thousand tables checks them several times at start."""
    out: dict[TableId, Captured | None] = dict.fromkeys(tables)
    if not tables:
        return out
    listed = list(out)
    # the publication's tables listed once (the view expands FOR ALL TABLES and IN SCHEMA)
    rows = conn.query(
        "WITH listed AS MATERIALIZED (SELECT schemaname, tablename FROM pg_publication_tables "
        "WHERE pubname = %s), rel AS MATERIALIZED (SELECT r.prrelid FROM pg_publication_rel r "
        "JOIN pg_publication p ON p.oid = r.prpubid WHERE p.pubname = %s) "
        "SELECT w.i, c.oid, c.relowner::regrole::text, pg_has_role(c.relowner, 'USAGE'), "
        "c.relkind = 'p', EXISTS (SELECT 1 FROM listed t WHERE t.schemaname = n.nspname AND "
        "t.tablename = c.relname) OR EXISTS (SELECT 1 FROM rel WHERE rel.prrelid = c.oid) "
        "FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS w(s, t, i) JOIN pg_namespace n "
        "ON n.nspname = w.s JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = w.t",
        (conn.publication, conn.publication, [t.schema for t in listed],
         [t.name for t in listed]))
    if not rows:
        return out
    trees: dict[int, list[Relation]] = {}
    for root, schema, name, ident, leaf, pk, index in conn.query(
            "SELECT t.root, n.nspname, c.relname, c.relreplident, t.isleaf, "
            + _KEY_COLUMNS.format(flag="indisprimary") + ", "
            + _KEY_COLUMNS.format(flag="indisreplident")
            + " FROM (SELECT r.root, r.root AS relid, 0 AS level, k.relkind <> 'p' AS isleaf "
            "FROM unnest(%s::oid[]) AS r(root) JOIN pg_class k ON k.oid = r.root UNION SELECT "
            "r.root, p.relid, p.level, p.isleaf FROM unnest(%s::oid[]) AS r(root) JOIN pg_class "
            "k ON k.oid = r.root AND k.relkind = 'p' CROSS JOIN LATERAL "  # (a slow function)
            "pg_partition_tree(r.root) p WHERE p.level > 0) t "
            "JOIN pg_class c ON c.oid = t.relid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "ORDER BY t.root, t.level, n.nspname, c.relname", ([r[1] for r in rows],) * 2):
        trees.setdefault(root, []).append(
            Relation(TableId(schema, name), ident, tuple(pk), tuple(index), leaf))
    names: set[tuple[str, str]] | None = None
    for i, oid, owner, owned, partitioned, published in rows:
        table = listed[i - 1]
        root, *rest = trees[oid]
        leaves = tuple(r for r in rest if r.leaf)
        if partitioned and not published and leaves:
            # a publication FOR ALL TABLES or IN SCHEMA without publish_via_partition_root
            # lists the partitions, not the root: the root is in it when every partition is
            if names is None:
                names = {(s, t) for s, t in conn.query(
                    "SELECT schemaname, tablename FROM pg_publication_tables WHERE "
                    "pubname = %s", (conn.publication,))}
            published = all((r.table.schema, r.table.name) in names for r in leaves)
        out[table] = Captured(table, owner, owned, published, partitioned, (root, *leaves))
    return out


def identity_problem(table: Captured) -> tuple[str, str] | None:
    """Why the log's old rows of ``table`` cannot identify its rows, and the fix; None if
    they can. Every relation needs an identity, and partitions need the root's kind."""
    root = table.relations[0]
    usable = [r for r in table.relations if r.identity == "f" or r.identity == "i" or
              (r.identity == "d" and r.primary_key)]
    if len(usable) < len(table.relations):
        bad = [r for r in table.relations if r not in usable]
        names = ", ".join(str(r.table) for r in bad)
        return (f"{names}: no primary key and no replica identity: adding it to a publication "
                "would make the application's UPDATE and DELETE fail",
                "; ".join(f"ALTER TABLE {qualified(r.table)} REPLICA IDENTITY FULL"
                          for r in bad) + " (or add a primary key)")
    if root.identity == "f":
        bad = [r for r in table.relations[1:] if r.identity != "f"]
        if bad:
            names = ", ".join(f"{r.table} ({IDENTITY_NAMES[r.identity]})" for r in bad)
            return (f"{table.table} has REPLICA IDENTITY FULL but its partitions {names} do "
                    "not (a partition does not take its parent's): pgoutput would label their "
                    "key-only old rows as whole rows",
                    "; ".join(f"ALTER TABLE {qualified(r.table)} REPLICA IDENTITY FULL"
                              for r in bad) + " (and for each partition added later)")
    return None


def unpublished(pub: Publication, every: dict[TableId, Captured | None]) -> list[Captured]:
    """The captured tables missing from the publication that this role cannot add: one
    statement, run by their owners, adds them all (:func:`table_requirements`)."""
    return [c for c in every.values()
            if c is not None and not c.published and not (c.owned and pub.mine)]


def create_requirement(pub: Publication, user: str, database: str,
                       every: dict[TableId, Captured | None]) -> Requirement | None:
    """Where the publication is missing and this role owns tables to put in it but may not
    create it: the ``CREATE`` on the database it lacks, named (the tables are its own)."""
    if pub.exists or pub.mine or not any(c is not None and c.owned and not c.published
                                         for c in every.values()):
        return None
    return Requirement(f"may create publication {pub.name}", False,
                       f"role {user} has no CREATE on database {database}",
                       f"GRANT CREATE ON DATABASE {q(database)} TO {q(user)}, as the "
                       "database's owner (sdk sync then creates the publication)")


def table_requirements(pub: Publication, table: TableId, found: Captured | None,
                       pending: Sequence[Captured] = ()) -> list[Requirement]:
    """The replica identity and publication checks of ``table`` (``found``: :func:`captured`);
    ``pending``: :func:`unpublished`, whose first table's fix is the statement for all."""
    if found is None:
        return [Requirement(f"{table} exists", False, "no such table or not visible", "")]
    problem = identity_problem(found)
    checks = [Requirement(f"replica identity of {table}", problem is None,
                          problem[0] if problem else "",
                          problem[1] if problem else "")]
    addable = found.owned and pub.mine
    detail = "" if found.published else (
        "will be added by sdk sync" if addable else
        f"sdk sync cannot add it: the table belongs to role {found.owner}"
        + (f" and the publication to role {pub.owner}" if pub.exists and not pub.mine else "")
        + ("" if pub.exists or pub.mine else ", and this role may not create publications"))
    together = [c for c in pending if c.table != table] if found in pending else []
    owners = ("the tables' owner" if len(together) else "the table's owner") \
        if not pub.exists else "a role owning the tables and the publication (or a superuser)"
    fix = f"{pub.sql_for([found, *together])}, as {owners}"
    if pending and found in pending and pending[0] != found:
        fix = f"the statement shown for {pending[0].table} adds it too"
    elif found.owned and not pub.exists and not pub.mine:
        fix = "the GRANT CREATE above (sdk sync then adds it)"
    checks.append(Requirement(f"{table} in publication {pub.name}",
                              found.published or addable, detail, fix))
    return checks


def partition_root_requirement(pub: Publication) -> Requirement:
    """An existing publication must publish partitions under their root's name (one that sdk
    sync creates does: the tables' requirements show its statement)."""
    detail = "" if pub.via_root else "will be set by sdk sync" if pub.mine else (
        f"the publication belongs to role {pub.owner}: the partitions' changes would come "
        "under their own names and be missed")
    return Requirement(f"publication {pub.name} publishes partitions through their root",
                       pub.via_root or pub.mine, detail,
                       f"ALTER PUBLICATION {q(pub.name)} SET ({VIA_ROOT}), as its owner")


def check_keys(tables: Sequence[TableSchema], every: dict[TableId, Captured | None]) -> None:
    """Refuse a chosen key the log's old rows do not carry (a key other than the replica
    identity's columns needs REPLICA IDENTITY FULL), before anything is created; ``every``:
    the tables as :func:`captured_all` gives them."""
    problems = []
    for schema in tables:
        found = every[schema.table]
        if found is None:
            continue
        short = [r for r in found.relations
                 if (cols := r.old_key_columns()) is not None and not set(schema.key) <= cols]
        if short and identity_problem(found) is None:
            names = ", ".join(str(r.table) for r in short)
            problems.append(
                f"[MISSING] old key of {schema.table}: its chosen key ({', '.join(schema.key)}) "
                f"is not in the old rows the log carries for {names} (replica identity "
                f"{IDENTITY_NAMES[short[0].identity]})\n    fix: "
                + "; ".join(f"ALTER TABLE {qualified(r.table)} REPLICA IDENTITY FULL"
                            for r in short))
    if problems:
        raise PreflightError("the log cannot identify the rows of the chosen keys:\n"
                             + "\n".join(problems))


def publish(conn: PgConnection, every: dict[TableId, Captured | None]) -> None:
    """Create the publication, add the tables missing from it and publish partitions through
    their root, as far as this role may; preflight names what is left to the owners."""
    import psycopg

    pub = publication(conn)
    if not pub.mine:
        return
    found = [c for c in every.values() if c is not None]
    missing = [c for c in found if not c.published and c.owned]
    partitioned = any(c.partitioned for c in found)
    try:
        if not pub.exists:
            if missing:  # never an empty one: the tables' owners could not add to it
                conn.query(f"CREATE PUBLICATION {q(pub.name)} FOR TABLE "
                           + ", ".join(qualified(c.table) for c in missing)
                           + (f" WITH ({VIA_ROOT})" if partitioned else ""))
            return
        if not pub.via_root and partitioned:
            conn.query(f"ALTER PUBLICATION {q(pub.name)} SET ({VIA_ROOT})")
        if missing:
            conn.query(f"ALTER PUBLICATION {q(pub.name)} ADD TABLE "
                       + ", ".join(qualified(c.table) for c in missing))
    except psycopg.errors.InsufficientPrivilege:
        pass  # preflight names the statement the owner must run
