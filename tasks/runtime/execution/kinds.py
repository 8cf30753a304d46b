"""The executor kinds a workflow may name, apart from their settings (spec.py), so the command
line can offer them without importing pydantic: the local ones, every registered batch scheduler
(schedulers/), and an existing dask scheduler's address."""
from .local_kinds import USER_KINDS
from .schedulers import BATCH_KINDS

LOCAL_KINDS = USER_KINDS  # auto, local, threads, sync (local_kinds.py)
EXECUTOR_KINDS = (*LOCAL_KINDS, *BATCH_KINDS, "address")
