"""The stream's checkpointed state: what each offset names in the state directory.

Spark keeps only small offsets; each names an immutable state file here: the sync state, the
splits handed out in the batch that ends there and the log range that batch reads. Finished
splits live in shared content-addressed chunks. No pyspark here (``sdk status`` and the tests
read states without a Spark session).
"""

from __future__ import annotations

import functools
import json
import logging
import time
import uuid
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ...algorithm import SyncState
from ...algorithm.following import table_digest
from ...algorithm.lineage import (
    SOURCE_FILE,
    another_source,
    check_position,
    check_same_source,
    relocate,
    resume_position,
    source_record,
)
from ...algorithm.progress import ProgressReport, TableProgress, with_staged
from ...dialect.codec import dumps, position_label
from ...dialect.errors import ConfigurationError, RetriableError
from ...dialect.manager import Dialect
from ...dialect.types import (
    Connection,
    FinishedSplit,
    Offset,
    SchemaChange,
    SnapshotSplit,
    TableId,
    TableSchema,
    TableTruncated,
)
from ...job.spec import SourceSpec
from .checkpoint_format import FORMAT, check_format
from .handoff import HEAD_START_FILE, resumed_state
from .statestore import StateStore

log = logging.getLogger(__name__)

CHUNK_SPLITS = 256
"""Finished splits per stored chunk. A state names its chunks instead of holding the splits,
so a micro-batch writes only the chunk its new splits land in: the bytes stored per batch stay
flat however many splits a snapshot has finished (with them inline, a snapshot of n splits wrote
O(n^2) bytes: 40 MiB for 2,000 splits, growing with the square)."""

ChunkCache = dict[tuple[TableId, int], tuple[tuple[Any, ...], str]]
"""(table, chunk number) -> the chunk's splits and digest, as last stored by this process;
(:data:`SCHEMAS`, chunk number) -> the chunk's table schemas and digest."""

SCHEMAS = TableId("", "\0schemas")
"""The key of the chunks of table schemas in a :data:`ChunkCache` (no table is named so)."""


@dataclass
class EngineState:
    """What an offset stands for: the sync state, the splits handed out in the batch that ends
    here (their watermarks are not folded in yet), and the log range this batch reads."""

    sync: SyncState
    inflight: list[SnapshotSplit] = field(default_factory=list)
    log_from: Offset | None = None
    seq: int = 0

    def save(self, store: StateStore, chunks: ChunkCache | None = None) -> str:
        """Store under ``<seq>-<content hash>``; the name is what the offset carries. The
        finished splits go to content-addressed chunks of ``CHUNK_SPLITS``; ``chunks`` skips
        re-encoding those this process stored already (a finished table only grows)."""
        cache: ChunkCache = {} if chunks is None else chunks
        finished = []
        for table, splits in self.sync.finished.items():
            digests = []
            for number, at in enumerate(range(0, len(splits), CHUNK_SPLITS)):
                chunk = splits[at:at + CHUNK_SPLITS]
                known = cache.get((table, number))
                if known is None or known[0] != chunk:
                    known = (chunk, store.put_content([f.to_json() for f in chunk], "chunks"))
                    cache[(table, number)] = known
                digests.append(known[1])
            finished.append(digests)
        schemas = list(self.sync.tables.values())
        tables = []  # the schemas in chunks too: a log batch's state is then O(its changes)
        for number, at in enumerate(range(0, len(schemas), CHUNK_SPLITS)):
            part = tuple(schemas[at:at + CHUNK_SPLITS])
            known = cache.get((SCHEMAS, number))
            if known is None or known[0] != part:
                known = (part, store.put_content([t.to_json() for t in part], "chunks"))
                cache[(SCHEMAS, number)] = known
            tables.append(known[1])
        sync = {**self.sync.to_json(finished=False), "tables": []}
        content = {"sync": sync, "finished": finished, "tables": tables,
                   "inflight": [s.to_json() for s in self.inflight],
                   "log_from": self.log_from.to_json() if self.log_from else None}
        digest = store.put_content(content, "content")
        name = f"{self.seq:012d}-{digest}"
        if store.read_bytes("states", f"{name}.json") is None:
            store.write_json({"content": digest, "format": FORMAT}, "states", f"{name}.json")
        return name

    @classmethod
    def load(cls, store: StateStore, name: str) -> EngineState:
        """The state stored as ``name``; a file of it damaged or missing raises
        :class:`CheckpointDamagedError` naming the file."""
        pointer = store.read_json("states", f"{name}.json")
        if pointer is None:
            raise ConfigurationError(f"state {name} is missing from {store.uri}: the state.dir "
                                     "does not belong to this checkpoint")
        if not isinstance(pointer, dict) or not isinstance(pointer.get("content"), str):
            raise store.damaged(("states", f"{name}.json"), "not a state's record")
        file = ("content", f"{pointer['content']}.json")
        data = store.read_json(*file)
        if data is None:
            raise store.damaged(file, f"missing, and state {name} names it")
        try:
            sync = data["sync"]
            if "finished" in data:  # else: a state stored with its finished splits inline
                sync["finished"] = [[split for digest in digests
                                     for split in _read_chunk(store, digest, file)]
                                    for digests in data["finished"]]
            if "tables" in data:  # else: a state stored with its schemas inline
                sync["tables"] = [schema for digest in data["tables"]
                                  for schema in _read_chunk(store, digest, file)]
            return with_cut(store, name, cls(
                SyncState.from_json(sync),
                [SnapshotSplit.from_json(_split_of(s)) for s in data["inflight"]],
                Offset.from_json(data["log_from"]) if data["log_from"] else None,
                int(name.split("-", 1)[0])))
        except (KeyError, TypeError, AttributeError, IndexError) as exc:
            raise store.damaged(file, f"not a state's content: {type(exc).__name__} {exc}"
                                ) from None

    @staticmethod
    def chunks_of(store: StateStore, content: str) -> list[str]:
        """The chunks a stored content names (none for one with its splits inline)."""
        data = store.read_json("content", f"{content}.json") or {}
        return [*(d for digests in data.get("finished", []) for d in digests),
                *data.get("tables", [])]


def _read_chunk(store: StateStore, digest: str, named_by: tuple[str, ...]
                ) -> list[dict[str, Any]]:
    """The finished splits or table schemas of chunk ``digest``, which the content file
    ``named_by`` names."""
    file = ("chunks", f"{digest}.json")
    data = store.read_json(*file)
    if data is None:
        raise store.damaged(file, f"missing, and {'/'.join(named_by)} names it")
    if not isinstance(data, list):
        raise store.damaged(file, "not a chunk of finished splits or table schemas")
    return data


def _split_of(item: Any) -> Any:
    """An in-flight split as stored: its JSON, or (before tables were named by identity) a
    ``[table position, split]`` pair whose position is ignored (the split names its table)."""
    return item[1] if isinstance(item, list) else item


SCHEMA_STAGE = "schema.json"
"""The schema changes a log batch followed, staged beside its splits' stages (the splits'
watermarks are the other ``.json`` files there): the driver folds them into the next state."""


def staged_schema_changes(store: StateStore, state: str) -> list[SchemaChange]:
    """The schema changes the log batch ending at ``state`` followed, in log order."""
    data = store.read_json("batches", state, SCHEMA_STAGE) or []
    return [SchemaChange(TableSchema.from_json(d["schema"]), Offset.from_json(d["offset"]))
            for d in data]


TRUNCATED_STAGE = "truncated.json"
"""The truncations (:class:`TableTruncated`) a chained log batch met, staged like
:data:`SCHEMA_STAGE`: the driver reads each table again whole."""


def staged_truncations(store: StateStore, state: str) -> list[TableTruncated]:
    """The truncations the log batch ending at ``state`` met, in log order."""
    return [TableTruncated.from_json(d)
            for d in store.read_json("batches", state, TRUNCATED_STAGE) or []]


def stage_name(split: SnapshotSplit) -> str:
    """The file name a split's output is staged under in its batch: the split's table by
    identity (a digest of its name, safe for any characters) and the split's number, so a
    replay after the table list changed finds the same stage."""
    return f"{table_digest(split.table)}-{split.index}"


APPLIED_FILE = "applied.json"
"""What the running ``sdk sync`` last reported of what it applied (``sdk status`` shows it):
changes applied and set aside by this run, the lag then, the source commit the target
reflects and since when it is consistent."""
APPLIED_KEYS = ("applied", "skipped", "lag_seconds", "source_commit", "consistent_since",
                "per_table_commits")

VERIFY_FILE = "verify.json"
"""The progress of the last ``sdk verify`` on the checkpoint (:mod:`sdk.spark.verify`):
``sdk status`` and the sync's metrics show it."""

PROGRESS_FILE = "progress.json"
PROGRESS_TABLES = "progress-tables.json"
"""The progress report is two files: the per-table figures, written only when they change
(at thousands of tables, most batches change none of them), and the rest, every report."""


def write_progress(store: StateStore, report: ProgressReport,
                   written: Mapping[str, TableProgress] | None
                   ) -> Mapping[str, TableProgress]:
    """Write ``report``: its tables only when they differ from ``written`` (the tables this
    writer wrote last, None when unknown; a table whose figures did not change is the same
    object, see :func:`sdk.algorithm.progress.progress_of`, so comparing is quick); the
    tables written now or before."""
    if written is None or report.tables != written:
        store.write_json({name: t.to_json() for name, t in report.tables.items()},
                         PROGRESS_TABLES)
    store.write_json(report.to_json(tables=False), PROGRESS_FILE)
    return report.tables


def read_progress(store: StateStore) -> ProgressReport | None:
    """The progress report as :func:`write_progress` wrote it (or as one file, written by an
    earlier version), None before the first; a damaged file is named."""
    report = store.read_json(PROGRESS_FILE)
    if report is None:
        return None
    if not isinstance(report, dict):
        raise store.damaged((PROGRESS_FILE,), "not a progress report")
    if "tables" not in report:
        tables = store.read_json(PROGRESS_TABLES)
        if tables is not None and not isinstance(tables, dict):
            raise store.damaged((PROGRESS_TABLES,), "not the tables of a progress report")
        report["tables"] = tables or {}
    try:
        return ProgressReport.from_json(report)
    except (ValueError, TypeError, KeyError, AttributeError):
        raise store.damaged((PROGRESS_FILE,), "not a progress report") from None


def live_report(store: StateStore, seen: dict[str, FinishedSplit] | None = None,
                report: ProgressReport | None = None) -> ProgressReport | None:
    """The progress report with the splits of the newest batch it does not count yet (its
    ``counted``) counted as they are staged (:func:`sdk.algorithm.progress.with_staged`): a
    snapshot batch may run for many seconds before the next report. None before the first.
    ``seen`` keeps the staged splits read by earlier calls, so a caller polling reads each
    one once. ``report``: the report as the caller just read it (not read again)."""
    if report is None:
        report = read_progress(store)
    names = [n for n in store.list_dir("states") if n.endswith(".json")]  # no temporary one
    if report is None or not names:
        return report
    newest = max(names).removesuffix(".json")
    if int(newest.split("-")[0]) <= (1 << 62 if report.counted is None else report.counted):
        return report
    known = {} if seen is None else seen
    for name in [n for n in known if not n.startswith(f"{newest}/")]:
        del known[name]  # an earlier batch's, which the report counts by now
    for file in store.list_dir("batches", newest):
        name = f"{newest}/{file}"
        if file.endswith(".json") and file not in (SCHEMA_STAGE, TRUNCATED_STAGE) and \
                name not in known:
            data = store.read_json("batches", newest, file)
            if data is not None:
                known[name] = FinishedSplit.from_json(data)
    return with_staged(report, list(known.values()))


def live_progress(store: StateStore, seen: dict[str, FinishedSplit] | None = None,
                  report: ProgressReport | Mapping[str, Any] | None = None
                  ) -> dict[str, Any] | None:
    """:func:`live_report` as JSON (what ``sdk status --json`` prints and
    :func:`sdk.spark.progress` returns)."""
    live = live_report(store, seen, None if report is None else ProgressReport.of(report))
    return None if live is None else live.to_json()


CUTS = "cuts"
"""Where a log batch cut short records where it ended (``<state>.json``)."""


def write_cut(store: StateStore, name: str, at: Offset) -> None:
    """Record that the log batch ending at state ``name`` read only up to ``at`` (exclusive):
    it met ``log.batch.changes`` there. Written by its task before the batch commits; the
    same cut every time the batch is read (a bounded read repeats its events)."""
    store.write_json(at.to_json(), CUTS, f"{name}.json")


def with_cut(store: StateStore, name: str, engine: EngineState) -> EngineState:
    """``engine`` (state ``name``) with its position where its log batch was cut, if it was:
    the next batch reads on from there, and that is what was applied. Only the position
    moves; the tables' states were decided at the batch's start, which the cut keeps."""
    if engine.log_from is None:
        return engine
    cut = store.read_json(CUTS, f"{name}.json")
    if cut is None:
        return engine
    at = Offset.from_json(cut)
    if engine.sync.position == at:
        return engine
    return replace(engine, sync=replace(engine.sync, position=at))


KEPT_STATES = 4
"""States a stream's driver keeps loaded: a batch names its start and end state three times
(latestOffset, partitions, commit)."""


class StateCache:
    """The states a stream's driver saved or loaded last, by name, the chunk cache their saves
    share and when each batch was handed out; and what a committed batch lets it drop."""

    def __init__(self, store: StateStore, planned: dict[str, float] | None = None) -> None:
        self.store = store
        self.states: dict[str, EngineState] = {}
        self.chunks: ChunkCache = {}
        self.planned: dict[str, float] = dict(planned or {})
        """When this driver handed out the batch ending at each state (``time.time()``): the
        rate limits count from there."""

    def load(self, name: str) -> EngineState:
        """State ``name``, with its cut (:func:`with_cut`: its batch may have been cut since
        it was planned)."""
        engine = self.states.get(name)
        if engine is None:
            return self._keep(name, EngineState.load(self.store, name))
        cut = with_cut(self.store, name, engine)
        return engine if cut is engine else self._keep(name, cut)

    def _keep(self, name: str, engine: EngineState) -> EngineState:
        self.states[name] = engine
        while len(self.states) > KEPT_STATES:
            del self.states[next(iter(self.states))]
        return engine

    def save(self, engine: EngineState) -> str:
        """Save ``engine`` as the end of a batch handed out now; its name."""
        name = engine.save(self.store, self.chunks)
        self.planned[name] = time.time()
        while len(self.planned) > KEPT_STATES:
            del self.planned[next(iter(self.planned))]
        self._keep(name, engine)
        return name

    def forget(self) -> None:
        """Drop what is loaded (the positions moved under it: a failover followed)."""
        self.states.clear()
        self.chunks = {}

    def collect_garbage(self, committed_seq: int, keep_states: Collection[str] = ()) -> None:
        """Drop the stages and states of batches before the committed one but ``keep_states``:
        Spark never goes back to them (a restart replays at most the batch after the last
        commit)."""
        for name in self.store.list_dir("batches"):
            if int(name.split("-", 1)[0]) < committed_seq:
                self.store.delete_dir("batches", name)
        keep: set[str] = set()
        drop: list[tuple[str, str]] = []
        for file in self.store.list_dir("states"):
            if not file.endswith(".json"):  # a state being written (its temporary file)
                continue
            pointer = self.store.read_json("states", file)
            if pointer is None:
                continue
            if int(file.split("-", 1)[0]) < committed_seq - 1 and \
                    file.removesuffix(".json") not in keep_states:
                drop.append((file, pointer["content"]))
            else:
                keep.add(pointer["content"])
        kept_chunks = {c for content in keep for c in EngineState.chunks_of(self.store, content)}
        for file, content in drop:
            self.store.delete_file("states", file)
            self.store.delete_file(CUTS, file)
            if content not in keep:
                self.store.delete_file("content", f"{content}.json")
        gone = {file.removesuffix(".json") for file in self.store.list_dir("chunks")} - kept_chunks
        for digest in gone:
            self.store.delete_file("chunks", f"{digest}.json")
        if gone:  # a later save must write such a chunk again, not trust the cache
            self.chunks = {k: v for k, v in self.chunks.items() if v[1] not in gone}


def latest_name(store: StateStore) -> str | None:
    """The name of the newest state stored, or None for a new state directory."""
    names = sorted(n.removesuffix(".json") for n in store.list_dir("states")
                   if n.endswith(".json"))  # not a state being written (a temporary file)
    return names[-1] if names else None


def latest(store: StateStore) -> EngineState | None:
    """The newest state stored, or None for a new state directory."""
    name = latest_name(store)
    return EngineState.load(store, name) if name else None


def readable_checkpoint(store: StateStore) -> EngineState | None:
    """The newest state, having read every file a resumed sync starts from (the state with
    its content and chunks, the source's record, the progress report): a damaged or missing
    one raises :class:`CheckpointDamagedError` naming it and the way out, before anything
    reports on the checkpoint or adds to it. None for a new state directory."""
    check_format(store)  # a newer release's, or written to by one that knows no format
    for file in (SOURCE_FILE, STREAM_FILE, PROGRESS_FILE, PROGRESS_TABLES):
        data = store.read_json(file)
        if data is not None and not isinstance(data, dict):
            raise store.damaged((file,), "not a JSON object")
    return latest(store)


def with_staged_columns(store: StateStore, name: str, tables: list[TableSchema]
                        ) -> list[TableSchema]:
    """``tables`` with the columns of the schema changes the batch ending at state ``name``
    followed (a typed stream's batch after a restart for new columns carries them)."""
    changed = {c.table: c.schema for c in staged_schema_changes(store, name)}
    return [changed.get(t.table, t) for t in tables]


def captured_tables(store: StateStore, staged: bool = False) -> list[TableSchema]:
    """The tables the newest state captures (its finished splits are not read); ``staged``:
    with the columns its batch's schema changes give them (:func:`with_staged_columns`)."""
    name = latest_name(store)
    pointer = store.read_json("states", f"{name}.json") if name else None
    file = ("content", f"{pointer['content']}.json") if pointer else None
    content = store.read_json(*file) if file else None
    if content is None or file is None:
        return []
    found = content["sync"]["tables"] if "tables" not in content else \
        [t for digest in content["tables"] for t in _read_chunk(store, digest, file)]
    tables = [TableSchema.from_json(t) for t in found]
    return with_staged_columns(store, name, tables) if staged and name else tables


STREAM_FILE = "stream.json"
"""What a stream's output was when it started (``{"envelope": bool}``): a restart keeps it,
however many tables it captures by then; and the sync's id (``"sync"``, made at its first
start), which its ledger ids begin with."""


def start_stream(store: StateStore, envelope: bool) -> None:
    """Record the stream's output and, once, a new id for the sync (:func:`ledger_prefix`)."""
    started = store.read_json(STREAM_FILE) or {}
    store.write_json({"envelope": envelope,
                      "sync": started.get("sync") or uuid.uuid4().hex[:16]}, STREAM_FILE)


def ledger_prefix(store: StateStore) -> str:
    """What the ledger ids of the sync in ``store`` begin with: its id, so a new sync into a
    target an earlier one wrote (its checkpoint deleted, the same tables and positions) never
    finds its batches "applied" by the earlier one's ledger rows. Empty for a checkpoint
    made before syncs had ids (its replays keep matching its ledger rows)."""
    started = store.read_json(STREAM_FILE) or {}
    sync = started.get("sync")
    return f"{sync}:" if sync else ""


def checkpointed(spec: SourceSpec) -> SourceSpec:
    """``spec`` restricted to the tables its state directory already syncs, in their order,
    with the columns it has for them, and with the output it started with: a restart reads
    and replays exactly what it did before. A table that newly matches the patterns, or a
    synced table no longer found, is left to the stream when it follows tables
    (:attr:`SourceSpec.follows_tables`: it adds and removes them in its log phase); otherwise
    the first gets a warning and the second is an error."""
    if not spec.state_dir:
        return spec
    store = StateStore(spec.state_dir)
    state = latest(store)
    if state is None:
        return spec
    resolved = spec.table_map()
    synced = list(state.sync.tables)
    started = store.read_json(STREAM_FILE) or {}
    envelope = spec.envelope_forced or len(synced) > 1 or bool(started.get("envelope"))
    spec = replace(spec, envelope=envelope)
    gone = [str(t) for t in synced if t not in resolved]
    if gone and not spec.follows_tables:
        raise ConfigurationError(
            f"the sync in {spec.state_dir} captures {', '.join(gone)}, which the source no "
            "longer has or the table patterns no longer select: restore the table or the "
            "patterns, or start a new sync with a new checkpoint")
    new = [str(t) for t in resolved if t not in state.sync.tables]
    if new and not spec.follows_tables:
        log.warning("%s: not captured by this sync, which started without them (start a new "
                    "checkpoint to capture them, or use the envelope or a target, whose "
                    "streams add tables as they appear)", ", ".join(new))
    # the columns the sync has, not the live ones: a schema change not followed yet is met
    # in the log, at its place (and the target's tables match the sync's)
    tables = [state.sync.tables[t] for t in synced if t in resolved]
    if not envelope and spec.target is None and tables:
        # a typed stream stopped at a schema change in its last batch (SchemaChangedError):
        # the restarted query's columns are the table's after it, and the batch replays
        name = latest_name(store)
        assert name is not None
        tables = with_staged_columns(store, name, tables)
    return replace(spec, tables=tables)


def _state_files(store: StateStore) -> Iterator[tuple[str, ...]]:
    """Every file the states ``store`` keeps refer to, where a log position may be: their
    contents and chunks, their cuts and their batches' stages (not what the next garbage
    collection drops: no sync reads from there again)."""
    for file in store.list_dir("states"):
        pointer = store.read_json("states", file) if file.endswith(".json") else None
        if not isinstance(pointer, dict):
            continue
        name = file.removesuffix(".json")
        yield "content", f"{pointer['content']}.json"
        for digest in EngineState.chunks_of(store, pointer["content"]):
            yield "chunks", f"{digest}.json"
        if store.exists(CUTS, file):
            yield CUTS, file
        for stage in store.list_dir("batches", name):
            if stage.endswith(".json"):
                yield "batches", name, stage


def _offsets_in(data: Any, dialect: str) -> Iterator[dict[str, Any]]:
    """The offsets (``Offset.to_json`` forms) of ``dialect`` anywhere in JSON ``data``."""
    if isinstance(data, dict):
        if data.keys() == {"dialect", "position"} and data["dialect"] == dialect:
            yield data
            return
        for value in data.values():
            yield from _offsets_in(value, dialect)
    elif isinstance(data, list):
        for value in data:
            yield from _offsets_in(value, dialect)


def _replaced(data: Any, places: Mapping[str, Any]) -> Any:
    """``data`` with each offset in ``places`` (by its canonical text) replaced."""
    if isinstance(data, dict):
        if data.keys() == {"dialect", "position"}:
            return places.get(dumps(data), data)
        return {k: _replaced(v, places) for k, v in data.items()}
    if isinstance(data, list):
        return [_replaced(v, places) for v in data]
    return data


def follow_failover(store: StateStore, dialect: Dialect, conn: Connection,
                    recorded: Mapping[str, Any], now: Mapping[str, Any], write: bool = True
                    ) -> dict[Offset, Offset]:
    """Move the checkpoint in ``store`` onto ``conn``'s server, another server of the source's
    replication topology than the ``recorded`` one (a failover): every log position it keeps
    becomes its place in the new server's log (:func:`sdk.algorithm.lineage.relocate`), then
    the new server is recorded, with the old one in its ``followed`` history. Rewriting is
    idempotent (a position is found by what it carries across servers), so a sync stopped
    halfway does it again. Returns where each position moved; ``write`` False: only that
    (``sdk check``)."""
    files = list(dict.fromkeys(_state_files(store)))
    contents = {parts: store.read_json(*parts) for parts in files}
    offsets = {dumps(o): Offset.from_json(o) for data in contents.values()
               for o in _offsets_in(data, dialect.name)}
    places = relocate(dialect, conn, offsets.values(), recorded.get("identity") or {},
                      _reads_from(store, dialect))
    if not write:
        return places
    by_text = {text: places[offset].to_json() for text, offset in offsets.items()}
    for parts, data in contents.items():
        moved = _replaced(data, by_text)
        if moved != data:
            store.write_json(moved, *parts)
    latest = max(places.values(), key=functools.cmp_to_key(dialect.compare_offset)) \
        if places else None
    history = [*recorded.get("followed", []),  # small: every task reads this file
               {"identity": recorded.get("identity"), "url": recorded.get("url"),
                "until": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "positions": len(offsets), "latest": latest.to_json() if latest else None}]
    store.write_json({**now, "followed": history}, SOURCE_FILE)
    log.warning("followed a failover: %s is another server than %s, which the checkpoint "
                "followed; %d log positions found in its log by what they carry (the "
                "latest: %s); going on from there without a new snapshot", now.get("url"),
                recorded.get("url"), len(offsets),
                position_label(dumps(latest.to_json())) if latest else "none")
    return places


def _reads_from(store: StateStore, dialect: Dialect) -> Offset | None:
    """The lowest log position a sync on ``store`` can read from again: the resume position
    of the state of the last batch Spark committed, as ``sdk sync``'s Spark checkpoint beside
    the state directory records it, or of the last one the driver's head start completed
    past it (None when there is none: a query of the user's own)."""
    base, _, leaf = store.uri.rstrip("/").rpartition("/")
    if leaf != "state":
        return None
    spark = StateStore(f"{base}/checkpoint", create=False)
    batches = [int(n) for n in spark.list_dir("commits") if n.isdigit()]
    text = spark.read_bytes("offsets", str(max(batches))) if batches else None
    try:
        name = json.loads(text.decode().splitlines()[2])["state"] if text else None
    except (ValueError, IndexError, KeyError, TypeError):
        return None
    record = store.read_json(HEAD_START_FILE)
    name = resumed_state(record if isinstance(record, dict) else None, name)
    if not isinstance(name, str) or store.read_json("states", f"{name}.json") is None:
        return None
    return resume_position(EngineState.load(store, name).sync, dialect)


def follow_or_check_source(store: StateStore, dialect: Dialect, conn: Connection, url: str,
                           checkpoint: str, write: bool = True
                           ) -> dict[Offset, Offset] | None:
    """At a resumed sync's start: when ``conn``'s server is another one than the checkpoint's
    (a failover) and the dialect can find positions across servers, move the checkpoint onto
    it (:func:`follow_failover`; ``write`` False: only find where) and return where its
    positions went; else raise when it is another server, return None when it is the same."""
    recorded = store.read_json(SOURCE_FILE)
    if recorded is None:
        return None
    now = source_record(dialect, conn, url)
    if another_source(recorded, now) and dialect.implements("locate_offset"):
        return follow_failover(store, dialect, conn, recorded, now, write)
    check_same_source(recorded, now, checkpoint)
    return None


def check_task_source(store: StateStore, dialect: Dialect, conn: Connection) -> None:
    """In a task, on its own connection: the server is the one the checkpoint follows. One
    that is not (a failover behind the same host name since the driver checked) raises
    :class:`RetriableError`: the sync restarts, and its driver follows the failover or
    stops. Costs the dialect's ``server_identity`` query."""
    recorded = store.read_json(SOURCE_FILE)
    if recorded is None:
        return
    now = {"dialect": dialect.name, "identity": dialect.server_identity(conn)}
    if another_source(recorded, now):
        raise RetriableError(
            f"the source is another server than the one the checkpoint follows (was "
            f"{recorded.get('identity')}, is {now['identity']}): a failover under a running "
            "sync; it restarts from its checkpoint to follow it")


def check_checkpoint_source(store: StateStore, dialect: Dialect, conn: Connection, url: str,
                            checkpoint: str) -> tuple[Offset | None, bool]:
    """Check, changing nothing, that ``conn``'s server is the source the checkpoint in
    ``store`` follows, or another server of its topology the checkpoint can move onto (a
    failover; the sync's driver moves it), and that its log holds the position the sync
    resumes from (:mod:`sdk.algorithm.lineage`). Returns that position, on this server
    (None for a checkpoint with none yet), and whether it is another server's. A checkpoint
    written before sources were recorded has no record: only its position is checked."""
    places = follow_or_check_source(store, dialect, conn, url, checkpoint, write=False)
    engine = readable_checkpoint(store)
    position = resume_position(engine.sync, dialect) if engine is not None else None
    if position is not None and places is not None:
        position = places.get(position, position)
    if position is not None:
        check_position(dialect, conn, position, url)
    return position, places is not None
