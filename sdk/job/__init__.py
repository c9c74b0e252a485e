"""One sync job, as its user describes it: options, tables, the source spec, the target it
writes, failures and metrics. Knows the dialects through their contract, and no Spark."""
