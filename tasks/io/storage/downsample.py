"""Block downsampling in numpy, for any number of axes and per-axis integer factors.

Shapes that are not divisible by a factor keep a last, partial block, reduced over the pixels it
has (output size = ceil(n / f)). ``mean`` accumulates the strided sub-grids in float (one output-
sized accumulator, never a copy of the input per offset), divides by the per-axis counts, rounds
and casts back to the input dtype. ``mode`` (label images) returns, per block, the most frequent
value among the pixels present (ties: the smallest), so only values of the input ever appear.
``nearest`` keeps the first pixel of each block."""
from __future__ import annotations

import math
from functools import reduce
from itertools import product
from typing import Literal

import numpy as np

Method = Literal["mean", "mode", "nearest"]


def out_shape(shape: tuple[int, ...], factors: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(math.ceil(n / f) for n, f in zip(shape, factors))


def downsample(x: np.ndarray, factors: tuple[int, ...], method: Method) -> np.ndarray:
    factors = tuple(int(f) for f in factors)
    if all(f == 1 for f in factors):
        return x.copy()
    if method == "nearest":
        return np.ascontiguousarray(x[tuple(slice(None, None, f) for f in factors)])
    if method == "mean":
        return _mean(x, factors)
    if method == "mode":
        return _mode(x, factors)
    raise ValueError(f"unknown method {method!r}")


def _offsets(factors: tuple[int, ...]):
    return product(*[range(f) for f in factors])


def _sub(x: np.ndarray, offs: tuple[int, ...], factors: tuple[int, ...]) -> np.ndarray:
    return x[tuple(slice(o, None, f) for o, f in zip(offs, factors))]


def _axis_counts(shape: tuple[int, ...], factors: tuple[int, ...]) -> np.ndarray:
    """How many input pixels each output pixel averages (separable per axis)."""
    vectors = []
    for axis, (n, f) in enumerate(zip(shape, factors)):
        m = math.ceil(n / f)
        counts = np.minimum(f, n - np.arange(m) * f).astype(np.float64)
        vectors.append(counts.reshape([-1 if a == axis else 1 for a in range(len(shape))]))
    return reduce(np.multiply, vectors)


SLAB_BYTES = 2 * 2**20  # a slab's accumulator at 4 bytes a value (float64 ones: twice): stays in cache


def _mean(x: np.ndarray, factors: tuple[int, ...]) -> np.ndarray:
    """Slab by slab along the first axis longer than one output row: each pass (sums, divide,
    round, cast) then runs over a cache-sized accumulator instead of an output-sized one (a 128 MB
    region's level 1: 2x faster, and no 64 MB accumulator page-faulted afresh per unit)."""
    shape = out_shape(x.shape, factors)
    axis = next((a for a, n in enumerate(shape) if n > 1), 0)
    row = math.prod(shape) // max(shape[axis], 1) * 4
    step = max(1, SLAB_BYTES // max(row, 1))
    if step >= shape[axis]:
        return _mean_whole(x, factors)
    out = np.empty(shape, x.dtype)
    f = factors[axis]
    for o in range(0, shape[axis], step):
        src = (slice(None),) * axis + (slice(o * f, min((o + step) * f, x.shape[axis])),)
        dst = (slice(None),) * axis + (slice(o, min(o + step, shape[axis])),)
        out[dst] = _mean_whole(x[src], factors)
    return out


def _mean_whole(x: np.ndarray, factors: tuple[int, ...]) -> np.ndarray:
    small_ints = x.dtype.kind in "ui" and x.dtype.itemsize <= 2 and math.prod(factors) <= 256
    acc = np.zeros(out_shape(x.shape, factors), dtype=np.float32 if small_ints else np.float64)
    for offs in _offsets(factors):
        part = _sub(x, offs, factors)
        if part.size:
            acc[tuple(slice(0, s) for s in part.shape)] += part
    _divide_by_counts(acc, x.shape, factors)
    if x.dtype.kind in "ui":  # a mean lies within its inputs' range: round, no clipping needed
        return np.rint(acc, out=acc).astype(x.dtype)
    return cast_like(acc, x.dtype)


def _divide_by_counts(acc: np.ndarray, shape: tuple[int, ...], factors: tuple[int, ...]) -> None:
    """acc /= the number of pixels each output pixel averages: the product of the factors, except
    in the last, partial block along an axis whose size the factor does not divide. In place,
    without an output-sized array of counts (that cost as much as the sums)."""
    if all(n % f == 0 for n, f in zip(shape, factors)):
        acc /= acc.dtype.type(math.prod(factors))
    else:
        acc /= _axis_counts(shape, factors)


def cast_like(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype.kind in "ui":
        info = np.iinfo(dtype)
        return np.clip(np.rint(values), info.min, info.max).astype(dtype)
    if dtype.kind == "b":
        return values >= 0.5
    return values.astype(dtype)


def _mode(x: np.ndarray, factors: tuple[int, ...]) -> np.ndarray:
    shape = out_shape(x.shape, factors)
    n = math.prod(factors)
    values = np.zeros((n,) + shape, dtype=x.dtype)
    valid = np.zeros((n,) + shape, dtype=bool)
    for i, offs in enumerate(_offsets(factors)):
        part = _sub(x, offs, factors)
        region = tuple(slice(0, s) for s in part.shape)
        values[(i,) + region] = part
        valid[(i,) + region] = True
    # count, for each candidate, how many valid window members equal it
    counts = np.zeros((n,) + shape, dtype=np.int16)
    for j in range(n):
        counts += (values == values[j]) & valid[j]
    counts[~valid] = -1
    # ties -> smallest value: among the best counts pick the minimum value
    best = counts.max(axis=0)
    candidates = np.where(counts == best, values, _max_of(x.dtype))
    return candidates.min(axis=0)


def _max_of(dtype: np.dtype):
    return np.iinfo(dtype).max if np.dtype(dtype).kind in "ui" else np.finfo(dtype).max
