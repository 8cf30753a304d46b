"""The direct chunk writer writes exactly the files zarr-python writes (byte for byte), and falls
back to zarr-python for everything it does not cover."""
from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import zarr
from numcodecs import Blosc

from zarrmill.io.storage.arrays import open_for_write
from zarrmill.io.storage.chunk_io import _layout_of, read_chunk, write_region


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _create(path: Path, shape, chunks, dtype, fmt=3, shards=None, shuffle="bitshuffle", cname="lz4"):
    if fmt == 3:
        comp = zarr.codecs.BloscCodec(cname=cname, clevel=5, shuffle=shuffle)
        return zarr.create_array(str(path), shape=shape, chunks=chunks, shards=shards, dtype=dtype,
                                 compressors=comp, fill_value=0, zarr_format=3)
    comp = Blosc(cname=cname, clevel=5, shuffle=Blosc.BITSHUFFLE if shuffle == "bitshuffle" else Blosc.SHUFFLE)
    return zarr.create_array(str(path), shape=shape, chunks=chunks, dtype=dtype, compressors=comp,
                             fill_value=0, zarr_format=2, chunk_key_encoding={"name": "v2", "separator": "/"})


CASES = [
    # shape, chunks, shards, dtype, format, shuffle
    ((3, 100, 90), (1, 40, 32), None, "uint16", 3, "bitshuffle"),        # edge chunks on y and x
    ((5, 64, 64), (2, 32, 32), (4, 64, 64), "float32", 3, "shuffle"),   # sharded, edge shard on z
    ((2, 3, 50, 70), (1, 1, 16, 16), (1, 3, 48, 64), "uint8", 3, "bitshuffle"),  # inner chunks past the edge
    ((7, 33, 65), (3, 16, 32), None, "int16", 2, "shuffle"),             # zarr v2
    ((4, 40, 40), (4, 40, 40), None, "float64", 3, "noshuffle"),
]


@pytest.mark.parametrize("shape,chunks,shards,dtype,fmt,shuffle", CASES)
def test_direct_writes_equal_zarr_bytes(tmp_path: Path, shape, chunks, shards, dtype, fmt, shuffle) -> None:
    rng = np.random.default_rng(1)
    data = (rng.normal(100, 20, shape) * (rng.random(shape) > 0.3)).astype(dtype)
    ref = _create(tmp_path / "ref", shape, chunks, dtype, fmt, shards, shuffle)
    ours = _create(tmp_path / "ours", shape, chunks, dtype, fmt, shards, shuffle)
    ref = ref.with_config({"write_empty_chunks": True})
    ref[...] = data
    arr = open_for_write(tmp_path / "ours")
    assert _layout_of(arr) is not None, "this layout should take the direct path"
    block = shards or chunks
    # two writes: the leading blocks, then the rest (units write regions, not whole arrays)
    split = block[0] * max(1, (shape[0] // block[0]) // 2)
    write_region(arr, (0,) * len(shape), data[:split])
    if split < shape[0]:
        write_region(arr, (split,) + (0,) * (len(shape) - 1), data[split:])
    assert _files(tmp_path / "ours") == _files(tmp_path / "ref")
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "ours"), mode="r")[...], data)


def test_unaligned_and_sparse_writes_go_through_zarr(tmp_path: Path) -> None:
    arr = _create(tmp_path / "a", (10, 40, 40), (2, 16, 16), "uint16")
    sparse = open_for_write(tmp_path / "a", sparse=True)
    write_region(sparse, (0, 0, 0), np.zeros((2, 16, 16), "uint16"))  # aligned but all fill value
    assert not (tmp_path / "a" / "c").exists(), "a sparse write must leave empty chunks unstored"
    dense = open_for_write(tmp_path / "a")
    part = np.arange(3 * 10 * 10, dtype="uint16").reshape(3, 10, 10) + 1
    write_region(dense, (1, 5, 7), part)  # not chunk-aligned: zarr does the read-modify-write
    out = np.zeros((10, 40, 40), "uint16")
    out[1:4, 5:15, 7:17] = part
    np.testing.assert_array_equal(arr[...], out)


def test_unsupported_codecs_fall_back(tmp_path: Path) -> None:
    arr = zarr.create_array(str(tmp_path / "z"), shape=(8, 8), chunks=(4, 4), dtype="uint16",
                            compressors=zarr.codecs.ZstdCodec(level=3), fill_value=0)
    dense = open_for_write(tmp_path / "z")
    assert _layout_of(dense) is None
    write_region(dense, (0, 0), np.ones((8, 8), "uint16"))
    assert int(arr[...].sum()) == 64


@pytest.mark.parametrize("shape,chunks,shards,dtype,fmt,shuffle", CASES)
def test_read_chunk_equals_zarr(tmp_path: Path, shape, chunks, shards, dtype, fmt, shuffle) -> None:
    rng = np.random.default_rng(2)
    data = rng.integers(0, 200, shape).astype(dtype)
    data[:, :7] = 0  # some all-zero chunks
    arr = _create(tmp_path / "a", shape, chunks, dtype, fmt, shards, shuffle)
    arr[...] = data  # zarr's default: all-fill chunks are not stored, read back as the fill value
    arr = zarr.open_array(str(tmp_path / "a"), mode="r")
    assert _layout_of(arr) is not None
    grid = [range(-(-s // c)) for s, c in zip(shape, chunks)]
    for coords in itertools.product(*grid):
        region = tuple(slice(i * c, (i + 1) * c) for i, c in zip(coords, chunks))
        np.testing.assert_array_equal(read_chunk(arr, coords), data[region])
