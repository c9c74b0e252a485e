"""The head start: a sync's first micro-batches run by the driver while Spark starts.

On a local master the JVM, the Spark session and the stream take some 5 s before Spark runs a
task (docs/operations.md, "Measured costs"). Meanwhile the driver plans batches with the
stream's own reader (:class:`~sdk.spark.source.CdcStreamReader`) and runs their partitions
with the tasks' own code, in Python processes of its own (:class:`.headworkers.Worker`, one
per core): the same reads, stages and ledger-recorded loads. It
records how far it got in :data:`HEAD_START_FILE`; the stream's source then goes from where
Spark's checkpoint stands to the last batch the driver completed in one step without tasks,
and runs a batch the driver left unfinished as Spark replays one (staged splits served from
their stage, loads the target's ledger holds skipped). Like Spark's own offset log, the record
names a batch before any of its tasks run, so a driver that dies mid-batch leaves a batch the
stream replays, never rows the checkpoint does not know of.

The driver holds :data:`HEAD_START_LOCK` while it runs; the stream's source waits for it before
it reads the record. A batch it completes is committed for the stream (the source's log
acknowledged, older states dropped but the one Spark's checkpoint stands at); the stream and a
failover's relocation resume from it (:func:`resumed_state`). The ``head-start`` setting (or
``SDK_HEAD_START``) asks for one: ``auto`` gives a bounded sync one, which it runs whole
without starting Spark; beside a JVM starting, on two cores, the JVM takes the CPU it would
use (docs/operations.md has the figures). Only a chained sync (its tasks apply to the target)
on a local master on Linux with a local checkpoint gets one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..dialect.errors import RetriableError
from ..job.failures import task_error
from .headworkers import Worker
from .reads import gc_paused

if TYPE_CHECKING:
    from .source import CdcStreamReader
    from .statestore import StateStore

log = logging.getLogger(__name__)

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


def _base(record: dict[str, Any]) -> str | None:
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
    base = _base(record)
    if committed == base or (committed is None and record.get("initial")):
        return str(record["done"]["state"])
    return committed


def next_step(record: dict[str, Any] | None, start: Offset) -> Offset | None:
    """The end of the stream's next batch from ``start`` as the record gives it: the last
    completed state (a batch without tasks), then the batch left unfinished; None past them."""
    if not record:
        return None
    done, planned = record.get("done"), record.get("planned")
    if start["state"] == _base(record):
        return done or planned
    if done and planned and start["state"] == done["state"]:
        return planned  # type: ignore[no-any-return]
    return None


def skips(record: dict[str, Any] | None, start: Offset, end: Offset) -> bool:
    """Whether the batch ``start`` -> ``end`` is the one the driver completed: no tasks."""
    return record is not None and start["state"] == _base(record) and \
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
        (last is not None and last["state"] == _base(record))


def wait_for_driver(store: StateStore) -> dict[str, Any] | None:
    """The record, once a driver running a head start on this state directory has stopped."""
    lock = Path(store.path(HEAD_START_LOCK))
    if lock.is_file():
        import fcntl

        with open(lock, "rb") as held:
            fcntl.flock(held, fcntl.LOCK_SH)  # released when the file closes
    record = store.read_json(HEAD_START_FILE)
    return record if isinstance(record, dict) else None


class HeadStart:
    """Runs the stream's first batches on the driver until it hands over to the stream
    (:meth:`hand_over`), the user stops the sync (``stop``: after the batch in flight;
    ``now``: at once, the batch left to a replay), nothing is left to do or ``until`` is
    reached; ``reports`` takes each task's report rows."""

    def __init__(self, reader: Callable[[], CdcStreamReader], store: StateStore,
                 last: Offset | None, cores: int, until: str,
                 reports: Callable[[list[tuple[Any, ...]]], None],
                 progress: Callable[[], None], stop: threading.Event,
                 now: threading.Event, previous: dict[str, Any] | None = None,
                 workers: list[Worker] | None = None) -> None:
        """``previous``: a record the stream has taken up nothing of, to go on from;
        ``workers``: processes started already (:func:`.headworkers.early_workers`), else
        made here."""
        self.make_reader, self.store, self.last, self.cores = reader, store, last, cores
        self.previous = previous
        self.reached = False
        """Whether it ran the sync to ``until`` (snapshot done, or caught up)."""
        self.until, self.reports, self.progress = until, reports, progress
        self.stop, self.now = stop, now
        self.reader: CdcStreamReader | None = None
        self._handover = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock: Any = None
        self._workers: list[Worker] = workers or []
        self.batches = 0
        self.warned = False
        """Whether it told the user it stops once its batch is done."""

    def start(self) -> None:
        """Take the lock (before the stream can look) and start the driver's batches."""
        import fcntl

        self._lock = open(self.store.path(HEAD_START_LOCK), "wb")  # noqa: SIM115
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        self._thread = threading.Thread(target=self._run, name="sdk-head-start", daemon=True)
        self._thread.start()

    def hand_over(self) -> None:
        """Stop after the batch in flight: the stream starts (it waits for the lock)."""
        self._handover.set()

    def join(self) -> None:
        self._handover.set()
        self.wait()

    def wait(self) -> None:
        """Wait until it ends by itself (or is stopped)."""
        if self._thread is not None:
            self._thread.join()

    def _ended(self) -> bool:
        return self._handover.is_set() or self.stop.is_set()

    def _run(self) -> None:
        try:
            self.reader = self.make_reader()  # made here: it resolves the source's tables
            self.reader.runs_head_start()
            # the workers start (their imports) while the first batch is planned, unless
            # started before the sync was prepared
            self._workers = self._workers or [Worker(_dialects(self.reader))
                                              for _ in range(self.cores)]
            for worker in self._workers:
                worker.load(self.reader)
            with gc_paused():
                self._batches(self.reader)
        except Exception as exc:  # the stream meets it again and says so, or goes on past it
            log.debug("head start stopped: %s", exc, exc_info=True)
            found = task_error(str(exc))
            if isinstance(found, RetriableError):  # a passing fault: say what it was
                log.warning("sync: %s; restarting from the checkpoint on Spark", found)
        finally:
            for worker in self._workers:
                worker.close()
            if self.reader is not None:
                with contextlib.suppress(Exception):
                    self.reader.stop()
            self._lock.close()  # releases it

    def _batches(self, reader: CdcStreamReader) -> None:
        record: dict[str, Any] = {"start": None, "initial": None, "done": None,
                                  "planned": None}
        if self.until == "caught-up":
            reader.prepareForTriggerAvailableNow()
        planned = None
        if self.previous is not None:  # go on from a record no stream took up
            record = dict(self.previous)
            start = record["done"] or record["initial"] or self.last
            assert start is not None  # untouched(): the record's initial or Spark's last
            planned = record["planned"]
        elif self.last is None:
            start = record["initial"] = reader.initialOffset()
        else:
            start, record["start"] = self.last, self.last["state"]
        while not self._ended():
            end = planned or reader.latestOffset(start, None)  # type: ignore[arg-type]
            planned = None
            if end == start:
                self.reached = self.until == "caught-up"
                return
            record["planned"] = end
            self.store.write_json(record, HEAD_START_FILE)  # before any of its tasks runs
            if self.until == "snapshot" and end["phase"] != "snapshot":
                self.reached = True
                return  # the snapshot is done: the stream, when one runs, runs this batch
            if not self._run_batch(reader, start, end):
                return  # stopped at once: the stream replays it
            record["done"], record["planned"] = end, None
            self.store.write_json(record, HEAD_START_FILE)
            reader.settle(end, keep={_base(record) or ""})  # as Spark's commit, the state
            # its checkpoint stands at kept: the stream steps from there to this batch's end
            self.batches += 1
            self.progress()
            start = end

    def _run_batch(self, reader: CdcStreamReader, start: Offset, end: Offset) -> bool:
        """The batch's partitions, ``cores`` at a time, in processes of their own as Spark's
        Python workers (threads would share one interpreter's lock; a fork of the driver,
        whose other threads hold locks, can hang); False when stopped at once."""
        todo: queue.SimpleQueue[Any] = queue.SimpleQueue()
        partitions = reader.partitions(start, end)
        for partition in partitions:
            todo.put(partition)
        while len(self._workers) < min(self.cores, len(partitions)):  # started with fewer
            worker = Worker(_dialects(reader))
            worker.load(reader)
            self._workers.append(worker)
        results: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()
        feeders = [threading.Thread(target=worker.serve, args=(todo, results), daemon=True)
                   for worker in self._workers]
        for feeder in feeders:
            feeder.start()
        while any(feeder.is_alive() for feeder in feeders) or not results.empty():
            if self.now.is_set():
                for worker in self._workers:
                    worker.kill()  # the batch cut: the stream replays it
                return False
            if self.stop.is_set() and not self.warned:
                self.warned = True
                log.warning(STOPPING)
            self.progress()  # the splits staged so far (at the report interval)
            with contextlib.suppress(queue.Empty):
                ok, value = results.get(timeout=0.1)
                if not ok:
                    raise RuntimeError(f"a head start task failed: {value}")
                self.reports(value)
        return True


def _dialects(reader: CdcStreamReader) -> list[str]:
    """The dialects whose plugins and drivers a worker of ``reader`` imports ahead."""
    spec = reader.spec
    return [spec.dialect] + ([spec.target.dialect_name] if spec.target is not None else [])


STOPPING = ("sync: stopping once the batch in flight commits; signal again to stop now (a "
            "restart resumes exactly)")


