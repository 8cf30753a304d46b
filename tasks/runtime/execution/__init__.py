"""Running steps: the engine, executors, batch schedulers (one module each, in schedulers/), worker
pools, workflow files, for-each runs, dry-run sizing and the task registry."""
