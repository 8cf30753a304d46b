"""Batch schedulers behind one interface (base.py), one module each: a module here that sets
``SCHEDULER`` is registered, and the rest of zarrmill (command line, workflow files, submit, worker
pools, the allocation a process runs in) reads the schedulers from ``SCHEDULERS`` only."""
from __future__ import annotations

import importlib
import pkgutil

from .base import Scheduler


def _registered() -> dict[str, Scheduler]:
    found = []
    for module in pkgutil.iter_modules(__path__):
        declared = getattr(importlib.import_module(f"{__name__}.{module.name}"), "SCHEDULER", None)
        if isinstance(declared, Scheduler):
            found.append(declared)
    return {s.kind: s for s in sorted(found, key=lambda s: (s.rank, s.kind))}


SCHEDULERS: dict[str, Scheduler] = _registered()
BATCH_KINDS = tuple(SCHEDULERS)
DEFAULT_BATCH_KIND = BATCH_KINDS[0]  # zarrmill submit, where the workflow names no scheduler


def scheduler(kind: str) -> Scheduler:
    return SCHEDULERS[kind]
