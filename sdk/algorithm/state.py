"""The whole progress of a sync as compact, canonical JSON.

Restoring a :class:`SyncState` at any point continues the sync exactly: the split cursors say
what is left to read, the finished splits and their watermarks drive the incremental filter,
and the log position says where the log phase is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ..dialect.codec import dumps
from ..dialect.types import FinishedSplit, Offset, TableId, TableSchema
from .assigner import TablePlan

STATE_VERSION = 1


class Phase(StrEnum):
    SNAPSHOT = "snapshot"
    LOG = "log"
    DONE = "done"


@dataclass(frozen=True)
class SyncState:
    """Progress: ``plans`` for tables with splits left to hand out, ``finished`` splits of the
    tables still filtered by the log phase, and the log ``position``.

    Treated as immutable: every step returns a new state.
    """

    phase: Phase
    tables: Mapping[TableId, TableSchema]
    plans: Mapping[TableId, TablePlan] = field(default_factory=dict)
    finished: Mapping[TableId, tuple[FinishedSplit, ...]] = field(default_factory=dict)
    position: Offset | None = None
    stop_after_snapshot: bool = False
    leaving: Mapping[TableId, Offset] = field(default_factory=dict)
    """Tables that stop being captured once the log ``position`` reaches their offset (gone
    from the source or from the table patterns): their changes before it are still emitted."""
    rereads: Mapping[TableId, str | None] = field(default_factory=dict)
    """Tables read again while their changes flow (a snapshot on demand), with the condition
    the rows read must meet (None: all): their splits left to hand out are in ``plans``."""
    served: tuple[str, ...] = ()
    """The snapshot requests this sync took up (each is served once)."""
    versions: Mapping[TableId, int] = field(default_factory=dict)
    """The schema version of each table whose columns changed since it was first captured
    (absent: 1), one more for each schema change followed."""
    snapshot_from: Offset | None = None
    """The log position when the snapshot began, taken after the tables were described: the
    log phase starts no later, so it meets a schema change made before the first split's
    watermark (the splits read the columns described)."""

    def version(self, table: TableId) -> int:
        """``table``'s schema version (1: the columns it was first captured with)."""
        return self.versions.get(table, 1)

    def to_json(self, finished: bool = True) -> dict[str, Any]:
        """``finished=False`` leaves the finished splits out (``"finished": []``), for a store
        that keeps them apart (they are most of a big snapshot's state)."""
        return {
            "v": STATE_VERSION,
            "phase": self.phase.value,
            "tables": [s.to_json() for s in self.tables.values()],
            "plans": [p.to_json() for p in self.plans.values()],
            "finished": [[f.to_json() for f in splits] for splits in self.finished.values()]
            if finished else [],
            "position": self.position.to_json() if self.position else None,
            "stop_after_snapshot": self.stop_after_snapshot,
            **({"leaving": [[t.to_json(), o.to_json()] for t, o in self.leaving.items()]}
               if self.leaving else {}),
            **({"rereads": [[t.to_json(), w] for t, w in self.rereads.items()]}
               if self.rereads else {}),
            **({"served": list(self.served)} if self.served else {}),
            **({"versions": [[t.to_json(), v] for t, v in self.versions.items()]}
               if self.versions else {}),
            **({"snapshot_from": self.snapshot_from.to_json()} if self.snapshot_from else {}),
        }

    def dumps(self) -> str:
        """Canonical JSON text: equal states give equal text."""
        return dumps(self.to_json())

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SyncState:
        if data.get("v") != STATE_VERSION:
            raise ValueError(f"unsupported sync state version {data.get('v')!r}")
        tables = [TableSchema.from_json(t) for t in data["tables"]]
        plans = [TablePlan.from_json(p) for p in data["plans"]]
        finished = [tuple(FinishedSplit.from_json(f) for f in splits)
                    for splits in data["finished"]]
        return cls(
            phase=Phase(data["phase"]),
            tables={t.table: t for t in tables},
            plans={p.table: p for p in plans},
            finished={splits[0].split.table: splits for splits in finished if splits},
            position=Offset.from_json(data["position"]) if data["position"] else None,
            stop_after_snapshot=data["stop_after_snapshot"],
            leaving={TableId.from_json(t): Offset.from_json(o)
                     for t, o in data.get("leaving", [])},
            rereads={TableId.from_json(t): w for t, w in data.get("rereads", [])},
            served=tuple(data.get("served", [])),
            versions={TableId.from_json(t): v for t, v in data.get("versions", [])},
            snapshot_from=Offset.from_json(data["snapshot_from"])
            if data.get("snapshot_from") else None,
        )

    @classmethod
    def loads(cls, text: str) -> SyncState:
        return cls.from_json(json.loads(text))
