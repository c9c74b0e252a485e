"""The driver side: the ``cdc`` data source Spark calls, its offsets, planning a micro-batch,
following the source's tables and serving snapshot requests (thin over :mod:`sdk.algorithm`).

It plans partitions the executor side reads, and keeps what it decided in the state below.
"""
