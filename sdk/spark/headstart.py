"""The head start: a sync's first micro-batches run by the driver while Spark starts.

On a local master the JVM, the Spark session and the stream take some 5 s before Spark runs a
task (docs/operations.md, "Measured costs"). Meanwhile the driver plans batches with the
stream's own reader (:class:`~sdk.spark.source.CdcStreamReader`) and runs their partitions
with the tasks' own code, in Python processes of its own (:class:`Worker`, one per core): the
same reads, stages and ledger-recorded loads. It
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
import os
import queue
import re
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark import cloudpickle

from ..dialect.errors import ConfigurationError, RetriableError
from ..job.failures import task_error
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
_LOCAL = re.compile(r"local(\[(\*|\d+)(,\d+)?\])?$")


def local_cores(master: str) -> int | None:
    """The task slots of a local master (``local``, ``local[N]``, ``local[*]``), else None."""
    found = _LOCAL.match(master.strip())
    if found is None:
        return None
    slots = found.group(2)
    if slots is None:
        return 1
    if slots != "*":
        return int(slots)
    affinity = getattr(os, "sched_getaffinity", None)  # Linux: the cores this process may use
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


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


def wanted(setting: str | None, until: str) -> bool:
    """Whether the ``head-start`` setting asks for a head start on a sync run ``until``:
    ``auto`` for a bounded one, ``on`` always, ``off`` never; None (not set): the
    environment's ``SDK_HEAD_START`` (``auto``, ``on``/``1``, ``off``/``0``), else ``auto``."""
    if setting is None:
        from ..job.spec import HEAD_START

        given = os.environ.get("SDK_HEAD_START", "auto")
        try:
            setting = HEAD_START(given)
        except ValueError:
            raise ConfigurationError(f"SDK_HEAD_START takes auto, on or off, not {given!r}: "
                                     "set it to one of them or unset it") from None
    return setting == "on" or (setting == "auto" and until in ("snapshot", "caught-up"))


def possible(master: str, chained: bool) -> bool:
    """Whether a sync can have a head start: a chained one, on a local master, on Linux."""
    return chained and local_cores(master) is not None and sys.platform == "linux"


def ends_without_spark(setting: str | None, master: str, until: str, chained: bool) -> bool:
    """Whether a sync may end without starting Spark: a bounded one (``until`` snapshot or
    caught-up) with a head start, which runs it whole (Spark starts only if it fails)."""
    return until in ("snapshot", "caught-up") and wanted(setting, until) and \
        possible(master, chained)


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
        ``workers``: processes started already (:func:`start_workers`), else made here."""
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
            self._workers = self._workers or [Worker() for _ in range(self.cores)]
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
        for partition in reader.partitions(start, end):
            todo.put(partition)
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


STOPPING = ("sync: stopping once the batch in flight commits; signal again to stop now (a "
            "restart resumes exactly)")


def start_workers(cores: int, dialects: Sequence[str]) -> list[Worker]:
    """``cores`` worker processes for a head start, started before the sync is prepared so
    their imports (the engine's, and the ``dialects``' plugins) run meanwhile."""
    return [Worker(dialects) for _ in range(cores)]


class Worker:
    """A Python process of its own (``python -m sdk.spark.headstart``) running partitions
    of the reader it is given (:meth:`load`) as Spark's Python workers run tasks; it imports
    the plugins of ``dialects`` (names) while it waits for it, and dies with the thread that
    made it (so with the driver)."""

    def __init__(self, dialects: Sequence[str] = ()) -> None:
        import subprocess
        import sys

        to_worker, self._in = os.pipe()
        self._out, from_worker = os.pipe()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sdk.spark.headstart", str(to_worker), str(from_worker),
             *dialects], pass_fds=(to_worker, from_worker), stdin=subprocess.DEVNULL)
        os.close(to_worker)
        os.close(from_worker)
        self._send = os.fdopen(self._in, "wb")
        self._receive = os.fdopen(self._out, "rb")
        self._reader: bytes | None = None  # sent with its first partition

    def load(self, reader: CdcStreamReader) -> None:
        """The reader whose partitions it runs (sent with the first one)."""
        self._reader = _pickled(reader)

    def serve(self, todo: queue.SimpleQueue[Any], results: queue.SimpleQueue[tuple[bool, Any]]
              ) -> None:
        """Run partitions from ``todo`` until it is empty, each outcome into ``results``."""
        while True:
            try:
                partition = todo.get_nowait()
            except queue.Empty:
                return
            try:
                if self._reader is not None:  # it reads it once its imports are done
                    _write(self._send, self._reader)
                    self._reader = None
                _write(self._send, _pickled(partition))
                results.put(cloudpickle.loads(_read(self._receive)))
            except (OSError, EOFError, ValueError) as exc:
                results.put((False, f"worker {self.process.pid} lost: {exc}"))
                return

    def kill(self) -> None:
        self.process.kill()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._send.close()  # its end of input: it exits
        with contextlib.suppress(OSError):
            self._receive.close()
        try:
            self.process.wait(timeout=5)
        except Exception:
            self.process.kill()


def _write(stream: Any, data: bytes) -> None:
    stream.write(len(data).to_bytes(8, "big") + data)
    stream.flush()


def _read(stream: Any) -> bytes:
    size = stream.read(8)
    if len(size) < 8:
        raise EOFError("the other side closed")
    data: bytes = stream.read(int.from_bytes(size, "big"))
    return data


def _pickled(value: Any) -> bytes:
    """``value`` as Spark pickles a task's (its reader holds closures plain pickle refuses)."""
    return bytes(cloudpickle.dumps(value))  # type: ignore[no-untyped-call]


def _serve(read_fd: int, write_fd: int, dialects: Sequence[str]) -> None:
    """A worker's life: die with the driver's thread that started it, import the
    ``dialects``' plugins, load the reader, then run each partition sent until the input
    ends, answering (ok, report rows or error)."""
    import ctypes
    import signal
    import traceback

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver decides when to stop
    from ..dialect.manager import default_manager

    for name in dialects:  # what the reader's unpickling would import, imported meanwhile
        with contextlib.suppress(Exception):  # its own import, if any, says what is wrong
            default_manager().get(name)
    with os.fdopen(read_fd, "rb") as source, os.fdopen(write_fd, "wb") as sink:
        try:
            reader = cloudpickle.loads(_read(source))
        except EOFError:  # closed before it was given a partition (fewer than the workers)
            return
        while True:
            try:
                partition = cloudpickle.loads(_read(source))
            except EOFError:
                return
            try:
                rows: list[tuple[Any, ...]] = []
                for batch in reader.read(partition):
                    rows += [tuple(r.values()) for r in batch.to_pylist()]
                outcome: tuple[bool, Any] = (True, rows)
            except Exception as exc:
                outcome = (False, "".join(traceback.format_exception_only(exc)).strip())
            _write(sink, _pickled(outcome))


if __name__ == "__main__":
    import sys

    _serve(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:])
