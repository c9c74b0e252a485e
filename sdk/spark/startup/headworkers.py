"""The head start's worker processes, and whether a sync may have a head start: light to
import (no pyspark, no engine), so ``sdk sync`` starts the workers, whose own imports take about
half a second, before it imports the engine (:mod:`.headstart` runs them); forked then, they
also skip an interpreter's start.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...dialect.errors import ConfigurationError

if TYPE_CHECKING:
    from ...job.spec import SyncSettings
    from ..driver.source import CdcStreamReader

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


def wanted(setting: str | None, until: str) -> bool:
    """Whether the ``head-start`` setting asks for a head start on a sync run ``until``:
    ``auto`` for a bounded one, ``on`` always, ``off`` never; None (not set): the
    environment's ``SDK_HEAD_START`` (``auto``, ``on``/``1``, ``off``/``0``), else ``auto``."""
    if setting is None:
        from ...job.spec import HEAD_START

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


def head_start_cores(settings: SyncSettings) -> int | None:
    """The cores of a head start when the settings allow one (the ``head-start`` setting, a
    local master on Linux, a local checkpoint), else None; the mirror must be chained too."""
    cores = local_cores(settings.master)
    if cores is None or not wanted(settings.head_start, settings.until) or \
            not possible(settings.master, True) or "://" in settings.checkpoint:
        return None
    return cores


def early_workers(settings: SyncSettings) -> list[Worker]:
    """The head start's worker processes, started before the sync is prepared (and before
    ``sdk sync`` imports the engine) so that their imports run meanwhile, when the settings
    alone allow a head start (:func:`.sync._head_start` decides)."""
    from ...dialect.config import ConnectionConfig
    from ...dialect.manager import default_manager

    cores = head_start_cores(settings)
    if cores is None or settings.target is None or settings.changes is not None:
        return []
    # started before the dialects are looked up (the plugins' entry points, ~0.2 s here)
    workers = start_workers(1 if reads_log(settings.checkpoint) else cores)
    names = []
    for url in (settings.source, settings.target):
        with contextlib.suppress(Exception):  # preparing the sync says what is wrong with it
            scheme = ConnectionConfig.from_url(url).dialect
            names.append(default_manager().name_for_scheme(scheme))
    for worker in workers:
        worker.tell(names)
    return workers


def reads_log(checkpoint: str) -> bool:
    """Whether the last progress report of the sync at ``checkpoint`` says it reads the log
    (its snapshot done): its batches then run one partition each (a table read again gets
    more workers when the head start meets it), and one worker imports faster than several
    that share the cores with the driver."""
    import json
    from pathlib import Path

    from ...job.spec import checkpoint_paths

    try:
        state, _ = checkpoint_paths(checkpoint)
        # engine_state.PROGRESS_FILE, named here: importing that module pulls the engine in
        report = json.loads(Path(state, "progress.json").read_text())
    except Exception:  # no report yet, or one preparing the sync refuses with a message
        return False
    return isinstance(report, dict) and report.get("phase") == "log"


def discard(workers: Sequence[Worker]) -> None:
    """Stop worker processes the sync will not use."""
    for worker in workers:
        worker.close()


def start_workers(cores: int) -> list[Worker]:
    """``cores`` worker processes for a head start, started before the sync is prepared so
    their imports (the engine's; the dialects' once :meth:`Worker.tell` names them) run
    meanwhile."""
    return [Worker(None) for _ in range(cores)]


class Worker:
    """A Python process of its own (forked from the driver while :func:`_may_fork` allows it,
    else ``python -m sdk.spark.startup.headworkers``) running partitions of the reader it is given
    (:meth:`load`) as Spark's Python workers run tasks; it imports the engine, then the
    plugins and drivers of ``dialects`` (names; None: told later, by :meth:`tell`) while it
    waits for the reader, and dies with the thread that made it (so with the driver)."""

    def __init__(self, dialects: Sequence[str] | None = ()) -> None:
        import subprocess

        to_worker, self._in = os.pipe()
        self._out, from_worker = os.pipe()
        forked = _forked(to_worker, from_worker) if _may_fork() else None
        self.process: subprocess.Popen[bytes] | _Forked = forked or subprocess.Popen(
            [sys.executable, "-m", "sdk.spark.startup.headworkers", str(to_worker),
             str(from_worker)],
            pass_fds=(to_worker, from_worker), stdin=subprocess.DEVNULL)
        os.close(to_worker)
        os.close(from_worker)
        self._send = os.fdopen(self._in, "wb")
        self._receive = os.fdopen(self._out, "rb")
        self._reader: bytes | None = None  # sent with its first partition
        if dialects is not None:
            self.tell(dialects)

    def tell(self, dialects: Sequence[str]) -> None:
        """Name the dialects whose plugins and drivers it imports ahead (once, first)."""
        with contextlib.suppress(OSError):  # a worker lost: serve() says so
            _write(self._send, "\n".join(dialects).encode())

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
                results.put(_unpickled(_read(self._receive)))
            except (OSError, EOFError, ValueError) as exc:
                results.put((False, f"worker {self.process.pid} lost: {exc}"))
                return

    def kill(self) -> None:
        self.process.kill()

    def close(self) -> None:
        """End it without waiting for its interpreter's exit (~0.1 s on the sync's own time):
        every partition it ran was answered after its work committed, and one it was still
        running is replayed, as a killed task's is."""
        with contextlib.suppress(OSError):
            self._send.close()
        with contextlib.suppress(OSError):
            self._receive.close()
        self.process.kill()
        self.process.wait()


NAME = b"sdk-headworker"
"""A forked worker's process name (what ``ps`` and ``top`` show; its command line is the
driver's)."""

_THREADED = ("pyarrow", "numpy", "pyspark", "py4j")
"""Libraries that may run threads of their own once imported, which a fork does not copy (a
lock one of them held stays locked in the child)."""


def _may_fork() -> bool:
    """Whether a worker may be forked from this process: on Linux, while it runs one thread and
    has not imported a library that may run native ones (``sdk sync`` before it imports the
    engine)."""
    import threading

    return sys.platform == "linux" and threading.active_count() == 1 and \
        not any(name in sys.modules for name in _THREADED)


class _Forked:
    """A worker forked from the driver: what :class:`Worker` uses of a ``Popen``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    def wait(self) -> None:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


def _forked(to_worker: int, from_worker: int) -> _Forked | None:
    """A worker forked from this process (:func:`_may_fork`), serving on the pipe ends
    ``to_worker`` and ``from_worker``: it starts without an interpreter's start-up and with
    what the driver imported so far, ~0.07 s sooner than a new interpreter; None if the
    system refuses a fork. It keeps no other file of the driver's (another worker's pipe left
    open would hide that worker's end of input) and never returns into the driver's code."""
    import ctypes
    import gc

    for stream in (sys.stdout, sys.stderr):  # else what they buffer is written twice
        stream.flush()
    try:
        pid = os.fork()
    except OSError:
        return None
    if pid:
        return _Forked(pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver decides when to stop
    code = 1
    try:
        # the driver's objects are never collected here: a file object among them would
        # close its descriptor's number, which this process may have reused by then
        gc.freeze()
        kept = {1, 2, to_worker, from_worker}
        for name in os.listdir("/proc/self/fd"):
            if int(name) not in kept:
                with contextlib.suppress(OSError):  # the listing's own, closed already
                    os.close(int(name))
        os.open(os.devnull, os.O_RDONLY)  # descriptor 0, as a started worker's: no terminal
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(15, NAME)  # PR_SET_NAME
        _serve(to_worker, from_worker)
        code = 0
    except Exception:
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)  # not the driver's exit handlers, nor its open files' flushes


def _write(stream: Any, data: bytes) -> None:
    stream.write(len(data).to_bytes(8, "big") + data)
    stream.flush()


def _read(stream: Any) -> bytes:
    size = stream.read(8)
    if len(size) < 8:
        raise EOFError("the other side closed")
    data: bytes = stream.read(int.from_bytes(size, "big"))
    return data


def _exactly(fd: int, size: int) -> bytes:
    """``size`` bytes of ``fd``, read unbuffered (nothing of the next message is taken)."""
    data = b""
    while len(data) < size:
        more = os.read(fd, size - len(data))
        if not more:
            raise EOFError("the other side closed")
        data += more
    return data


def _pickled(value: Any) -> bytes:
    """``value`` as Spark pickles a task's (its reader holds closures plain pickle refuses)."""
    from pyspark import cloudpickle

    return bytes(cloudpickle.dumps(value))  # type: ignore[no-untyped-call]


def _unpickled(data: bytes) -> Any:
    from pyspark import cloudpickle

    return cloudpickle.loads(data)


def _serve(read_fd: int, write_fd: int) -> None:
    """A worker's life: die with the driver's thread that started it, import the engine,
    then the plugins and drivers of the dialects it is told, load the reader, then run each
    partition sent until the input ends, answering (ok, report rows or error)."""
    import ctypes
    import select
    import signal
    import traceback

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver decides when to stop
    from .warmup import import_engine, load_dialects

    import_engine()  # what the reader's unpickling and its first rows import
    with contextlib.suppress(EOFError):  # else closed before it was told (a failed start)
        named = _exactly(read_fd, int.from_bytes(_exactly(read_fd, 8), "big"))
        # the conversion's warm-up only if the reader has not come yet
        load_dialects([name for name in named.decode().split("\n") if name],
                      idle=lambda: not select.select([read_fd], [], [], 0)[0])
    with os.fdopen(read_fd, "rb") as source, os.fdopen(write_fd, "wb") as sink:
        try:
            reader = _unpickled(_read(source))
        except EOFError:  # closed before it was given a partition (fewer than the workers)
            return
        while True:
            try:
                partition = _unpickled(_read(source))
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
    _serve(int(sys.argv[1]), int(sys.argv[2]))
