"""What a Spark user writes instead of ``sdk sync`` to copy one table: a local SparkSession
with the JDBC drivers' jars, ``spark.read.jdbc`` partitioned on the key, ``df.write.jdbc``
appending into the target table (made beforehand). ``e2e_sync.py`` runs it as its own
process and times the whole command (Python and JVM start-up included), as it does sdk's.

    python benchmarks/_spark_jdbc.py < spec.json

The spec (JSON on stdin, so that no password shows in the process list): ``jars`` (list),
``source`` and ``target`` (each ``url``, ``table``, ``properties``: the JDBC connection
properties, user, password and driver included), ``lower``, ``upper`` (the key's min and max)
and ``partitions``.
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession


def main() -> None:
    spec = json.load(sys.stdin)
    spark = (SparkSession.builder.master("local[*]").appName("jdbc-copy")
             .config("spark.jars", ",".join(spec["jars"]))
             .config("spark.ui.enabled", "false")
             # one time zone end to end, so TIMESTAMP values keep their wall-clock text
             .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    source, target = spec["source"], spec["target"]
    df = spark.read.jdbc(source["url"], source["table"], column="id",
                         lowerBound=spec["lower"], upperBound=spec["upper"],
                         numPartitions=spec["partitions"],
                         properties={**source["properties"], "fetchsize": "10000"})
    df.write.jdbc(target["url"], target["table"], mode="append",
                  properties={**target["properties"], "batchsize": "10000"})
    spark.stop()


if __name__ == "__main__":
    main()
