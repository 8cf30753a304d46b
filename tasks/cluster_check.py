"""Run N units of CPU-busy no-op work, to check (and time) an executor or a batch scheduler's setup.

``zarrmill task cluster-check --set output=/scratch/check --set units=200 --set busy_ms=500
--executor KIND`` shows that jobs start, workers connect, units run and resume works, without
touching any data. Each unit reports the host and batch job it ran in."""
from __future__ import annotations

import json
import os
import re
import socket
import time
from pathlib import Path

from pydantic import Field

from .io.storage.atomic import atomic_write_json
from .runtime.core.contract import PlanContext, TaskParams
from .runtime.core.units import TypedUnit


# the manual's example for this task (its reference page; tests/test_reference.py runs it)
EXAMPLE = {"params": {"output": "check", "units": 20, "busy_ms": 50},
           "note": "On a cluster, run it with the executor you mean to use (`--executor` with your scheduler, or the "
                   "workflow's `executor`): every unit reports the host and job it ran in."}


class Params(TaskParams):
    output: str = Field(description="folder for the ledger and one small JSON per unit (where it ran)")
    units: int = Field(100, ge=1, le=10_000_000, description="number of units")
    busy_ms: float = Field(0.0, ge=0, le=3_600_000, description="CPU time each unit spins for")
    hold_mb: float = Field(0.0, ge=0, le=1_000_000, description="memory each unit allocates and touches "
                           "while it spins (checks the memory limit workers really get)")
    declare_mb: float | None = Field(None, ge=0, le=1_000_000, description="memory each unit declares to the "
                                     "executor's budget (default: hold_mb); less stands for a unit that misjudged "
                                     "its size (checks what a worker's memory limit does then)")
    record: bool = Field(True, description="write where each unit ran (off: pure engine overhead)")


# what a unit holds besides ``hold_mb``: the interpreter's own buffers while it spins and records
UNIT_OVERHEAD = 8 * 2**20


def plan(p: Params, ctx: PlanContext) -> list[TypedUnit]:
    ctx.guard.make_dirs(Path(p.output))
    declared = p.hold_mb if p.declare_mb is None else p.declare_mb
    memory = int(declared * 2**20) + UNIT_OVERHEAD if declared else 0  # the executor budgets it
    return [TypedUnit(id=str(i), memory=memory) for i in range(p.units)]


def run_unit(p: Params, unit: TypedUnit) -> int:
    started = time.time()
    held = bytearray(int(p.hold_mb * 2**20))
    # touch every page (RSS, not just address space), 16 MB every 20 ms: memory grows as a real
    # unit's does, so a guard that polls (dask's nanny, every 100 ms) sees it on its way up instead
    # of racing an allocation made in one instant against the job's hard limit
    step = 16 * 2**20
    for start in range(0, len(held), step):
        stop = min(start + step, len(held))
        held[start:stop:4096] = b"\1" * len(range(start, stop, 4096))
        time.sleep(0.02)
    end = time.perf_counter() + p.busy_ms / 1000
    x = 0
    while time.perf_counter() < end:
        x += 1
    del held
    if p.record:
        # the batch job's id, as every scheduler names it: <SCHEDULER>_JOB_ID, JOB_ID, <X>_JOBID
        job = next((value for name, value in sorted(os.environ.items())
                    if re.search(r"(^|_)JOB_?ID$", name) and value), None)
        where = {"host": socket.gethostname(), "pid": os.getpid(), "job": job, "started": started,
                 "ended": time.time()}
        atomic_write_json(Path(p.output) / "units" / f"{unit.id}.json", where)
    return 0


def finish(p: Params, ctx: PlanContext) -> None:
    if not p.record:
        return
    seen: dict[str, int] = {}
    for f in (Path(p.output) / "units").glob("*.json"):
        job = json.loads(f.read_text())["job"] or "local"
        seen[job] = seen.get(job, 0) + 1
    print(f"cluster-check: {p.units} units ran in: "
          + ", ".join(f"{k}: {v}" for k, v in sorted(seen.items())))
