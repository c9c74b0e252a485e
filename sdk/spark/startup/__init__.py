"""The start-up accelerators: what makes a short sync start fast (the head start read while
Spark starts, forked head-start workers, warmed Python workers, the JVM's class-data archive).

Optional: only the runtime glue (:mod:`sdk.spark.sync`, :mod:`sdk.spark.session`) imports
them; the driver, the executor and the state never do, and a sync without them is correct,
only slower to its first rows.
"""
