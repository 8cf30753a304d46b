"""Mean downsampling: block means rounded back to the input dtype, partial edge blocks averaged over
the pixels they have, an axis kept whole gives the same as each slice on its own."""
from __future__ import annotations

import numpy as np
import pytest

from zarrmill.io.storage.downsample import downsample


def _reference_mean(x: np.ndarray, factors: tuple[int, ...]) -> np.ndarray:
    """Block by block in float64: the definition, without the implementation's tricks."""
    shape = tuple(-(-n // f) for n, f in zip(x.shape, factors))
    out = np.empty(shape, dtype=np.float64)
    for index in np.ndindex(*shape):
        block = x[tuple(slice(i * f, (i + 1) * f) for i, f in zip(index, factors))]
        out[index] = block.astype(np.float64).mean()
    return out


@pytest.mark.parametrize("shape,factors", [((3, 8, 10), (1, 2, 2)), ((2, 4, 9, 7), (1, 2, 2, 2)),
                                           ((5, 6), (2, 3)), ((4, 6, 6), (2, 2, 2)), ((2, 3, 5, 5), (1, 1, 2, 2))])
def test_mean_is_the_block_mean(shape, factors) -> None:
    x = np.random.default_rng(0).integers(0, 60000, shape, dtype=np.uint16)
    got = downsample(x, factors, "mean")
    want = _reference_mean(x, factors)
    assert got.dtype == x.dtype and got.shape == want.shape
    assert np.abs(got.astype(np.float64) - want).max() <= 0.5 + 1e-3  # rounded to the nearest integer


def test_slices_kept_whole_equal_the_whole_array_path() -> None:
    x = np.random.default_rng(1).integers(0, 4000, (4, 3, 33, 47), dtype=np.uint16)
    per_slice = downsample(x, (1, 1, 2, 2), "mean")
    whole = np.stack([np.stack([downsample(x[i, j], (2, 2), "mean") for j in range(3)]) for i in range(4)])
    np.testing.assert_array_equal(per_slice, whole)
    floats = x.astype(np.float32)
    np.testing.assert_allclose(downsample(floats, (1, 1, 2, 2), "mean"),
                               _reference_mean(floats, (1, 1, 2, 2)), rtol=1e-6)


def _reference_mode(x: np.ndarray, factors: tuple[int, ...]) -> np.ndarray:
    """The most frequent label of each block, the smallest one on a tie, block by block."""
    shape = tuple(-(-n // f) for n, f in zip(x.shape, factors))
    out = np.empty(shape, dtype=x.dtype)
    for index in np.ndindex(*shape):
        block = x[tuple(slice(i * f, (i + 1) * f) for i, f in zip(index, factors))].ravel()
        values, counts = np.unique(block, return_counts=True)
        out[index] = values[counts == counts.max()].min()
    return out


@pytest.mark.parametrize("shape,factors", [((1, 8, 10), (1, 2, 2)), ((6, 9, 7), (2, 2, 2)), ((5, 6), (2, 3))])
def test_mode_is_the_block_majority_smallest_on_ties(shape, factors) -> None:
    x = np.random.default_rng(1).integers(0, 3, shape, dtype=np.uint16)  # three labels: many ties
    np.testing.assert_array_equal(downsample(x, factors, "mode"), _reference_mode(x, factors))
    tie = np.asarray([[[5, 2], [2, 5]]], np.uint16)  # two labels twice each: the smaller wins
    assert downsample(tie, (1, 2, 2), "mode").item() == 2
