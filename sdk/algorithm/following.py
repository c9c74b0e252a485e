"""What both drivers of the machine do between batches, with no I/O: the snapshot requests
waiting taken up, and the reads of its own a sync asks for when a log batch met schema changes
or truncations.

:class:`~.runner.SyncRunner` keeps its requests in memory, the Spark stream's driver in its
state directory; both hand them here and do what comes back (a read through the machine, a
file written or deleted). The decisions themselves are :mod:`.policy`'s.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from ..dialect.codec import dumps
from ..dialect.types import SchemaChange, TableId
from .policy import (
    SCHEMA_REQUEST,
    RequestStep,
    fold_schema_changes,
    judge_request,
    own_request_id,
    served,
)
from .settings import SyncOptions
from .state import Phase, SyncState


class Asked(Protocol):
    """A request to read a table again, as either driver keeps it."""

    @property
    def id(self) -> str: ...

    @property
    def table(self) -> TableId: ...

    @property
    def where(self) -> str | None: ...


@dataclass(frozen=True)
class Request:
    """A snapshot request held in memory (the runner's; Spark's carry a time as well)."""

    id: str
    table: TableId
    where: str | None = None


R = TypeVar("R", bound=Asked)


@dataclass
class TakenUp(Generic[R]):
    """What :func:`take_up_requests` did with the requests it was given."""

    state: SyncState
    waiting: list[R] = field(default_factory=list)
    """Their table is being read or leaving: asked again at the next batch."""
    read: list[R] = field(default_factory=list)
    """Read again from now (the state holds the read)."""
    refused: list[tuple[R, str]] = field(default_factory=list)
    """Recorded as served without a read, with the reason."""
    withdrawn: list[R] = field(default_factory=list)
    """Taken back before this driver could claim it."""


def take_up_requests(state: SyncState, requests: Sequence[R], filtered_reads: bool,
                     reread: Callable[[SyncState, R], SyncState],
                     claim: Callable[[R], bool] = lambda _: True) -> TakenUp[R]:
    """``state`` with ``requests`` judged (:func:`.policy.judge_request`) and taken up in the
    log phase: each that can be served is ``claim``-ed (a request in a file can be withdrawn
    up to then) and read again through ``reread``; a refused one, or one whose table left,
    is recorded as served. One the state holds already is dropped."""
    taken: TakenUp[R] = TakenUp(state)
    if state.phase is not Phase.LOG:
        taken.waiting = list(requests)
        return taken
    for request in requests:
        step, refusal = judge_request(taken.state, request.id, request.table, request.where,
                                      filtered_reads)
        if step is RequestStep.DONE:
            continue
        if step is RequestStep.WAIT:
            taken.waiting.append(request)
        elif step is RequestStep.LEFT:
            taken.state = served(taken.state, request.id)
        elif not claim(request):
            taken.withdrawn.append(request)
        elif step is RequestStep.REFUSED:
            assert refusal is not None
            taken.state = served(taken.state, request.id)
            taken.refused.append((request, refusal))
        else:
            taken.state = reread(taken.state, request)
            taken.read.append(request)
    return taken


def whole_reads_waiting(state: SyncState, requests: Sequence[Asked]) -> list[TableId]:
    """The tables a request not served yet reads whole: a schema change or a truncation of
    one of them needs no read of its own."""
    return [r.table for r in requests if r.id not in state.served and r.where is None]


def table_digest(table: TableId) -> str:
    """A short name for ``table`` safe in a file name or an id, whatever its characters."""
    return hashlib.sha256(dumps(table.to_json()).encode()).hexdigest()[:16]


def own_reread_id(prefix: str, batch: int, table: TableId) -> str:
    """The id of a whole read of ``table`` the sync asks for itself in batch ``batch`` (the
    same when the batch is planned again)."""
    return own_request_id(prefix, batch, f"{table_digest(table)}-0")


def schema_change_rereads(state: SyncState, changes: Sequence[SchemaChange],
                          options: SyncOptions, requests: Sequence[Asked], batch: int
                          ) -> tuple[SyncState, list[Request]]:
    """``state`` with ``changes`` followed (:func:`.policy.fold_schema_changes`), and the
    requests of the sync's own to read again each table that gained columns."""
    state, tables = fold_schema_changes(state, changes, options,
                                        whole_reads_waiting(state, requests))
    return state, [Request(own_reread_id(SCHEMA_REQUEST, batch, t), t) for t in tables]
