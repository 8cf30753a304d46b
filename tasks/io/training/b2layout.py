"""Chunk and block shapes for compressed arrays read as random training patches.

A patch at a random offset touches, along each axis, about (patch + block) / block blocks, so it
decompresses roughly prod(1 + block_i / patch_i) times its own bytes; blosc2 decompresses only the
blocks a slice touches, and a chunk is the unit of storage holding several blocks.

zarrmill's rule (``patch_layout``):
- block: per spatial axis the power of two nearest patch/4 (at least 1), then doubled along the
  axis with the most room (smallest block/patch) while the block holds < 16 KiB (smaller blocks
  compress worse and cost per-block overhead) and stays within patch/2 per axis; never above 128 KiB;
- chunk: whole blocks covering about one patch per axis (1x patch rounded up to blocks, <= the
  image), shrunk along the longest axis while above 4 MiB;
- channels (leading non-spatial axes): 1 in blocks and chunks (patches read channels separately
  or all of them; either way per-channel chunks cost nothing extra).
Computed examples (``bytes_touched_factor`` in brackets): 128^3 uint16 patch -> blocks 32^3 (64
KiB), chunks 128^3 [1.92x]; nnU-Net v2.8: blocks 64x32x32 [2.30x]. 20x50x50 uint16 cuboid -> blocks
8x16x16 (4 KiB: the 16 KiB floor yields to the patch/2 cap), chunks 24x64x64 [2.28x]; nnU-Net v2.8:
blocks 16x64x64 [8.94x]. 256x256 2D uint16 -> blocks 64x128 [1.86x]; nnU-Net: 256x256 [3.98x].

``nnunet_layout`` re-implements nnU-Net v2.8's published rule (the benchmark baseline): blocks
start at the patch's next power of two and are halved along the axis furthest over its target
(min(image, 1.5 x patch)) until <= 128 KiB; chunks grow from the block in block steps along the
least-covered axis up to 6 MiB and the target; LZ4HC level 5, shuffle chosen by trial.
"""
from __future__ import annotations

import math
from typing import Sequence

MIN_BLOCK = 16 * 1024
MAX_BLOCK = 128 * 1024
MAX_CHUNK = 4 * 2**20


def _pow2_near(x: float) -> int:
    return 1 if x <= 1 else 2 ** round(math.log2(x))


def patch_layout(shape: Sequence[int], itemsize: int, patch: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(chunks, blocks) for ``shape`` whose last len(patch) axes are spatial."""
    n_lead = len(shape) - len(patch)
    space = [int(s) for s in shape[n_lead:]]
    patch = [min(int(p), s) for p, s in zip(patch, space)]
    block = [min(_pow2_near(p / 4), s) for p, s in zip(patch, space)]
    cap = [max(1, p // 2) for p in patch]
    while math.prod(block) * itemsize < MIN_BLOCK:
        room = [i for i in range(len(block)) if block[i] * 2 <= cap[i] and block[i] < space[i]]
        if not room:
            break
        i = min(room, key=lambda k: (block[k] / patch[k], -k))
        block[i] = min(block[i] * 2, space[i])
    while math.prod(block) * itemsize > MAX_BLOCK:
        i = max(range(len(block)), key=lambda k: block[k])
        block[i] = max(1, block[i] // 2)
    chunk = [min(math.ceil(p / b) * b, s) for p, b, s in zip(patch, block, space)]
    while math.prod(chunk) * itemsize > MAX_CHUNK:
        i = max(range(len(chunk)), key=lambda k: chunk[k] / block[k])
        if chunk[i] <= block[i]:
            break
        chunk[i] = max(block[i], (chunk[i] // block[i] // 2) * block[i])
    return (1,) * n_lead + tuple(chunk), (1,) * n_lead + tuple(block)


def nnunet_layout(shape: Sequence[int], itemsize: int, patch: Sequence[int],
                  max_block: int = 128 * 1024, max_chunk: int = 6 * 2**20, ratio: float = 1.5
                  ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(chunks, blocks) by nnU-Net v2.8's rule, for a baseline. A 2D patch is promoted to (1, y, x)."""
    n_lead = len(shape) - 3
    space = [int(s) for s in shape[n_lead:]]
    p3 = [1] + list(patch) if len(patch) == 2 else list(patch)
    target = [max(1, min(s, int(math.floor(ratio * p)))) for s, p in zip(space, p3)]
    nbytes = lambda b: math.prod(b) * itemsize  # noqa: E731
    block = [min(1 << max(0, (p - 1).bit_length()) if p > 1 else 1, s) for p, s in zip(p3, space)]
    while nbytes(block) > min(max_block, max_chunk):
        axis = max((a for a in range(3) if block[a] > 1), key=lambda a: (block[a] / target[a], a))
        block[axis] = max(1, 1 << ((block[axis] - 1).bit_length() - 1))
    chunk = list(block)
    while True:
        options = []
        for a in range(3):
            if (len(patch) == 2 and a == 0) or p3[a] == 1 or chunk[a] >= min(space[a], target[a]):
                continue
            cand = list(chunk)
            cand[a] = min(chunk[a] + block[a], space[a], target[a])
            if nbytes(cand) <= max_chunk:
                options.append((chunk[a] / target[a], -space[a], a, -nbytes(cand), cand))
        if not options:
            break
        chunk = min(options)[-1]
    return (1,) * n_lead + tuple(chunk), (1,) * n_lead + tuple(block)


def bytes_touched_factor(patch: Sequence[int], block: Sequence[int]) -> float:
    """Expected decompressed bytes per patch byte for a random offset: prod((p + b - 1) / p)."""
    return math.prod((p + b - 1) / p for p, b in zip(patch, block[-len(patch):]))


def block_options(chunk: Sequence[int], block: Sequence[int], patch: Sequence[int],
                  itemsize: int) -> list[tuple[int, ...]]:
    """Block shapes beside ``block`` for a trial that weighs over-read against decode speed and
    ratio: halved once and twice along the largest spatial axis (less over-read; smaller blocks
    compress worse) and doubled once along the axis with the most room (<= patch/2 and MAX_BLOCK).
    Each divides ``chunk``, so chunks stay whole blocks."""
    n = len(patch)
    lead, space, chunk_s = tuple(block[:-n]), list(block[-n:]), list(chunk[-n:])
    out = []
    smaller = list(space)
    for _ in range(2):
        i = max(range(n), key=lambda k: (smaller[k], k))
        if smaller[i] < 2:
            break
        smaller[i] //= 2
        out.append(list(smaller))
    room = [k for k in range(n) if space[k] * 2 <= max(1, patch[k] // 2) and chunk_s[k] % (space[k] * 2) == 0]
    if room and math.prod(space) * 2 * itemsize <= MAX_BLOCK:
        i = min(room, key=lambda k: (space[k] / patch[k], -k))
        out.append([x * 2 if k == i else x for k, x in enumerate(space)])
    return [lead + tuple(b) for b in out if all(c % x == 0 for c, x in zip(chunk_s, b))]
