"""Spark's Python workers started, and loaded with what a sync's tasks import, while the driver
is still starting the stream.

Spark forks a task's Python worker when the task needs one, and the worker imports the engine,
the dialects, pyarrow and pandas (pyarrow pulls pandas in on its first conversion) before it
reads a row: ~0.6 s a worker, and the first snapshot tasks only start once their workers have.
Spark keeps a worker for the next task of any job (``spark.python.worker.reuse``), so a tiny
read of :class:`WarmSource`, one task per core, run beside the stream's start-up, leaves every
core a worker that has all of it imported; the stream's first tasks take those. Measured on a
1M-row PostgreSQL snapshot (2 cores): the first split started ~1 s sooner.

The read is best effort: a failure only means the tasks import as they would have.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

log = logging.getLogger(__name__)

MODULES = ("sdk.spark.source", "sdk.spark.reads", "sdk.target", "pyarrow.compute")
"""What every task of a sync imports, besides its dialects."""


class WarmSource(DataSource):
    """``format("sdk_warmup")``: one row per task, from a worker that imported
    :data:`MODULES` and the dialects of option ``dialects`` (comma-separated names)."""

    @classmethod
    def name(cls) -> str:
        return "sdk_warmup"

    def schema(self) -> str:
        return "pid int"

    def reader(self, schema: Any) -> DataSourceReader:
        names = [d for d in self.options.get("dialects", "").split(",") if d]
        return WarmReader(int(self.options.get("tasks", "1")), names)


class WarmReader(DataSourceReader):
    def __init__(self, tasks: int, dialects: Sequence[str]) -> None:
        self.tasks, self.dialects = tasks, list(dialects)

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(i) for i in range(self.tasks)]

    def read(self, partition: InputPartition) -> Iterator[tuple[int]]:
        import importlib
        import os

        import pyarrow as pa

        for module in MODULES:
            importlib.import_module(module)
        from ..dialects import get_dialect
        from .reads import freeze_imports

        for name in self.dialects:
            get_dialect(name)
        pa.array([0]).cast(pa.string())  # pyarrow's first conversion imports pandas
        freeze_imports()
        yield (os.getpid(),)


def warm_workers(spark: Any, tasks: int, dialects: Sequence[str]) -> threading.Thread:
    """Run the warm-up read on a daemon thread (one task per core) and return the thread."""
    spark.dataSource.register(WarmSource)

    def run() -> None:
        try:
            spark.read.format("sdk_warmup").option("tasks", str(tasks)) \
                .option("dialects", ",".join(dialects)).load().collect()
        except Exception as exc:  # only a missed head start
            log.debug("warming Spark's Python workers failed: %s", exc)

    thread = threading.Thread(target=run, name="sdk-warm-workers", daemon=True)
    thread.start()
    return thread
