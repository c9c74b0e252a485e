"""The Spark engine: the only part of sdk that imports pyspark.

``format("cdc")`` is registered automatically (the ``pyspark_cdc`` module); :func:`register`
does it by hand for a session that cannot see installed modules.
"""

from __future__ import annotations

from typing import Any

from .envelope import split_tables
from .source import CdcDataSource


def register(spark: Any) -> None:
    """Register the ``cdc`` format on ``spark`` explicitly."""
    spark.dataSource.register(CdcDataSource)



def progress(state_dir: str) -> dict[str, Any] | None:
    """The last progress report of the stream using ``state_dir``: phase, per-table splits
    done/estimated and rows, rows per second, log position, head and whether it caught up."""
    from .statestore import StateStore

    report: dict[str, Any] | None = StateStore(state_dir).read_json("progress.json")
    return report


__all__ = ["CdcDataSource", "progress", "register", "split_tables"]
