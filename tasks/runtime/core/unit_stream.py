"""A plan whose units are made on demand: a full plate's plan has ~900,000 units of ~2.5 KB each
(the files each reads), more than a driver's memory, and most of them are needed only when they
are handed to a worker. A task's ``plan`` may return a ``UnitStream`` instead of a list: batches
of units of one stage each, whose count and declared memory are known when planned, and whose
units are made (``make()``) each time the engine walks them: once to hand them out. The engine
(engine.py) takes a list or a stream alike."""
from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Callable, Container, Iterator

from .budget import PlanSize
from .units import Unit, unit_id, unit_memory, unit_stage


@dataclass(frozen=True)
class Batch:
    """``count`` units of one stage: the i-th unit's id (cheap) and the unit itself (made now)."""

    stage: int
    count: int
    largest: int  # bytes the largest unit declares
    total: int  # bytes all its units declare
    declared: bool  # every unit declares its bytes
    id_of: Callable[[int], str]
    unit_of: Callable[[int], Unit]

    @classmethod
    def of(cls, units: list[Unit], stage: int) -> "Batch":
        sizes = [unit_memory(u) for u in units]
        return cls(stage, len(units), max(sizes, default=0), sum(sizes), all(sizes),
                   lambda i: unit_id(units[i]), units.__getitem__)

    def ids(self) -> Iterator[str]:
        return (self.id_of(i) for i in range(self.count))

    def make(self, skip: Container[str] = ()) -> Iterator[Unit]:
        """The units whose id is not in ``skip`` (a resume's done units are never made)."""
        return (self.unit_of(i) for i in range(self.count) if not skip or self.id_of(i) not in skip)


class UnitStream:
    """Units in batches; walked stage by stage (every unit of a stage before the next stage)."""

    def __init__(self) -> None:
        self.batches: list[Batch] = []

    def add(self, units: list[Unit]) -> None:
        """Units already made (a few per image: pyramid levels, an overview)."""
        by_stage: dict[int, list[Unit]] = {}
        for unit in units:
            by_stage.setdefault(unit_stage(unit), []).append(unit)
        self.batches += [Batch.of(group, stage) for stage, group in by_stage.items()]

    def add_batch(self, batch: Batch) -> None:
        if batch.count:
            self.batches.append(batch)

    def __len__(self) -> int:
        return sum(b.count for b in self.batches)

    def size(self) -> PlanSize:
        return PlanSize(len(self), max((b.largest for b in self.batches), default=0),
                        sum(b.total for b in self.batches), all(b.declared for b in self.batches))

    def stages(self) -> list[int]:
        return sorted({b.stage for b in self.batches})

    def units(self, stage: int | None = None, skip: Container[str] = ()) -> Iterator[Unit]:
        """Every unit of ``stage`` (all stages, in order, when None) not in ``skip``, made now."""
        stages = self.stages() if stage is None else [stage]
        return chain.from_iterable(b.make(skip) for s in stages for b in self.batches if b.stage == s)

    def __iter__(self) -> Iterator[Unit]:
        return self.units()

    def ids(self) -> Iterator[str]:
        return chain.from_iterable(b.ids() for b in self.batches)

    def largest_unit(self) -> Unit | None:
        batch = max(self.batches, key=lambda b: b.largest, default=None)
        if batch is None:
            return None
        return max(batch.make(), key=unit_memory)


def as_stream(units: list[Unit] | UnitStream) -> UnitStream:
    if isinstance(units, UnitStream):
        return units
    stream = UnitStream()
    stream.add(list(units))
    return stream
