"""The Spark engine: the only part of sdk that imports pyspark.

``format("cdc")`` is registered automatically (the ``pyspark_cdc`` module); :func:`register`
does it by hand for a session that cannot see installed modules. Importing this package does
not import pyspark: the state store and the progress report are read without a Spark session
(``sdk status``); the data source is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .driver.source import CdcDataSource
    from .executor.envelope import split_tables
    from .executor.mirror import Mirror


def register(spark: Any) -> None:
    """Register the ``cdc`` format on ``spark`` explicitly."""
    from .driver.source import CdcDataSource

    spark.dataSource.register(CdcDataSource)


def progress(state_dir: str) -> dict[str, Any] | None:
    """The last progress report of the stream using ``state_dir``: phase, per-table splits
    done/estimated and rows (the splits of a snapshot batch still running counted as they are
    staged), rows per second, log position, head and whether it caught up."""
    from .state.engine_state import live_progress
    from .state.statestore import StateStore

    return live_progress(StateStore(state_dir))


def request_snapshot(state_dir: str, table: str, where: str | None = None,
                     source: str | None = None) -> str:
    """Ask the stream using ``state_dir`` (running or stopped) to read ``table`` again while
    it streams, only the rows meeting ``where`` (SQL on its columns) when given: a snapshot
    on demand, durable and served once (:mod:`.requests`). ``source``: the URL of the
    database the stream reads, where the table and the condition are checked first (one it
    refuses raises, nothing recorded). Returns the request's id."""
    from .driver.requests import request_snapshot as request

    return request(state_dir, table, where, source).id


def __getattr__(name: str) -> Any:
    """``CdcDataSource``, ``Mirror`` and ``split_tables`` import pyspark or pyarrow: loaded
    when first asked for."""
    if name == "CdcDataSource":
        from .driver.source import CdcDataSource

        return CdcDataSource
    if name == "Mirror":
        from .executor.mirror import Mirror

        return Mirror
    if name == "split_tables":
        from .executor.envelope import split_tables

        return split_tables
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CdcDataSource", "Mirror", "progress", "register", "request_snapshot", "split_tables"]
