"""The head start: a sync's first micro-batches run by the driver while Spark starts.

On a local master the JVM, the Spark session and the stream take some 5 s before Spark runs a
task (docs/operations.md, "Measured costs"). Meanwhile the driver plans batches with the
stream's own reader (:class:`~sdk.spark.driver.source.CdcStreamReader`) and runs their partitions
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
failover's relocation resume from it (the record is :mod:`.handoff`'s). The ``head-start``
setting (or ``SDK_HEAD_START``) asks for one: ``auto`` gives a bounded sync one, which it runs
whole without starting Spark; beside a JVM starting, on two cores, the JVM takes the CPU it would
use (docs/operations.md has the figures). Only a chained sync (its tasks apply to the target)
on a local master on Linux with a local checkpoint gets one.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...dialect.errors import RetriableError
from ...job.failures import task_error
from ..executor.collector import gc_paused
from ..state.handoff import HEAD_START_FILE, HEAD_START_LOCK, Offset, base_state
from .headworkers import Worker

if TYPE_CHECKING:
    from ..driver.source import CdcStreamReader
    from ..state.statestore import StateStore

log = logging.getLogger(__name__)

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
            reader.settle(end, keep={base_state(record) or ""})  # as Spark's commit, the state
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


