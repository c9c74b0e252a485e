"""The executor side: reading snapshot splits and log ranges in Spark's tasks, applying them
to the target (one apply path for the chained sync and the ``foreachBatch`` mirror), the
change envelope's Arrow form and the dead letters.
"""
