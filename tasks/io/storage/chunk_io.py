"""Whole-chunk and whole-shard writes (and whole-chunk reads) without zarr-python's per-chunk
machinery.

Why: on this project's 2-core machines zarr-python spent ~4.5 ms per 2.7 MB chunk where encoding
and writing it take ~3 ms (copies between its buffer types, asyncio hops per chunk); ingest and
patch-extract write nothing but whole chunks, so that overhead was most of their units' time.

What: the bytes zarr-python itself would write, tested byte for byte against it (tests/
test_chunk_io.py): the array's own Blosc settings through numcodecs (the library zarr uses),
zarr's chunk keys, shards laid out as zarr lays them out (inner chunks in morton order, then the
offset/length index and its crc32c), each file replaced atomically like zarr's LocalStore does.
Only what this covers takes the direct path: a local store, codecs bytes + blosc (v3, optionally
inside a sharding codec with the default index codecs) or a Blosc compressor (v2, no filters),
dense writes (write_empty_chunks on) of regions aligned to whole chunks or shards. Reads of one
chunk (``read_chunk``) decode the stored bytes the same way (the inner chunk only, for shards).
Anything else goes through zarr-python unchanged."""
from __future__ import annotations

import itertools
import os
import struct
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import zarr
from google_crc32c import value as crc32c  # zarr-python's own crc32c dependency
from numcodecs import Blosc
from zarr.storage import LocalStore

from .atomic import atomic_write_bytes

_SHUFFLE = {"noshuffle": Blosc.NOSHUFFLE, "shuffle": Blosc.SHUFFLE, "bitshuffle": Blosc.BITSHUFFLE}
_NO_CHUNK = np.uint64(2**64 - 1)


@dataclass(frozen=True)
class _Layout:
    root: Path
    block: tuple[int, ...]            # what one file holds: a shard, or a chunk
    inner: tuple[int, ...] | None     # chunk shape inside a shard
    codec: Blosc
    key: Any                          # chunk coords -> key relative to root
    fill: Any


def write_region(arr: zarr.Array, start: Sequence[int], data: np.ndarray) -> None:
    """``arr[start:start + data.shape] = data``: directly when the region is made of whole chunks
    (or shards) of a supported array, else through zarr-python."""
    # sparse outputs (write_empty_chunks off) go through zarr, which decides what to drop
    layout = _layout_of(arr) if arr.config.write_empty_chunks else None
    start = tuple(int(s) for s in start)
    if layout is None or not _aligned(start, data.shape, layout.block, arr.shape):
        arr[tuple(slice(s, s + n) for s, n in zip(start, data.shape))] = data
        return
    data = np.ascontiguousarray(data, dtype=arr.dtype)
    jobs = []
    for offset in itertools.product(*(range(0, n, b) for n, b in zip(data.shape, layout.block))):
        piece = data[tuple(slice(o, o + b) for o, b in zip(offset, layout.block))]
        coords = tuple((s + o) // b for s, o, b in zip(start, offset, layout.block))
        jobs.append((coords, piece))
    list(_pool().map(lambda job: _write_block(layout, *job), jobs))


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


def _write_block(layout: _Layout, coords: tuple[int, ...], piece: np.ndarray) -> None:
    block = _padded(piece, layout.block, layout.fill)
    if layout.inner is None:
        payload = layout.codec.encode(block)
    else:
        payload = _encode_shard(block, piece.shape, layout.inner, layout.codec)
    atomic_write_bytes(layout.root / layout.key(coords), payload, durable=False)  # as zarr's LocalStore


def _encode_shard(shard: np.ndarray, extent: tuple[int, ...], inner: tuple[int, ...], codec: Blosc) -> bytes:
    """``extent``: the part of the shard inside the array; inner chunks wholly beyond it are not
    stored (as zarr-python does), the rest are, fill values included."""
    per_shard = tuple(s // c for s, c in zip(shard.shape, inner))
    index = np.full(per_shard + (2,), _NO_CHUNK, dtype="<u8")
    parts, offset = [], 0
    for coords in morton_order(per_shard):
        if any(i * c >= e for i, c, e in zip(coords, inner, extent)):
            continue
        chunk = shard[tuple(slice(i * c, (i + 1) * c) for i, c in zip(coords, inner))]
        encoded = codec.encode(np.ascontiguousarray(chunk))
        index[coords] = (offset, len(encoded))
        parts.append(encoded)
        offset += len(encoded)
    index_bytes = index.tobytes()
    parts += [index_bytes, struct.pack("<I", crc32c(index_bytes))]
    return b"".join(parts)


@lru_cache(maxsize=16)
def morton_order(shape: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """Every index of ``shape`` in the order zarr-python stores a shard's inner chunks: sorted by
    compressed Morton code (bits interleaved dimension by dimension, a dimension dropping out once
    its own bits are used up, as Neuroglancer's compressed Morton code). zarr keeps this in a
    private module that moves between releases, so the project carries its own."""
    bits = [(n - 1).bit_length() for n in shape]

    def code(index: tuple[int, ...]) -> int:
        z, out_bit = 0, 0
        for bit in range(max(bits, default=0)):
            for dim, n_bits in enumerate(bits):
                if bit < n_bits:
                    z |= ((index[dim] >> bit) & 1) << out_bit
                    out_bit += 1
        return z

    return tuple(sorted(itertools.product(*(range(n) for n in shape)), key=code))


def _padded(piece: np.ndarray, block: tuple[int, ...], fill: Any) -> np.ndarray:
    if piece.shape == block:
        return np.ascontiguousarray(piece)
    full = np.full(block, fill, dtype=piece.dtype)
    full[tuple(slice(0, n) for n in piece.shape)] = piece
    return full


def _aligned(start: tuple[int, ...], shape: Sequence[int], block: tuple[int, ...], full: Sequence[int]) -> bool:
    return all(s % b == 0 and ((s + n) % b == 0 or s + n == f)
               for s, n, b, f in zip(start, shape, block, full))


def _layout_of(arr: zarr.Array) -> _Layout | None:
    dtype = np.dtype(arr.dtype)
    if not isinstance(arr.store, LocalStore) or dtype.byteorder == ">" or dtype.hasobject:
        return None
    root = Path(arr.store.root) / arr.path if arr.path else Path(arr.store.root)
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


def _blosc_of(codecs: tuple[Any, ...], dtype: np.dtype) -> Blosc | None:
    if (len(codecs) != 2 or not isinstance(codecs[0], zarr.codecs.BytesCodec)
            or not isinstance(codecs[1], zarr.codecs.BloscCodec)):
        return None
    if dtype.itemsize > 1 and codecs[0].endian is not None and _name(codecs[0].endian) != "little":
        return None
    b = codecs[1]
    return Blosc(cname=_name(b.cname), clevel=b.clevel, shuffle=_SHUFFLE[_name(b.shuffle)],
                 blocksize=b.blocksize, typesize=b.typesize)


def _name(setting: Any) -> str:
    """A codec setting's name: zarr 3.1 holds enums, later releases plain strings."""
    return str(getattr(setting, "value", setting))


@lru_cache(maxsize=1)
def _pool() -> ThreadPoolExecutor:
    # numcodecs releases the GIL while compressing: chunks of one write are encoded in parallel
    return ThreadPoolExecutor(max(1, min(8, len(os.sched_getaffinity(0)))), thread_name_prefix="zarrmill-encode")


# a forked child (e.g. a torch DataLoader worker) has the pool object but none of its threads
os.register_at_fork(after_in_child=_pool.cache_clear)
