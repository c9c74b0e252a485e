"""Snapshots on demand: a request to read a captured table again (or the rows meeting a
condition), kept in the sync's state directory until the sync takes it up.

A request is a file under ``<stateDir>/requests``, written before :func:`request_snapshot`
returns: a running sync takes it up at its next batch, a stopped one when it runs again. The
sync records the request's id in its state (``SyncState.served``) in the batch that starts the
read, so a crash before that batch is committed serves it after the restart, and a crash after
does not serve it twice; the file is deleted once a committed state holds its id. No pyspark
here (``sdk snapshot`` writes requests without a Spark session).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError
from ..types import TableId
from .engine_state import captured_tables
from .statestore import StateStore

REQUESTS = "requests"


@dataclass(frozen=True)
class SnapshotRequest:
    """Read ``table`` again while the sync streams, only the rows meeting ``where`` (a SQL
    condition on its columns) when given."""

    id: str
    table: TableId
    where: str | None = None
    at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "table": self.table.to_json(), "where": self.where,
                "at": self.at}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SnapshotRequest:
        return cls(data["id"], TableId.from_json(data["table"]), data.get("where"),
                   data.get("at", 0.0))


def request_snapshot(state_dir: str, table: str | TableId, where: str | None = None
                     ) -> SnapshotRequest:
    """Ask the sync whose state directory is ``state_dir`` to read ``table`` again (``where``:
    only the rows meeting it), durably; returns the request. The table must be one the sync
    captures."""
    store = StateStore(state_dir, create=False)
    captured = {t.table for t in captured_tables(store)}
    if not captured:
        raise ConfigurationError(f"no sync has started with state directory {state_dir}")
    wanted = table if isinstance(table, TableId) else _table_named(table, captured)
    if wanted not in captured:
        raise ConfigurationError(
            f"table {wanted} is not captured by the sync in {state_dir} (it captures "
            f"{', '.join(sorted(str(t) for t in captured))})")
    if where is not None and not where.strip():
        where = None
    request = SnapshotRequest(f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}", wanted, where,
                              time.time())
    write_request(store, request)
    return request


def write_request(store: StateStore, request: SnapshotRequest) -> None:
    """Store ``request`` (one of the same id is replaced: the sync's own requests are
    written again when a batch is replayed, and served once)."""
    store.write_json(request.to_json(), REQUESTS, f"{request.id}.json")


def _table_named(name: str, captured: Iterable[TableId]) -> TableId:
    """The captured table ``name`` stands for: ``schema.table``, or a bare table name that
    only one captured table has."""
    if "." in name:
        return TableId.parse(name)
    matches = [t for t in captured if t.name == name]
    if len(matches) != 1:
        raise ConfigurationError(f"name the table as schema.table: {name!r} matches "
                                 f"{len(matches)} captured tables")
    return matches[0]


def pending_requests(store: StateStore) -> list[SnapshotRequest]:
    """The requests in the state directory, oldest first."""
    out = []
    for file in sorted(store.list_dir(REQUESTS)):
        data = store.read_json(REQUESTS, file)
        if data is not None:
            out.append(SnapshotRequest.from_json(data))
    return out


def forget_requests(store: StateStore, ids: Iterable[str]) -> None:
    """Delete the files of requests a committed state holds."""
    for request_id in ids:
        store.delete_file(REQUESTS, f"{request_id}.json")
