"""A unit of work, as the engine, the ledger and the budget see it: an id, a stage, the bytes it
holds at its peak and the allocator profile it runs under. Each task declares its own unit types
as frozen dataclasses on :class:`TypedUnit` (the fields its ``run_unit`` needs, typed), so a unit
says what it is by its type, not by the keys it happens to carry. The engine reads units only
through the accessors below, which also take a plain dict (a task that has not declared a type
yet); both pickle to workers and serialise to JSON the same way (``fields_of``)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Union


@dataclass(frozen=True, kw_only=True)
class TypedUnit:
    """The fields every unit has. ``stage``: every unit of a stage finishes before the next
    stage starts; ``memory``: bytes held at the peak (0: not declared; runtime/core/budget.py);
    ``allocator``: the malloc profile (runtime/core/malloc.py)."""

    id: str
    stage: int = 0
    memory: int = 0
    allocator: str = "steady"


@dataclass(frozen=True, kw_only=True)
class PlacedUnit(TypedUnit):
    """A unit that carries all it needs to run, its store's root included, so that one task's plan
    can place another's units in its own stages (ingest and reshard place the pyramid's levels
    read back from the level above) and the engine runs them as they are: the task whose plan
    holds them neither routes nor describes them."""

    def run(self) -> int:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError


Unit = Union[TypedUnit, Mapping[str, Any]]
Region = list[list[int]]  # [start, stop) per axis of the array a unit writes


@dataclass(frozen=True, kw_only=True)
class RegionUnit(TypedUnit):
    """One region of one output array, whole chunks or shards (``path``: the array, from the
    task's output root; "" when the task writes one array)."""

    region: Region
    path: str = ""


def describe_region(region: Region) -> str:
    return " ".join(f"{a}:{b}" for a, b in region)


def unit_id(unit: Unit) -> str:
    return unit.id if isinstance(unit, TypedUnit) else str(unit["id"])


def unit_stage(unit: Unit) -> int:
    return unit.stage if isinstance(unit, TypedUnit) else int(unit.get("stage", 0))


def unit_memory(unit: Unit) -> int:
    """The bytes a unit declared (0: it declared nothing)."""
    return unit.memory if isinstance(unit, TypedUnit) else int(unit.get("memory") or 0)


def unit_allocator(unit: Unit) -> str:
    return unit.allocator if isinstance(unit, TypedUnit) else str(unit.get("allocator", "steady"))


def run_unit_of(task_run: Callable[[Any, Any], int | None], params: Any, unit: Unit) -> int:
    """Run one unit: a placed unit by itself, any other by its task's ``run_unit``."""
    return int((unit.run() if isinstance(unit, PlacedUnit) else task_run(params, unit)) or 0)


def describe(task_describe: Callable[[Any], str], unit: Unit) -> str:
    return unit.describe() if isinstance(unit, PlacedUnit) else task_describe(unit)


def fields_of(unit: Unit) -> dict[str, Any]:
    """The unit as plain data (its type's name under ``"type"``): what a log or a JSON check sees."""
    if isinstance(unit, TypedUnit):
        return {"type": type(unit).__name__, **dataclasses.asdict(unit)}
    return dict(unit)
