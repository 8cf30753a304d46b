"""Seeded synthetic microscopy-like pixels: gaussian blobs (cells) on a background with noise, or
a label image of the same blobs. Any region can be rendered on its own and equals the same region
of the whole image, so units can render in parallel."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BACKGROUND = 100.0


@dataclass(frozen=True)
class Blobs:
    centres: np.ndarray  # (n, ndim) in pixels of the spatial axes
    radii: np.ndarray  # (n,)
    amplitudes: np.ndarray  # (n,)

    @classmethod
    def make(cls, shape: tuple[int, ...], n: int, radius: float, seed: int) -> "Blobs":
        rng = np.random.default_rng(seed)
        centres = rng.uniform(0, 1, size=(n, len(shape))) * np.array(shape)
        radii = radius * rng.uniform(0.6, 1.4, size=n)
        amplitudes = rng.uniform(300, 1500, size=n)
        return cls(centres, radii, amplitudes)


def render(blobs: Blobs, region: tuple[tuple[int, int], ...], labels: bool, noise_seed: int | None
           ) -> np.ndarray:
    """float64 intensities (or int32 labels, 1-based blob index) for a region of spatial axes."""
    starts = np.array([a for a, _ in region])
    stops = np.array([b for _, b in region])
    out = np.zeros(tuple(stops - starts), dtype=np.int32 if labels else np.float64)
    if not labels:
        out += BACKGROUND
    reach = 3.0 if not labels else 1.0
    for i, (centre, r, amp) in enumerate(zip(blobs.centres, blobs.radii, blobs.amplitudes)):
        lo = np.maximum(np.floor(centre - reach * r).astype(int), starts)
        hi = np.minimum(np.ceil(centre + reach * r).astype(int) + 1, stops)
        if np.any(lo >= hi):
            continue
        grids = np.ix_(*[np.arange(a, b) + 0.5 for a, b in zip(lo, hi)])
        d2 = sum((g - c) ** 2 for g, c in zip(grids, centre))
        local = tuple(slice(a - s, b - s) for a, b, s in zip(lo, hi, starts))
        if labels:
            out[local] = np.where(d2 <= r * r, i + 1, out[local])
        else:
            out[local] += amp * np.exp(-d2 / (2 * r * r))
    if noise_seed is not None and not labels:
        rng = np.random.default_rng(noise_seed)
        out += rng.normal(0.0, np.sqrt(out))  # shot noise ~ sqrt(signal)
    return out


def to_dtype(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype.kind in "ui":
        info = np.iinfo(dtype)
        return np.clip(np.rint(values), info.min, info.max).astype(dtype)
    return values.astype(dtype)
