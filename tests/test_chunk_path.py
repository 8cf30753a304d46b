"""The chunk path: writes through tensorstore read back by stock zarr-python (and the files are the
same size: the same codecs), the same bytes whatever the threads, empty chunks unstored, partial
shards merged and replaced atomically; whole-chunk reads equal zarr's."""
from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import zarr
from numcodecs import Blosc

from zarrmill.io.storage.arrays import _tensorstore_of, open_for_write, write_region
from zarrmill.io.storage.chunk_read import _layout_of, read_chunk


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


def _sizes(root: Path) -> dict[str, int]:
    return {k: len(v) for k, v in _files(root).items() if not k.endswith(("zarr.json", ".zarray", ".zattrs"))}


@pytest.mark.parametrize("shape,chunks,shards,dtype,fmt,shuffle", CASES)
def test_zarrs_writes_read_back_by_stock_zarr(tmp_path: Path, shape, chunks, shards, dtype, fmt, shuffle) -> None:
    rng = np.random.default_rng(1)
    data = (rng.normal(100, 20, shape) * (rng.random(shape) > 0.3)).astype(dtype)
    ref = _create(tmp_path / "ref", shape, chunks, dtype, fmt, shards, shuffle).with_config({"write_empty_chunks": True})
    ref[...] = data
    _create(tmp_path / "ours", shape, chunks, dtype, fmt, shards, shuffle)
    arr = open_for_write(tmp_path / "ours")
    assert _tensorstore_of(arr) is not None, "a local array is written through tensorstore"
    block = shards or chunks
    # two writes: the leading blocks, then the rest (units write regions, not whole arrays)
    split = block[0] * max(1, (shape[0] // block[0]) // 2)
    write_region(arr, (0,) * len(shape), data[:split])
    if split < shape[0]:
        write_region(arr, (split,) + (0,) * (len(shape) - 1), data[split:])
    # stock zarr-python (its own pipeline) reads every pixel; the same codecs give the same sizes.
    # no chunk that is all fill value is stored (zarr reads it back as the fill value)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "ours"), mode="r")[...], data)
    ours, ref_sizes = _sizes(tmp_path / "ours"), _sizes(tmp_path / "ref")
    assert ours.keys() <= ref_sizes.keys() and len(ours) >= len(ref_sizes) - 2
    for key, n in ours.items():
        assert abs(n - ref_sizes[key]) <= max(64, n // 50), key


def test_sparse_and_partial_writes(tmp_path: Path) -> None:
    arr = _create(tmp_path / "a", (10, 40, 40), (2, 16, 16), "uint16")
    sparse = open_for_write(tmp_path / "a", sparse=True)
    write_region(sparse, (0, 0, 0), np.zeros((2, 16, 16), "uint16"))  # aligned but all fill value
    stored = [f for f in (tmp_path / "a").rglob("*") if f.is_file() and f.name != "zarr.json"]
    assert stored == [], "a sparse write must leave empty chunks unstored"
    dense = open_for_write(tmp_path / "a")
    part = np.arange(3 * 10 * 10, dtype="uint16").reshape(3, 10, 10) + 1
    write_region(dense, (1, 5, 7), part)  # not chunk-aligned: merged with what is stored
    out = np.zeros((10, 40, 40), "uint16")
    out[1:4, 5:15, 7:17] = part
    np.testing.assert_array_equal(arr[...], out)


def test_partial_shard_writes_replace_the_file_atomically(tmp_path: Path) -> None:
    """A shard merged with a new region is written to a new file and renamed, so a kill mid-write
    cannot leave a torn shard for the rerun to read."""
    _create(tmp_path / "s", (2, 64, 64), (1, 32, 32), "uint16", shards=(2, 64, 64))
    arr = open_for_write(tmp_path / "s")
    write_region(arr, (0, 0, 0), np.ones((2, 64, 64), "uint16"))
    shard = tmp_path / "s" / "c" / "0" / "0" / "0"
    before = shard.stat().st_ino
    write_region(arr, (0, 0, 0), np.full((1, 32, 32), 7, "uint16"))
    assert shard.stat().st_ino != before, "a partial shard write must replace the file, not rewrite it in place"
    back = zarr.open_array(str(tmp_path / "s"), mode="r")[...]
    assert (back[0, :32, :32] == 7).all() and int(back.sum()) == 2 * 64 * 64 + 6 * 32 * 32


def test_same_bytes_whatever_the_threads(tmp_path: Path) -> None:
    """Units write shards from several threads at once; every run must give the same files (the
    zarrs pipeline, tried first, ordered a shard's chunks by thread timing)."""
    from concurrent.futures import ThreadPoolExecutor

    data = np.random.default_rng(3).integers(0, 1000, (8, 8, 64, 64), dtype="uint16")
    runs = []
    for n, threads in enumerate((1, 2, 4, 2)):
        _create(tmp_path / f"r{n}", data.shape, (1, 4, 16, 16), "uint16", shards=(1, 8, 32, 32))
        arr = open_for_write(tmp_path / f"r{n}")
        jobs = [(t, y, x) for t in range(8) for y in (0, 32) for x in (0, 32)]
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda j: write_region(arr, (j[0], 0, j[1], j[2]),
                                                 data[j[0]:j[0] + 1, :, j[1]:j[1] + 32, j[2]:j[2] + 32]), jobs))
        runs.append(_files(tmp_path / f"r{n}"))
    assert len(runs[0]) == 8 * 4 + 1 and all(r == runs[0] for r in runs)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "r1"), mode="r")[...], data)


def test_unsupported_codecs_read_through_zarr(tmp_path: Path) -> None:
    arr = zarr.create_array(str(tmp_path / "z"), shape=(8, 8), chunks=(4, 4), dtype="uint16",
                            compressors=zarr.codecs.ZstdCodec(level=3), fill_value=0)
    dense = open_for_write(tmp_path / "z")
    assert _layout_of(dense) is None
    write_region(dense, (0, 0), np.ones((8, 8), "uint16"))
    assert int(arr[...].sum()) == 64
    np.testing.assert_array_equal(read_chunk(dense, (1, 1)), np.ones((4, 4), "uint16"))


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
