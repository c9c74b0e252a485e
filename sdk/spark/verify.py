"""``sdk verify``: compare a sync's target with its source chunk by chunk while the sync runs,
report the rows that differ, and read them again (``--repair``).

The chunks are compared by :class:`sdk.job.verify.Verifier` in parallel threads of this
process (each one a connection to either side); what they wait for is the running sync's
applied log position, read from its progress report in the checkpoint. Progress goes to
``verify.json`` in the state directory (``sdk status`` shows it) and the findings to a JSON
report.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import fnmatch
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from ..algorithm.assigner import SplitAssigner
from ..algorithm.progress import TableState
from ..algorithm.settings import SyncOptions
from ..algorithm.state import Phase
from ..algorithm.throttle import Throttle
from ..dialect.codec import encode_key
from ..dialect.errors import SdkError
from ..dialect.manager import Dialect, default_manager
from ..dialect.types import Capability, Key, Offset, TableSchema
from ..job.spec import checkpoint_paths
from ..job.target import Target
from ..job.verify import Chunk, ChunkResult, Side, SourceRead, Verifier
from .driver.requests import list_requests, request_snapshot
from .state.engine_state import (
    VERIFY_FILE,
    captured_tables,
    check_checkpoint_source,
    read_progress,
    readable_checkpoint,
)
from .state.statestore import StateStore

log = logging.getLogger(__name__)

CHUNK_ROWS = 50_000
WAIT_SECONDS = 300.0
"""How long a chunk waits for the sync to apply the log past its watermark."""
REPAIR_KEYS = 500
"""Differing rows of a table ``--repair`` names one by one in its condition; past that it
reads the key ranges they lie in."""


class VerifyError(SdkError):
    """``sdk verify`` could not compare (exit code 2)."""


@dataclass
class VerifyJob:
    """What ``sdk verify`` was asked."""

    checkpoint: str
    source: str
    target: str
    target_schema: str | None = None
    tables: Sequence[str] = ()
    where: str | None = None
    rows_per_second: float | None = None
    static: bool = False
    repair: bool = False
    chunk_rows: int = CHUNK_ROWS
    parallel: int = 2
    report: str | None = None
    wait_seconds: float = WAIT_SECONDS


@dataclass
class Outcome:
    """What a verify found, table by table."""

    results: list[ChunkResult] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    """Tables not compared, each with why (still being copied)."""
    seconds: float = 0.0
    repaired: list[str] = field(default_factory=list)
    """The snapshot requests ``--repair`` made."""

    @property
    def differences(self) -> int:
        return sum(len(r.differences) for r in self.results)

    @property
    def unsettled(self) -> int:
        return sum(len(r.unsettled) for r in self.results)

    @property
    def rows(self) -> int:
        return sum(r.rows for r in self.results)

    def to_json(self) -> dict[str, Any]:
        tables: dict[str, dict[str, Any]] = {}
        for r in self.results:
            t = tables.setdefault(str(r.chunk.table.table), {
                "chunks": 0, "rows": 0, "differences": 0, "unsettled": 0, "in_server": True})
            t["chunks"] += 1
            t["rows"] += r.rows
            t["differences"] += len(r.differences)
            t["unsettled"] += len(r.unsettled)
            t["in_server"] = t["in_server"] and r.in_server
        return {"equal": self.differences == 0, "rows": self.rows,
                "differences": self.differences, "unsettled": self.unsettled,
                "seconds": round(self.seconds, 3), "tables": tables, "skipped": self.skipped,
                "repaired": self.repaired,
                "rows_differing": [d.to_json(r.chunk.table.column_names)
                                   for r in self.results for d in r.differences],
                "rows_unsettled": [{"table": str(r.chunk.table.table), "key": encode_key(k)}
                                   for r in self.results for k in r.unsettled]}


class _Progress:
    """``verify.json``: chunks done of all, rows compared and differing, written as chunks
    end (at most twice a second) and at the end."""

    def __init__(self, store: StateStore, total: int, report: Callable[[dict[str, Any]], None]
                 ) -> None:
        self.store, self.total, self.report = store, total, report
        self.started = time.time()
        self.done = self.rows = self.differing = self.unsettled = 0
        self.state = "running"
        self._lock = threading.Lock()
        self._written = 0.0

    def add(self, result: ChunkResult) -> None:
        with self._lock:
            self.done += 1
            self.rows += result.rows
            self.differing += len(result.differences)
            self.unsettled += len(result.unsettled)
            if time.monotonic() - self._written >= 0.5 or self.done == self.total:
                self._write()

    def finish(self, state: str) -> None:
        with self._lock:
            self.state = state
            self._write()

    def _write(self) -> None:
        self._written = time.monotonic()
        data = {"state": self.state, "started_at": self.started, "updated_at": time.time(),
                "chunks": self.done, "chunks_total": self.total, "rows": self.rows,
                "differing": self.differing, "unsettled": self.unsettled}
        with contextlib.suppress(OSError):
            self.store.write_json(data, VERIFY_FILE)
        self.report(data)


def running_owner(store: StateStore) -> dict[str, Any] | None:
    """The sync holding the checkpoint's lease, as ``owner.json`` names it; None when none
    does. On a local disk the owner's process is looked up when it runs on this host (its
    lock is not probed: a sync starting at that moment would find it taken); on shared
    storage the lease must have been renewed lately."""
    import socket

    from .state.lease import LEASE_SECONDS, CheckpointLease

    lease = CheckpointLease(store)
    owner = lease.owner()
    if owner is None:
        return None
    if not lease.local:
        return owner if time.time() - float(owner.get("renewed", 0)) <= LEASE_SECONDS \
            else None
    if owner.get("host") != socket.gethostname():
        return owner  # another host's process: trusted as running
    try:
        pid = int(owner.get("pid", 0))
        if pid <= 0:
            return None
        os.kill(pid, 0)
    except (ProcessLookupError, ValueError, TypeError):
        return None
    except PermissionError:  # another user's process: it is there
        pass
    return owner


class SyncWatch:
    """The running sync's applied log position, polled from its progress report."""

    def __init__(self, store: StateStore, dialect: Dialect, seconds: float) -> None:
        self.store, self.dialect, self.seconds = store, dialect, seconds

    def applied(self) -> Offset | None:
        report = read_progress(self.store)
        if report is None or report.position is None or report.phase is not Phase.LOG:
            return None
        return Offset.from_json(json.loads(report.position))

    def wait_past(self, high: Offset) -> None:
        """Return once the sync applied the log up to ``high``."""
        deadline = time.monotonic() + self.seconds
        pause = 0.05
        while True:
            applied = self.applied()
            if applied is not None and self.dialect.compare_offset(applied, high) >= 0:
                return
            if time.monotonic() > deadline:
                raise VerifyError(
                    f"the sync did not apply the source's log up to {high} within "
                    f"{self.seconds:.0f} s (it is at {applied}): is it running and keeping "
                    "up? (sdk status shows its lag; --wait-seconds gives it longer)")
            time.sleep(pause)
            pause = min(pause * 2, 0.5)


def run_verify(job: VerifyJob, report: Callable[[dict[str, Any]], None] = lambda _: None
               ) -> Outcome:
    """Compare the tables of ``job``'s checkpoint; with ``repair``, read the differing rows
    again through the sync and compare them again."""
    started = time.monotonic()
    state_dir, _ = checkpoint_paths(job.checkpoint)
    store = StateStore(state_dir, create=False)
    if readable_checkpoint(store) is None:
        raise VerifyError(f"no sync has run with checkpoint {job.checkpoint}")
    if not job.static and running_owner(store) is None:
        raise VerifyError(
            f"no sync is running on checkpoint {job.checkpoint}: verify compares the target "
            "with the source as the sync applies the log, so start it (sdk sync ... "
            "--checkpoint); with the source's writes stopped, verify with --static")
    dialect, config = default_manager().source_for_url(job.source)
    source = Side(dialect, config, target=False)
    target_of = Target.of(job.target, job.target_schema)
    target_dialect = default_manager().get(target_of.dialect_name)
    if not target_dialect.implements("read_target_range") and \
            not target_dialect.implements("read_range"):
        raise VerifyError(f"dialect {target_dialect.name!r} cannot read its tables back, so "
                          "its mirrors cannot be verified")
    target = Side(target_dialect, target_of.config, target=True)
    try:
        check_checkpoint_source(store, dialect, source.conn(), config.masked_url,
                                job.checkpoint)
        tables, skipped = _tables(store, job)
        chunks = _chunks(source, target_of, tables, job)
        watch = None if job.static else SyncWatch(store, dialect, job.wait_seconds)
        verifier = Verifier(source, target, None if watch is None else watch.wait_past,
                            _throttle(job.rows_per_second))
        outcome = Outcome(_run(verifier, chunks, store, job.parallel, report), skipped)
        if job.repair and outcome.differences:
            outcome = _repair(outcome, verifier, store, state_dir, job, report)
    finally:
        source.close()
        target.close()
    outcome.seconds = time.monotonic() - started
    return outcome


def _tables(store: StateStore, job: VerifyJob) -> tuple[list[TableSchema], dict[str, str]]:
    """The captured tables ``job`` names (all by default) whose changes the sync follows; the
    others it names, each with why it is not compared."""
    progress = read_progress(store)
    states = {} if progress is None else {n: t.state for n, t in progress.tables.items()}
    chosen, skipped = [], {}
    for table in captured_tables(store, staged=True):
        name = str(table.table)
        if job.tables and not any(fnmatch.fnmatchcase(name, p) for p in job.tables):
            continue
        state = states.get(name)
        if state == TableState.STREAMING or (job.static and state == TableState.SNAPSHOT_DONE):
            chosen.append(table)
        else:
            skipped[name] = f"not compared: {state or 'not started'}"
    if job.tables and not chosen and not skipped:
        raise VerifyError(f"no table captured by checkpoint {job.checkpoint} matches "
                          f"{', '.join(job.tables)}")
    return chosen, skipped


def _chunks(source: Side, target: Target, tables: Iterable[TableSchema], job: VerifyJob
            ) -> list[Chunk]:
    """Each table cut as the snapshot cuts it, into chunks of about ``job.chunk_rows``."""
    if job.where is not None:
        for side in (source.dialect, default_manager().get(target.dialect_name)):
            if not side.has(Capability.FILTERED_READS):
                raise VerifyError(f"--where needs dialects that read with a condition; "
                                  f"{side.name!r} does not")
    assigner = SplitAssigner(source.dialect, replace(SyncOptions(), split_size=job.chunk_rows))
    chunks = []
    for table in tables:
        mirror = target.table_for(table)
        with source.dialect.passing_faults():
            plan = assigner.plan(source.conn(), table)
            while (step := assigner.next_split(source.conn(), table, plan)) is not None:
                split, plan = step
                chunks.append(Chunk(table, mirror, replace(split, where=job.where)))
    return chunks


def _throttle(rate: float | None) -> Callable[[int], None]:
    """The ``--rows-per-second`` pace shared by every thread."""
    if rate is None:
        return lambda rows: None
    pace, lock = Throttle(rate), threading.Lock()

    def took(rows: int) -> None:
        with lock:
            pace.take(rows)
    return took


def _run(verifier: Verifier, chunks: Sequence[Chunk], store: StateStore, parallel: int,
         report: Callable[[dict[str, Any]], None]) -> list[ChunkResult]:
    """Compare ``chunks``: ``parallel`` threads read the source's checksums ahead while
    others compare the target's once the sync has passed each one's watermark (so the sync's
    lag is waited for about once, and both servers work at the same time); twice as many
    compare, as they mostly wait."""
    progress = _Progress(store, len(chunks), report)
    threads = max(1, parallel)

    def finish(chunk: Chunk, read: Future[SourceRead]) -> ChunkResult:
        result = verifier.finish(chunk, read.result())
        progress.add(result)
        return result
    try:
        with ThreadPoolExecutor(threads, thread_name_prefix="sdk-verify-source") as sources, \
                ThreadPoolExecutor(threads * 2, thread_name_prefix="sdk-verify-target"
                                   ) as targets:
            reads = [sources.submit(verifier.read_source, chunk) for chunk in chunks]
            done = [targets.submit(finish, chunk, read)
                    for chunk, read in zip(chunks, reads, strict=True)]
            try:
                results = [future.result() for future in done]
            except BaseException:
                for pending in reads:
                    pending.cancel()
                for waiting in done:
                    waiting.cancel()
                raise
    except BaseException:
        progress.finish("failed")
        raise
    progress.finish("different" if any(r.differences for r in results) else "equal")
    return results


def _repair(outcome: Outcome, verifier: Verifier, store: StateStore, state_dir: str,
            job: VerifyJob, report: Callable[[dict[str, Any]], None]) -> Outcome:
    """Ask the sync to read again the rows found differing (sdk snapshot), wait until it did,
    and compare those chunks again."""
    wrong = [r for r in outcome.results if r.differences]
    by_table: dict[str, list[ChunkResult]] = {}
    for r in wrong:
        by_table.setdefault(str(r.chunk.table.table), []).append(r)
    asked = []
    for name, results in by_table.items():
        where = repair_condition(results)
        request = request_snapshot(state_dir, name, where, job.source)
        log.info("verify: %s read again (%s)", name, where or "whole table")
        asked.append(request.id)
    _wait_served(state_dir, asked, job.wait_seconds)
    if verifier.wait_past is not None:
        verifier.wait_past(verifier.source.offset())
    again = _run(verifier, [r.chunk for r in wrong], store, job.parallel, report)
    fixed = {id(r.chunk) for r in again}
    kept = [r for r in outcome.results if id(r.chunk) not in fixed]
    return replace(outcome, results=kept + again, repaired=asked)


def _wait_served(state_dir: str, ids: Sequence[str], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        states = {r.id: r.state for r in list_requests(state_dir) if r.id in ids}
        refused = [f"{i}: {s}" for i, s in states.items() if s.startswith("refused")]
        if refused:
            raise VerifyError("the sync refused to read the differing rows again: "
                              + "; ".join(refused))
        if all(states.get(i) == "done" for i in ids):
            return
        if time.monotonic() > deadline:
            raise VerifyError(f"the sync did not read the differing rows again within "
                              f"{seconds:.0f} s (sdk snapshot --list shows the requests)")
        time.sleep(0.5)


def repair_condition(results: Sequence[ChunkResult]) -> str | None:
    """The ``--where`` reading again the rows of ``results``' differences: their keys, or the
    narrowed key ranges past :data:`REPAIR_KEYS`; None (the whole table) when a row only the
    target has is among them (a condition's read does not delete it; a whole table's does),
    or a key cannot be written as a plain literal."""
    table = results[0].chunk.table
    differences = [d for r in results for d in r.differences]
    if any(d.kind == "extra" for d in differences):
        return None
    columns = table.key
    if not all(c.isidentifier() and c.isascii() for c in columns):
        return None
    lhs = columns[0] if len(columns) == 1 else f"({', '.join(columns)})"
    if len(differences) <= REPAIR_KEYS:
        keys = [_literals(d.key) for d in differences]
        if any(k is None for k in keys):
            return None
        tuples = [k if len(columns) == 1 else f"({k})" for k in keys if k is not None]
        return f"{lhs} IN ({', '.join(tuples)})"
    parts = []
    for lo, hi in (span for r in results for span in r.ranges):
        bounds = []
        for key, op in ((lo, ">="), (hi, "<")):
            if key is None:
                continue
            text = _literals(key)
            if text is None:
                return None
            bounds.append(f"{lhs} {op} {text if len(columns) == 1 else f'({text})'}")
        parts.append("(" + " AND ".join(bounds or ["1 = 1"]) + ")")
    return " OR ".join(parts)


def _literals(key: Key) -> str | None:
    """A key's values as SQL literals, comma separated; None for a value with no plain one."""
    out = []
    for value in key:
        if isinstance(value, bool) or value is None:
            return None
        if isinstance(value, int | float | decimal.Decimal):
            out.append(str(value))
        elif isinstance(value, str | dt.date | dt.time):
            text = value if isinstance(value, str) else value.isoformat(sep=" ") \
                if isinstance(value, dt.datetime) else value.isoformat()
            out.append("'" + text.replace("'", "''") + "'")
        else:
            return None
    return ", ".join(out)


def write_report(outcome: Outcome, path: str) -> None:
    """Write the findings as JSON to ``path``."""
    with open(path, "w") as file:
        json.dump(outcome.to_json(), file, indent=1, default=str)


def default_report_path(checkpoint: str) -> str:
    """Where the report goes by default: ``verify-<UTC time>.json`` in the state directory."""
    state_dir, _ = checkpoint_paths(checkpoint)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return os.path.join(state_dir, f"verify-{stamp}.json") if "://" not in state_dir \
        else f"verify-{stamp}.json"
