"""A unit's region: the block-aligned pieces of an array that units write (each whole blocks,
grown toward a target size), their slices and bytes, and the memory a unit assembling one in memory
declares (runtime/core/budget.py schedules by it). Planning, not storage: tasks use it to cut their
arrays into units."""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Sequence

import numpy as np

from ...errors import ConfigError

# The driver holds every unit of a step in memory (about 1 KB each with its ledger entry): beyond
# this a plan would take minutes and gigabytes before the first unit runs.
MAX_REGIONS = 2_000_000


def block_regions(shape: tuple[int, ...], block: tuple[int, ...]) -> list[tuple[tuple[int, int], ...]]:
    """Every block-aligned region of ``shape`` as ((start, stop), ...) per axis, C order."""
    grids = [range(0, s, b) for s, b in zip(shape, block)]
    count = math.prod(len(g) for g in grids)
    if count > MAX_REGIONS:
        raise ConfigError(f"shape {list(shape)} in pieces of {list(block)} is {count:,} units of work; one step plans "
                          f"at most {MAX_REGIONS:,} (driver memory): use larger chunks or unit_mb, or a smaller shape")
    regions = []
    for index in np.ndindex(*[len(g) for g in grids]):
        regions.append(tuple((grids[a][i], min(grids[a][i] + block[a], shape[a]))
                             for a, i in enumerate(index)))
    return regions


def group_regions(shape: tuple[int, ...], block: tuple[int, ...], itemsize: int,
                  target_bytes: int) -> list[tuple[tuple[int, int], ...]]:
    """Regions made of whole blocks, grown along the leading axes up to ~``target_bytes``, so a
    unit is seconds of work (not one tiny chunk) yet never splits a block between two units.
    The list is shared by every caller asking the same (a plate's wells do): never change it."""
    return _group_regions(tuple(int(s) for s in shape), tuple(int(b) for b in block), int(itemsize),
                          int(target_bytes))


@lru_cache(maxsize=32)
def _group_regions(shape: tuple[int, ...], block: tuple[int, ...], itemsize: int,
                   target_bytes: int) -> list[tuple[tuple[int, int], ...]]:
    grown = list(block)
    for axis in range(len(shape)):
        block_bytes = math.prod(min(g, s) for g, s in zip(grown, shape)) * itemsize
        if block_bytes >= target_bytes:
            break
        factor = max(1, target_bytes // max(block_bytes, 1))
        n_blocks = math.ceil(shape[axis] / block[axis])
        grown[axis] = block[axis] * min(n_blocks, int(factor))
        if grown[axis] < shape[axis]:
            break
    return block_regions(shape, tuple(grown))


def region_slices(region: Sequence[Sequence[int]]) -> tuple[slice, ...]:
    return tuple(slice(int(a), int(b)) for a, b in region)


def region_nbytes(region: Sequence[Sequence[int]], itemsize: int) -> int:
    return math.prod(int(b) - int(a) for a, b in region) * itemsize


# a unit's peak over the region it writes, measured with /usr/bin/time on ``ingest layout: well``
# (a 4x4-field, 10-plane well: 1.2x its volume above the interpreter's own): the region, the part of
# a source being read into it, and the encoded shards on their way out
REGION_COPIES = 1.5


def holds(region: Any, itemsize: int, copies: float = REGION_COPIES) -> int:
    """What a unit that assembles ``region`` ([[start, stop], ...]) in memory declares."""
    n = itemsize
    for a, b in region:
        n *= int(b) - int(a)
    return int(n * copies)
