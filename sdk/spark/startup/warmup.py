"""Spark's Python workers started, and loaded with what a sync's tasks import, while the driver
is still starting the stream.

Spark forks a task's Python worker when the task needs one, and the worker imports the engine,
the dialects, pyarrow and pandas (pyarrow pulls pandas in on its first conversion) before it
reads a row, and the first snapshot tasks only start once their workers have.
Spark keeps a worker for the next task (``spark.python.worker.reuse``) of any job whose Python
runner has the same environment: a ``mapInArrow`` job's workers serve the ``cdc`` source's
tasks, a plain RDD job's do not. So a tiny ``mapInArrow`` job run beside the stream's
start-up leaves workers that have all of it imported, and the stream's first tasks take
those. It warms one worker per core but one (:func:`warm_tasks`): the stream's start-up is a
chain of Python processes of its own (the source made, its runner, the read planned) that
the warm-up would otherwise compete with for every core, and its tasks hold every task slot
until they are done. It is a ``mapInArrow`` rather than a Python data source read
because its tasks start sooner: a read first runs Python workers of its own to create the
source and plan its partitions, and would hold the first tasks back (the figures are in
docs/operations.md, "Measured costs").

The job is best effort: a failure only means the tasks import as they would have.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any

import pyarrow as pa

log = logging.getLogger(__name__)

MODULES = (
    "sdk.spark.driver.source", "sdk.spark.executor.reads", "sdk.job.target", "pyarrow.compute",
)
"""What every task of a sync imports, besides its dialects."""


def load_imports(dialects: Sequence[str], idle: Callable[[], bool] = lambda: True) -> None:
    """What a task would do before its first rows, done ahead: :func:`import_engine`, then
    :func:`load_dialects`."""
    import_engine()
    load_dialects(dialects, idle)


def import_engine() -> None:
    """Import :data:`MODULES`, what every task imports whatever its dialects."""
    import importlib

    for module in MODULES:
        importlib.import_module(module)


def load_dialects(dialects: Sequence[str], idle: Callable[[], bool] = lambda: True) -> None:
    """Import the plugins of ``dialects`` (names) and their drivers (``DialectInfo.drivers``,
    which a plugin imports only when it first connects: ~0.1-0.2 s each), freeze it all out of
    the collector's sight, and convert once (pyarrow's first conversion imports pandas,
    ~0.2 s): here if ``idle()`` says no work waits yet, else on a thread of its own while the
    work starts (a task's first rows wait on its connections meanwhile). A plugin or driver
    that fails to import is left for the task, whose own import says what is wrong."""
    import contextlib
    import importlib

    from ...dialect.manager import get_dialect
    from ..executor.collector import freeze_imports

    for name in dialects:
        with contextlib.suppress(Exception):
            for module in get_dialect(name).info.drivers:
                with contextlib.suppress(Exception):
                    importlib.import_module(module)
    freeze_imports()
    if idle():
        _convert_once()
    else:
        threading.Thread(target=_convert_once, name="sdk-warm-conversion", daemon=True).start()


def _convert_once() -> None:
    pa.array([0]).cast(pa.string())


def load_worker(dialects: Sequence[str], batches: Iterator[pa.RecordBatch]
                ) -> Iterator[pa.RecordBatch]:
    """A warm-up task: :func:`load_imports`, then yield the worker's process id."""
    import os

    for _ in batches:
        pass
    load_imports(dialects)
    yield pa.RecordBatch.from_pydict({"pid": [os.getpid()]},
                                     schema=pa.schema([("pid", pa.int64())]))


def warm_tasks(cores: int) -> int:
    """How many workers to warm on ``cores`` task slots: all but one, at least one (warming
    every core slowed the start-up it competes with: docs/operations.md, "Measured costs")."""
    return max(1, cores - 1)


def warm(spark: Any, tasks: int, dialects: Sequence[str]) -> set[int]:
    """Run the warm-up job, ``tasks`` tasks at once; the process ids of the workers it left."""
    rows = spark.range(0, tasks, 1, tasks) \
        .mapInArrow(partial(load_worker, list(dialects)), "pid long").collect()
    return {row.pid for row in rows}


def warm_workers(spark: Any, tasks: int, dialects: Sequence[str]) -> threading.Thread:
    """Run :func:`warm` on a daemon thread and return the thread."""

    def run() -> None:
        try:
            warm(spark, tasks, dialects)
        except Exception as exc:  # only a missed head start
            log.debug("warming Spark's Python workers failed: %s", exc)

    thread = threading.Thread(target=run, name="sdk-warm-workers", daemon=True)
    thread.start()
    return thread
