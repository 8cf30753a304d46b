"""The executors that run on this machine, as data: one row per kind says where its units run and
how its workers are sized, so executors.py reads the row instead of testing the kind's name (batch
schedulers are the registry in schedulers/; ``address`` is a scheduler zarrmill did not start).
Adding a local kind is one row here (and, for a new way of running, one branch in
``Executor._start``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Runs = Literal["inline", "this process", "cluster"]


@dataclass(frozen=True)
class PoolKind:
    """``runs``: inline on the driver, on threads in this process (no dask), or on a dask
    ``LocalCluster``; ``processes``: the cluster's workers are processes (else threads of this
    process); ``one_worker``: one worker unless ``executor.workers`` says otherwise (else one per
    CPU); ``all_threads``: that worker has a thread per CPU; ``shares_memory``: the workers share
    this process's memory (its limit is the machine's, not a share of it); ``user``: a workflow may
    name it (``inprocess`` is what ``auto`` chooses, never named)."""

    name: str
    runs: Runs
    processes: bool = False
    one_worker: bool = False
    all_threads: bool = False
    shares_memory: bool = False
    user: bool = True


POOL_KINDS: dict[str, PoolKind] = {k.name: k for k in (
    PoolKind("auto", "cluster", processes=True),  # chooses one of the others per step (Executor.auto_choice)
    PoolKind("local", "cluster", processes=True),
    PoolKind("threads", "cluster", one_worker=True, all_threads=True),
    PoolKind("sync", "inline", one_worker=True),
    PoolKind("inprocess", "this process", shares_memory=True, user=False),
)}
USER_KINDS = tuple(name for name, kind in POOL_KINDS.items() if kind.user)


def pool_kind(name: str) -> PoolKind | None:
    """The row of a local kind; None for a batch scheduler or ``address``."""
    return POOL_KINDS.get(name)
