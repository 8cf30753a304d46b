"""Plan the pyramid levels a writer of level-0 regions builds in memory (ingest with ``pyramid:
true``), and the units reading back the levels below them.

A level is built from the region a unit holds while the level-0 region it needs (whole write
blocks of that level and of every level above it) stays within ``hold_bytes``. A level whose
chunks make that region too large is read back from the level above once all of it is written:
a stage barrier and a second decode. ``fit_chunks`` halves such a level's chunks (never below
``MIN_CHUNK_BYTES``) until the region fits, so more levels come from memory. On the 537 MB volume
of tests/bench/bench_volume.py this takes level 2 (128 MB, read back alone on one core in 0.6-0.9
s after every region was done) into the regions' own units."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path


from .io.ngff.metadata import ImageMeta
from .io.storage.arrays import ArraySpec
from .runtime.core.regions import group_regions
from .pyramid import LevelSpecs, LevelUnit, Params, _create_levels, _level_units
from .runtime.core.contract import PlanContext

MIN_CHUNK_BYTES = 2**20  # the smallest chunk _level_specs grows a level to (at least 1 MB)
Regions = list[tuple[tuple[int, int], ...]]


def plan_levels_with_regions(p: Params, base: Path, image: str, meta: ImageMeta, spec0: ArraySpec, ctx: PlanContext,
                             block0: tuple[int, ...], unit_bytes: int, hold_bytes: int, fit_chunks: bool = False
                             ) -> tuple[Regions, list[dict], list[LevelUnit]]:
    """Create levels 1.. of an image whose level 0 is being written in regions (ingest of a volume
    or a field), so the writers build the levels they can from the region they hold (nothing read
    back). A level is built in memory while the level-0 region it needs (whole blocks of every
    level so far, each a multiple of the factors down to it) is at most ``hold_bytes``; the levels
    below are read back from the last one built so (a few % of the bytes, at most 1/4 per level).
    Returns (level-0 regions, [{path, factors, method}] for their writers, read-back units)."""
    chosen: dict[str, tuple[int, tuple[int, ...]]] = {}
    itemsize = spec0.itemsize

    def choose(specs: LevelSpecs) -> LevelSpecs:
        specs, count, block = _in_memory(specs, tuple(spec0.shape), itemsize, block0, hold_bytes, fit_chunks)
        chosen["plan"] = (count, block)
        return specs

    method, specs = _create_levels(p, base, image, meta, spec0, ctx, across_lead=False, adjust=choose)
    count, block = chosen["plan"]
    in_memory = [{"path": level.path, "factors": list(factors), "method": method} for factors, _, level in specs[:count]]
    regions = group_regions(tuple(spec0.shape), block, itemsize, unit_bytes)
    prev = in_memory[-1]["path"] if in_memory else meta.levels[0].path
    return regions, in_memory, _level_units(base, image, prev, specs[count:], method, itemsize, p.unit_mb)


def _in_memory(specs: LevelSpecs, shape0: tuple[int, ...], itemsize: int, block0: tuple[int, ...], hold_bytes: int,
               fit_chunks: bool) -> tuple[LevelSpecs, int, tuple[int, ...]]:
    """(specs, with chunks halved where ``fit_chunks`` lets a level fit; how many levels from the
    top are built in memory; the level-0 block a region is made of)."""
    specs = list(specs)
    block, reach = list(block0), [1] * len(shape0)
    for k, (factors, spec, level) in enumerate(specs):
        reach = [r * f for r, f in zip(reach, factors)]
        need = _need(shape0, block, spec, reach)
        while math.prod(need) * itemsize > hold_bytes and fit_chunks:
            smaller = _halved(spec, shape0, block, reach)
            if smaller is None:
                break
            spec, need = smaller, _need(shape0, block, smaller, reach)
        if math.prod(need) * itemsize > hold_bytes:
            return specs, k, tuple(block)
        specs[k], block = (factors, spec, level), need
    return specs, len(specs), tuple(block)


def _need(shape0: tuple[int, ...], block: list[int], spec: ArraySpec, reach: list[int]) -> list[int]:
    """The level-0 region holding whole blocks of this level and of every level above it."""
    return [min(n, math.lcm(b, w * r)) for n, b, w, r in zip(shape0, block, spec.write_block, reach)]


def _halved(spec: ArraySpec, shape0: tuple[int, ...], block: list[int], reach: list[int]) -> ArraySpec | None:
    """``spec`` with its chunk halved along the outermost spatial axis where that shrinks the
    level-0 region it needs (outer first: the regions keep whole rows, read in one run per plane
    from a TIFF); None for a sharded level, where no halving helps or where the chunk would fall
    below ``MIN_CHUNK_BYTES``."""
    if spec.shards is not None:
        return None
    names = spec.dimension_names or ()
    now = math.prod(_need(shape0, block, spec, reach))
    for axis in [a for a, name in enumerate(names) if name in "zyx" and min(spec.chunks[a], spec.shape[a]) > 1]:
        chunks = list(spec.chunks)
        chunks[axis] = math.ceil(min(chunks[axis], spec.shape[axis]) / 2)
        if math.prod(chunks) * spec.itemsize < MIN_CHUNK_BYTES:
            continue
        smaller = dataclasses.replace(spec, chunks=tuple(chunks))
        if math.prod(_need(shape0, block, smaller, reach)) < now:
            return smaller
    return None
