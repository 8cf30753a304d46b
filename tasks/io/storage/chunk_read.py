"""Whole-chunk reads without zarr-python's per-chunk machinery: the random-patch path of training
(patch_dataset) and patch-extract's cuboid cache.

Why: one 16x64x64 inner chunk of a sharded array takes 0.16 ms here, 0.72 ms through zarr-python
with the zarrs pipeline and 1.8 ms through zarr-python's own (measured on this project's 2-core
machines; tests/bench/bench_chunk_path.py --reads). Writes go through tensorstore
(arrays.write_region).

What: the stored bytes decoded as zarr decodes them: the array's own Blosc settings through numcodecs
(the library zarr uses), zarr's chunk keys, a shard's offset/length index checked by its crc32c
and only the wanted inner chunk read. Only what this covers takes the direct path: a local store,
codecs bytes + blosc (v3, optionally inside a sharding codec with the default index codecs) or a
Blosc compressor (v2, no filters). Anything else is read through zarr-python."""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import zarr
from google_crc32c import value as crc32c  # zarr-python's own crc32c dependency
from numcodecs import Blosc
from zarr.storage import LocalStore

from .arrays import local_root

_SHUFFLE = {"noshuffle": Blosc.NOSHUFFLE, "shuffle": Blosc.SHUFFLE, "bitshuffle": Blosc.BITSHUFFLE}
_NO_CHUNK = np.uint64(2**64 - 1)


@dataclass(frozen=True)
class _Layout:
    root: Path
    block: tuple[int, ...]            # what one file holds: a shard, or a chunk
    inner: tuple[int, ...] | None     # chunk shape inside a shard
    codec: Blosc
    key: Callable[[tuple[int, ...]], str]  # chunk coords -> key relative to root
    fill: int | float | bool | complex


def read_chunk(arr: zarr.Array, coords: Sequence[int]) -> np.ndarray:
    """Chunk ``coords`` (on the grid of ``arr.chunks``: inner chunks of a sharded array), cut to
    the array's extent. One file read (two for an inner chunk: the shard index, then the chunk)
    and one decode straight into the result."""
    chunks = tuple(arr.chunks)
    region = tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(coords, chunks, arr.shape))
    layout = _layout_of(arr)
    if layout is None:
        return np.asarray(arr[region])
    coords = tuple(int(i) for i in coords)
    if layout.inner is None:
        payload = _read_file(layout.root / layout.key(coords))
    else:
        per_shard = tuple(b // c for b, c in zip(layout.block, layout.inner))
        shard = tuple(i // n for i, n in zip(coords, per_shard))
        within = tuple(i % n for i, n in zip(coords, per_shard))
        payload = _read_inner_chunk(layout.root / layout.key(shard), per_shard, within)
    if payload is None:  # never written: the fill value, as zarr reads it
        return np.full(tuple(r.stop - r.start for r in region), layout.fill, dtype=arr.dtype)
    out = np.empty(chunks, dtype=arr.dtype)
    layout.codec.decode(payload, out=out)
    return out[tuple(slice(0, r.stop - r.start) for r in region)]


def _read_file(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _read_inner_chunk(path: Path, per_shard: tuple[int, ...], within: tuple[int, ...]) -> bytes | None:
    n_index = 16 * int(np.prod(per_shard))
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        return None
    with fh:
        fh.seek(-(n_index + 4), os.SEEK_END)
        tail = fh.read(n_index + 4)
        index_bytes, (crc,) = tail[:n_index], struct.unpack("<I", tail[n_index:])
        if crc32c(index_bytes) != crc:
            raise ValueError(f"{path}: shard index checksum mismatch (corrupt shard)")
        offset, length = np.frombuffer(index_bytes, dtype="<u8").reshape(per_shard + (2,))[within]
        if offset == _NO_CHUNK:
            return None
        fh.seek(int(offset))
        return fh.read(int(length))


def _layout_of(arr: zarr.Array) -> _Layout | None:
    dtype = np.dtype(arr.dtype)
    if not isinstance(arr.store, LocalStore) or dtype.byteorder == ">" or dtype.hasobject:
        return None
    root = local_root(arr)
    meta = arr.metadata
    fill = meta.fill_value if meta.fill_value is not None else 0
    if meta.zarr_format == 2:
        if meta.filters or not isinstance(meta.compressor, Blosc) or meta.order != "C":
            return None
        return _Layout(root, tuple(meta.chunks), None, meta.compressor, meta.encode_chunk_key, fill)
    codecs, inner = tuple(meta.codecs), None
    block = tuple(meta.chunk_grid.chunk_shape)
    if len(codecs) == 1 and isinstance(codecs[0], zarr.codecs.ShardingCodec):
        sharding = codecs[0]
        index_ok = (_name(sharding.index_location) == "end" and len(sharding.index_codecs) == 2
                    and isinstance(sharding.index_codecs[0], zarr.codecs.BytesCodec)
                    and isinstance(sharding.index_codecs[1], zarr.codecs.Crc32cCodec))
        if not index_ok or any(s % c for s, c in zip(block, sharding.chunk_shape)):
            return None
        codecs, inner = tuple(sharding.codecs), tuple(sharding.chunk_shape)
    codec = _blosc_of(codecs, dtype)
    if codec is None:
        return None
    return _Layout(root, block, inner, codec, meta.encode_chunk_key, fill)


def _blosc_of(codecs: tuple[object, ...], dtype: np.dtype) -> Blosc | None:
    if (len(codecs) != 2 or not isinstance(codecs[0], zarr.codecs.BytesCodec)
            or not isinstance(codecs[1], zarr.codecs.BloscCodec)):
        return None
    if dtype.itemsize > 1 and codecs[0].endian is not None and _name(codecs[0].endian) != "little":
        return None
    b = codecs[1]
    return Blosc(cname=_name(b.cname), clevel=b.clevel, shuffle=_SHUFFLE[_name(b.shuffle)],
                 blocksize=b.blocksize, typesize=b.typesize)


def _name(setting: object) -> str:
    """A codec setting's name: zarr 3.1 holds enums, later releases plain strings."""
    return str(getattr(setting, "value", setting))
