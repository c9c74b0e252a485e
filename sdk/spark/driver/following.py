"""What a stream's plan takes in besides the phase machine's own next step, on the driver: the
tables a look at the source finds added, gone or created again (:class:`Following`), the
schema changes and truncations a log batch met, and the snapshot requests waiting in the state
directory. The same decisions as the algorithm's own runner, made by
:mod:`sdk.algorithm.policy`; here kept in the stream's state directory."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ...algorithm import Phase, PhaseMachine, SyncState
from ...algorithm.following import (
    own_reread_id,
    schema_change_rereads,
    take_up_requests,
    whole_reads_waiting,
)
from ...algorithm.policy import (
    TRUNCATED_REQUEST,
    busy,
    check_recreated,
    recreated_request,
    truncations_to_reread,
)
from ...dialect.errors import ConfigurationError
from ...dialect.manager import Dialect
from ...dialect.types import Capability, Connection, TableId, TableSchema
from ...job.spec import BeforePrepare, SourceSpec, TableWatch
from ..state.engine_state import EngineState, staged_schema_changes, staged_truncations
from ..state.statestore import StateStore
from .requests import SnapshotRequest, claim_request, forget_requests, write_request

log = logging.getLogger(__name__)

IDENTITIES_FILE = "identities.json"
"""Per captured table, the incarnation token (``table_identities``) the sync holds it at."""

PENDING_FILE = "rereads-pending.json"
"""Per captured table whose token changed, the token met, until the state holds its read."""


def identities(store: StateStore) -> dict[TableId, str]:
    """The incarnation token recorded of each captured table (:data:`IDENTITIES_FILE`)."""
    return {TableId(schema, name): token
            for schema, name, token in store.read_json(IDENTITIES_FILE) or []}


def pending_rereads(store: StateStore) -> dict[TableId, tuple[str, str | None]]:
    """The tables met with another token whose read the state does not hold yet: the token
    met, and the one the table had once its capture was prepared again (None: not yet)."""
    return {TableId(schema, name): (met, after)
            for schema, name, met, after in store.read_json(PENDING_FILE) or []}


def _write_pending(store: StateStore, pending: dict[TableId, tuple[str, str | None]]) -> None:
    store.write_json([[t.schema, t.name, *v] for t, v in
                      sorted(pending.items(), key=lambda i: str(i[0]))], PENDING_FILE)


def add_pending_rereads(store: StateStore, met: Mapping[TableId, tuple[str, str | None]],
                        keep: bool = False) -> None:
    """Record ``met`` tables (their token met and after); ``keep``: not over a table's
    pending read."""
    pending = pending_rereads(store)
    new = {t: v for t, v in met.items() if pending.get(t) != v and not
           (keep and t in pending)}
    if new:
        _write_pending(store, {**pending, **new})


def drop_pending_rereads(store: StateStore, tables: Sequence[TableId]) -> None:
    """Forget the pending reads of ``tables``: the state holds them."""
    pending = pending_rereads(store)
    if any(t in pending for t in tables):
        _write_pending(store, {t: v for t, v in pending.items() if t not in tables})


def noting_changed_tables(state_dir: str | None) -> BeforePrepare | None:
    """What a sync on ``state_dir`` calls before its capture is prepared: the tables whose
    token changed while it was stopped are recorded (:func:`note_changed_tables`)."""
    if not state_dir:
        return None
    return functools.partial(note_changed_tables, state_dir)


def note_changed_tables(state_dir: str, dialect: Dialect, conn: Connection,
                        schemas: Sequence[TableSchema]) -> None:
    """Before a resumed sync prepares its capture (which may undo what changed a table's
    token: a table put back into its publication): record each captured table whose token
    is not the one the sync holds, so that its driver reads it again."""
    store = StateStore(state_dir)
    recorded = identities(store)
    if not recorded or not dialect.implements("table_identities"):
        return
    now = dialect.table_identities(conn, [s.table for s in schemas if s.table in recorded])
    add_pending_rereads(store, {t: (v, None) for t, v in now.items() if recorded[t] != v},
                        keep=True)


class Following:
    """The driver's following of the source's tables and of the requests to read one again:
    kept with the stream's reader (pickled with it), given the reader's connection."""

    def __init__(self, spec: SourceSpec, store: StateStore, machine: PhaseMachine) -> None:
        self.spec, self.store, self.machine = spec, store, machine
        self.watch = TableWatch(spec) if spec.follows_tables else None
        self.outcomes: dict[str, dict[str, Any]] = {}
        """The snapshot requests taken up by this driver, for the progress report."""

    def follow_tables(self, conn: Connection, sync: SyncState) -> SyncState:
        """``sync`` with the tables a look at the source found added (their target tables
        created first) or leaving; in the log phase, every ``tables.discovery-interval.ms``."""
        if self.watch is None or sync.phase is not Phase.LOG:
            return sync
        found = self.watch.look(conn, sync.tables, sync.leaving)
        if found is None:
            return sync
        if found.gone:
            assert found.at is not None
            sync = self.machine.remove_tables(sync, found.gone, found.at)
        if found.added:
            if self.spec.target is not None:
                self.spec.target.create_tables(found.added)
            sync = self.machine.add_tables(conn, sync, found.added)
            self.save_identities(self.spec.dialect_obj.table_identities(
                conn, [t.table for t in found.added]))
        if found.identities:
            sync = self._follow_recreated(conn, sync, found.identities)
        return sync

    def _follow_recreated(self, conn: Connection, sync: SyncState, tokens: dict[TableId, str]
                          ) -> SyncState:
        """``sync`` with each captured table whose incarnation token changed (dropped and
        created again under its name, taken out of what captures it, while the log flowed or
        the sync was stopped) read again whole, its capture prepared again first: the read
        deletes the mirror's rows the new table does not hold and brings those the log may
        lack. A change met is recorded in :data:`PENDING_FILE` before the capture is
        prepared again (which may undo what changed the token: a table put back into its
        publication), and the token the table then has is taken as its own in
        ``identities.json`` once the state holds the read (request
        ``recreated/<token met>/<table>``), so a batch planned again plans the read again."""
        assert self.watch is not None
        recorded = identities(self.store)
        pending = pending_rereads(self.store)
        seen: dict[TableId, str] = {}
        for table, identity in tokens.items():
            met, after = pending.get(table, (None, None))
            if met is not None and recreated_request(met, table) in sync.served:
                drop_pending_rereads(self.store, [table])  # its read is held: the token
                recorded[table] = seen[table] = after or identity  # after it is the table's
                met = None
            if met is None and recorded.get(table) not in (None, identity):
                met = identity
            request = recreated_request(met, table) if met is not None else ""
            if met is None or request in sync.served:
                seen[table] = identity
                continue
            if busy(sync, table):
                continue  # being read or leaving: looked at again later
            check_recreated(table, sync.tables[table],
                            self.spec.dialect_obj.describe_table(conn, table),
                            self.spec.options)
            add_pending_rereads(self.store, {table: (met, None)})
            self.watch.prepare_again(conn, sync.tables[table])
            after = self.spec.dialect_obj.table_identities(conn, [table]).get(table)
            add_pending_rereads(self.store, {table: (met, after)})
            sync = self.machine.reread(conn, sync, table, None, request)
            log.warning("table %s was dropped and created again, taken out of what captures "
                        "it (a publication), or rows left or joined it outside the log (a "
                        "partition truncated, attached, detached or dropped): it is read "
                        "again whole (request %s)", table, request)
        self.save_identities(seen)
        return sync

    def save_identities(self, tokens: dict[TableId, str]) -> None:
        """Record ``tokens`` over those recorded (written only when one is new)."""
        recorded = identities(self.store)
        if all(recorded.get(t) == v for t, v in tokens.items()):
            return
        recorded.update(tokens)
        self.store.write_json([[t.schema, t.name, v] for t, v in
                               sorted(recorded.items(), key=lambda i: str(i[0]))],
                              IDENTITIES_FILE)

    def fold_schema_changes(self, name: str, engine: EngineState, sync: SyncState,
                            requests: list[SnapshotRequest]) -> SyncState:
        """``sync`` with the schema changes log batch ``name`` followed
        (:func:`sdk.algorithm.following.schema_change_rereads`); a table that gained columns
        is read again, by a request of the sync's own added to ``requests`` (written again if
        this is done again after a crash)."""
        changes = staged_schema_changes(self.store, name)
        if not changes:
            return sync
        sync, rereads = schema_change_rereads(sync, changes, self.spec.options, requests,
                                              engine.seq)
        for asked in rereads:
            request = self._own_request(asked.id, asked.table, requests)
            log.warning("table %s gained columns: it is read again (request %s)", asked.table,
                        request.id)
        return sync

    def fold_truncations(self, conn: Connection, name: str, engine: EngineState,
                         sync: SyncState, requests: list[SnapshotRequest]) -> None:
        """Each table log batch ``name`` met truncated (``TRUNCATE``, dropped, replaced) is
        read again whole (:func:`.policy.truncations_to_reread`): a request of the sync's own
        added to ``requests``, whose read deletes the target rows the table no longer
        holds. With the tables followed, a table dropped for good leaves instead (its
        request is then dropped with it)."""
        exists = None if self.watch is not None else functools.partial(self._exists, conn)
        for item in truncations_to_reread(sync, staged_truncations(self.store, name),
                                          whole_reads_waiting(sync, requests), exists):
            request = self._own_request(own_reread_id(TRUNCATED_REQUEST, engine.seq,
                                                      item.table), item.table, requests)
            if self.watch is not None:
                self.watch.due()
            log.warning("table %s is read again whole (request %s)", item.table, request.id)

    def _own_request(self, request_id: str, table: TableId,
                     requests: list[SnapshotRequest]) -> SnapshotRequest:
        """A request of the sync's own to read ``table`` again whole, written and added to
        ``requests``."""
        request = SnapshotRequest(request_id, table, None, time.time())
        write_request(self.store, request)
        requests.append(request)
        return request

    def _exists(self, conn: Connection, table: TableId) -> bool:
        try:
            self.spec.dialect_obj.describe_table(conn, table)
        except ConfigurationError:
            return False
        return True

    def serve_requests(self, conn: Connection, sync: SyncState,
                       waiting: list[SnapshotRequest]) -> SyncState:
        """``sync`` with the snapshot requests ``waiting`` in the state directory taken up
        (:func:`sdk.algorithm.following.take_up_requests`, see :mod:`.requests`): the files
        of those ``sync`` holds already are deleted (it is a committed state), and one
        withdrawn before this claims it (:func:`.requests.claim_request`) is passed over."""
        if sync.phase is not Phase.LOG:
            return sync
        forget_requests(self.store, [r.id for r in waiting if r.id in sync.served])
        taken = take_up_requests(
            sync, waiting, self.spec.dialect_obj.has(Capability.FILTERED_READS),
            lambda s, r: self.machine.reread(conn, s, r.table, r.where, r.id),
            lambda r: claim_request(self.store, r.id))
        for request in taken.withdrawn:
            log.warning("snapshot request %s of %s withdrawn", request.id, request.table)
        for request, refusal in taken.refused:
            log.warning("snapshot request %s refused: %s", request.id, refusal)
            self.outcomes[request.id] = {"table": str(request.table), "state": "refused",
                                         "reason": refusal, "at": request.at}
        for request in taken.read:
            log.warning("snapshot request %s: table %s read again%s", request.id,
                        request.table, f" where {request.where}" if request.where else "")
            self.outcomes[request.id] = {"table": str(request.table), "state": "served",
                                         "where": request.where, "at": request.at}
        return taken.state
