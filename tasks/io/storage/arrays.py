"""Create and open output arrays the same way in every task: zarr v3 (optionally sharded) or v2,
Blosc codecs that stock zarr-python, ome-zarr-py and napari read, and resume-safe creation."""
from __future__ import annotations

import functools
import itertools
import os
from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Literal, Protocol, Sequence

import numpy as np
import zarr
from pydantic import BaseModel, ConfigDict, Field

from ...errors import InputError, InputNotFoundError, OutputExistsError, UnsafeOutputError
from .atomic import read_json_if_exists
from . import uploads
from .guard import OutputGuard
from .handles import HeldFolder, by_handle, handle_path, open_array_folder
from .location import Where, as_location
from .location import in_bucket, zarr_url

if TYPE_CHECKING:
    import tensorstore as ts
    from numcodecs import Blosc
    from zarr.codecs import BloscCodec

Shuffle = Literal["shuffle", "bitshuffle", "noshuffle"]


class Codec(BaseModel):
    """Blosc settings for zarr outputs (lossless; read by stock zarr readers)."""

    model_config = ConfigDict(extra="forbid")
    cname: Literal["zstd", "lz4", "lz4hc", "blosclz", "zlib"] = Field("zstd", description="Blosc compressor")
    clevel: int = Field(5, ge=0, le=9, description="compression level")
    shuffle: Shuffle = Field("shuffle", description="byte shuffle (bitshuffle helps low-entropy uint8/uint16)")
    blocksize: int = Field(0, ge=0, le=2**30, description="Blosc block in bytes (0: Blosc chooses); zstd compresses "
                           "1.5x faster in 1 MiB blocks than in Blosc's own, for slightly fewer bytes")

    def for_format(self, zarr_format: int) -> BloscCodec | Blosc:
        if zarr_format == 3:
            return zarr.codecs.BloscCodec(cname=self.cname, clevel=self.clevel, shuffle=self.shuffle,
                                          blocksize=self.blocksize)
        from numcodecs import Blosc

        mode = {"shuffle": Blosc.SHUFFLE, "bitshuffle": Blosc.BITSHUFFLE, "noshuffle": Blosc.NOSHUFFLE}
        return Blosc(cname=self.cname, clevel=self.clevel, shuffle=mode[self.shuffle], blocksize=self.blocksize)


# the default codecs by job shape (ingest_params.Params.chosen_codec; manual: Performance, #39)
PLATE_CODEC = Codec(cname="zstd", clevel=1, shuffle="shuffle", blocksize=1 << 20)
VOLUME_CODEC = Codec(cname="lz4", clevel=5, shuffle="bitshuffle")


class WriteContext(Protocol):
    """What creating an output node needs to know (the runtime's PlanContext is one)."""

    resume: bool
    overwrite: bool
    guard: OutputGuard | None


def check_array_name(root: Where, name: str) -> None:
    """An array's path under its group: plain names, never '..' ("" for the group itself)."""
    if name and any(part in ("..", "") for part in name.split("/")):
        raise UnsafeOutputError(f"{root}: array path {name!r} must be plain names without '..'")


def _guard(ctx: WriteContext) -> OutputGuard:
    """The run's own guard, tied to its lock: a node is never created or replaced without it (a
    guard made here would judge ownership without the run's lock and records)."""
    if ctx.guard is None:
        raise RuntimeError("an output node is created without the run's output guard (a bug in the task)")
    return ctx.guard


@dataclass(frozen=True)
class ArraySpec:
    shape: tuple[int, ...]
    dtype: str
    chunks: tuple[int, ...]
    shards: tuple[int, ...] | None = None
    codec: Codec = field(default_factory=Codec)
    zarr_format: int = 3
    dimension_names: tuple[str, ...] | None = None

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize

    @property
    def write_block(self) -> tuple[int, ...]:
        """The unit of writing: a whole shard where there are shards, else a chunk."""
        return self.shards or self.chunks


def ensure_array(root: Path, name: str, spec: ArraySpec, ctx: WriteContext) -> None:
    """Keep the array if a resumed run created it identically; else create it (units open arrays
    themselves).

    An existing node is replaced only with ``--overwrite`` (or when resuming this step's own
    half-made output), and only if zarrmill created it (the output guard); a fresh run never
    silently reuses one."""
    guard = _guard(ctx)
    check_array_name(root, name)
    path = guard.contain(as_location(root) / name if name else as_location(root), what="array path")
    place = guard.place
    there = not guard.skips_look(path) and place.node_there(path)
    kwargs = _create_kwargs(spec)
    if there:
        if ctx.resume and place.is_array_as_made(path, kwargs):
            return  # this step's own array, as it made it
        if ctx.resume and _exists(path) and _matches(zarr.open_array(zarr_url(path), mode="r"), spec):
            return  # an equivalent one (zarr compared it)
        empty = place.is_empty(path)  # nothing, or only the claim of a store that is this array
        if not (ctx.overwrite or ctx.resume) and not empty:
            raise OutputExistsError(
                f"{path}: an array already exists here (not from this step's ledger); rerun with "
                f"--overwrite to replace it, or choose another output")
        if not empty:
            guard.remove(path)
    guard.will_create(path, absent=None if place.cheap_lookups or there else True)
    place.make_array(path, kwargs)


def fresh_node(path: Where, ctx: WriteContext) -> Where:
    """Room for a node a step writes whole with zarr itself (a table's column): one already there
    goes through the output guard (only if zarrmill created it), and the new one is recorded as the
    run's before zarr creates it (zarr's own overwrite deletes without asking)."""
    guard = _guard(ctx)
    where = guard.contain(as_location(path), what="array path")
    if guard.place.node_there(where):
        guard.remove(where)
    guard.will_create(where, absent=True)
    return where


def _create_kwargs(spec: ArraySpec) -> dict[str, object]:
    kwargs: dict[str, object] = dict(
        shape=spec.shape, dtype=spec.dtype, chunks=spec.chunks, zarr_format=spec.zarr_format,
        compressors=spec.codec.for_format(spec.zarr_format), fill_value=0,
    )
    if spec.zarr_format == 3:
        kwargs["shards"] = spec.shards
        kwargs["dimension_names"] = spec.dimension_names
    else:
        kwargs["chunk_key_encoding"] = {"name": "v2", "separator": "/"}
    return kwargs


def open_input_array(path: str | Path) -> zarr.Array:
    """An input array, read-only; damaged metadata or a path that holds no array is one clear
    error naming the path (zarr-python would raise from deep inside)."""
    path = as_location(path)
    for name in ("zarr.json", ".zarray"):
        meta = read_json_if_exists(path / name)  # names the file and position if it is damaged
        if meta is not None:
            if name == "zarr.json" and meta.get("node_type") != "array":
                raise InputError(f"{path}: a zarr group, not an array")
            return zarr.open_array(zarr_url(path), mode="r")
    if not path.exists():
        raise InputNotFoundError(f"{path}: does not exist")
    raise InputError(f"{path}: not a zarr array (no zarr.json or .zarray)")


def open_for_write(path: str | Path, sparse: bool = False) -> zarr.Array:
    """Open an output array in a unit. ``write_region`` stores no chunk that is all fill value
    (zarr reads it back as the fill value), dense or sparse. Writes that fall back to zarr-python
    keep ``sparse`` semantics: dense writers skip its is-this-chunk-empty check, which cost as much
    as compressing the chunk (measured: 14 of 34 ms per 1080x1280 uint16 plane)."""
    # zarr 3.1 silently ignores open_array(config=...); with_config is what takes effect
    return zarr.open_array(zarr_url(path), mode="r+").with_config({"write_empty_chunks": not sparse})


def write_region(arr: zarr.Array, start: Sequence[int], data: np.ndarray, handed_over: bool = False) -> None:
    """``arr[start:start + data.shape] = data`` through tensorstore for arrays on the local file
    system, else through zarr-python; in a bucket, inside a unit, as uploads that go on after
    this returns (uploads.py). ``handed_over``: the caller never changes ``data`` afterwards, so
    those uploads read it where it is instead of a copy.

    Why tensorstore: on whole-shard writes of microscopy planes it is 3.3-4x zarr-python's own
    pipeline and 1.3-1.5x zarr-python with the zarrs pipeline (which, besides, orders a shard's
    chunks by thread timing unless run on one thread); zarrmill's hand-written encoder it replaces
    was 1.0x (tests/bench/bench_chunk_path.py). Its files are zarr's (read back by stock zarr-python in
    tests/test_chunk_path.py), the same bytes on every run and executor, each written to a new file
    and renamed into place, so a killed run never leaves a torn chunk or shard.

    The region goes to tensorstore one write block (shard, or chunk) at a time, at most
    ``IN_FLIGHT_BYTES`` at once: tensorstore holds a copy of what it is given until it is written,
    so one call for a whole unit would hold a second copy of the unit's pixels."""
    target = _tensorstore_of(arr, writes=True)
    start = tuple(int(s) for s in start)
    queue = uploads.current() if target is None and in_bucket(arr) else None
    if queue is not None:
        _queue_blocks(queue, arr, start, data, handed_over)
        return
    if target is None:
        arr[tuple(slice(s, s + n) for s, n in zip(start, data.shape))] = data
        return
    data = np.asarray(data, dtype=arr.dtype)
    pending: deque[tuple[ts.Future, int]] = deque()
    in_flight = 0
    for piece in _write_blocks(start, data.shape, tuple(getattr(arr, "shards", None) or arr.chunks)):
        # a view: tensorstore copies what it is given into its chunk buffer anyway (it may not keep
        # references), so a contiguous copy first was a second pass over every byte (0.45 vs 0.63 s
        # for 268 MB of a volume's regions)
        part = data[tuple(slice(p.start - s, p.stop - s) for p, s in zip(piece, start))]
        while pending and in_flight + part.nbytes > IN_FLIGHT_BYTES:
            future, nbytes = pending.popleft()
            future.result()
            in_flight -= nbytes
        pending.append((target[piece].write(part), part.nbytes))
        in_flight += part.nbytes
    for future, _ in pending:
        future.result()


def _queue_blocks(queue: uploads.Uploads, arr: zarr.Array, start: tuple[int, ...], data: np.ndarray,
                  handed_over: bool) -> None:
    """Each write block of the region as its own upload (uploads.py): of the caller's array when
    it is handed over, else of a copy (the caller may reuse its array, a plane buffer, at once). A
    block of one unsharded chunk that holds a non-zero pixel is written without zarr's
    is-this-chunk-empty check (np.any costs a fraction of it); an empty one, or a shard, goes
    through zarr's own sparse rules (an empty chunk is not stored)."""
    data = np.asarray(data, dtype=arr.dtype)
    sharded = getattr(arr, "shards", None) is not None
    dense = arr.with_config({"write_empty_chunks": True}) if not sharded else arr
    grid = tuple(getattr(arr, "shards", None) or arr.chunks)
    for piece in _write_blocks(start, data.shape, grid):
        part = data[tuple(slice(p.start - s, p.stop - s) for p, s in zip(piece, start))]
        target = dense if arr.config.write_empty_chunks or (not sharded and np.any(part)) else arr
        # the object this piece lands in: one write to it at a time (uploads.Uploads.submit)
        block = (str(arr.store_path), tuple(p.start // b for p, b in zip(piece, grid)))
        if handed_over:
            queue.submit(functools.partial(target.__setitem__, piece, part), 0, block)  # no copy held
        elif part.nbytes > queue.limit // 2:
            queue.wait_for(block)
            target[piece] = part  # a large shard: a copy would double it
        else:
            queue.submit(functools.partial(target.__setitem__, piece, np.array(part)), part.nbytes, block)


def read_region(arr: zarr.Array, region: tuple[slice, ...]) -> np.ndarray:
    """``arr[region]``: through tensorstore for arrays on the local file system (it decodes the
    chunks on all cores: 64 MB of level 1 in 0.2 s where zarr-python took 0.75 s), else zarr-python."""
    source = _tensorstore_of(arr)
    if source is None:
        return np.asarray(arr[region])
    return np.asarray(source[region].read().result())


# bytes handed to tensorstore and not yet written, per call: many small chunks still go out in
# parallel, large shards a few at a time (a unit's memory stays its own pixels plus this)
IN_FLIGHT_BYTES = 32 * 2**20


def _write_blocks(start: tuple[int, ...], shape: tuple[int, ...], block: tuple[int, ...]) -> Iterator[tuple[slice, ...]]:
    """The region ``start`` + ``shape`` cut at the write-block boundaries of the array's grid."""
    axes = []
    for s, n, b in zip(start, shape, block):
        cuts = [s, *range((s // b + 1) * b, s + n, b), s + n]
        axes.append([slice(lo, hi) for lo, hi in zip(cuts, cuts[1:])])
    return itertools.product(*axes)


def local_root(arr: zarr.Array) -> Path:
    """The folder of an array on a LocalStore (its store root, or the array's path inside it)."""
    return Path(arr.store.root) / arr.path if arr.path else Path(arr.store.root)


def _tensorstore_of(arr: zarr.Array, writes: bool = False) -> HeldFolder | None:
    from zarr.storage import LocalStore

    if not isinstance(arr.store, LocalStore):
        return None
    path = local_root(arr)
    meta = path / ("zarr.json" if arr.metadata.zarr_format == 3 else ".zarray")
    try:
        stamp = meta.stat().st_mtime_ns  # an array replaced at the same path is opened anew
    except FileNotFoundError:
        return None
    # absolute: tensorstore refuses a relative path that climbs ('../out.zarr')
    return _open_tensorstore(os.path.abspath(path), arr.metadata.zarr_format, stamp, writes)


# Each open handle keeps ~1 MB (shard indexes, write state) even without a chunk cache: 64 handles
# made a 48-well ingest peak 60 MB higher than 16 do, and a unit writes at most ~6 arrays.
@lru_cache(maxsize=16)
def _open_tensorstore(path: str, zarr_format: int, stamp: int, writes: bool) -> HeldFolder:
    """tensorstore on the array's folder; to write, through a handle of it (handles.py: what a
    colleague swaps on the path afterwards is never written through), which the result holds.
    Reads go by path: an input may reach its arrays through the user's own links."""
    import tensorstore as ts

    fd = open_array_folder(path) if writes and by_handle() else None
    where = handle_path(fd) if fd is not None else path
    spec = {"driver": "zarr3" if zarr_format == 3 else "zarr", "kvstore": {"driver": "file", "path": where}}
    try:
        return HeldFolder(ts.open(spec, open=True, context=_tensorstore_context()).result(), fd)
    except BaseException:
        if fd is not None:
            os.close(fd)
        raise


@lru_cache(maxsize=1)
def _tensorstore_context() -> ts.Context:
    import tensorstore as ts

    # no chunk cache (every byte is written once); no fsync per file, as zarr's LocalStore
    return ts.Context({"cache_pool": {"total_bytes_limit": 0}, "file_io_sync": False})


# a forked child (e.g. a torch DataLoader worker) has tensorstore's objects but none of its threads
os.register_at_fork(after_in_child=lambda: (_open_tensorstore.cache_clear(), _tensorstore_context.cache_clear()))


def _exists(path: Path) -> bool:
    return (path / "zarr.json").exists() or (path / ".zarray").exists()


def _matches(arr: zarr.Array, spec: ArraySpec) -> bool:
    shards = getattr(arr, "shards", None)
    return (tuple(arr.shape) == tuple(spec.shape) and np.dtype(arr.dtype) == np.dtype(spec.dtype)
            and tuple(arr.chunks) == tuple(spec.chunks)
            and (tuple(shards) if shards else None) == (tuple(spec.shards) if spec.shards else None))


def ensure_group(path: Path, zarr_format: int, ctx: WriteContext) -> None:
    """Open or create a group of the output (never replacing one); a new one is recorded with the
    output guard first."""
    guard = _guard(ctx)
    path = guard.contain(path, what="group path")
    guard.will_create(path, absent=True if guard.skips_look(path) else None)
    guard.place.make_group(path, zarr_format)
