"""Snapshots on demand: a request to read a captured table again (or the rows meeting a
condition), kept in the sync's state directory until the sync takes it up.

A request is a file under ``<state.dir>/requests``, ``<id>.json``, written before
:func:`request_snapshot` returns: a running sync takes it up at its next batch, a stopped one
when it runs again. Taking it up, the sync renames the file ``<id>.taken`` (a claim) and
records the request's id in its state (``SyncState.served``) in the batch that starts the read,
so a crash before that batch is committed serves it after the restart, and a crash after does
not serve it twice; the file is deleted once a committed state holds its id.
:func:`withdraw_request` renames a waiting ``<id>.json`` away instead: of the two renames one
wins, so a request is either read or withdrawn, never both and never half. A condition is tried
on the source before the request is recorded (:func:`request_snapshot` with ``source``). No
pyspark here (``sdk snapshot`` writes requests without a Spark session).
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ...algorithm.lineage import SOURCE_FILE, source_record
from ...dialect.errors import ConfigurationError, LogMismatchError, SdkError
from ...dialect.types import Capability, SnapshotSplit, TableId, TableSchema
from ..state.engine_state import PROGRESS_FILE, EngineState, readable_checkpoint
from ..state.statestore import StateStore

REQUESTS = "requests"
WAITING, TAKEN, WITHDRAWN = ".json", ".taken", ".withdrawn"
"""A request's file: waiting for the sync, taken up by it, being withdrawn (a moment)."""
ASKED = re.compile(r"\d{20}-[0-9a-f]{8}")
"""The id of a request someone asked for (the sync's own, a table truncated or given columns
and read again, name why: they cannot be withdrawn)."""


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


def request_snapshot(state_dir: str, table: str | TableId, where: str | None = None,
                     source: str | None = None) -> SnapshotRequest:
    """Ask the sync whose state directory is ``state_dir`` to read ``table`` again (``where``:
    only the rows meeting it), durably; returns the request. The table must be one the sync
    captures; with ``source`` (the URL of the database the sync reads) it must exist there
    and the condition is run there first, in a read that returns nothing: one the source
    refuses is refused here, nothing recorded, rather than failing every batch of the sync."""
    store = StateStore(state_dir, create=False)
    engine = _checkpoint(store, state_dir)
    captured = set(engine.sync.tables)
    wanted = table if isinstance(table, TableId) else _table_named(table, captured)
    if wanted not in captured:
        raise ConfigurationError(
            f"table {wanted} is not captured by the sync in {state_dir} (it captures "
            f"{', '.join(sorted(str(t) for t in captured))})")
    if where is not None and not where.strip():
        where = None
    if source is not None:
        check_on_source(store, source, wanted, where)
    request = SnapshotRequest(f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}", wanted, where,
                              time.time())
    write_request(store, request)
    return request


def _checkpoint(store: StateStore, state_dir: str) -> EngineState:
    """The newest state of the sync in ``store``, its files checked readable."""
    engine = readable_checkpoint(store)
    if engine is None:
        raise ConfigurationError(f"no sync has started with state directory {state_dir}")
    return engine


def check_on_source(store: StateStore, source: str, table: TableId, where: str | None
                    ) -> None:
    """Check on ``source`` that a request of ``table`` (``where``: its rows meeting it) can be
    served: the source is the one the sync in ``store`` reads, it has the table, its dialect
    reads with a condition and runs this one (in a read that returns nothing)."""
    from ...dialect.manager import default_manager

    dialect, config = default_manager().source_for_url(source)
    if where is not None and not dialect.has(Capability.FILTERED_READS):
        raise ConfigurationError(f"dialect {dialect.name!r} cannot read the rows meeting a "
                                 "condition: ask for the whole table (no --where)")
    conn = dialect.connect(config)
    try:
        with dialect.passing_faults():
            recorded = store.read_json(SOURCE_FILE)
            now = source_record(dialect, conn, config.masked_url)
            if recorded is not None:
                from ...algorithm.lineage import check_same_source

                try:
                    check_same_source(recorded, now, store.uri)
                except LogMismatchError:
                    raise ConfigurationError(
                        f"--source {config.masked_url} is not the source of the sync in "
                        f"{store.uri} (it reads {recorded.get('url')}): give that one's URL"
                        ) from None
            schema = dialect.describe_table(conn, table)
        if where is not None:
            _try_condition(dialect, conn, schema, where, config.masked_url)
    finally:
        conn.close()


def _try_condition(dialect: Any, conn: Any, schema: TableSchema, where: str, url: str) -> None:
    """Run ``where`` on the source in a read of ``schema``'s table that returns nothing (the
    condition and a false one), as the sync's split reads would run it; refuse it with the
    database's message."""
    split = SnapshotSplit(schema.table, 0, None, None, f"({where}) AND 1 = 0")
    rows = None
    try:
        with dialect.passing_faults():
            rows = dialect.read_range(conn, schema, split, 1)
            next(iter(rows), None)
    except SdkError:
        raise
    except Exception as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        message = " ".join(lines[0].split()) if lines else "no message"
        raise ConfigurationError(
            f"{url} refuses the condition of the snapshot of {schema.table} where {where}: "
            f"{type(exc).__name__}: {message}; nothing was recorded: correct the condition "
            "(SQL on the table's columns) and ask again") from None
    finally:
        close = getattr(rows, "close", None)
        if close is not None:
            close()


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


def _request_files(store: StateStore) -> dict[str, tuple[SnapshotRequest, bool]]:
    """The requests in the state directory by id, oldest first, each with whether the sync
    took it up (its file renamed ``.taken``)."""
    out: dict[str, tuple[SnapshotRequest, bool]] = {}
    for file in sorted(store.list_dir(REQUESTS)):
        request_id, dot, kind = file.rpartition(".")
        if not dot or f".{kind}" not in (WAITING, TAKEN):  # a temporary or withdrawn one
            continue
        data = store.read_json(REQUESTS, file)
        if data is not None:  # else: renamed meanwhile
            taken = f".{kind}" == TAKEN or (request_id in out and out[request_id][1])
            out[request_id] = (SnapshotRequest.from_json(data), taken)
    return dict(sorted(out.items()))


def pending_requests(store: StateStore) -> list[SnapshotRequest]:
    """The requests in the state directory, waiting or taken up, oldest first."""
    return [request for request, _ in _request_files(store).values()]


def claim_request(store: StateStore, request_id: str) -> bool:
    """Take request ``request_id`` up, before a state records it served: its file renamed
    ``.taken``; False when it was withdrawn (its file renamed away first)."""
    try:
        store.move((REQUESTS, f"{request_id}{WAITING}"), (REQUESTS, f"{request_id}{TAKEN}"))
    except FileNotFoundError:
        return store.exists(REQUESTS, f"{request_id}{TAKEN}")  # taken up before a restart
    return True


def forget_requests(store: StateStore, ids: Iterable[str]) -> None:
    """Delete the files of requests a committed state holds."""
    for request_id in ids:
        store.delete_file(REQUESTS, f"{request_id}{WAITING}")
        store.delete_file(REQUESTS, f"{request_id}{TAKEN}")


@dataclass(frozen=True)
class RequestStatus:
    """A request as ``sdk snapshot --list`` shows it: ``state`` is waiting, being read, done
    or refused (with why); ``at``: when it was asked for, if known."""

    id: str
    table: str
    where: str | None
    state: str
    at: float | None


def list_requests(state_dir: str) -> list[RequestStatus]:
    """The requests of the sync in ``state_dir``: those waiting or taken up, and the last ones
    it served or refused (its progress report keeps 20), oldest first."""
    store = StateStore(state_dir, create=False)
    engine = _checkpoint(store, state_dir)
    report = store.read_json(PROGRESS_FILE) or {}  # its requests (not its tables)
    outcomes: dict[str, Any] = report.get("requests") or {}
    files = _request_files(store)
    served = {request_id: i for i, request_id in enumerate(engine.sync.served)}
    known: dict[str, tuple[str, str | None, float | None]] = {
        request_id: (str(o.get("table")), o.get("where"), o.get("at"))
        for request_id, o in outcomes.items()}
    for request_id, (request, _) in files.items():
        known[request_id] = (str(request.table), request.where, request.at)
    reading = {str(t) for t in engine.sync.rereads}
    last_served: dict[str, str] = {}  # table -> the request read last (it may be reading)
    for request_id in sorted((r for r in known if r in served), key=served.__getitem__):
        if (outcomes.get(request_id) or {}).get("state") != "refused":
            last_served[known[request_id][0]] = request_id
    out = []
    for request_id, (table, where, at) in known.items():
        outcome = outcomes.get(request_id) or {}
        if outcome.get("state") == "refused":
            state = f"refused: {outcome.get('reason')}"
        elif request_id in served:
            state = "being read" if table in reading and last_served.get(table) == request_id \
                else "done"
        elif request_id in files:
            state = "being read" if files[request_id][1] else "waiting"
        else:
            continue  # withdrawn
        if at is None and ASKED.fullmatch(request_id):
            at = int(request_id[:20]) / 1e9
        out.append(RequestStatus(request_id, table, where, state, at))
    return sorted(out, key=lambda s: (s.at or 0, s.id))


def withdraw_request(state_dir: str, request_id: str) -> RequestStatus:
    """Withdraw request ``request_id`` of the sync in ``state_dir`` if the sync, running or
    not, has not taken it up (the renames of the module's docstring make it one or the
    other); else raise :class:`ConfigurationError` saying where it is."""
    store = StateStore(state_dir, create=False)
    found = {s.id: s for s in list_requests(state_dir)}.get(request_id)
    if found is None:
        raise ConfigurationError(f"no snapshot request {request_id} in {state_dir} (sdk "
                                 "snapshot --list shows them)")
    if found.state == "waiting" and not ASKED.fullmatch(request_id):
        raise ConfigurationError(
            f"snapshot request {request_id} of {found.table} is the sync's own (the table was "
            "truncated or gained columns, and is read again to keep the target right): it "
            "cannot be withdrawn")
    if found.state == "waiting":
        try:
            store.move((REQUESTS, f"{request_id}{WAITING}"),
                       (REQUESTS, f"{request_id}{WITHDRAWN}"))
        except FileNotFoundError:  # the sync took it up just now
            found = RequestStatus(found.id, found.table, found.where, "being read", found.at)
        else:  # a store that copies to rename: the sync may have copied it first
            taken = store.exists(REQUESTS, f"{request_id}{TAKEN}")
            store.delete_file(REQUESTS, f"{request_id}{WITHDRAWN}")
            if not taken:
                return found
            found = RequestStatus(found.id, found.table, found.where, "being read", found.at)
    what = {"being read": "is being read: the sync took it up, and reads it to its end "
                          "(sdk status shows the table re-snapshotting until then)",
            "done": "was read already"}.get(found.state, f"was {found.state}")
    raise ConfigurationError(f"snapshot request {request_id} of {found.table} {what}: it "
                             "cannot be withdrawn")
