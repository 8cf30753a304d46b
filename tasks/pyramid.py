"""Add multiscale levels to an OME-Zarr image, or to every image of a plate.

Each level is built from the previous one as stored (level 0 is read once, never per level), one
unit per group of whole output shards/chunks, levels in order (engine stages). The dtype of every
level equals level 0's; ``mode`` keeps label values intact (never averaged).

Conventions: y and x shrink by ``factor``; z by 2 only where that makes voxels more isotropic
(``z_factor: auto``) or when asked. A shape that does not divide keeps a last partial block,
averaged over the pixels it has (level size = ceil(n / f)). ``scale`` is multiplied by the
factors; for ``mean``/``mode`` a level's pixel centre is the centre of the block it summarises, so
``translation`` shifts by (f - 1) / 2 x the previous pixel size; ``nearest`` samples the block's
first pixel and keeps the translation. Chunks grow toward ``target_chunk_mb`` at low levels instead
of shrinking, and (zarr v3) shards gather up to ``shard_mb``, so low levels are a few files.
Level-0 is never rewritten; the image metadata lists the new levels only once all are complete."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Callable, Literal

import numpy as np
import zarr
from pydantic import Field

from .errors import InputError, OutputExistsError
from .io.storage.nodes import ArrayNode
from .io.storage.uploads import writes_in_flight
from .io.storage.arrays import ArraySpec, Codec, open_for_write, open_input_array, read_region, write_region
from .io.storage.downsample import downsample, out_shape
from .io.storage.layout import level_chunks, level_shards
from .io.storage.location import as_location, on_disk
from .io.ngff.metadata import (
    ImageMeta,
    Level,
    check_dimensions,
    plate_images,
    read_image,
    write_image_metadata,
)
from .runtime.core.regions import group_regions, holds
from .runtime.core.unit_stream import Batch
from .runtime.core.contract import MAX_INDEX, MAX_MB, THREADS, PlanContext, TaskParams
from .runtime.core.units import PlacedUnit, Region, describe_region
from .io.storage.location import zarr_url

MAX_LEVELS = 12
SLAB_BYTES = 4 * 2**20

WORKERS = THREADS  # its units read files and run numpy and Blosc, all outside the GIL


@dataclass(frozen=True, kw_only=True)
class LevelUnit(PlacedUnit):
    """One region of level ``dst`` of the image ``image`` under ``base``, downsampled by
    ``factors`` from level ``src`` as stored. Placed in ingest's, reshard's and labels' plans for
    the levels they read back: the engine runs it as it is (``run``)."""

    base: str
    image: str
    src: str
    dst: str
    factors: list[int]
    method: str
    region: Region
    sparse: bool = False

    @writes_in_flight  # its PUTs overlap its encoding; all stored before it returns (uploads.py)
    def run(self) -> int:
        return run_level_unit(as_location(self.base), self)

    def describe(self) -> str:
        return f"image {self.image or '.'} level {self.dst} region {describe_region(self.region)}"

# the manual's example for this task (its reference page; tests/test_reference.py runs it)
EXAMPLE = {"params": {"input": "brain.ome.zarr", "min_size": 64}, "after": "generate"}


class Params(TaskParams):
    OBJECT_STORES = True  # input and output may be s3:// (input also https://)

    input: str = Field(description="OME-Zarr image, or plate (every field image gets a pyramid)")
    method: Literal["auto", "mean", "mode", "nearest"] = Field(
        "auto", description="auto: mode for label images (image-label metadata), mean otherwise")
    factor: int = Field(2, ge=2, le=8, description="downsampling factor in y and x")
    z_factor: Literal["auto"] | Annotated[int, Field(ge=1, le=8)] = Field(
        "auto", description="z factor per level: auto = 2 where it makes voxels more isotropic, else an integer (1 = never)")
    levels: int | None = Field(None, ge=2, le=MAX_LEVELS, description="total levels incl. level 0 (default: down to min_size)")
    min_size: int = Field(256, ge=1, le=MAX_INDEX, description="stop once a level's largest y/x side is at most this")
    target_chunk_mb: float | None = Field(None, gt=0, le=MAX_MB, description="chunk size to keep at low levels (default: level 0's, at least 1 MB)")
    shard_mb: float | None = Field(16.0, gt=0, le=MAX_MB, description="zarr v3: shard size per level (null: no shards)")
    codec: Codec | None = Field(None, description="codec of new levels (default: level 0's Blosc settings, else zstd)")
    unit_mb: float = Field(16.0, gt=0, le=MAX_MB, description="target output size of one unit of work")

    def ledger_root(self) -> Path:
        return as_location(self.input)

    def writes_in_place(self) -> bool:
        return True

    def output_path(self) -> Path:
        return as_location(self.input)


def _images(p: Params) -> list[str]:
    found = plate_images(as_location(p.input))
    return found if found is not None else [""]


def _method(p: Params, meta: ImageMeta) -> str:
    if p.method != "auto":
        return p.method
    return "mode" if "image-label" in meta.attrs else "mean"


def level_plan(p: Params, meta: ImageMeta, shape0: tuple[int, ...]) -> list[tuple[tuple[int, ...], tuple[int, ...], Level]]:
    """[(factors, shape, Level)] for levels 1.. from level 0's shape and transforms."""
    names = meta.axis_names
    yx = [names.index("y"), names.index("x")]
    z = names.index("z") if "z" in names else None
    method = _method(p, meta)
    out = []
    shape = tuple(shape0)
    scale = list(meta.levels[0].scale)
    translation = list(meta.levels[0].translation or [0.0] * len(shape))
    while len(out) + 1 < (p.levels or MAX_LEVELS):
        if p.levels is None and max(shape[a] for a in yx) <= p.min_size:
            break
        factors = [1] * len(shape)
        for a in yx:
            factors[a] = p.factor if shape[a] > 1 else 1
        if z is not None and shape[z] > 1:
            if p.z_factor == "auto":
                factors[z] = 2 if scale[z] * 2 <= min(scale[a] * factors[a] for a in yx) else 1
            else:
                factors[z] = int(p.z_factor)
        if all(f == 1 for f in factors):
            break
        if method != "nearest":
            translation = [t + (f - 1) / 2 * s for t, f, s in zip(translation, factors, scale)]
        scale = [s * f for s, f in zip(scale, factors)]
        shape = out_shape(shape, tuple(factors))
        out.append((tuple(factors), shape, Level(str(len(out) + 1), list(scale), list(translation))))
    return out


def _stored_codec(arr: zarr.Array) -> Codec:
    """The Blosc settings a stored array was written with (zstd's defaults for another codec).
    A zarr v3 codec says them in ``to_dict``'s configuration; a v2 compressor (numcodecs) in
    ``get_config``, its shuffle as a number (-1: Blosc chooses, bitshuffle for 1-byte items)."""
    for c in arr.compressors:
        if hasattr(c, "to_dict"):
            cfg = c.to_dict().get("configuration", {})
        else:
            cfg = c.get_config() if hasattr(c, "get_config") else {}
        cname = cfg.get("cname") or getattr(c, "cname", None)
        if cname:
            shuffle = str(cfg.get("shuffle", "shuffle")).replace("BloscShuffle.", "")
            auto = "bitshuffle" if arr.dtype.itemsize == 1 else "shuffle"
            shuffle = {"-1": auto, "0": "noshuffle", "1": "shuffle", "2": "bitshuffle"}.get(shuffle, shuffle)
            return Codec(cname=cname, clevel=int(cfg.get("clevel", 5)), shuffle=shuffle,
                         blocksize=int(cfg.get("blocksize", 0) or 0))
    return Codec()


def _level_specs(p: Params, meta: ImageMeta, spec0: ArraySpec, across_lead: bool = True
                 ) -> list[tuple[tuple[int, ...], ArraySpec, Level]]:
    """Levels 1.. of an image whose level 0 is ``spec0``: their factors, arrays and metadata."""
    spatial = [i for i, a in enumerate(meta.axis_names) if a in "zyx"]
    itemsize = spec0.itemsize
    base = tuple(spec0.chunks)
    target = int(p.target_chunk_mb * 2**20) if p.target_chunk_mb else max(math.prod(base) * itemsize, 2**20)
    codec = p.codec if p.codec is not None else spec0.codec
    specs = []
    for factors, shape, level in level_plan(p, meta, tuple(spec0.shape)):
        chunks = level_chunks(shape, base, spatial, itemsize, target)
        shards = None
        if meta.zarr_format == 3 and p.shard_mb:
            shards = level_shards(shape, chunks, spatial, itemsize, int(p.shard_mb * 2**20), across_lead)
        specs.append((factors, ArraySpec(shape, spec0.dtype, chunks, shards, codec, meta.zarr_format,
                                         tuple(meta.axis_names)), level))
    return specs


def plan(p: Params, ctx: PlanContext) -> list[LevelUnit]:
    units: list[LevelUnit] = []
    for image in _images(p):
        root = as_location(p.input) / image
        meta = read_image(root)
        if len(meta.levels) > 1 and not ctx.resume:
            if not ctx.overwrite:
                raise OutputExistsError(f"{root}: already has {len(meta.levels)} levels; --overwrite "
                                        f"rebuilds levels 1.. from level 0")
            foreign = [lv.path for lv in meta.levels[1:] if ctx.guard is not None
                       and not ctx.guard.may_replace(ctx.guard.contain(root / lv.path, what="level path"))]
            if foreign:
                raise OutputExistsError(
                    f"{root}: levels {', '.join(foreign)} were not written by zarrmill, so --overwrite does not "
                    "replace them; run pyramid on a copy (zarrmill task rechunk) to rebuild its levels")
            # metadata first lists level 0 only, so it never points at arrays being rebuilt
            _write_levels(root, meta, meta.levels[:1])
        units += plan_image_levels(p, as_location(p.input), image, meta, _level0(root / meta.levels[0].path), ctx)
    return units


LevelSpecs = list[tuple[tuple[int, ...], ArraySpec, Level]]


def _create_levels(p: Params, base: Path, image: str, meta: ImageMeta, spec0: ArraySpec, ctx: PlanContext,
                   across_lead: bool = True, adjust: Callable[[LevelSpecs], LevelSpecs] | None = None
                   ) -> tuple[str, LevelSpecs]:
    """Create the arrays of levels 1.. of one image whose level 0 is ``spec0`` (made by the calling
    plan, or read by the pyramid task from its input): (method, specs). ``adjust`` may change the
    specs (chunks) before the arrays are made (pyramid_regions.py)."""
    check_dimensions(meta, meta.levels[0], tuple(spec0.shape))
    specs = _level_specs(p, meta, spec0, across_lead)
    if adjust is not None:
        specs = adjust(specs)
    for _, spec, level in specs:
        ctx.nodes.append(ArrayNode(base / image, level.path, spec))
    return _method(p, meta), specs


_LEVEL0: dict[bytes, ArraySpec] = {}  # metadata document -> the level-0 spec it describes


def _level0(path: Path) -> ArraySpec:
    """A stored level 0 (the pyramid task's input) as a spec: its shape, dtype, chunks, shards and
    codec. The images of a plate share one document, and opening each through zarr cost ~3 ms an
    image (a 1536-well plate: 5 s)."""
    local = on_disk(path)
    doc = None
    if local is not None:
        try:
            doc = (local / "zarr.json").read_bytes()
        except OSError:
            doc = None
    spec = _LEVEL0.get(doc) if doc is not None else None
    if spec is None:
        arr = open_input_array(path)
        spec = ArraySpec(tuple(arr.shape), str(arr.dtype), tuple(arr.chunks), arr.shards, _stored_codec(arr),
                         arr.metadata.zarr_format, None)
        if doc is not None:
            if len(_LEVEL0) > 64:
                _LEVEL0.clear()
            _LEVEL0[doc] = spec
    return spec


def plan_image_levels(p: Params, base: Path, image: str, meta: ImageMeta, spec0: ArraySpec, ctx: PlanContext,
                      first_stage: int = 1, sparse: bool = False) -> list[LevelUnit]:
    """Create levels 1.. of one image whose level 0 is ``spec0`` and return their units; level k
    runs in stage ``first_stage + k - 1``. Other tasks (reshard) call this for the images they write."""
    method, specs = _create_levels(p, base, image, meta, spec0, ctx)
    return _level_units(base, image, meta.levels[0].path, specs, method, spec0.itemsize, p.unit_mb,
                        first_stage, sparse)


def _level_units(base: Path, image: str, prev: str, specs: list[tuple[tuple[int, ...], ArraySpec, Level]], method: str,
                 itemsize: int, unit_mb: float, first_stage: int = 1, sparse: bool = False) -> list[LevelUnit]:
    """Units building each level of ``specs`` from the one before as stored, starting from ``prev``;
    the first of them in stage ``first_stage``."""
    return [unit for batch in _level_batches(base, image, prev, specs, method, itemsize, unit_mb, first_stage, sparse)
            for unit in batch.make()]


def _level_batches(base: Path, image: str, prev: str, specs: list[tuple[tuple[int, ...], ArraySpec, Level]], method: str,
                   itemsize: int, unit_mb: float, first_stage: int = 1, sparse: bool = False) -> list[Batch]:
    """``_level_units`` as one batch per level, made when handed out (runtime/core/unit_stream.py)."""
    batches = []
    for k, (factors, spec, level) in enumerate(specs):
        regions = group_regions(spec.shape, spec.write_block, itemsize, int(unit_mb * 2**20))
        sizes = [holds(reg, itemsize) for reg in regions]

        def unit_of(i: int, regions=regions, k=k, factors=factors, level=level, prev=prev) -> LevelUnit:
            return LevelUnit(id=f"{image or '.'}:{level.path}:{i}", stage=first_stage + k, base=str(base), image=image,
                             src=prev, dst=level.path, factors=list(factors), method=method, sparse=sparse,
                             region=[list(r) for r in regions[i]], memory=holds(regions[i], itemsize))

        batches.append(Batch(first_stage + k, len(regions), max(sizes, default=0), sum(sizes), all(sizes),
                             lambda i, level=level: f"{image or '.'}:{level.path}:{i}", unit_of))
        prev = level.path
    return batches


def image_level_batches(p: Params, base: Path, image: str, meta: ImageMeta, spec0: ArraySpec, ctx: PlanContext,
                        first_stage: int = 1, sparse: bool = False) -> list[Batch]:
    """``plan_image_levels`` for a plan too large to hold its units (a full plate's wells)."""
    method, specs = _create_levels(p, base, image, meta, spec0, ctx)
    return _level_batches(base, image, meta.levels[0].path, specs, method, spec0.itemsize, p.unit_mb,
                          first_stage, sparse)


def plan_levels_in_memory(p: Params, base: Path, image: str, meta: ImageMeta, spec0: ArraySpec, ctx: PlanContext,
                          across_lead: bool = False) -> list[dict]:
    """Create levels 1.. of an image whose writers build them from the level-0 volumes they hold in
    memory (reshard, ingest layout well). Unless one writer holds every channel and time point
    (``across_lead``), no shard spans two, so no two writers share one. Returns [{path, factors,
    method}] for those writers."""
    method, specs = _create_levels(p, base, image, meta, spec0, ctx, across_lead)
    return [{"path": level.path, "factors": list(factors), "method": method} for factors, _, level in specs]


def write_levels_from(data: np.ndarray, start: list[int], image_root: Path, levels: list[dict],
                      sparse: bool = False) -> int:
    """Write the levels ``levels`` (from a planner above) of the region ``data`` of level 0 that
    starts at ``start``, each downsampled from the one before in memory. Returns the bytes written."""
    nbytes = 0
    for level in levels:
        factors = tuple(level["factors"])
        data = downsample(data, factors, level["method"])
        start = [a // f for a, f in zip(start, factors)]  # a multiple of f: regions are planned so
        write_region(open_for_write(image_root / level["path"], sparse=sparse), start, data, handed_over=True)
        nbytes += data.nbytes
    return nbytes


def pyramid_levels(p: Params, meta: ImageMeta, shape0: tuple[int, ...]) -> list[Level]:
    """Every level's transforms, level 0 included (what the metadata lists once all are written)."""
    return [meta.levels[0]] + [level for _, _, level in level_plan(p, meta, shape0)]


def run_unit(p: Params, unit: LevelUnit) -> int:
    return unit.run()  # its root is p.input's (plan)


def run_level_unit(base: Path, unit: LevelUnit) -> int:
    """Build one region of one level from the previous level as stored. The region (a whole
    shard) is assembled slab by slab, so memory is the shard plus one slab, not 2^n x the shard."""
    root = base / unit.image
    src = zarr.open_array(zarr_url(root / unit.src), mode="r")
    dst = open_for_write(root / unit.dst, sparse=unit.sparse)
    factors = tuple(unit.factors)
    region = [(a, b) for a, b in unit.region]
    out = np.empty(tuple(b - a for a, b in region), dtype=dst.dtype)
    for slab in _slabs(region, dst.dtype.itemsize):
        src_region = tuple(slice(a * f, min(b * f, n)) for (a, b), f, n in zip(slab, factors, src.shape))
        part = downsample(read_region(src, src_region), factors, unit.method)
        if part.dtype != dst.dtype:
            raise InputError(f"{root}: level {unit.dst} would be {part.dtype}, level 0 is {dst.dtype}")
        out[tuple(slice(a - r0, b - r0) for (a, b), (r0, _) in zip(slab, region))] = part
    write_region(dst, [a for a, _ in region], out, handed_over=True)
    return out.nbytes


def _slabs(region: list[tuple[int, int]], itemsize: int) -> list[list[tuple[int, int]]]:
    """Split a region along its first axis longer than 1 into slabs of about SLAB_BYTES output."""
    sizes = [b - a for a, b in region]
    axis = next((i for i, n in enumerate(sizes) if n > 1), 0)
    row_bytes = math.prod(sizes) // max(sizes[axis], 1) * itemsize
    step = max(1, SLAB_BYTES // max(row_bytes, 1))
    a0, b0 = region[axis]
    return [region[:axis] + [(a, min(a + step, b0))] + region[axis + 1:] for a in range(a0, b0, step)]


def finish(p: Params, ctx: PlanContext) -> None:
    for image in _images(p):
        root = as_location(p.input) / image
        meta = read_image(root)
        arr0 = open_input_array(root / meta.levels[0].path)
        _write_levels(root, meta, pyramid_levels(p, meta, tuple(arr0.shape)))


def _write_levels(root: Path, meta: ImageMeta, levels: list[Level]) -> None:
    ms = meta.attrs["multiscales"][0]
    extra = {k: v for k, v in meta.attrs.items() if k not in {"multiscales", "version"}}
    write_image_metadata(root, meta.version, meta.axes, levels, name=ms.get("name"), extra=extra, placed=meta.placed)


def describe_unit(unit: LevelUnit) -> str:
    return unit.describe()
