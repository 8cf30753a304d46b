"""The small runtime that composes tasks, in three layers, each importing only from those below it
(tests/test_house.py):

- ``core``: what the tasks build on: the task contract, units and their memory budget, the ledger,
  locks, provenance, resume, run folders, workflow variables and positions;
- ``execution``: running steps: the engine, executors and the batch schedulers' registry, worker
  pools, workflow files, for-each runs, dry-run sizing, the task registry;
- ``front``: what a user calls: the command line, its commands, ``check``, the manual's pages,
  sample data, job scripts for ``submit``."""
