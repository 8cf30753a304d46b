"""Memory by budget: each unit declares the bytes it holds at its peak (a unit's ``memory``: a well
volume and its pyramid, a region and its encoded shards, a plane stack); every worker offers a
budget (a share of its memory limit) as the dask resource ``MEMORY``, and the scheduler starts a
unit only where the budget it needs is free. So as many units run at once as the memory allows on
every executor zarrmill starts, whatever the worker's thread count, and a unit larger than any
worker's budget is refused with one line after planning, before any unit runs and before the
plan's skeleton is created (runtime/execution/step_run.py; the output's parent folders and
bookkeeping it made are rolled back).

Units that declare nothing run unconstrained, as before. On an ``address`` executor (a scheduler
zarrmill did not start) the workers' budgets are unknown: nothing is constrained or refused."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


from ...errors import ConfigError
from .units import Unit, unit_id, unit_memory

MEMORY = "MEMORY"  # the dask worker resource: bytes of unit data the worker may hold at once
# of a worker's memory limit, the share units may hold: the rest is the interpreter and its
# libraries (~0.2-0.3 GB), and headroom below dask's pause (80 %) and kill (95 %) thresholds
UNIT_SHARE = 0.6




@dataclass(frozen=True)
class PlanSize:
    """What a plan asks of an executor: its units, the largest unit's bytes and all units' bytes."""

    units: int
    largest: int
    total: int
    declared: bool  # every unit declared its bytes (else the totals say little)

    def left(self, units: int) -> "PlanSize":
        """The same plan with only ``units`` of its units left to run (a resume): the executor is
        sized for those, their bytes taken as the plan's mean."""
        return PlanSize(units, self.largest, self.total * units // max(self.units, 1), self.declared)

    @classmethod
    def of(cls, units: list[Unit]) -> "PlanSize":
        sizes = [unit_memory(u) for u in units]
        return cls(len(sizes), max(sizes, default=0), sum(sizes), all(sizes))


def budget_of(worker_memory: int) -> int:
    return int(worker_memory * UNIT_SHARE)


# the parameters that size a task's units, named in the refusal when the task has them
UNIT_SIZE_FIELDS = ("unit_mb", "volume_mb")


def refuse_oversized(task: str, units: Iterable[Unit], budget: int | None, setting: str,
                     size_fields: Iterable[str] = ()) -> None:
    """One line naming the largest unit that no worker could run, before any unit starts."""
    if budget is None:
        return
    largest = max(units, key=unit_memory, default=None)
    if largest is None or unit_memory(largest) <= budget:
        return
    fields = [f for f in size_fields if f in UNIT_SIZE_FIELDS]
    smaller = f" or make units smaller ({' / '.join(fields)})" if fields else ""
    from dask.utils import format_bytes  # here: importing dask costs every run 0.1-0.15 s of start-up

    raise ConfigError(f"task {task}: unit {unit_id(largest)} holds {format_bytes(unit_memory(largest))} at once, more "
                      f"than a worker's budget of {format_bytes(budget)} ({int(UNIT_SHARE * 100)} % of its memory); "
                      f"give workers more memory ({setting}){smaller}")


def resources_for(unit: Unit, budget: int | None) -> dict[str, int] | None:
    """What to ask the scheduler for: the unit's declared bytes, when the workers offer a budget."""
    need = unit_memory(unit)
    return {MEMORY: need} if budget is not None and need else None
