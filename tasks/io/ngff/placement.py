"""Where each field of view (FOV) goes in a well-level image, from its physical coordinates.

A FOV's pixel position on the well canvas is round((translation - well origin) / pixel size) per
spatial axis: any layout (1x4, 2x2, 9x8, irregular, overlapping) follows from the metadata, never
from a row/column grid. Overlaps are resolved by a policy:

- ``first``: the FOV listed first in the well wins (source pixels kept exactly);
- ``last``: the FOV listed last wins;
- ``mean``: overlapping pixels are the rounded mean of the FOVs covering them;
- ``shift``: FOVs are moved apart until none overlap (like Fractal): for each overlapping pair,
  the later FOV, and every FOV at or beyond it along the axis where the two are further apart,
  moves by the overlap. The original and the placed positions are both recorded."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Literal

import numpy as np

from ..storage.downsample import cast_like

Policy = Literal["first", "last", "mean", "shift"]
MAX_SHIFT_ROUNDS = 10_000


@dataclass(frozen=True)
class Fov:
    name: str  # e.g. FOV_1
    path: str  # image path inside the plate, e.g. B/03/0
    origin_um: tuple[float, ...]  # translation of the spatial axes (level used)
    size: tuple[int, ...]  # pixels along the spatial axes
    pixel: tuple[int, ...] = ()  # placed position on the well canvas, pixels
    original_pixel: tuple[int, ...] = ()
    extra: dict = field(default_factory=dict, compare=False)


def place(fovs: list[Fov], scale: tuple[float, ...], policy: Policy) -> tuple[list[Fov], tuple[float, ...]]:
    """(FOVs with pixel positions, well origin in micrometer)."""
    origin = tuple(min(f.origin_um[a] for f in fovs) for a in range(len(scale)))
    placed = []
    for f in fovs:
        px = tuple(int(round((f.origin_um[a] - origin[a]) / scale[a])) for a in range(len(scale)))
        placed.append(replace(f, pixel=px, original_pixel=px))
    if policy == "shift":
        placed = remove_overlaps(placed)
    return placed, origin


def overlap(a: Fov, b: Fov) -> tuple[int, ...]:
    """Overlap length per axis (<= 0 on an axis: no overlap there)."""
    return tuple(min(a.pixel[i] + a.size[i], b.pixel[i] + b.size[i]) - max(a.pixel[i], b.pixel[i])
                 for i in range(len(a.size)))


def remove_overlaps(fovs: list[Fov]) -> list[Fov]:
    fovs = list(fovs)
    for _ in range(MAX_SHIFT_ROUNDS):
        pair = _first_overlap(fovs)
        if pair is None:
            return fovs
        i, j = pair
        a, b = fovs[i], fovs[j]
        # the axis (y or x, the last two) along which the two FOVs are further apart
        distances = [abs(b.pixel[k] - a.pixel[k]) for k in range(len(a.size))]
        axis = max(range(len(a.size) - 2, len(a.size)), key=lambda k: distances[k])
        amount = overlap(a, b)[axis]
        lead, trail = (a, b) if b.pixel[axis] >= a.pixel[axis] else (b, a)
        fovs = [replace(f, pixel=_moved(f.pixel, axis, amount)) if f.pixel[axis] >= trail.pixel[axis]
                and f is not lead else f for f in fovs]
    raise RuntimeError("could not separate overlapping FOVs")


def _moved(pixel: tuple[int, ...], axis: int, amount: int) -> tuple[int, ...]:
    return tuple(p + amount if k == axis else p for k, p in enumerate(pixel))


def _first_overlap(fovs: list[Fov]) -> tuple[int, int] | None:
    for i in range(len(fovs)):
        for j in range(i + 1, len(fovs)):
            if all(o > 0 for o in overlap(fovs[i], fovs[j])):
                return i, j
    return None


def canvas_shape(fovs: list[Fov]) -> tuple[int, ...]:
    return tuple(max(f.pixel[a] + f.size[a] for f in fovs) for a in range(len(fovs[0].size)))


def is_regular_grid(fovs: list[Fov]) -> bool:
    """All FOVs the same size, at whole multiples of it, without overlap: chunks can align to it."""
    size = fovs[0].size
    return all(f.size == size and all(p % s == 0 for p, s in zip(f.pixel, size)) for f in fovs) and \
        _first_overlap(fovs) is None


def compose(region: list[tuple[int, int]], fovs: list[Fov], policy: Policy, dtype: np.dtype,
            lead_shape: tuple[int, ...], read: Callable[[Fov, tuple[slice, ...], np.ndarray | None], np.ndarray],
            out: np.ndarray | None = None) -> np.ndarray:
    """Pixels of one canvas region (spatial axes) for every leading (t, c) index, in ``out`` when
    given (a part of the caller's array: no second copy of the pixels).

    ``read(fov, spatial_slices, into)`` returns the FOV's pixels (lead axes first) in its own
    coordinates; ``into`` is their place in the canvas (policies first and last), which a reader
    may fill and return (no buffer of its own, no copy), or None (mean)."""
    shape = lead_shape + tuple(b - a for a, b in region)
    hits = []
    for f in fovs:
        lo = [max(a, p) for (a, _), p in zip(region, f.pixel)]
        hi = [min(b, p + s) for (_, b), p, s in zip(region, f.pixel, f.size)]
        if all(h > l for l, h in zip(lo, hi)):
            hits.append((f, lo, hi))
    lead = (slice(None),) * len(lead_shape)
    if policy == "mean":
        acc = np.zeros(shape, dtype=np.float64)
        count = np.zeros(shape[len(lead_shape):], dtype=np.int32)
    elif out is None:
        out = np.zeros(shape, dtype=dtype)
    else:
        out[...] = 0
    order = reversed(hits) if policy == "first" else hits
    for f, lo, hi in order:
        src = tuple(slice(l - p, h - p) for l, h, p in zip(lo, hi, f.pixel))
        dst = tuple(slice(l - a, h - a) for l, h, (a, _) in zip(lo, hi, region))
        if policy == "mean":
            acc[lead + dst] += read(f, src, None)
            count[dst] += 1
        else:
            into = out[lead + dst]
            data = read(f, src, into)
            if data is not into:
                into[...] = data
    if policy == "mean":
        mean = cast_like(np.divide(acc, np.maximum(count, 1)), dtype)
        if out is not None:
            out[...] = mean
            return out
        return mean
    return out
