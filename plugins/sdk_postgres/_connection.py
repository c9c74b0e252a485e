"""The dialect's connection (a psycopg connection and its per-connection caches) and how its
statements name things."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sdk import TableId

from . import _pgoutput as pgo

if TYPE_CHECKING:
    from ._snapshot import Exporter


@dataclass
class PgConnection:
    """A psycopg connection and the dialect's per-connection caches."""

    raw: Any
    slot: str
    publication: str
    wait_seconds: float
    relations: dict[int, pgo.Relation] = field(default_factory=dict)
    loaders: dict[int, Any] = field(default_factory=dict)
    connect_args: dict[str, Any] = field(default_factory=dict, repr=False)
    """What ``connect`` passed to psycopg (password included, hence ``repr=False``): the
    exporting replication connection of ``begin_snapshot`` is opened with the same."""
    exporter: Exporter | None = None
    """The replication connection whose exported snapshot this connection's view uses, when
    this connection created the view: it must stay open and idle until ``end_snapshot``."""
    in_view: bool = False
    failover_slot: bool = True
    """URL option ``failover_slot``: make the slot a failover slot where the server can."""
    server_encoding: str = "UTF8"
    """The database's encoding (the session's is UTF-8 whatever it is: see ``connect``)."""
    replica_role: bool | None = None
    """Whether this session may set ``session_replication_role`` (asked once, as a target)."""

    def query(self, sql: str, args: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        cur = self.raw.execute(sql, args)
        return list(cur.fetchall()) if cur.description else []

    def close(self) -> None:
        if self.exporter is not None:
            self.exporter.close()
            self.exporter = None
        self.raw.close()


def q(name: str) -> str:
    """An identifier, quoted (an inner ``"`` doubled): for statements run without parameters,
    and for the statements messages show."""
    return '"' + name.replace('"', '""') + '"'


def qp(name: str) -> str:
    """An identifier quoted for a statement run with parameters: psycopg then reads every
    ``%`` of the text as a placeholder's, so a ``%`` in the name is doubled (``sql.Identifier``
    does not do this either)."""
    return q(name).replace("%", "%%")


def qualified(table: TableId, params: bool = False) -> str:
    """A table's quoted ``schema.name``; ``params``: for a statement run with parameters."""
    quote = qp if params else q
    return f"{quote(table.schema)}.{quote(table.name)}"
