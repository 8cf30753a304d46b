"""A unit of work, as the engine, the ledger and the budget see it: an id, a stage, the bytes it
holds at its peak and the allocator profile it runs under. Each task declares its own unit types
as frozen dataclasses on :class:`TypedUnit` (the fields its ``run_unit`` needs, typed), so a unit
says what it is by its type, not by the keys it happens to carry. The engine reads units only
through the accessors below, which also take a plain dict (a task that has not declared a type
yet); both pickle to workers and serialise to JSON the same way (``fields_of``)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Union


@dataclass(frozen=True, kw_only=True)
class TypedUnit:
    """The fields every unit has. ``stage``: every unit of a stage finishes before the next
    stage starts; ``memory``: bytes held at the peak (0: not declared; runtime/core/budget.py);
    ``allocator``: the malloc profile (runtime/core/malloc.py)."""

    id: str
    stage: int = 0
    memory: int = 0
    allocator: str = "steady"


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


def fields_of(unit: Unit) -> dict[str, Any]:
    """The unit as plain data (its type's name under ``"type"``): what a log or a JSON check sees."""
    if isinstance(unit, TypedUnit):
        return {"type": type(unit).__name__, **dataclasses.asdict(unit)}
    return dict(unit)
