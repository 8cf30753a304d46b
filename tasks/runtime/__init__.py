"""The small runtime that composes tasks: registry, workflow files, engine, ledger, executors, CLI."""
