"""Extract patches into a store built for training and inference: cuboids around points
(cellfinder-style), random training patches (optional foreground oversampling), or a grid of
overlapping tiles for inference.

- ``points``: CSV (``z,y,x[,label]``), .npy (N x 3) or cellfinder XML. The cuboid is given in network
  voxels at ``network_voxel_size``; it is cut at the data resolution (the image's NGFF scale, or
  ``voxel_size``): round(n x network size / data size) voxels per axis, placed by ``centering``, and
  resampled to the network size by separable linear interpolation with voxel centres aligned.
  Points that are NaN, outside the image or (``edge: drop``) too close to an edge are kept in the
  table as ``dropped`` with the reason.
- ``random``: ``n_patches`` seeded uniform patches; with ``labels`` a fraction
  (``foreground_fraction``, nnU-Net uses 0.33) is forced to contain a foreground voxel.
- ``grid``: tiles of ``tile`` stepping by tile - overlap; the last tile on each axis ends at the
  image edge, so every voxel is covered.

Speed: patches are sorted by z (then y) and cut in units of consecutive patches; inside a unit a
bounded cache of decoded chunks (``cache_mb``) means each input chunk is decoded about once.
Output (zarr v3): ``patches`` (N, C, Z, Y, X) in chunks of ``patches_per_chunk`` patches (4: one read
decodes ~4 patches) and shards of ``patches_per_shard``; a unit writes whole shards only. ``table/`` holds zarr columns (point_id,
center, origin, size, label, status: the points table, read as rows by ``points_table(store)``; a
table in zarr arrays, so zarr-python walks the store without a warning); the store's attributes
record where every patch came from. Read the patches with ``PatchDataset(store)``."""
from __future__ import annotations

from dataclasses import dataclass

import math
from pathlib import Path
from typing import Literal

import numpy as np
import zarr
from pydantic import Field, model_validator

from .errors import ConfigError, InputError, warn
from .io.storage.arrays import (ArraySpec, Codec, ensure_array, ensure_group, fresh_node, open_for_write,
                                open_input_array, write_region)
from .io.storage.chunk_read import read_chunk
from .io.training.patch_table import PATCH_STATUS
from .io.training.cuboids import (
    ChunkCache,
    cast,
    data_size,
    inside,
    origin,
    read_padded,
    resample_linear,
)
from .io.ngff.metadata import check_dimensions, level_index, read_attrs, read_image
from .io.readers.points import read_points
from .io.ngff.units import ngff_to_micrometer
from .runtime.core.contract import MAX_COUNT, MAX_LEVEL, MAX_MB, NonNegativeInt, PlanContext, PositiveFloat, PositiveInt, Seed, TaskParams
from .runtime.core.units import TypedUnit
from .io.storage.location import as_location, recorded_name, zarr_url
from .io.storage.handles import writable_url


@dataclass(frozen=True, kw_only=True)
class PatchRangeUnit(TypedUnit):
    """Patches ``start`` to ``stop`` (of the table): whole shards of the patch array."""

    start: int
    stop: int

STATUS = dict(enumerate(PATCH_STATUS))  # table/status code -> the text points_table shows


# the manual's example for this task (its reference page; tests/test_reference.py runs it)
EXAMPLE = {"params": {"input": "organ/brain.ome.zarr", "output": "cuboids.zarr", "points": "organ/cells.xml",
                      "cuboid": [8, 16, 16], "network_voxel_size": [2, 1, 1], "voxel_size": [2, 1, 1]},
           "sample": ["organ-points", "organ"],
           "note": "Your own points may be a CSV instead: one point a line, `z,y,x` in voxels of the image "
                   "(a header line `z,y,x` first; a fourth column `label` is kept with each patch). On the "
                   "small sample about half the cuboids cross the image's edge: a warning line counts the "
                   "ones `edge: drop` leaves out."}


class Params(TaskParams):
    OBJECT_STORES = True  # image and patch store may be s3://; the points file is read locally

    input: str = Field(description="OME-Zarr image or zarr array (leading axes = channels, last 2-3 spatial)")
    output: str = Field(description="patch store to write (.zarr)")
    mode: Literal["points", "random", "grid"] = Field(
        "points", description="points: a cuboid around each point of the points file; random: n_patches seeded "
                              "patches (with labels, a share forced onto foreground); grid: overlapping tiles that "
                              "cover the image, for inference")
    level: int = Field(0, ge=0, le=MAX_LEVEL, description="OME-Zarr pyramid level")
    points: str | None = Field(None, description="points: CSV (z,y,x[,label]), .npy (N x 3) or cellfinder XML")
    points_unit: Literal["voxel", "physical"] = Field("voxel", description="points: coordinates in voxels or micrometer")
    cuboid: list[PositiveInt] | None = Field(None, min_length=2, max_length=3, description="points/random: patch size in network voxels (z,y,x)")
    network_voxel_size: list[PositiveFloat] | None = Field(None, description="points: network voxel size (um); resample to it")
    voxel_size: list[PositiveFloat] | None = Field(None, description="data voxel size (um), default: the image's NGFF scale")
    centering: Literal["cellfinder", "round"] = Field(
        "cellfinder", description="points: where a cuboid of n voxels starts around a point at c: cellfinder = "
                                  "round(c - n/2) in y and x and int(c - n//2) in z (cellfinder's own rule, so "
                                  "patches match the models it trained); round = round(c - n/2) on every axis")
    edge: Literal["drop", "pad"] = Field(
        "drop", description="points: a cuboid that crosses the image edge is dropped (kept in the table as dropped, "
                            "with the reason) or padded (pad_mode)")
    pad_mode: Literal["constant", "reflect"] = Field(
        "constant", description="edge: pad: the voxels outside the image are pad_value (constant) or the image "
                                "mirrored at its edge (reflect)")
    pad_value: float = Field(0.0, ge=-3.4e38, le=3.4e38, description="edge: pad, pad_mode: constant: the value (must fit the image dtype)")
    n_patches: int = Field(1000, ge=1, le=MAX_COUNT, description="random: patches to draw")
    seed: Seed = 0
    labels: str | None = Field(None, description="random: label image for foreground oversampling")
    foreground_fraction: float = Field(0.33, ge=0, le=1, description="random with labels: share of the patches "
                                                                     "forced to hold a foreground voxel (nnU-Net "
                                                                     "uses 0.33)")
    tile: list[PositiveInt] | None = Field(None, description="grid: tile size (z,y,x)")
    overlap: list[NonNegativeInt] | None = Field(None, description="grid: overlap between tiles (z,y,x)")
    patches_per_chunk: int = Field(4, ge=1, le=MAX_COUNT, description="patches per output chunk (a small group: zarr-python's "
                                   "per-chunk write cost made one patch per chunk 3x slower to write)")
    patches_per_shard: int = Field(64, ge=1, le=MAX_COUNT, description="patches per output shard file (a multiple of patches_per_chunk)")
    patches_per_unit: int = Field(4096, ge=1, le=MAX_COUNT, description="patches per unit (rounded to whole shards)")
    allow_empty: bool = Field(False, description="points: finish with an empty store when every point is dropped "
                              "(default: an error)")
    cache_mb: float = Field(512.0, gt=0, le=MAX_MB, description="decoded-chunk cache per worker")
    # byte shuffle, not bitshuffle: 1.7x faster to write and 2x faster to read patches, ~15 % larger
    codec: Codec = Field(default_factory=lambda: Codec(cname="lz4", clevel=5, shuffle="shuffle"),
                         description="Blosc settings of the patch array (byte shuffle: 1.7x faster to write and 2x "
                                     "faster to read than bitshuffle, about 15 % larger)")

    @model_validator(mode="after")
    def _check(self) -> "Params":
        if self.mode == "points" and not (self.points and self.cuboid):
            raise ValueError("mode points needs points and cuboid")
        if self.mode == "random" and not self.cuboid:
            raise ValueError("mode random needs cuboid")
        if self.mode == "grid" and not self.tile:
            raise ValueError("mode grid needs tile")
        return self


# -- the input image --------------------------------------------------------------------------------
def open_level(path: str | Path, level: int) -> tuple[zarr.Array, tuple[float, ...]]:
    """(array of an OME-Zarr level or a plain zarr array, spatial voxel sizes from its scale)."""
    attrs, _ = read_attrs(as_location(path))
    if "multiscales" not in attrs:
        arr = open_input_array(path)
        return arr, (1.0,) * arr.ndim
    meta = read_image(as_location(path))
    lv = meta.levels[level_index(meta, level)]
    arr = open_input_array(as_location(path) / lv.path)
    check_dimensions(meta, lv, tuple(arr.shape))
    # in micrometer whatever unit the axes declare (network_voxel_size and voxel_size are micrometer)
    return arr, tuple(ngff_to_micrometer(s, ax.get("unit"), str(path))
                      for ax, s in zip(meta.axes, lv.scale) if ax["name"] in "zyx")


def open_image(p: Params) -> tuple[zarr.Array, tuple[float, ...]]:
    """(level array, spatial voxel size in um)."""
    arr, scale = open_level(p.input, p.level)
    n_space = len(p.cuboid or p.tile or [])
    if arr.ndim < n_space:
        raise InputError(f"{p.input}: {arr.ndim} axes, fewer than the {n_space} spatial axes of the patch")
    vs = tuple(p.voxel_size) if p.voxel_size else scale[-n_space:]
    if len(vs) != n_space:
        raise ConfigError(f"voxel_size needs {n_space} entries")
    return arr, vs


# -- requests: one row per output slot -----------------------------------------------------------------
def requests(p: Params, arr: zarr.Array, vs: tuple[float, ...]) -> dict[str, np.ndarray]:
    n = len(p.cuboid or p.tile)
    space = arr.shape[-n:]
    if p.mode == "points":
        return _point_requests(p, space, vs)
    if p.mode == "random":
        return _random_requests(p, arr, space)
    return _grid_requests(p, space)


def _table(ids, centers, origins, sizes, labels, status) -> dict[str, np.ndarray]:
    return {"point_id": np.asarray(ids, np.int64), "center": np.asarray(centers, np.float64),
            "origin": np.asarray(origins, np.int64), "size": np.asarray(sizes, np.int64),
            "label": np.asarray(labels, np.int64), "status": np.asarray(status, np.int8)}


def _point_requests(p: Params, space: tuple[int, ...], vs: tuple[float, ...]) -> dict[str, np.ndarray]:
    n = len(p.cuboid)
    pts = read_points(p.points, p.points_unit, tuple(vs) if n == 3 else (1.0,) + tuple(vs))
    zyx = pts.zyx[:, 3 - n:]
    size = data_size(p.cuboid, p.network_voxel_size or vs, vs) if p.network_voxel_size else tuple(p.cuboid)
    origins = np.zeros((len(zyx), n), np.int64)
    status = np.zeros(len(zyx), np.int8)
    for i, c in enumerate(zyx):
        if not np.all(np.isfinite(c)):
            status[i] = 1
            continue
        origins[i] = origin(c, size, p.centering)
        if not all(0 <= v < s for v, s in zip(c, space)):
            status[i] = 2
        elif p.edge == "drop" and not inside(origins[i], size, space):
            status[i] = 3
    order = np.lexsort((np.nan_to_num(zyx[:, min(1, n - 1)], nan=np.inf), np.nan_to_num(zyx[:, 0], nan=np.inf)))
    sizes = np.tile(np.asarray(size, np.int64), (len(zyx), 1))
    return {k: v[order] for k, v in _table(pts.ids, zyx, origins, sizes, pts.labels, status).items()}


def _random_requests(p: Params, arr: zarr.Array, space: tuple[int, ...]) -> dict[str, np.ndarray]:
    size = np.asarray(p.cuboid)
    if np.any(size > np.asarray(space)):
        raise InputError(f"{p.input}: cuboid {p.cuboid} is larger than the image {list(space)}")
    rng = np.random.default_rng(p.seed)
    origins = np.stack([rng.integers(0, s - c + 1, size=p.n_patches) for s, c in zip(space, size)], axis=1)
    labels = np.full(p.n_patches, -1)
    if p.labels:
        fg = foreground_voxels(p.labels, p.level, len(size), p.seed)
        n_fg = int(round(p.n_patches * p.foreground_fraction))
        if len(fg) and n_fg:
            picks = fg[rng.integers(0, len(fg), size=n_fg)]
            offsets = np.stack([rng.integers(0, c, size=n_fg) for c in size], axis=1)
            origins[:n_fg] = np.clip(picks - offsets, 0, np.asarray(space) - size)
            labels[:n_fg] = 1
    order = np.lexsort((origins[:, min(1, len(size) - 1)], origins[:, 0]))
    centers = origins + size / 2
    t = _table(np.arange(p.n_patches), centers, origins, np.tile(size, (p.n_patches, 1)), labels,
               np.zeros(p.n_patches))
    return {k: v[order] for k, v in t.items()}


def foreground_voxels(path: str, level: int, n_space: int, seed: int, per_chunk: int = 256) -> np.ndarray:
    """Up to ``per_chunk`` seeded foreground coordinates from every chunk of a label image (like
    nnU-Net's class locations), read chunk by chunk."""
    lab, _ = open_level(path, level)
    rng = np.random.default_rng(seed + 1)
    space = lab.shape[-n_space:]
    chunks = lab.chunks[-n_space:]
    found = []
    for idx in np.ndindex(*[math.ceil(s / c) for s, c in zip(space, chunks)]):
        sl = tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(idx, chunks, space))
        block = np.asarray(lab[(0,) * (lab.ndim - n_space) + sl])
        nz = np.argwhere(block > 0)
        if len(nz):
            nz = nz[rng.choice(len(nz), size=min(per_chunk, len(nz)), replace=False)]
            found.append(nz + np.asarray([s.start for s in sl]))
    return np.concatenate(found) if found else np.zeros((0, n_space), np.int64)


def grid_origins(size: int, tile: int, overlap: int) -> list[int]:
    if tile > size:
        raise InputError(f"tile {tile} is larger than the image side {size}")
    step = tile - overlap
    if step <= 0:
        raise ConfigError(f"overlap {overlap} must be smaller than the tile {tile}")
    starts = list(range(0, size - tile + 1, step))
    if starts[-1] != size - tile:
        starts.append(size - tile)  # the last tile ends at the edge: every voxel covered
    return starts


def _grid_requests(p: Params, space: tuple[int, ...]) -> dict[str, np.ndarray]:
    tile = p.tile
    overlap = p.overlap or [0] * len(tile)
    axes = [grid_origins(s, t, o) for s, t, o in zip(space, tile, overlap)]
    origins = np.array(np.meshgrid(*axes, indexing="ij")).reshape(len(tile), -1).T
    n = len(origins)
    return _table(np.arange(n), origins + np.asarray(tile) / 2, origins, np.tile(tile, (n, 1)), np.full(n, -1), np.zeros(n))


# -- plan / run / finish ------------------------------------------------------------------------------
def out_size(p: Params) -> tuple[int, ...]:
    return tuple(p.cuboid or p.tile)


def plan(p: Params, ctx: PlanContext) -> list[PatchRangeUnit]:
    arr, vs = open_image(p)
    req = requests(p, arr, vs)
    n_space = len(out_size(p))
    lead = int(math.prod(arr.shape[:-n_space]))
    n = len(req["point_id"])
    if n == 0:
        raise InputError(f"{p.points or p.input}: no patches to extract")
    _check_pad_value(p, arr.dtype)
    out = p.output_path()
    _report_dropped(p, req["status"], out / "table")
    ensure_group(out, 3, ctx)
    shape = (n, lead) + out_size(p)
    chunk = min(p.patches_per_chunk, n)
    shard = max(chunk, min(p.patches_per_shard, n) // chunk * chunk)
    spec = ArraySpec(shape, str(arr.dtype), (chunk, lead) + out_size(p), (shard, lead) + out_size(p), p.codec, 3,
                     ("patch", "c") + tuple("zyx"[-n_space:]))
    ensure_array(out, "patches", spec, ctx)
    ensure_group(out / "table", 3, ctx)
    for name, values in req.items():
        col = zarr.create_array(writable_url(fresh_node(out / "table" / name, ctx)), shape=values.shape,
                                dtype=values.dtype, chunks=values.shape)
        col[...] = values
    per_unit = max(shard, p.patches_per_unit // shard * shard)
    layer = req["origin"][:, 0] // arr.chunks[-n_space] if n_space == 3 else np.zeros(n, np.int64)
    return [PatchRangeUnit(id=f"p{a}", start=a, stop=b) for a, b in unit_ranges(layer, shard, per_unit)]


def _report_dropped(p: Params, status: np.ndarray, table: Path) -> None:
    """Dropped points are counted by reason in one warning naming the table that lists them; all
    points dropped is an error unless ``allow_empty`` (a wrong unit or level drops everything)."""
    dropped = status != 0
    if not dropped.any():
        return
    counts = np.bincount(status[dropped].astype(np.int64), minlength=len(STATUS))
    reasons = ", ".join(f"{int(counts[k])} {STATUS[k].removeprefix('dropped: ')}" for k in sorted(STATUS)
                        if k and counts[k])
    if dropped.all() and not p.allow_empty:
        raise InputError(f"{p.points}: all {len(status)} points dropped ({reasons}); check points_unit, "
                         "voxel_size, level and edge, or set allow_empty: true")
    warn(table, f"{int(dropped.sum())} of {len(status)} points dropped ({reasons}); their rows say why")


def _check_pad_value(p: Params, dtype: np.dtype) -> None:
    if p.edge == "pad" and p.pad_mode == "constant" and np.dtype(dtype).kind in "iub":
        info = np.iinfo(dtype) if np.dtype(dtype).kind != "b" else np.iinfo(np.uint8)
        if not info.min <= p.pad_value <= info.max:
            raise ConfigError(f"pad_value {p.pad_value:g} does not fit the image's {np.dtype(dtype)} "
                              f"({info.min}..{info.max}); choose a value in that range")


def unit_ranges(layer: np.ndarray, shard: int, per_unit: int) -> list[tuple[int, int]]:
    """Ranges of the z-sorted table made of whole output shards, about ``per_unit`` long, cut
    after the shard where a new input chunk layer starts once a unit has half its size: a unit
    ending mid-layer made two units decode that whole layer. (The few new-layer points of that
    shard stay with the old unit, whose last cuboids reach into the new layer anyway.)"""
    n = len(layer)
    out, a = [], 0
    for b in range(shard, n, shard):
        size = b - a
        if size >= per_unit or (size >= per_unit // 2 and layer[b - 1] != layer[b - shard]):
            out.append((a, b))
            a = b
    out.append((a, n))
    return out


def run_unit(p: Params, unit: PatchRangeUnit) -> int:
    arr, vs = open_image(p)
    out = p.output_path()
    table = {k: zarr.open_array(zarr_url(out / "table" / k), mode="r")[unit.start:unit.stop]
             for k in ("origin", "size", "status")}
    n_space = len(out_size(p))
    lead_shape = arr.shape[:-n_space]
    dst = open_for_write(out / "patches")  # dense: the empty-chunk check cost more than storing rare dropped slots
    shard = dst.shards[0] if dst.shards else 1
    cache = ChunkCache(lambda idx: read_chunk(arr, idx), arr.chunks, arr.shape, arr.dtype, int(p.cache_mb * 2**20))
    written = 0
    for s0 in range(unit.start, unit.stop, shard):
        s1 = min(s0 + shard, unit.stop)
        buf = np.zeros((s1 - s0,) + tuple(dst.shape[1:]), dtype=arr.dtype)
        for k in range(s0, s1):
            i = k - unit.start
            if table["status"][i] != 0:
                continue
            cut = read_padded(cache, table["origin"][i], table["size"][i], p.pad_mode, p.pad_value)
            if tuple(cut.shape[len(lead_shape):]) != out_size(p):
                cut = cast(resample_linear(cut, out_size(p)), arr.dtype)
            buf[k - s0] = cut.reshape(buf.shape[1:])
        write_region(dst, (s0,) + (0,) * (buf.ndim - 1), buf)
        written += buf.nbytes
    return written


def finish(p: Params, ctx: PlanContext) -> None:
    out = p.output_path()
    cols = {k: zarr.open_array(zarr_url(out / "table" / k), mode="r")[...] for k in ("point_id", "status")}
    arr, vs = open_image(p)
    kept = int((cols["status"] == 0).sum())
    zarr.open_group(writable_url(out), mode="a").attrs["zarrmill"] = {"patch_store": {
        "source": recorded_name(p.input), "level": p.level, "mode": p.mode, "voxel_size": list(vs),
        "network_voxel_size": p.network_voxel_size, "patch_size": list(out_size(p)), "centering": p.centering,
        "edge": p.edge, "points": p.points, "n": len(cols["point_id"]), "kept": kept,
        "dropped": len(cols["point_id"]) - kept, "complete": True}}


def describe_unit(unit: PatchRangeUnit) -> str:
    return f"patches {unit.start}-{unit.stop}"
