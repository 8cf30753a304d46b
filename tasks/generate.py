"""Generate a seeded synthetic OME-Zarr image (blobs on a noisy background, or their labels).

For demos, tests and benchmarks: realistic enough to compress like microscopy, reproducible from
the seed, rendered region by region so images larger than memory are fine."""
from __future__ import annotations

import zlib
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from .io.storage.nodes import ArrayNode, GroupNode
from .io.storage.arrays import ArraySpec, Codec, open_for_write, write_region
from .io.ngff.metadata import NGFF_FORMATS, Level, NgffVersion, make_axes, write_image_metadata
from .io.synthetic.blobs import Blobs, render, to_dtype
from .runtime.core.regions import group_regions, holds
from .runtime.core.contract import MAX_COUNT, MAX_INDEX, MAX_MB, PlanContext, PositiveFloat, PositiveInt, Seed, TaskParams
from .runtime.core.units import RegionUnit, describe_region

AXIS_ORDER = "tczyx"
UNIT_MB = 32


# the manual's example for this task (its reference page; tests/test_reference.py runs it)
EXAMPLE = {"params": {"output": "brain.ome.zarr", "shape": [64, 256, 256], "chunks": [32, 128, 128],
                      "pixel_size": [2, 1, 1], "n_blobs": 300}}


class Params(TaskParams):
    OBJECT_STORES = True  # input and output may be s3:// (input also https://)

    output: str = Field(description="OME-Zarr image to write")
    shape: list[PositiveInt] = Field(description="array shape, one entry per axis", min_length=2, max_length=5)
    axes: str = Field("zyx", description="axis names in order, a subsequence of 'tczyx'")
    dtype: Literal["uint8", "uint16", "int16", "float32"] = Field("uint16", description="pixel type")
    chunks: list[PositiveInt] | None = Field(None, description="chunk shape (default: 1 per t/c, 64^3 / 256^2 spatial)")
    kind: Literal["blobs", "labels"] = Field("blobs", description="intensities or a label image")
    n_blobs: int = Field(200, ge=0, le=MAX_COUNT, description="number of blobs (cells)")
    blob_radius: float = Field(6.0, gt=0, le=MAX_INDEX, description="mean blob radius in pixels")
    pixel_size: list[PositiveFloat] | None = Field(None, description="physical size per spatial axis (micrometer)")
    seed: Seed = 0
    ngff_version: NgffVersion = Field("0.5", description="OME-Zarr version: 0.5 (zarr v3), 0.4 (zarr v2, for readers"
                                                         " without zarr v3) or 0.6 (0.6rc0: coordinate systems and "
                                                         "transformations)")
    codec: Codec = Field(default_factory=Codec, description="Blosc settings of every level")
    unit_mb: float = Field(UNIT_MB, gt=0, le=MAX_MB, description="target size of one unit of work (whole chunks/shards are never split)")

    @model_validator(mode="after")
    def _check_axes(self) -> "Params":
        if len(self.axes) != len(self.shape) or "".join(a for a in AXIS_ORDER if a in self.axes) != self.axes:
            raise ValueError(f"axes {self.axes!r} must have one letter per shape entry, in 'tczyx' order")
        if self.chunks is not None and len(self.chunks) != len(self.shape):
            raise ValueError("chunks must have one entry per axis")
        n_space = sum(a in "zyx" for a in self.axes)
        if self.pixel_size is not None and len(self.pixel_size) != n_space:
            raise ValueError(f"pixel_size needs {n_space} entries (one per spatial axis)")
        return self

    @property
    def spatial(self) -> list[int]:
        return [i for i, a in enumerate(self.axes) if a in "zyx"]


def default_chunks(shape: list[int], axes: str) -> tuple[int, ...]:
    n_space = sum(a in "zyx" for a in axes)
    side = 64 if n_space == 3 else 256
    return tuple(1 if a in "tc" else min(s, side) for s, a in zip(shape, axes))


def _spec(p: Params) -> ArraySpec:
    chunks = tuple(p.chunks) if p.chunks else default_chunks(p.shape, p.axes)
    return ArraySpec(tuple(p.shape), p.dtype, chunks, None, p.codec, NGFF_FORMATS[p.ngff_version],
                     tuple(p.axes))


def plan(p: Params, ctx: PlanContext) -> list[RegionUnit]:
    spec = _spec(p)
    ctx.nodes.append(GroupNode(p.output_path(), spec.zarr_format))
    ctx.nodes.append(ArrayNode(p.output_path(), "0", spec))
    regions = group_regions(spec.shape, spec.chunks, np.dtype(p.dtype).itemsize, int(p.unit_mb * 2**20))
    return [RegionUnit(id=f"r{i}", region=[list(r) for r in reg], memory=holds(reg, np.dtype(p.dtype).itemsize))
            for i, reg in enumerate(regions)]


def run_unit(p: Params, unit: RegionUnit) -> int:

    region = [(a, b) for a, b in unit.region]
    space_shape = tuple(p.shape[i] for i in p.spatial)
    blobs = Blobs.make(space_shape, p.n_blobs, p.blob_radius, p.seed)
    space_region = tuple(region[i] for i in p.spatial)
    out = np.empty(tuple(b - a for a, b in region), dtype=p.dtype)
    lead = [i for i, a in enumerate(p.axes) if a in "tc"]
    for index in np.ndindex(*[region[i][1] - region[i][0] for i in lead]):
        absolute = [region[i][0] + k for i, k in zip(lead, index)]
        noise_seed = zlib.crc32(repr((p.seed, absolute, space_region)).encode())
        values = render(blobs, space_region, p.kind == "labels", noise_seed)
        if p.kind == "blobs" and absolute:
            values = values * (1.0 + 0.25 * sum(absolute))  # channels/timepoints differ in brightness
        out[tuple(index)] = to_dtype(values, np.dtype(p.dtype))
    arr = open_for_write(p.output_path() / "0")
    write_region(arr, [a for a, _ in region], out)
    return out.nbytes


def finish(p: Params, ctx: PlanContext) -> None:
    sizes = iter(p.pixel_size or [1.0] * len(p.spatial))
    scale = [next(sizes) if a in "zyx" else 1.0 for a in p.axes]
    extra = {"image-label": {"version": p.ngff_version}} if p.kind == "labels" else None
    if extra and p.ngff_version != "0.4":
        extra = {"image-label": {}}  # 0.5 keeps the version once, in "ome"
    write_image_metadata(p.output_path(), p.ngff_version, make_axes(p.axes), [Level("0", scale, None)],
                         name=p.output_path().stem, extra=extra)


def describe_unit(unit: RegionUnit) -> str:
    return f"region {describe_region(unit.region)}"
