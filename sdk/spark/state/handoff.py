"""The record a head start leaves for the stream (:mod:`.headstart` writes it; the stream's
source and the checkpoint's state read it): where the driver got, and how the stream takes it
up. Kept apart from the head start itself, so that the stream (the driver side of the engine)
reads the record without importing the start-up machinery that writes it.

The driver holds :data:`HEAD_START_LOCK` while it runs; the stream's source waits for it
(:func:`wait_for_driver`) before it reads :data:`HEAD_START_FILE`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .statestore import StateStore

HEAD_START_FILE = "headstart.json"
"""The record: ``start`` (the state Spark's checkpoint ends at, None when new), ``initial`` (the
initial offset, for a new checkpoint), ``done`` (the offset after the last batch completed) and
``planned`` (a batch planned after it whose tasks may not all have run)."""
HEAD_START_LOCK = "headstart.lock"
Offset = dict[str, Any]


def spark_position(checkpoint: str) -> tuple[bool, Offset | None]:
    """Where Spark's checkpoint ``checkpoint`` (a local directory) ends: (usable, the source
    offset its last committed batch ended at, None for a new one). Not usable when its last
    batch is not committed (Spark replays it first) or its offset log cannot be read."""
    offsets, commits = Path(checkpoint, "offsets"), Path(checkpoint, "commits")
    numbers = [int(f.name) for f in offsets.glob("*") if f.name.isdigit()] \
        if offsets.is_dir() else []
    if not numbers:
        return True, None
    last = max(numbers)
    if not (commits / str(last)).is_file():
        return False, None
    lines = (offsets / str(last)).read_text().splitlines()
    try:  # "v1", the batch's metadata, then one line per source: this query has one
        offset = json.loads(lines[2]) if len(lines) == 3 and lines[0] == "v1" else None
    except ValueError:
        offset = None
    return (True, offset) if isinstance(offset, dict) and "state" in offset else (False, None)


def base_state(record: dict[str, Any]) -> str | None:
    """The state the stream's next batch starts from when it takes the record up."""
    if record.get("initial"):
        return str(record["initial"]["state"])
    return record.get("start")


def resumed_state(record: dict[str, Any] | None, committed: str | None) -> str | None:
    """The state a stream resumes from whose Spark checkpoint last committed the state
    ``committed`` (None: nothing yet): the end of the driver's last completed batch when the
    stream has not taken it up yet (that batch was committed for it), else ``committed``."""
    if not record or not record.get("done"):
        return committed
    base = base_state(record)
    if committed == base or (committed is None and record.get("initial")):
        return str(record["done"]["state"])
    return committed


def next_step(record: dict[str, Any] | None, start: Offset) -> Offset | None:
    """The end of the stream's next batch from ``start`` as the record gives it: the last
    completed state (a batch without tasks), then the batch left unfinished; None past them."""
    if not record:
        return None
    done, planned = record.get("done"), record.get("planned")
    if start["state"] == base_state(record):
        return done or planned
    if done and planned and start["state"] == done["state"]:
        return planned  # type: ignore[no-any-return]
    return None


def skips(record: dict[str, Any] | None, start: Offset, end: Offset) -> bool:
    """Whether the batch ``start`` -> ``end`` is the one the driver completed: no tasks."""
    return record is not None and start["state"] == base_state(record) and \
        record.get("done") == end


def taken_up(record: dict[str, Any] | None, last: Offset | None) -> bool:
    """Whether the stream has gone past everything ``record`` holds, Spark's checkpoint ending
    at ``last`` (None: new)."""
    if not record or not (record.get("done") or record.get("planned")):
        return True
    if last is None:
        return False  # a new checkpoint starts at the record's initial offset
    return next_step(record, last) is None


def untouched(record: dict[str, Any] | None, last: Offset | None) -> bool:
    """Whether the stream has taken up nothing of ``record`` yet (Spark's checkpoint ending at
    ``last``, None: new): a head start may then go on from where the record ends."""
    if taken_up(record, last) or record is None:
        return False
    return (last is None and bool(record.get("initial"))) or \
        (last is not None and last["state"] == base_state(record))


def wait_for_driver(store: StateStore) -> dict[str, Any] | None:
    """The record, once a driver running a head start on this state directory has stopped."""
    lock = Path(store.path(HEAD_START_LOCK))
    if lock.is_file():
        import fcntl

        with open(lock, "rb") as held:
            fcntl.flock(held, fcntl.LOCK_SH)  # released when the file closes
    record = store.read_json(HEAD_START_FILE)
    return record if isinstance(record, dict) else None
