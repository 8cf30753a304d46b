"""Batch schedulers behind one interface (base.py), one module each."""
from __future__ import annotations

from .base import Scheduler
from .htcondor import HTCondor
from .lsf import LSF
from .pbs import PBS
from .sge import SGE
from .slurm import SLURM

SCHEDULERS: dict[str, Scheduler] = {s.kind: s for s in (SLURM(), SGE(), PBS(), LSF(), HTCondor())}
BATCH_KINDS = tuple(SCHEDULERS)


def scheduler(kind: str) -> Scheduler:
    return SCHEDULERS[kind]
