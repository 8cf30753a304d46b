"""Copy a zarr array or a whole OME-Zarr image (every pyramid level) into new chunks, shards or codec.

One unit per group of whole output shards (or chunks), so no two units write the same shard. The
image metadata (multiscales, omero, translations), ``tables/`` and ``labels/`` are copied in
``finish``, after every array is complete: an interrupted rechunk is never a valid-looking image."""
from __future__ import annotations


import numpy as np
import zarr
from pydantic import Field, model_validator

from .errors import ConfigError, InputError
from .io.storage.nodes import ArrayNode, GroupNode
from .io.storage.arrays import ArraySpec, Codec, open_for_write, open_input_array, write_region
from .io.storage.subtrees import carry_subtrees
from .io.ngff.metadata import (
    NGFF_FORMATS,
    ImageMeta,
    NgffVersion,
    check_dimensions,
    read_attrs,
    read_image,
    write_image_metadata,
)
from .runtime.core.regions import group_regions, holds, region_nbytes, region_slices
from .runtime.core.contract import MAX_MB, THREADS, PlanContext, PositiveInt, TaskParams
from .runtime.core.units import RegionUnit, describe_region
from .io.storage.location import as_location, zarr_url

UNIT_MB = 64

WORKERS = THREADS  # its units read files and run numpy and Blosc, all outside the GIL

# the manual's example for this task (its reference page; tests/test_reference.py runs it)
EXAMPLE = {"params": {"input": "brain.ome.zarr", "output": "brain-sharded.ome.zarr", "chunks": [16, 64, 64],
                      "shards": [64, 256, 256]},
           "after": "generate"}


class Params(TaskParams):
    OBJECT_STORES = True  # input and output may be s3:// (input also https://)

    input: str = Field(description="zarr array, or OME-Zarr image group (all levels are copied)")
    output: str = Field(description="where to write: a new or empty folder, or a store zarrmill wrote (replaced only with --overwrite)")
    chunks: list[PositiveInt] | None = Field(None, description="chunk shape (default: the input's); clipped to each level")
    shards: list[PositiveInt] | None = Field(None, description="zarr v3 shard shape, a multiple of chunks")
    codec: Codec = Field(default_factory=Codec, description="Blosc settings of every output array")
    unit_mb: float = Field(UNIT_MB, gt=0, le=MAX_MB, description="target size of one unit of work (whole chunks/shards are never split)")
    ngff_version: NgffVersion | None = Field(None, description="output NGFF version (default: the input's)")

    @model_validator(mode="after")
    def _check(self) -> "Params":
        if self.shards is not None:
            if self.chunks is None or len(self.chunks) != len(self.shards):
                raise ValueError("shards need chunks of the same length")
            if any(s % c for s, c in zip(self.shards, self.chunks)):
                raise ValueError(f"shards {self.shards} must be whole multiples of chunks {self.chunks}")
            if self.ngff_version == "0.4":
                raise ValueError("shards need zarr v3 (ngff_version 0.5)")
        return self


def _sources(p: Params) -> tuple[ImageMeta | None, list[str]]:
    """(image metadata or None for a plain array, array paths relative to input)."""
    attrs, _ = read_attrs(as_location(p.input))  # raises a clear error if missing / not zarr
    if "multiscales" in attrs or "bioformats2raw.layout" in attrs:  # the latter: read_image names its images
        meta = read_image(as_location(p.input))
        return meta, [lv.path for lv in meta.levels]
    if (as_location(p.input) / "zarr.json").exists() or (as_location(p.input) / ".zarray").exists():
        open_input_array(p.input)  # an array (a group without multiscales is refused there)
        return None, [""]
    raise InputError(f"{p.input}: neither a zarr array nor an OME-Zarr image")


def _level_spec(p: Params, src: zarr.Array, zarr_format: int) -> ArraySpec:
    ndim = src.ndim
    for name, value in (("chunks", p.chunks), ("shards", p.shards)):
        if value is not None and len(value) != ndim:
            raise ConfigError(f"{name} {value} has {len(value)} entries but {p.input} has {ndim} axes")
    chunks = tuple(min(c, s) for c, s in zip(p.chunks or src.chunks, src.shape))
    shards = None
    if p.shards is not None and zarr_format == 3:
        # clip to the level, rounded up to whole chunks
        shards = tuple(min(sh, -(-s // c) * c) for sh, s, c in zip(p.shards, src.shape, chunks))
    names = getattr(src.metadata, "dimension_names", None)
    return ArraySpec(tuple(src.shape), str(src.dtype), chunks, shards, p.codec, zarr_format,
                     tuple(names) if names else None)


def plan(p: Params, ctx: PlanContext) -> list[RegionUnit]:
    meta, paths = _sources(p)
    version = p.ngff_version or (meta.version if meta else None)
    zarr_format = NGFF_FORMATS[version] if version else open_input_array(p.input).metadata.zarr_format
    if meta is not None:
        ctx.nodes.append(GroupNode(p.output_path(), zarr_format))
    units: list[RegionUnit] = []
    for path in paths:
        src = open_input_array(as_location(p.input) / path)
        if meta is not None:
            check_dimensions(meta, meta.levels[paths.index(path)], tuple(src.shape))
        spec = _level_spec(p, src, zarr_format)
        if path:
            ctx.nodes.append(ArrayNode(p.output_path(), path, spec))
        else:
            ctx.nodes.append(ArrayNode(p.output_path().parent, p.output_path().name, spec))
        for i, reg in enumerate(group_regions(spec.shape, spec.write_block, src.dtype.itemsize, int(p.unit_mb * 2**20))):
            units.append(RegionUnit(id=f"{path or 'array'}:{i}", path=path, region=[list(r) for r in reg],
                                    memory=holds(reg, src.dtype.itemsize)))
    return units


def run_unit(p: Params, unit: RegionUnit) -> int:
    sl = region_slices(unit.region)
    src = zarr.open_array(zarr_url(as_location(p.input) / unit.path), mode="r")
    dst = open_for_write(p.output_path() / unit.path)
    data = np.asarray(src[sl])
    write_region(dst, [a for a, _ in unit.region], data)
    return region_nbytes(unit.region, data.dtype.itemsize)


def finish(p: Params, ctx: PlanContext) -> None:
    meta, _ = _sources(p)
    if meta is None:
        return
    version = p.ngff_version or meta.version
    extra = {k: v for k, v in meta.attrs.items() if k not in {"multiscales", "version"}}
    ms = meta.attrs["multiscales"][0]
    carry_subtrees(as_location(p.input), p.output_path(), NGFF_FORMATS[version], ctx.guard)  # before the image is listed
    write_image_metadata(p.output_path(), version, meta.axes, meta.levels, name=ms.get("name"), extra=extra)


def describe_unit(unit: RegionUnit) -> str:
    return f"{unit.path or 'array'} region {describe_region(unit.region)}"
