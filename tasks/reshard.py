"""Reshard a plate: the fields of view (FOVs) of each well into one well-level image, each FOV
placed by its physical coordinates, plus an optional low-resolution plate overview.

Per well, a new image (``image_name``, default ``well``) holds every FOV at its position (any
layout: 1x4, 2x2, 9x8, irregular; gaps are zero; overlapping pixels follow ``overlap``: the first
or last FOV listed wins, their mean, or ``shift`` moves FOVs apart until none overlap, recording
both positions), for every channel, z and time point, with FOV and well ROI tables (AnnData,
as Fractal and ngio write them) to find each FOV again. Level 0 chunks divide the FOV size and,
on a regular grid, line up with it; its zarr v3 shards are FOV-sized. Lower levels come from the
``pyramid`` task's machinery with large shards, so a whole well at a low level is one or a few
files instead of one per FOV. One unit per output shard; no two units write the same shard.
Well images share one canvas size (the largest, zero-padded), so plate viewers can tile them.

Always into a new plate (``output``, default ``<input>-wells.ome.zarr`` beside the input): plate
metadata copied, each well listing exactly one image, the well image (Fractal's convention), whose
FOV table points back to the source FOVs. A well listing its FOVs and a larger well image side by
side is refused: ome-zarr-py, ``ome_zarr info`` and napari cannot open it. The overview
(``overview: true``) is an image ``overview`` in the plate: each well at its plate position at
about ``overview_size`` pixels, its own small pyramid, and ``zarrmill.overview`` attributes
mapping each well path to its box."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Callable

import numpy as np
import zarr
from pydantic import AfterValidator, Field, model_validator

from . import pyramid
from .errors import InputError
from .io.storage.transfer import each_node
from .io.storage.nodes import ArrayNode, GroupNode
from .io.storage.uploads import writes_in_flight
from .io.storage.arrays import PLATE_CODEC, ArraySpec, Codec, open_for_write, open_input_array, write_region
from .io.storage.guard import OutputGuard
from .io.storage.location import as_location, location_key, zarr_url
from .io.ngff.fov_table import table_rows, well_row, write_roi_tables
from .io.storage.layout import level_shards
from .io.ngff import ngff06
from .io.ngff.metadata import (NGFF_FORMATS, ImageMeta, Level, level_index, member_path, read_attrs, read_image,
                               well_acquisition, write_image_metadata, write_plate_metadata, write_well_metadata)
from .io.ngff.overview import OverviewLayout, overview_fits, overview_layout
from .io.ngff.placement import Fov, Policy, compose
from .io.ngff.well_canvas import Well, one_canvas
from .runtime.core.regions import group_regions, holds
from .runtime.core.unit_stream import Batch, UnitStream
from .runtime.core.contract import MAX_INDEX, MAX_LEVEL, MAX_MB, THREADS, PlanContext, PositiveInt, TaskParams
from .runtime.core.units import describe_region
from .pyramid import LevelUnit
from .well_units import ComposeUnit, OverviewUnit
from .io.storage.handles import writable_url

ReshardUnit = ComposeUnit | OverviewUnit  # and the pyramid's LevelUnits, placed in the plan: the engine runs them

OVERVIEW = "overview"
OVERVIEW_STAGE = 50  # after every well level (pyramids have at most 12)

WORKERS = THREADS  # its units read files and run numpy and Blosc, all outside the GIL


def _alnum(name: str) -> str:
    if not name.isalnum():
        raise ValueError("image_name must be letters and digits only (NGFF well image paths)")
    return name


ImageName = Annotated[str, AfterValidator(_alnum)]

# the manual's example for this task (its reference page; tests/test_reference.py runs it)
EXAMPLE = {"params": {"input": "plate.ome.zarr", "output": "wells.ome.zarr", "overview": True, "min_size": 64},
           "after": "ingest"}


class Params(TaskParams):
    OBJECT_STORES = True  # input and output may be s3:// (input also https://)

    input: str = Field(description="HCS plate whose wells hold several FOV images")
    output: str | None = Field(None, description="new plate to write (default: next to input, named "
                               "<input>-wells.ome.zarr); each well lists one image, the well image")
    image_name: ImageName = Field("well", description="name of the well image (letters and digits)")
    overlap: Policy = Field("first", description="overlapping pixels: first, last, mean, or shift FOVs apart")
    level: int = Field(0, ge=0, le=MAX_LEVEL, description="FOV pyramid level to reshard")
    chunk_yx: list[PositiveInt] | None = Field(None, min_length=2, max_length=2, description="level-0 chunk [y, x] (default: divides the FOV)")
    shard_mb: float = Field(64.0, gt=0, le=MAX_MB, description="shard size of the lower levels")
    min_size: int = Field(256, ge=1, le=MAX_INDEX, description="pyramid: stop once a level's largest side is at most this")
    overview: bool = Field(False, description="also write a plate overview image (each well at its plate position)")
    overview_size: int = Field(256, ge=16, le=65_536, description="overview: about this many pixels per well side")
    codec: Codec = Field(default_factory=lambda: PLATE_CODEC.model_copy(),  # as ingest's for plates
                         description="Blosc settings of the new plate (default: ingest's for plates, zstd 1 + byte "
                                     "shuffle in 1 MiB blocks)")
    unit_mb: float = Field(32.0, gt=0, le=MAX_MB, description="target size of one unit of work for wells larger than"
                                                              " volume_mb and for the overview (whole shards are "
                                                              "never split)")
    volume_mb: float = Field(192.0, ge=0, le=MAX_MB, description="a well's (t, c) volume up to this size is composed whole "
                             "in one unit and its pyramid built in memory (each byte written once, nothing read "
                             "back); larger wells go by unit_mb regions, lower levels read back from level 0")

    @model_validator(mode="after")
    def _new_plate(self) -> "Params":
        # A well listing its FOVs and a larger well image is a plate that ome-zarr-py's Reader,
        # `ome_zarr info` and napari cannot open (they tile same-shaped images), so no in-place mode.
        if location_key(self.output_path()) == location_key(self.input):
            raise ValueError("output must be a new plate, not the input plate (readers cannot open a well "
                             "whose images differ in shape); leave output unset for <input>-wells.ome.zarr")
        return self

    def ledger_root(self) -> Path:
        return self.output_path()

    def output_path(self) -> Path:
        return as_location(self.output) if self.output else default_output(as_location(self.input))

    def pyramid_params(self) -> pyramid.Params:
        return pyramid.Params(input=str(self.output_path()), method="mean", z_factor="auto",
                              min_size=self.min_size, shard_mb=self.shard_mb, codec=self.codec)


def default_output(plate: Path) -> Path:
    """``plate.ome.zarr`` -> ``plate-wells.ome.zarr`` beside it (``p.zarr`` -> ``p-wells.zarr``)."""
    name = plate.name
    for suffix in (".ome.zarr", ".zarr", ""):
        if name.endswith(suffix) and len(name) > len(suffix):
            return plate.with_name(f"{name[:len(name) - len(suffix)]}-wells{suffix or '.ome.zarr'}")
    return plate.with_name("wells.ome.zarr")


# -- reading the wells (driver) ---------------------------------------------------------------------
def read_well(p: Params, path: str) -> Well:
    """The FOV images a well of the input plate lists (level ``p.level`` of each), checked alike."""
    attrs, _ = read_attrs(member_path(as_location(p.input), path, "plate well path"))
    listed = [im for im in attrs.get("well", {}).get("images", []) if im.get("path") != p.image_name]
    images = [im.get("path") for im in listed]
    for im in images:
        member_path(as_location(p.input) / path, im, "well image path")
    if not images:
        raise InputError(f"{as_location(p.input) / path}: well has no field images")
    metas = [read_image(as_location(p.input) / path / im) for im in images]
    names = metas[0].axis_names
    spatial = [i for i, a in enumerate(names) if a in "zyx"]
    ref = metas[0].levels[level_index(metas[0], p.level)]
    fovs, dtype, lead = [], None, None
    for i, (im, meta) in enumerate(zip(images, metas)):
        own = meta.levels[level_index(meta, p.level)]
        arr = open_input_array(meta.path / own.path)
        if i == 0:
            dtype, lead = arr.dtype, tuple(n for k, n in enumerate(arr.shape) if k not in spatial)
        _check_same(meta, own, arr, names, ref, spatial, dtype, lead)
        tr = own.translation or [0.0] * len(names)
        fovs.append(Fov(f"FOV_{i + 1}", f"{path}/{im}", tuple(tr[k] for k in spatial),
                        tuple(arr.shape[k] for k in spatial), extra={"level_path": own.path}))
    return Well(path, metas[0], ref.scale, fovs, dtype, lead, p.overlap, well_acquisition(listed))


def _check_same(meta: ImageMeta, own: Level, arr: zarr.Array, names: list[str], ref: Level, spatial: list[int],
                dtype: np.dtype, lead_shape: tuple[int, ...]) -> None:
    if meta.axis_names != names:
        raise InputError(f"{meta.path}: axes {meta.axis_names} differ from the well's {names}")
    if [round(s, 9) for s in own.scale] != [round(s, 9) for s in ref.scale]:
        raise InputError(f"{meta.path}: pixel size {own.scale} differs from the well's {ref.scale}")
    if arr.dtype != dtype:
        raise InputError(f"{meta.path}: dtype {arr.dtype} differs from the well's {dtype}")
    lead = tuple(n for k, n in enumerate(arr.shape) if k not in spatial)
    if lead != lead_shape:
        raise InputError(f"{meta.path}: channel/time sizes {lead} differ from the well's {lead_shape}")


def read_wells(p: Params) -> tuple[dict, list[Well], str]:
    attrs, zf = read_attrs(as_location(p.input))
    plate = attrs.get("plate")
    if plate is None:
        raise InputError(f"{p.input}: not an HCS plate (no plate metadata)")
    wells = [read_well(p, w.get("path")) for w in plate.get("wells", [])]
    return plate, one_canvas(wells), (ngff06.normalized(attrs.get("version", "0.5")) if zf == 3 else "0.4")


# -- plan / run / finish ----------------------------------------------------------------------------
def plan(p: Params, ctx: PlanContext) -> UnitStream:
    return plan_wells(p, *read_wells(p), ctx)


def plan_wells(p: Params, plate: dict, wells: list[Well], version: str, ctx: PlanContext,
               complete: Callable[[ComposeUnit], ComposeUnit] | None = None) -> UnitStream:
    """The output plate's groups and arrays, and the units writing every well image (and the
    overview); ``complete`` finishes each compose unit as it is made (ingest: the files it reads)."""
    out, pp = p.output_path(), p.pyramid_params()  # once per plate, not per well
    ctx.nodes.append(GroupNode(out, NGFF_FORMATS[version]))
    stream = UnitStream()
    for well in wells:
        _plan_well(p, pp, out, well, version, ctx, stream, complete or (lambda unit: unit))
    if p.overview and overview_fits(wells, warn_of=out):
        stream.add(_plan_overview(p, plate, wells, version, ctx))
    return stream


def _plan_well(p: Params, pp: pyramid.Params, out: Path, well: Well, version: str, ctx: PlanContext,
               stream: UnitStream, complete: Callable[[ComposeUnit], ComposeUnit]) -> None:
    """One well image (under ``out``; its levels by ``pp``): its nodes declared, its units added."""
    zf = NGFF_FORMATS[version]
    for part in (well.path.split("/")[0], well.path, f"{well.path}/{p.image_name}"):
        ctx.nodes.append(GroupNode(out / part, zf))
    image = out / well.path / p.image_name
    spec = well.spec(p, zf)
    ctx.nodes.append(ArrayNode(image, "0", spec))
    n_lead = len(well.lead_shape)
    volume = [(0, n) for n in spec.shape[n_lead:]]
    volume_bytes = math.prod(spec.shape[n_lead:]) * well.dtype.itemsize
    if volume_bytes <= p.volume_mb * 2**20:
        # the whole well in one unit, or else one unit per (t, c) volume: composed whole, its lower
        # levels built from it in memory (every byte written once, nothing read back); level shards
        # span channels only where one unit holds them all
        whole = volume_bytes * math.prod(well.lead_shape) <= p.volume_mb * 2**20
        levels = pyramid.plan_levels_in_memory(pp, out, f"{well.path}/{p.image_name}",
                                               well.image_meta(image, version), spec, ctx, across_lead=whole)
        leads = [[[0, n] for n in well.lead_shape]] if whole else \
            [[[k, k + 1] for k in lead] for lead in np.ndindex(*well.lead_shape)]
        stream.add([complete(ComposeUnit(id=f"{well.path}:0:{i}", well=well.path, levels=levels,
                                         region=lead + [list(r) for r in volume], fovs=well.fovs_in(volume),
                                         memory=holds(lead + volume, well.dtype.itemsize)))
                    for i, lead in enumerate(leads)])
        return
    # many units per well: made when handed out (unit_stream.py), each listing only its own FOVs
    itemsize, unit_bytes = well.dtype.itemsize, int(p.unit_mb * 2**20)
    regions = group_regions(spec.shape, spec.write_block, itemsize, unit_bytes)  # shared: never changed
    sizes = [holds(reg, itemsize) for reg in regions]

    def unit_of(i: int) -> ComposeUnit:
        reg = regions[i]
        return complete(ComposeUnit(id=f"{well.path}:0:{i}", well=well.path, region=[list(r) for r in reg],
                                    fovs=well.fovs_in(reg[n_lead:]), memory=holds(reg, itemsize)))

    stream.add_batch(Batch(0, len(sizes), max(sizes), sum(sizes), all(sizes), lambda i: f"{well.path}:0:{i}",
                           unit_of))
    for batch in pyramid.image_level_batches(pp, out, f"{well.path}/{p.image_name}",
                                             well.image_meta(image, version), spec, ctx, sparse=True):
        stream.add_batch(batch)


@writes_in_flight  # a unit's PUTs overlap its encoding; all stored before it returns
def run_unit(p: Params, unit: ReshardUnit) -> int:
    match unit:
        case ComposeUnit():
            return _paint(as_location(p.input), unit, p.output_path() / unit.well / p.image_name / "0", p.overlap)
        case OverviewUnit():
            return _paint(p.output_path(), unit, p.output_path() / OVERVIEW / "0", "first")
    raise TypeError(f"reshard: not a unit of this task: {type(unit).__name__}")


# (fov, lead slices, spatial slices, its place in the canvas or None) -> that part of the FOV,
# in its place when the reader filled it
FovReader = Callable[[Fov, tuple[slice, ...], tuple[slice, ...], np.ndarray | None], np.ndarray]


def paint(unit: ComposeUnit | OverviewUnit, dst_path: Path, policy: str, read: FovReader) -> int:
    """Compose one region from the FOVs listed in the unit and write it (whole shards).
    ``read(fov, lead slices, spatial slices, into)`` returns that part of one FOV (see FovReader)."""
    dst = open_for_write(dst_path, sparse=True)
    region = [(a, b) for a, b in unit.region]
    n_lead = dst.ndim - len(unit.fovs[0]["size"]) if unit.fovs else dst.ndim - 2
    fovs = [Fov(f["path"], f["path"], (), tuple(f["size"]), pixel=tuple(f["pixel"]), extra=f) for f in unit.fovs]
    start = [a for a, _ in region]
    data = np.empty(tuple(b - a for a, b in region), dst.dtype)
    # one index of the first lead axis (a channel) at a time, each written once composed when its
    # shards hold that index alone (in a bucket its uploads run while the next is composed,
    # uploads.py); where a shard spans them (the overview) the whole region is written once at the
    # end: a channel alone would rewrite every such shard once per channel
    per_index = bool(n_lead) and tuple(getattr(dst, "shards", None) or dst.chunks)[0] == 1
    for k in range(data.shape[0] if n_lead else 1):
        lead_sl = tuple(slice(a + k, a + k + 1) if i == 0 else slice(a, b) for i, (a, b) in enumerate(region[:n_lead]))
        part = data[k:k + 1] if n_lead else data
        compose(region[n_lead:], fovs, policy, dst.dtype, part.shape[:n_lead],
                lambda fov, spatial, into: read(fov, lead_sl, spatial, into), out=part)
        if per_index:
            write_region(dst, [start[0] + k] + start[1:], part, handed_over=True)
    if not per_index:
        write_region(dst, start, data, handed_over=True)
    # the unit holds a whole (t, c) volume: its pyramid, from memory
    return data.nbytes + pyramid.write_levels_from(data, start, dst_path.parent,
                                                   unit.levels if isinstance(unit, ComposeUnit) else [], sparse=True)


def _paint(base: Path, unit: ComposeUnit | OverviewUnit, dst_path: Path, policy: str) -> int:
    """Paint from zarr images under ``base`` (FOV images, or well images for the overview)."""
    def read(fov: Fov, lead_sl: tuple[slice, ...], spatial: tuple[slice, ...], into: np.ndarray | None) -> np.ndarray:
        arr = zarr.open_array(zarr_url(base / fov.path / fov.extra["level_path"]), mode="r")
        # a source may have fewer planes on a lead axis (overview: wells with fewer z): zero-pad
        lead = tuple(slice(s.start, min(s.stop, n)) for s, n in zip(lead_sl, arr.shape))
        data = np.asarray(arr[lead + spatial])
        pad = [(0, (s.stop - s.start) - d) for s, d in zip(lead_sl, data.shape[:len(lead_sl)])]
        return np.pad(data, pad + [(0, 0)] * len(spatial)) if any(b for _, b in pad) else data

    return paint(unit, dst_path, policy, read)


def finish(p: Params, ctx: PlanContext) -> None:
    finish_wells(p, *read_wells(p), ctx.guard)


def finish_wells(p: Params, plate: dict, wells: list[Well], version: str, guard: OutputGuard,
                 attrs: dict[str, dict] | None = None) -> None:
    """Every well image's metadata (with zarrmill's ``attrs[well path]`` beside NGFF's) and ROI tables, the overview's,
    then well and plate metadata."""
    pp = p.pyramid_params()
    placed: dict[str, tuple[list, dict[str, list[float]]]] = {}  # 0.6: each well image's place in its well

    def finish_image(well: Well) -> None:
        image = p.output_path() / well.path / p.image_name
        meta = well.image_meta(image, version)
        extra = {k: v for k, v in meta.attrs.items() if k != "multiscales"}
        write_image_metadata(image, version, meta.axes, pyramid.pyramid_levels(pp, meta, well.shape),
                             name=f"{well.path} {p.image_name}", extra=extra, placed=True,
                             own=(attrs or {}).get(well.path))
        placed[well.path] = (meta.axes, {p.image_name: list(meta.levels[0].translation or [])})
        axes = "".join(a for a in meta.axis_names if a in "zyx")
        write_roi_tables(image, table_rows(well.fovs, well.scale, well.origin, axes),
                         well_row(well.shape[len(well.lead_shape):], well.scale, axes), str(as_location(p.input).resolve()),
                         guard)

    each_node(p.output_path(), wells, finish_image)
    if p.overview and overview_fits(wells):
        _finish_overview(p, plate, wells, version)
    _write_wells(p, plate, wells, version, placed)


def _write_wells(p: Params, plate: dict, wells: list[Well], version: str,
                 placed: dict[str, tuple[list, dict[str, list[float]]]]) -> None:
    """Well (and plate) metadata last: the new image is listed only once it is complete."""
    out = p.output_path()
    each_node(out, wells, lambda well: write_well_metadata(out / well.path, version, [p.image_name], well.acquisition,
                                                           placed.get(well.path)))
    write_plate_metadata(out, version, [r["name"] for r in plate["rows"]], [c["name"] for c in plate["columns"]],
                         [w["path"] for w in plate["wells"]], name=plate.get("name"), field_count=1,
                         acquisitions=plate.get("acquisitions") or [{"id": 0}])


# -- plate overview -----------------------------------------------------------------------------------
def _overview_plan(p: Params, plate: dict, wells: list[Well], version: str) -> tuple[OverviewLayout, int, Level]:
    """(layout, well level used, that level's transforms): the first well level whose largest
    y/x side is at most overview_size."""
    pp = p.pyramid_params()
    first = wells[0]
    levels = pyramid.pyramid_levels(pp, first.image_meta(Path(), version), first.shape)
    k = next((i for i, lv in enumerate(levels) if max(
        math.ceil(n * levels[0].scale[-1] / lv.scale[-1]) for n in first.shape[-2:]) <= p.overview_size),
        len(levels) - 1)
    shapes = {}
    for well in wells:
        plan_k = pyramid.level_plan(pp, well.image_meta(Path(), version), well.shape)
        shapes[well.path] = well.shape if k == 0 else plan_k[min(k, len(plan_k)) - 1][1]
    return overview_layout(plate, shapes), k, levels[k]


def _plan_overview(p: Params, plate: dict, wells: list[Well], version: str, ctx: PlanContext) -> list[OverviewUnit | LevelUnit]:
    layout, k, level = _overview_plan(p, plate, wells, version)
    zf = NGFF_FORMATS[version]
    root = p.output_path() / OVERVIEW
    ctx.nodes.append(GroupNode(root, zf))
    dtype = wells[0].dtype
    n = len(layout.shape)
    chunks = tuple(1 if i < n - 2 else min(512, size) for i, size in enumerate(layout.shape))
    shards = level_shards(layout.shape, chunks, [n - 2, n - 1], dtype.itemsize, int(p.shard_mb * 2**20)) if zf == 3 else None
    spec = ArraySpec(layout.shape, str(dtype), chunks, shards, p.codec, zf, tuple(wells[0].meta.axis_names))
    ctx.nodes.append(ArrayNode(root, "0", spec))
    units: list[OverviewUnit | LevelUnit] = []
    for i, reg in enumerate(group_regions(spec.shape, spec.write_block, dtype.itemsize, int(p.unit_mb * 2**20))):
        boxes = [{"path": f"{w}/{p.image_name}", "level_path": str(k), "pixel": list(o),
                  "size": list(layout.sizes[w][-2:])} for w, o in layout.origins.items()]
        hit = [b for b in boxes if all(a < q + s and q < c for (a, c), q, s in zip(reg[n - 2:], b["pixel"], b["size"]))]
        units.append(OverviewUnit(id=f"{OVERVIEW}:0:{i}", stage=OVERVIEW_STAGE, region=[list(r) for r in reg],
                                  fovs=hit))
    meta = ImageMeta(root, version, wells[0].meta.axes, [Level("0", list(level.scale), None)], {"multiscales": [{}]})
    return units + pyramid.plan_image_levels(p.pyramid_params(), p.output_path(), OVERVIEW, meta, spec, ctx,
                                             first_stage=OVERVIEW_STAGE + 1, sparse=True)


def _finish_overview(p: Params, plate: dict, wells: list[Well], version: str) -> None:
    layout, k, level = _overview_plan(p, plate, wells, version)
    root = p.output_path() / OVERVIEW
    meta = ImageMeta(root, version, wells[0].meta.axes, [Level("0", list(level.scale), None)], {"multiscales": [{}]})
    omero = {key: v for key, v in wells[0].meta.attrs.items() if key == "omero"}
    write_image_metadata(root, version, meta.axes, pyramid.pyramid_levels(p.pyramid_params(), meta, layout.shape),
                         name="plate overview", extra=omero)
    zarr.open_group(writable_url(root), mode="a", zarr_format=NGFF_FORMATS[version]).attrs["zarrmill"] = {"overview": {
        "source_image": p.image_name, "source_level": str(k),
        "wells": {w: {"y": o[0], "x": o[1], "height": layout.sizes[w][-2], "width": layout.sizes[w][-1]}
                  for w, o in layout.origins.items()}}}


def describe_unit(unit: ReshardUnit) -> str:
    if isinstance(unit, ComposeUnit):
        return f"well {unit.well} level 0 region {describe_region(unit.region)} ({len(unit.fovs)} FOVs)"
    return f"plate overview region {describe_region(unit.region)}"
