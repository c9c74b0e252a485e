"""Helpers for dialects that can be sync targets (``apply_changes``): the runs of changes to
write (or their net effect, for a set-based apply), the check of an existing target table, and
the ledger that makes batches idempotent, and the transaction a write joins."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from .errors import ConfigurationError
from .types import ChangeEvent, TableId, TableSchema

Kind = Literal["delete", "upsert"]


def change_runs(events: Sequence[ChangeEvent], convert: Callable[[Any], Any] | None = None
                ) -> list[tuple[Kind, list[tuple[Any, ...]]]]:
    """The events as runs of deletes (key values) and upserts (after images), in order, so a
    target can ``executemany`` each run. An update that moved its key deletes the old key
    first. ``convert`` maps each value to what the driver should send."""
    out: list[tuple[Kind, list[tuple[Any, ...]]]] = []

    def add(kind: Kind, values: tuple[Any, ...]) -> None:
        row = tuple(map(convert, values)) if convert is not None else values
        if out and out[-1][0] == kind:
            out[-1][1].append(row)
        else:
            out.append((kind, [row]))

    for event in events:
        if event.op == "d":
            add("delete", event.key)
            continue
        if event.old_key is not None:
            add("delete", event.old_key)
        assert event.after is not None
        add("upsert", event.after)
    return out


@dataclass(frozen=True)
class NetChanges:
    """The net effect of a sequence of changes: the keys to delete and the rows to upsert.

    Each key is in at most one of the two, so a target may apply them as two sets (all deletes,
    then all upserts, in any row order) and end as if it had applied the changes one by one."""

    deletes: list[tuple[Any, ...]]
    """The key values of the rows to delete."""
    upserts: list[tuple[Any, ...]]
    """The rows (after images) to insert or replace by key."""

    def __len__(self) -> int:
        return len(self.deletes) + len(self.upserts)


def net_changes(events: Sequence[ChangeEvent], convert: Callable[[Any], Any] | None = None
                ) -> NetChanges:
    """The last change of each key of ``events`` (in order; an update that moved its key
    deletes the old key): what a set-based apply writes. The last change decides, so a key
    deleted by a later move is deleted even when an earlier event upserted it, and a key
    re-inserted after a delete is upserted. ``convert`` maps each value as in
    :func:`change_runs`."""
    last: dict[tuple[Any, ...], tuple[Any, ...] | None] = {}  # key -> after image, or None
    for event in events:
        if event.op == "d":
            last.pop(event.key, None)  # re-inserted at the end: the dict keeps change order
            last[event.key] = None
            continue
        if event.old_key is not None:
            last.pop(event.old_key, None)
            last[event.old_key] = None
        assert event.after is not None
        last.pop(event.key, None)
        last[event.key] = event.after
    deletes: list[tuple[Any, ...]] = []
    upserts: list[tuple[Any, ...]] = []
    for key, after in last.items():
        values = key if after is None else after
        row = tuple(map(convert, values)) if convert is not None else values
        (deletes if after is None else upserts).append(row)
    return NetChanges(deletes, upserts)


def check_target_columns(existing: Sequence[str], table: TableSchema) -> None:
    """Refuse a target table that exists with other columns than the source table's (an empty
    ``existing`` means it does not exist yet). Their order may differ: a table altered after a
    schema change has its new columns last, and targets name the columns they write."""
    if existing and sorted(existing) != sorted(table.column_names):
        raise ConfigurationError(
            f"target table {table.table} exists with columns {list(existing)}, not "
            f"{list(table.column_names)}: drop it or choose another target")


LEDGER = "_sdk_applied"
"""The table in which a target records each batch it applied, as ``(tbl, batch_id)``: the target
table's name and the batch's id (the mirror's ``<Spark batch id>-<task>``), so a replayed Spark
micro-batch is applied once."""

ROW_RIGHTS = ("SELECT", "INSERT", "UPDATE", "DELETE")
"""What an apply does to a mirrored table (and to the ``_sdk_position`` table): the rights a
dialect's ``target_preflight`` asks of the target user on each."""

LEDGER_RIGHTS = ("SELECT", "INSERT", "DELETE")
"""What an apply does to :data:`LEDGER`: claims a batch, asks for one, trims old ones."""


class Cursor(Protocol):
    """The part of a DB-API cursor that ``Ledger.apply`` uses."""

    @property
    def rowcount(self) -> int: ...

    def execute(self, sql: str, params: Sequence[Any], /) -> object: ...

    def executemany(self, sql: str, params: Iterable[Sequence[Any]], /) -> object: ...


@dataclass(frozen=True)
class Ledger:
    """The applied-batch ledger (``LEDGER``) in one target database's SQL.

    A batch claims its ``(table, batch id)`` row before writing its changes, in the same
    transaction: the claim inserts nothing when the row exists (the batch was applied: a
    replay), the row commits with the changes or not at all, and its lock makes a concurrent
    replay wait for the first to end. The dialect supplies only what differs between databases:
    where the ledger lives, its column type, the placeholder and the insert-if-absent form."""

    schema: str = ""
    """The quoted schema holding the ledger (as in a statement without parameters); empty for
    the connection's default."""
    text_type: str = "TEXT"
    """The SQL type of both columns (one the database can index as a key)."""
    param: str = "%s"
    """The driver's placeholder (``%s`` or ``?``). With ``%s`` (psycopg, pymysql) the driver
    reads every ``%`` of a statement with parameters, so the claim doubles those of the name."""
    insert_ignore: bool = False
    """Claim with MySQL's ``INSERT IGNORE``, not ``ON CONFLICT DO NOTHING`` (PostgreSQL, SQLite)."""

    @property
    def name(self) -> str:
        """The ledger's table as statements name it."""
        return f"{self.schema}.{LEDGER}" if self.schema else LEDGER

    def create_sql(self) -> str:
        """The statement creating the ledger if it does not exist yet."""
        return (f"CREATE TABLE IF NOT EXISTS {self.name} (tbl {self.text_type}, "
                f"batch_id {self.text_type}, PRIMARY KEY (tbl, batch_id))")

    def claim_sql(self) -> str:
        """The insert of a batch's row that does nothing (0 rows) when the row exists."""
        values = f"VALUES ({self.param}, {self.param})"
        name = self.name.replace("%", "%%") if self.param == "%s" else self.name
        if self.insert_ignore:
            return f"INSERT IGNORE INTO {name} {values}"
        return f"INSERT INTO {name} {values} ON CONFLICT DO NOTHING"

    def trim_sql(self) -> str:
        """The delete of a table's rows whose batch id is in a range ``[low, high)`` (the
        parameters: the table's name, low, high): an index range of the key."""
        name = self.name.replace("%", "%%") if self.param == "%s" else self.name
        p = self.param
        return f"DELETE FROM {name} WHERE tbl = {p} AND batch_id >= {p} AND batch_id < {p}"

    def holding_sql(self, count: int) -> str:
        """The query of which of ``count`` table names (the parameters) the ledger holds a
        batch of, one per row: an index probe per name (its key starts with ``tbl``), so it
        costs the same however many batches the ledger holds."""
        name = self.name.replace("%", "%%") if self.param == "%s" else self.name
        probe = f"SELECT MIN(tbl) FROM {name} WHERE tbl = {self.param}"
        return " UNION ALL ".join([probe] * count)

    def claim(self, cursor: Cursor, table: TableSchema, batch_id: str) -> bool:
        """Claim ``batch_id`` of ``table``: False when it was applied before (a replay, which
        must write nothing). The caller writes the batch's changes after a True, in the same
        transaction, and commits both."""
        cursor.execute(self.claim_sql(), (table.table.name, batch_id))
        return cursor.rowcount != 0

    def apply(self, cursor: Cursor, table: TableSchema, events: Sequence[ChangeEvent],
              batch_id: str, delete: str, upsert: str,
              convert: Callable[[Any], Any] | None = None) -> bool:
        """Claim ``batch_id`` of ``table`` and write ``events`` with the dialect's ``delete`` (by
        key) and ``upsert`` statements; False, having written nothing, when the batch was
        applied before. The caller runs this inside one transaction and commits it."""
        if not self.claim(cursor, table, batch_id):
            return False
        for kind, rows in change_runs(events, convert):
            cursor.executemany(delete if kind == "delete" else upsert, rows)
        return True


def ledger_tables(tables: Sequence[TableSchema], existing: Collection[tuple[str, str]],
                   held: Callable[[str, list[str]], Iterable[str | None]]
                   ) -> dict[TableId, bool]:
    """What a SQL target's ``applied_tables`` hook returns, from the ``(schema, name)`` pairs
    among ``tables`` and their schemas' ledgers that exist, and ``held(schema, names)``: the
    names the ledger of ``schema`` holds a batch of (:meth:`Ledger.holding_sql`), asked once
    per schema whose ledger exists."""
    found = {t.table for t in tables if (t.table.schema, t.table.name) in existing}
    out: dict[TableId, bool] = {t: False for t in found}
    for schema in dict.fromkeys(t.schema for t in found):
        if (schema, LEDGER) not in existing:
            continue
        names = [t.name for t in found if t.schema == schema]
        holding: set[str | None] = set()
        for at in range(0, len(names), HELD_PER_QUERY):
            holding.update(held(schema, names[at:at + HELD_PER_QUERY]))
        out.update({t: True for t in found if t.schema == schema and t.name in holding})
    return out


HELD_PER_QUERY = 200
"""Table names one :meth:`Ledger.holding_sql` query probes at most: SQLite refuses a compound
SELECT of more than 500 terms (a target of 1,000 tables could not resume)."""


@contextlib.contextmanager
def write_transaction(execute: Callable[[str], object], inside: bool, begin: str = "BEGIN"
                      ) -> Iterator[None]:
    """One all-or-nothing write in SQL: its own transaction (``begin``, ``COMMIT``,
    ``ROLLBACK`` on an error), or, ``inside`` a transaction an ``apply_transaction`` block
    holds open, a savepoint in it, so that the block's commit is the only one."""
    if inside:
        execute("SAVEPOINT sdk_write")
        try:
            yield
        except BaseException:
            execute("ROLLBACK TO SAVEPOINT sdk_write")
            raise
        execute("RELEASE SAVEPOINT sdk_write")
        return
    execute(begin)
    try:
        yield
    except BaseException:
        execute("ROLLBACK")
        raise
    execute("COMMIT")
