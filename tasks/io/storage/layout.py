"""Chunk and shard shapes per pyramid level.

Keeping level 0's chunk shape at every level makes chunks shrink (clipped to ever smaller levels):
thousands of tiny files at low resolution. Instead each level's chunk grows along the spatial axes
(innermost first, doubling) while it stays within ``target_bytes``; shards (zarr v3) grow the same
way in whole chunks up to ``shard_bytes``, so a low level of a well is one or a few files."""
from __future__ import annotations

import math


def grow(block: tuple[int, ...], shape: tuple[int, ...], axes: list[int], itemsize: int,
         limit_bytes: int, multiple_of: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """Double ``block`` along ``axes`` (innermost first) while it fits ``limit_bytes``; never past
    the shape (rounded up to ``multiple_of`` when given, so shards stay whole chunks)."""
    out = list(block)
    cap = [math.ceil(s / m) * m for s, m in zip(shape, multiple_of)] if multiple_of else list(shape)
    changed = True
    while changed:
        changed = False
        for a in reversed(axes):
            if out[a] >= cap[a]:
                continue
            new = min(out[a] * 2, cap[a])
            if multiple_of:
                new = math.ceil(new / multiple_of[a]) * multiple_of[a]
            if math.prod(out[:a] + [new] + out[a + 1:]) * itemsize > limit_bytes:
                continue
            out[a] = new
            changed = True
    return tuple(out)


def level_chunks(shape: tuple[int, ...], base_chunks: tuple[int, ...], spatial: list[int],
                 itemsize: int, target_bytes: int) -> tuple[int, ...]:
    clipped = tuple(min(c, s) for c, s in zip(base_chunks, shape))
    return grow(clipped, shape, spatial, itemsize, target_bytes)


def level_shards(shape: tuple[int, ...], chunks: tuple[int, ...], spatial: list[int], itemsize: int,
                 shard_bytes: int, across_lead: bool = True) -> tuple[int, ...] | None:
    """Shards grown in whole chunks, spatial axes first; once a shard covers the whole plane or
    volume, along channels/time too (unless ``across_lead`` is False: one writer per channel and
    time point), so a small level is one file. None where a shard would be a single chunk (zarr
    then takes its slower shard path for nothing)."""
    shards = grow(chunks, shape, spatial, itemsize, shard_bytes, multiple_of=chunks)
    if across_lead and all(shards[a] >= shape[a] for a in spatial):
        lead = [a for a in range(len(shape)) if a not in spatial]
        shards = grow(shards, shape, lead, itemsize, shard_bytes, multiple_of=chunks)
    return None if shards == tuple(chunks) else shards
