"""What a dialect author gives the conformance kit: a database to test against and a few verbs.

Subclass :class:`Harness`, set ``dialect``, implement :meth:`Harness.admin_connect`,
:meth:`Harness.column_type` and :meth:`Harness.table_id` (a harness lacking one fails when it
is made, naming them), and override the rest only where the defaults (plain SQL-92 DDL with
double-quoted identifiers) do not fit the database. The kit writes its test data through
these verbs, so it never needs to know the database's SQL beyond ``INSERT``/``UPDATE``/
``DELETE`` with integer and short ASCII text literals.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

from ..dialect.types import Offset, TableId


class Feature(StrEnum):
    """What a harness or its database can do beyond the minimum; tests needing a feature that
    is absent are skipped with the feature's name (the kit's answer to skip lists).

    Dialect capabilities (``atomic_snapshot``, ``before_images``, ``acknowledge``...) come from
    the dialect's own ``dialect_info``; these flags describe the test database and harness.
    """

    LOG_SWITCH = "log_switch"
    """``force_log_switch`` starts a new log segment (binlog rotation, redo log switch)."""

    CONCURRENT_WRITERS = "concurrent_writers"
    """Several connections may write at once (false for a file database with one writer)."""

    KEY_UPDATES = "key_updates"
    """``UPDATE ... SET <key> = ...`` is logged as one update that moves the key."""

    END_SESSION = "end_session"
    """``end_session`` ends a dialect connection's server session from another session."""


@dataclass(frozen=True)
class GoldenColumn:
    """One column of the type-parity table: its DDL type and SQL literals to store in it.

    ``NULL`` is added by the kit; give the interesting values (extremes, precision, zones,
    empty and non-ASCII text, binary with zero bytes...).
    """

    sql_type: str
    literals: Sequence[str]


class PendingWrite:
    """A transaction the harness has written in and not ended: the kit holds a change in flight
    with it (see :meth:`Harness.open_write`)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def commit(self) -> None:
        try:
            self.conn.commit()
        finally:
            self.conn.close()

    def rollback(self) -> None:
        try:
            self.conn.rollback()
        finally:
            self.conn.close()


class Harness:
    """The database side of the conformance kit for one dialect.

    ``url`` is the URL the dialect itself connects with (its least-privilege capture user);
    None makes every test that needs the database skip with ``skip_reason``. The tests create
    their own tables (names start with ``kit_`` and end with a per-test suffix) and drop them
    again.
    """

    dialect: ClassVar[str]
    """The dialect's entry-point name."""

    features: ClassVar[frozenset[Feature]] = frozenset(
        {Feature.CONCURRENT_WRITERS, Feature.KEY_UPDATES})
    """What this database and harness can do; see :class:`Feature`."""

    plugin: ClassVar[object | None] = None
    """Register this object as the dialect instead of loading the installed entry point (for
    testing a plugin before it is installed, or a deliberately broken copy)."""

    skip_reason: ClassVar[str] = "no test database URL given"

    checksum_declined: ClassVar[frozenset[str]] = frozenset()
    """Golden column types (``GoldenColumn.sql_type``) the dialect documents hashing outside
    the server: the kit's checksum tests accept no server checksum for a table holding one."""

    REQUIRED: ClassVar[tuple[str, ...]] = ("dialect", "admin_connect", "column_type", "table_id")
    """What every harness must define; the rest has defaults."""

    def __init__(self, url: str | None) -> None:
        missing = [m for m in self.REQUIRED
                   if getattr(type(self), m, None) is getattr(Harness, m, None)]
        if missing:
            raise TypeError(f"conformance harness {type(self).__name__} lacks required "
                            f"member(s) {', '.join(missing)}: see sdk.testing.Harness")
        self.url = url

    # --- to implement --------------------------------------------------------------------------

    def admin_connect(self) -> Any:
        """Return a new DB-API connection allowed to create tables and write data, in manual
        commit mode (a transaction begins with the first statement)."""
        raise NotImplementedError

    def column_type(self, kind: str) -> str:
        """The DDL type for ``kind``: ``"int"`` (64-bit integer) or ``"text"`` (text up to 64
        characters that can be part of a primary key)."""
        raise NotImplementedError

    def table_id(self, name: str) -> TableId:
        """Where the kit's table ``name`` lives, as the dialect's ``list_tables`` names it."""
        raise NotImplementedError

    # --- defaults that fit most SQL databases ----------------------------------------------------

    def quote(self, name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    def qualified(self, name: str) -> str:
        """The table's name as written in the kit's SQL statements."""
        table = self.table_id(name)
        return f"{self.quote(table.schema)}.{self.quote(table.name)}"

    def create_table(self, name: str, columns: Sequence[tuple[str, str]],
                     key: Sequence[str]) -> TableId:
        """(Re)create table ``name`` with ``columns`` as ``(column, DDL type)`` and primary key
        ``key`` (empty: no key), ready for change capture. Override to add what capture needs
        (per-table supplemental logging, enabling CDC on the table...)."""
        self.drop_table(name)
        parts = [f"{self.quote(c)} {t}{' NOT NULL' if c in key else ''}" for c, t in columns]
        if key:
            parts.append(f"PRIMARY KEY ({', '.join(map(self.quote, key))})")
        self.execute(f"CREATE TABLE {self.qualified(name)} ({', '.join(parts)})")
        return self.table_id(name)

    def add_column_sql(self, name: str, column: str, kind: str) -> str:
        """The statement adding ``column`` of kit kind ``kind`` to table ``name`` (for the
        schema-change tests); override for another SQL dialect's spelling."""
        return (f"ALTER TABLE {self.qualified(name)} ADD COLUMN {self.quote(column)} "
                f"{self.column_type(kind)}")

    def drop_table(self, name: str) -> None:
        self.execute(f"DROP TABLE IF EXISTS {self.qualified(name)}")

    def execute(self, *statements: str, rollback: bool = False) -> None:
        """Run ``statements`` in one transaction on a new admin connection; commit it, or roll
        it back when ``rollback``."""
        pending = self.open_write(*statements)
        if rollback:
            pending.rollback()
        else:
            pending.commit()

    def open_write(self, *statements: str) -> PendingWrite:
        """Run ``statements`` in a transaction on a new admin connection and leave it open,
        for the kit to commit later: a change in flight while other sessions commit and ask for
        offsets, the race of the visibility hazard, made on purpose (needs
        :attr:`Feature.CONCURRENT_WRITERS`)."""
        conn = self.admin_connect()
        try:
            cursor = conn.cursor()
            for statement in statements:
                cursor.execute(statement)
        except BaseException:
            conn.close()
            raise
        return PendingWrite(conn)

    def force_log_switch(self) -> None:
        """Close the current log segment and start the next (needs :attr:`Feature.LOG_SWITCH`)."""
        raise NotImplementedError

    def end_session(self, conn: Any) -> None:
        """End the server session of the dialect's connection ``conn`` from an administrator's
        session, as a DBA's kill or a failover would (``KILL``, ``pg_terminate_backend``);
        needs :attr:`Feature.END_SESSION`."""
        raise NotImplementedError

    def wait_for_log(self, offset: Offset) -> None:
        """Return once the dialect can read every change below ``offset`` (a database whose
        capture runs asynchronously waits here); the default returns at once."""

    def offset_past(self, offset: Offset) -> Offset | None:
        """An offset of this dialect far past ``offset``, which the server has not written (a
        position beyond the end of its log): the kit checks that a sync resuming from it is
        refused, as after a log reset. None (the default) skips that test."""
        return None

    def golden_columns(self) -> Sequence[GoldenColumn]:
        """The type-parity table's columns; none skips the type-parity tests."""
        return ()

    def truncate_sql(self, name: str) -> str | None:
        """The statement emptying table ``name`` at once, without a row change each (a
        ``TRUNCATE``), for the truncation tests; None (the default) skips them."""
        return None

    def refused_login_url(self) -> str | None:
        """A URL of this database the server refuses to log in with (a wrong password, an
        unknown user): the kit checks the dialect calls it a ConfigurationError, not a passing
        fault, without the password. None (the default) skips that test."""
        return None

    def target_url(self) -> str | None:
        """A URL of this database whose user may create tables: the kit makes its mirror
        tables (the dialect as a sync target) with it. None (the default): the capture user's
        URL (a mirror test is skipped when that user may not create tables)."""
        return None

    def unprivileged_url(self) -> str | None:
        """A URL of a user lacking capture privileges, for the preflight tests (None skips)."""
        return None
