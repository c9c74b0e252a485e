"""The format of a sync's state directory, and the release that last wrote it.

A release reads every format up to its own and upgrades an older checkpoint in place (the
first time it takes it over, :func:`record_format`); a checkpoint of a newer format is refused
in one line naming both releases before anything touches the source or the target
(:func:`check_format`). Every state this release writes carries the format too, so a state
written later by a release that knows no format (0.1.0) is found, and the sync stops instead of
trusting what that release applied. docs/operations.md ("Upgrading") states the rule, and
CHANGELOG.md each format.
"""

from __future__ import annotations

from typing import Any

from ... import __version__
from ...dialect.errors import ConfigurationError
from .statestore import StateStore

FORMAT = 2
"""This release's format. 1: every checkpoint written before formats were recorded (sdk
0.1.0); 2: ``format.json`` at the state directory's top, each state's record naming its
format (sdk 0.2.0)."""

FORMAT_FILE = "format.json"
"""``{"format": N, "written_by": release, "upgraded_at": state}``: the checkpoint's format,
the newest release that wrote it, and the newest state when it was upgraded from format 1
(states up to that one carry no format, by design)."""


def _states(store: StateStore) -> list[str]:
    return sorted(n.removesuffix(".json") for n in store.list_dir("states")
                  if n.endswith(".json"))


def read_format(store: StateStore) -> dict[str, Any]:
    """The checkpoint's format record: as written, or format 1 for a checkpoint without one
    (``written_by`` unknown)."""
    record = store.read_json(FORMAT_FILE)
    if record is None:
        return {"format": 1, "written_by": None}
    if not isinstance(record, dict) or not isinstance(record.get("format"), int):
        raise store.damaged((FORMAT_FILE,), "not a checkpoint format record")
    return record


def check_format(store: StateStore) -> None:
    """Refuse, in one line, a checkpoint this release cannot resume: one of a newer format,
    or one a release without formats wrote states to after a release with them had (what
    that release applied is not to be trusted: it may have put deleted rows back)."""
    record = read_format(store)
    written_by = record.get("written_by") or "an unknown release"
    if record["format"] > FORMAT:
        raise ConfigurationError(
            f"checkpoint {store.uri} has format {record['format']}, written by sdk "
            f"{written_by}; this is sdk {__version__}, which reads formats up to {FORMAT}: "
            f"run sdk {written_by} or later with it (nothing was changed)")
    if record["format"] < 2:
        return
    states = _states(store)
    upgraded_at = record.get("upgraded_at")
    for name in reversed(states):
        if upgraded_at is not None and name <= upgraded_at:
            break
        pointer = store.read_json("states", f"{name}.json")
        if isinstance(pointer, dict) and "format" not in pointer:
            raise ConfigurationError(
                f"checkpoint {store.uri} was written by sdk {written_by} (format "
                f"{record['format']}), then state {name} by a release that knows no checkpoint "
                "format (sdk 0.1.0): what that release applied cannot be trusted (it may have "
                "read tables again over newer changes); take a new snapshot into a fresh "
                "target (a new --checkpoint)")
        return  # the newest state carries a format: written by a release that checks


def record_format(store: StateStore) -> None:
    """Mark the checkpoint as this release's (once it owns it, before it writes a state):
    a new one, or one of an older format upgraded in place; nothing when it says so already."""
    record = read_format(store)
    wanted = {**record, "format": FORMAT, "written_by": __version__}
    if record["format"] < 2:
        states = _states(store)
        wanted["upgraded_at"] = states[-1] if states else None
        if not states:
            wanted.pop("upgraded_at")
    if wanted != record:
        store.write_json(wanted, FORMAT_FILE)
