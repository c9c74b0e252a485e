"""The Spark engine: the only part of sdk that imports pyspark.

``format("cdc")`` is registered automatically (the ``pyspark_cdc`` module); :func:`register`
does it by hand for a session that cannot see installed modules.
"""

from __future__ import annotations

from typing import Any

from .source import CdcDataSource


def register(spark: Any) -> None:
    """Register the ``cdc`` format on ``spark`` explicitly."""
    spark.dataSource.register(CdcDataSource)


__all__ = ["CdcDataSource", "register"]
