"""Cuboids around points: where they start, how they are resampled, what happens at the edges.

Centering (``origin`` of a cuboid of n voxels around position c, data voxels):
- ``cellfinder``: round(c - n/2) in y and x, int(c - n // 2) in z (cellfinder's own rule, kept
  so patches match models it trained);
- ``round``: round(c - n/2) on every axis.
Data-resolution size per axis: n_data = round(n_network x network_um / data_um); the cut is then
resampled to the network size with separable linear interpolation, output voxel i sampling input
coordinate (i + 0.5) x n_data / n_network - 0.5 (voxel centres aligned), clamped to the cut.
Edges: ``drop`` (recorded with the reason) or ``pad`` (``constant`` value or ``reflect``)."""
from __future__ import annotations

import math
from collections import OrderedDict
from typing import Callable, Literal, Sequence

import numpy as np

Centering = Literal["cellfinder", "round"]


def data_size(network: Sequence[int], network_um: Sequence[float], data_um: Sequence[float]) -> tuple[int, ...]:
    return tuple(max(1, int(round(n * nu / du))) for n, nu, du in zip(network, network_um, data_um))


def origin(center: Sequence[float], size: Sequence[int], centering: Centering) -> tuple[int, ...]:
    out = [int(round(c - n / 2)) for c, n in zip(center, size)]
    if centering == "cellfinder":
        out[0] = int(center[0] - size[0] // 2)
    return tuple(out)


def inside(o: Sequence[int], size: Sequence[int], shape: Sequence[int]) -> bool:
    return all(a >= 0 and a + n <= s for a, n, s in zip(o, size, shape))


def resample_linear(x: np.ndarray, out_shape: Sequence[int]) -> np.ndarray:
    """Separable linear interpolation of the last len(out_shape) axes (float64 result)."""
    y = x.astype(np.float64, copy=False)
    n_lead = y.ndim - len(out_shape)
    for k, m in enumerate(out_shape):
        axis = n_lead + k
        n = y.shape[axis]
        if n == m:
            continue
        pos = np.clip((np.arange(m) + 0.5) * n / m - 0.5, 0, n - 1)
        lo = np.floor(pos).astype(int)
        hi = np.minimum(lo + 1, n - 1)
        w = (pos - lo).reshape([-1 if a == axis else 1 for a in range(y.ndim)])
        y = np.take(y, lo, axis=axis) * (1 - w) + np.take(y, hi, axis=axis) * w
    return y


def cast(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    from ..storage.downsample import cast_like

    return cast_like(values, dtype)


class ChunkCache:
    """Regions of a chunked array read through a bounded LRU cache of decoded chunks, so points
    sorted by z decode each chunk about once. Memory: at most ``max_bytes`` of chunks."""

    def __init__(self, read_chunk: Callable[[tuple[int, ...]], np.ndarray], chunks: Sequence[int],
                 shape: Sequence[int], dtype: np.dtype, max_bytes: int):
        self.read_chunk, self.chunks, self.shape, self.dtype = read_chunk, tuple(chunks), tuple(shape), dtype
        self.capacity = max(1, max_bytes // max(1, math.prod(chunks) * np.dtype(dtype).itemsize))
        self._cache: OrderedDict[tuple[int, ...], np.ndarray] = OrderedDict()
        self.decoded = 0

    def _chunk(self, idx: tuple[int, ...]) -> np.ndarray:
        hit = self._cache.get(idx)
        if hit is not None:
            self._cache.move_to_end(idx)
            return hit
        data = self.read_chunk(idx)
        self.decoded += 1
        self._cache[idx] = data
        if len(self._cache) > self.capacity:
            self._cache.popitem(last=False)
        return data

    def read(self, start: Sequence[int], stop: Sequence[int]) -> np.ndarray:
        """Region [start, stop) (inside the array) of all axes."""
        first = tuple(a // c for a, c in zip(start, self.chunks))
        if all((b - 1) // c == i for b, c, i in zip(stop, self.chunks, first)):
            # inside one chunk (most cuboids when chunks are much larger than them)
            chunk = self._chunk(first)
            return chunk[tuple(slice(a - i * c, b - i * c)
                               for a, b, i, c in zip(start, stop, first, self.chunks))].copy()
        out = np.empty([b - a for a, b in zip(start, stop)], dtype=self.dtype)
        ranges = [range(a // c, (b - 1) // c + 1) for a, b, c in zip(start, stop, self.chunks)]
        for idx in np.ndindex(*[len(r) for r in ranges]):
            ci = tuple(r[i] for r, i in zip(ranges, idx))
            c0 = [i * c for i, c in zip(ci, self.chunks)]
            lo = [max(a, o) for a, o in zip(start, c0)]
            hi = [min(b, o + c, s) for b, o, c, s in zip(stop, c0, self.chunks, self.shape)]
            out[tuple(slice(l - a, h - a) for l, h, a in zip(lo, hi, start))] = \
                self._chunk(ci)[tuple(slice(l - o, h - o) for l, h, o in zip(lo, hi, c0))]
        return out


def read_padded(cache: ChunkCache, o: Sequence[int], size: Sequence[int], mode: str, value: float) -> np.ndarray:
    """Cuboid [o, o + size) over the spatial (last) axes, padded where it leaves the image."""
    n_lead = len(cache.shape) - len(size)
    space = cache.shape[n_lead:]
    lo = [max(0, a) for a in o]
    hi = [min(s, a + n) for a, n, s in zip(o, size, space)]
    if any(h <= l for l, h in zip(lo, hi)):
        return np.full(tuple(cache.shape[:n_lead]) + tuple(size), value, dtype=cache.dtype)
    core = cache.read([0] * n_lead + lo, list(cache.shape[:n_lead]) + hi)
    pad = [(0, 0)] * n_lead + [(l - a, (a + n) - h) for a, n, l, h in zip(o, size, lo, hi)]
    if not any(p for pair in pad for p in pair):
        return core
    if mode == "reflect":
        return _read_reflected(cache, o, size, n_lead)
    return np.pad(core, pad, mode="constant", constant_values=value)


def reflect_index(i: np.ndarray, n: int) -> np.ndarray:
    """Mirror indices at the image edges without repeating the edge voxel (numpy's 'reflect')."""
    if n == 1:
        return np.zeros_like(i)
    period = 2 * (n - 1)
    j = np.mod(i, period)
    return np.where(j < n, j, period - j)


def _read_reflected(cache: ChunkCache, o: Sequence[int], size: Sequence[int], n_lead: int) -> np.ndarray:
    """Reflection about the image border itself (it may need image voxels beyond the cuboid)."""
    space = cache.shape[n_lead:]
    idx = [reflect_index(np.arange(a, a + n), s) for a, n, s in zip(o, size, space)]
    lo, hi = [int(i.min()) for i in idx], [int(i.max()) + 1 for i in idx]
    block = cache.read([0] * n_lead + lo, list(cache.shape[:n_lead]) + hi)
    lead = [np.arange(k) for k in cache.shape[:n_lead]]
    return block[np.ix_(*lead, *[i - a for i, a in zip(idx, lo)])]
