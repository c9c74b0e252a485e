"""Turning the multi-table envelope back into one typed DataFrame per table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ...dialect.types import Column, LogicalType, TableSchema
from .batches import spark_type

# How sdk.dialect.codec.encode_value tags values JSON has no type for.
_TAGS: dict[LogicalType, tuple[str, T.DataType]] = {
    LogicalType.DECIMAL: ("$decimal", T.StringType()),
    LogicalType.BINARY: ("$bytes", T.StringType()),
    LogicalType.DATE: ("$date", T.StringType()),
    LogicalType.TIME: ("$time", T.StringType()),
    LogicalType.TIMESTAMP: ("$datetime", T.StringType()),
    LogicalType.TIMESTAMP_TZ: ("$datetime", T.StringType()),
    LogicalType.INTERVAL: ("$interval", T.StringType()),
}


def _json_field(column: Column) -> T.StructField:
    tag = _TAGS.get(column.type)
    if tag is None:
        return T.StructField(column.name, spark_type(column))
    return T.StructField(column.name, T.StructType([T.StructField(tag[0], tag[1])]))


def _typed(value: SparkColumn, column: Column) -> SparkColumn:
    tag = _TAGS.get(column.type)
    if tag is None:
        return value
    raw = value.getField(tag[0])
    target = spark_type(column)
    if column.type is LogicalType.BINARY:
        return F.unbase64(raw)
    if column.type is LogicalType.TIMESTAMP:
        return F.to_timestamp_ntz(raw)
    if column.type is LogicalType.TIMESTAMP_TZ:
        return F.to_timestamp(raw)
    return raw.cast(target)


def split_tables(envelope: DataFrame, tables: Sequence[TableSchema]) -> dict[str, DataFrame]:
    """One DataFrame per table with the same columns as a single-table read (the table's typed
    columns, then ``_op``, ``_offset``, ``_commit_ts``, ``_seq``, ``_schema_version``). A
    delete carries its before image, or only its key columns when the log has no before
    image."""
    out: dict[str, DataFrame] = {}
    for table in tables:
        schema = T.StructType([_json_field(c) for c in table.columns])
        image = F.from_json(F.coalesce(F.col("after"), F.col("before")), schema)
        columns: list[Any] = [_typed(image.getField(c.name), c).alias(c.name)
                              for c in table.columns]
        columns += [F.col("op").alias("_op"), F.col("offset").alias("_offset"),
                    F.col("commit_ts").alias("_commit_ts"), F.col("seq").alias("_seq"),
                    F.col("schema_version").alias("_schema_version")]
        out[str(table.table)] = envelope.where(F.col("table") == str(table.table)) \
            .select(*columns)
    return out
