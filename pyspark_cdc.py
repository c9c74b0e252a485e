"""Lets Spark find the ``cdc`` data source by itself: PySpark registers the ``DefaultSource``
of every installed top-level module named ``pyspark_*``."""

from sdk.spark import CdcDataSource as DefaultSource

__all__ = ["DefaultSource"]
