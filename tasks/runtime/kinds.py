"""The executor kinds a workflow may name, apart from their settings (spec.py), so the command
line can offer them without importing pydantic."""
EXECUTOR_KINDS = ("auto", "local", "threads", "sync", "slurm", "sge", "pbs", "lsf", "htcondor", "address")
