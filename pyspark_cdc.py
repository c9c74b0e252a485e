"""Lets Spark find the ``cdc`` data source by itself: PySpark registers the ``DefaultSource``
of every installed top-level module named ``pyspark_*``.

PySpark looks these modules up in a Python worker of its own the first time a session uses a
data source, one of the workers a sync's query waits for in turn; so this module imports no
more than PySpark's ``DataSource``, and the engine is imported where the source is made."""

from typing import Any

from pyspark.sql.datasource import DataSource


class DefaultSource(DataSource):
    """``format("cdc")``: makes the engine's :class:`sdk.spark.driver.source.CdcDataSource` (the
    lookup only asks this class its name; what Spark makes of it is the engine's source)."""

    @classmethod
    def name(cls) -> str:
        return "cdc"

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        from sdk.spark.driver.source import CdcDataSource

        return CdcDataSource(*args, **kwargs)


__all__ = ["DefaultSource"]
