"""The source a checkpoint follows: the server's identity recorded at a sync's first start,
and the checks that a resumed sync reads the same log, from a position that log holds.

A checkpoint's offsets are positions in one server's log. Read against another server, or
the same server after its log was reset or restored, they may name nothing, or something
else: a resumed sync would then skip changes and call itself caught up. So a sync records
the dialect's ``server_identity`` once, and every start compares it and asks the dialect's
``check_offset`` about the position it resumes from; every poll of the log's head checks
that the position is not past it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

from ..dialect.errors import LogMismatchError
from ..dialect.manager import Dialect
from ..dialect.types import Connection, Offset
from .state import Phase, SyncState

SOURCE_FILE = "source.json"
"""In a sync's state directory: the dialect, identity and masked URL of its source."""

NEW_SYNC = ("start a new sync with a new --checkpoint directory (a new snapshot), or point "
            "--source at the server the checkpoint follows")
"""The way back from a source that is not the checkpoint's."""


def source_record(dialect: Dialect, conn: Connection, url: str) -> dict[str, Any]:
    """What :data:`SOURCE_FILE` holds for the source ``conn`` is connected to."""
    return {"dialect": dialect.name, "identity": dialect.server_identity(conn), "url": url}


def _describe(identity: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(identity.items())) or "nothing recorded"


def check_same_source(recorded: Mapping[str, Any], now: Mapping[str, Any],
                      checkpoint: str) -> None:
    """Raise :class:`LogMismatchError` when ``now`` is not the source ``recorded`` (both
    :func:`source_record` results): another dialect, or a recorded identity value that differs
    or that the server no longer gives. A name only ``now`` has (a plugin that learnt a new
    one) is not compared."""
    if recorded.get("dialect") != now.get("dialect"):
        raise LogMismatchError(
            f"checkpoint {checkpoint} follows a {recorded.get('dialect')} source "
            f"({recorded.get('url')}), not {now.get('dialect')} ({now.get('url')}): "
            f"{NEW_SYNC}")
    old: Mapping[str, str] = recorded.get("identity") or {}
    new: Mapping[str, str] = now.get("identity") or {}
    differ = sorted(k for k in old if str(old[k]) != str(new.get(k)))
    if differ:
        changes = "; ".join(f"{k} was {old[k]}, is {new.get(k, 'not given')}" for k in differ)
        raise LogMismatchError(
            f"{now.get('url')} is not the server checkpoint {checkpoint} follows ({changes}; "
            f"recorded from {recorded.get('url')}): its log positions mean nothing here "
            f"(another server, a failover or a restored backup); {NEW_SYNC}")


def another_source(recorded: Mapping[str, Any], now: Mapping[str, Any]) -> bool:
    """Whether ``now`` is another server of the same dialect than ``recorded`` (both
    :func:`source_record` results): a recorded identity value differs."""
    old: Mapping[str, str] = recorded.get("identity") or {}
    new: Mapping[str, str] = now.get("identity") or {}
    return recorded.get("dialect") == now.get("dialect") and \
        any(str(old[k]) != str(new.get(k)) for k in old)


def relocate(dialect: Dialect, conn: Connection, offsets: Iterable[Offset],
             source: Mapping[str, str], since: Offset | None = None) -> dict[Offset, Offset]:
    """Each of ``offsets``, positions in the log of the server whose identity was ``source``
    (the primary before a failover), as the dialect's ``locate_offset`` finds it in
    ``conn``'s server's log.

    An offset it cannot find by itself (it returns None) takes the place of the greatest
    offset found at or below it: the changes between are read again, which leaves a mirror
    as it was. That needs a found offset above it too, so that the server is known to hold
    every change up to it; else :class:`LogMismatchError`. A lossy failover raises the
    dialect's :class:`LogMismatchError`, naming the changes the server lacks, except for an
    offset below ``since`` (where every later read starts: nothing is read from below it),
    which then takes ``since``'s place."""
    compare = dialect.compare_offset
    found: dict[Offset, Offset] = {}
    blind: list[Offset] = []
    behind: list[Offset] = []
    for offset in sorted(set(offsets), key=functools.cmp_to_key(compare), reverse=True):
        try:
            place = dialect.locate_offset(conn, offset, source)
        except LogMismatchError:
            if since is None or compare(offset, since) >= 0:
                raise
            behind.append(offset)
            continue
        if place is None:
            blind.append(offset)
        else:
            found[offset] = place
    for offset in blind:
        below = [o for o in found if compare(o, offset) <= 0]
        if not below or not any(compare(o, offset) >= 0 for o in found):
            raise LogMismatchError(
                f"the checkpoint's log position {_text(offset)} cannot be found in this "
                f"server's log (it carries nothing to find it by, and no position the "
                f"checkpoint keeps around it does): {NEW_SYNC}")
        found[offset] = found[max(below, key=functools.cmp_to_key(compare))]
    if behind:
        assert since is not None
        place = found.get(since) or dialect.locate_offset(conn, since, source)
        if place is None:
            raise LogMismatchError(
                f"the checkpoint's log position {_text(since)} cannot be found in this "
                f"server's log (it carries nothing to find it by): {NEW_SYNC}")
        found.update(dict.fromkeys(behind, place))
    return found


def resume_position(state: SyncState, dialect: Dialect) -> Offset | None:
    """The log position a sync in ``state`` reads from next: its position in the log phase,
    else where its log phase will begin: the lowest watermark of the splits it has read, or
    where its snapshot began when earlier."""
    if state.phase is Phase.LOG or state.position is not None:
        return state.position
    marks = [f.watermark for splits in state.finished.values() for f in splits]
    if state.snapshot_from is not None:
        marks.append(state.snapshot_from)
    lowest: Offset | None = None
    for mark in marks:
        if lowest is None or dialect.compare_offset(mark, lowest) < 0:
            lowest = mark
    return lowest


def check_not_past_head(dialect: Dialect, position: Offset, head: Offset, url: str) -> None:
    """Raise :class:`LogMismatchError` when ``position`` lies past the log's ``head``: every
    change the server writes next would sort below it and never be read."""
    if dialect.compare_offset(position, head) > 0:
        raise LogMismatchError(
            f"the checkpoint's log position {_text(position)} lies past the head of "
            f"{url}'s log ({_text(head)}): the server's log was reset (RESET MASTER, a "
            f"restored backup, a rebuilt server) or this is another server, and the changes "
            f"since would be skipped; {NEW_SYNC}")


def check_position(dialect: Dialect, conn: Connection, position: Offset, url: str) -> None:
    """Raise when the source's log does not hold ``position``: past its head (here), or as
    the dialect's ``check_offset`` finds (a file it does not list, not an event's start,
    purged)."""
    if position.dialect != dialect.name:
        raise LogMismatchError(f"the checkpoint's log position is a {position.dialect} "
                               f"offset, but {url} is {dialect.name}: {NEW_SYNC}")
    check_not_past_head(dialect, position, dialect.current_offset(conn), url)
    dialect.check_offset(conn, position)


def _text(offset: Offset) -> str:
    return ", ".join(f"{k} {v}" for k, v in offset.to_json()["position"].items()) or "start"
