"""Ingest raw microscopy into OME-Zarr: instrument plates, filename-pattern series, single files.

- instrument folders (``cellvoyager``, ``cq``, ``imagexpress``, ``metaxpress``, ``hcsai``, ``operetta``,
  ``scanr``): one reader each, found from the folder's own marker files (the ``format``
  parameter lists them) up to three levels below input.
- ``pattern``: files named like ``{plate}_{well}_s{field}_w{channel}.tif`` (+ optional positions CSV).
- ``image``: one TIFF / OME-TIFF / .npy volume -> one OME-Zarr image (not a plate).

HCS output: plate/row/column/field, one image per field of view with axes (t)czyx, ``scale`` from
the pixel size and ``translation`` from the stage position relative to the well (micrometer), omero
channels with windows from the data. One unit per field (and time point); a unit writes its planes
one at a time, so memory is one plane. Chunks split each plane into even tiles of at most 1280
pixels a side (viewer-friendly reads); on zarr v3 each plane is one shard (one file per plane, not
per tile). Metadata that makes the store a valid plate/image is written last, in ``finish``."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import zarr

from . import pyramid, pyramid_regions, reshard
# after reshard (keep it so when sorting imports): both define plan(), and a reader of imports
# takes `ingest_wells.plan` for the plan of the module imported last (docs/development.md)
from . import ingest_wells
from .ingest_acquisition import planned_acquisition, read_acquisition
from .ingest_params import Params
from .errors import ConfigError
from .io.ngff.acquisition import Acquisition
from .io.storage.nodes import ArrayNode, GroupNode
from .io.storage.uploads import writes_in_flight
from .io.storage.arrays import ArraySpec, open_for_write, write_region
from .io.ngff.hcs import (
    channel_windows,
    field_axes,
    field_levels,
    field_path,
    field_shape,
    split_side,
    well_origins,
    write_field_image,
    write_plate,
)
from .io.storage.ozx_path import is_archive_build
from .io.ngff.metadata import NGFF_FORMATS, ImageMeta, Level, make_axes, write_image_metadata
from .io.readers.planes import plane_exists, planes_present, read_plane_into
from .io.readers.volume import open_volume
from .runtime.core.regions import REGION_COPIES, group_regions, holds
from .runtime.core.contract import THREADS, PlanContext
from .runtime.core.units import describe_region
from .ingest_units import FieldRegionUnit, FieldUnit, ImageRegionUnit
from .well_units import ComposeUnit, OverviewUnit
from .runtime.core.unit_stream import UnitStream
from .io.storage.location import zarr_url

# the manual's example for this task (its reference page; tests/test_reference.py runs it)
EXAMPLE = {"params": {"input": "raw", "output": "plate.ome.zarr", "pyramid": True, "min_size": 64},
           "after": "generate-plate"}


MAX_LISTED = 5
BATCH_BYTES = 32 * 2**20
ARCHIVE_ENTRY_BYTES = 1 << 20  # an .ozx: planes smaller than this are sharded together
IMAGE_UNIT_MB = 64

WORKERS = THREADS  # its units read files and run numpy and Blosc, all outside the GIL
# (the pyramid's LevelUnits, placed in the plan, are run by the engine: not listed here)
IngestUnit = FieldUnit | FieldRegionUnit | ImageRegionUnit | ComposeUnit | OverviewUnit

def _plate_spec(p: Params, acq: Acquisition) -> ArraySpec:
    shape = field_shape(acq)
    cy, cx = p.chunk_yx or (split_side(shape[-2]), split_side(shape[-1]))
    chunks = (1,) * (len(shape) - 2) + (cy, cx)
    zf = NGFF_FORMATS[p.ngff_version]
    # v3: one shard per plane, unless the plane is a single chunk anyway
    shards = (1,) * (len(shape) - 2) + (math.ceil(shape[-2] / cy) * cy, math.ceil(shape[-1] / cx) * cx)
    plane_bytes = math.prod(shape[-2:]) * np.dtype(acq.dtype).itemsize
    if zf == 3 and not p.pyramid and plane_bytes < ARCHIVE_ENTRY_BYTES and is_archive_build(p.output_path()):
        # an .ozx of small planes: one shard per write of run_unit (a z batch of one channel), so
        # the archive holds few entries and no two units (or writes) share a shard. Planes of 1 MB
        # and more stay one entry each: a shard of several is encoded on one thread (1.4x slower)
        batch = max(1, BATCH_BYTES // plane_bytes)
        shards = (1,) * (len(shape) - 3) + (min(batch, shape[-3]),) + shards[-2:]
    if zf != 3 or shards == chunks:
        shards = None
    return ArraySpec(shape, acq.dtype, chunks, shards, p.chosen_codec(), zf, tuple(field_axes(acq)))


# -- plan / run / finish ---------------------------------------------------------------------------
def plan(p: Params, ctx: PlanContext) -> list[IngestUnit] | UnitStream:
    if p.resolved_format() == "image":
        if p.layout == "well":
            raise ConfigError(f"{p.input}: one image file, not a plate; layout 'well' is for plates (drop it)")
        return _plan_image(p, ctx)
    # zarrmill follow: the wells ready at this poll (ingest_follow.py), checked there
    acq = ctx.growing.acquisition if ctx.growing is not None else planned_acquisition(p, ctx)
    ctx.carried["acquisition"] = acq  # finish uses it: the acquisition is read once per run
    if p.layout == "well":
        return ingest_wells.plan(p, acq, ctx)
    root = p.output_path()
    ctx.nodes.append(GroupNode(root, NGFF_FORMATS[p.ngff_version]))
    units: list[IngestUnit] = []
    for part in acq.parts():  # wells imaged alike: each its own channels and time points
        spec = _plate_spec(p, part)
        part_units = _plan_fields(p, part, spec, ctx)
        # followed: a unit's id names its well's files and its array's layout, which a later well
        # can change (a time axis once a well with time points is seen): either change redoes it
        units += ctx.growing.versioned(part_units, repr(spec)) if ctx.growing is not None else part_units
    return units


def _plan_fields(p: Params, acq: Acquisition, spec: ArraySpec, ctx: PlanContext) -> list[IngestUnit]:
    """The field images of one plate acquisition (``Acquisition.parts``) and the units writing them."""
    root = p.output_path()
    units: list[IngestUnit] = []
    plane = math.prod(acq.image_shape_yx) * np.dtype(acq.dtype).itemsize
    stack = plane * min(acq.n_z, max(1, BATCH_BYTES // plane))  # the planes one write holds (run_unit)
    origins = well_origins(acq) if p.pyramid else {}
    pp = _pyramid_params(p) if p.pyramid else None  # once, not per field (a pydantic model: ~0.2 ms)
    for (row, col, fld), planes in acq.fields().items():
        path = field_path(row, col, fld, acq)
        for part in (path.rsplit("/", 2)[0], path.rsplit("/", 1)[0], path):
            ctx.nodes.append(GroupNode(root / part, spec.zarr_format))
        ctx.nodes.append(ArrayNode(root / path, "0", spec))
        if p.pyramid:
            meta = _field_meta(p, acq, root / path, field_levels(acq, planes[0], origins[(row, col)]))
            units += _region_units(p, pp, ctx, path, meta, spec, BATCH_BYTES, fov_planes=planes)
            continue
        every = planes.files()
        for t in range(acq.n_t):
            files = [[c, z, path] for tt, c, z, path in every if tt == t]
            units.append(FieldUnit(id=f"{path}/t{t}", field=path, t=t, planes=files, has_t=acq.has_t,
                                   missing_ok=p.missing == "zeros", memory=int(stack * REGION_COPIES)))
    return units


@writes_in_flight  # a unit's PUTs overlap its encoding; all stored before it returns
def run_unit(p: Params, unit: IngestUnit) -> int:
    match unit:
        case ComposeUnit() | OverviewUnit():  # layout well: well images, their pyramid, the overview
            return ingest_wells.run_unit(p, unit)
        case FieldRegionUnit():
            return _run_field_region(p, unit)
        case ImageRegionUnit():
            return _run_image_unit(p, unit)
        case FieldUnit():
            return _run_field(p, unit)
    raise TypeError(f"ingest: not a unit of this task: {type(unit).__name__}")


def _run_field(p: Params, unit: FieldUnit) -> int:
    arr = open_for_write(p.output_path() / unit.field / "0")
    lead = (unit.t,) if unit.has_t else ()
    by_c: dict[int, dict[int, str]] = {}
    for c, z, path in unit.planes:
        by_c.setdefault(c, {})[z] = path
    nbytes = 0
    batch = max(1, BATCH_BYTES // (math.prod(arr.shape[-2:]) * arr.dtype.itemsize))
    for c in range(arr.shape[-4]):
        for z0 in range(0, arr.shape[-3], batch):
            # a few z-planes per write: their chunks are encoded concurrently; memory stays at
            # BATCH_BYTES whatever the field's size
            zs = range(z0, min(z0 + batch, arr.shape[-3]))
            files = {i: by_c.get(c, {}).get(z) for i, z in enumerate(zs)}
            # a missing plane costs nothing: unwritten chunks read as the fill value, zero (missing
            # planes are recorded in finish; a redo clears the store, so nothing stale is left)
            files = {i: f for i, f in files.items() if f is not None and not (unit.missing_ok and not plane_exists(f))}
            if not files:
                continue
            stack = np.zeros((len(zs),) + tuple(arr.shape[-2:]), dtype=arr.dtype)
            for i, path in files.items():
                read_plane_into(path, stack[i])
                nbytes += stack[i].nbytes
            write_region(arr, lead + (c, zs.start, 0, 0), stack.reshape((1,) * (len(lead) + 1) + stack.shape))
    return nbytes


def finish(p: Params, ctx: PlanContext) -> None:
    if p.resolved_format() == "image":
        return _finish_image(p)
    acq = ctx.growing.acquisition if ctx.growing is not None else (
        ctx.carried.pop("acquisition", None) or read_acquisition(p))
    if p.layout == "well":
        return ingest_wells.finish(p, acq, ctx.guard)
    root = p.output_path()
    missing = set(acq.table.paths(np.flatnonzero(~planes_present(acq.table))))
    parts = acq.parts()
    images: dict[str, int] = {}  # field path -> its plate acquisition
    offsets: dict[str, list[float]] = {}  # field path -> its translation in the well
    for part in parts:
        images.update(dict.fromkeys(_finish_fields(p, part, missing, offsets), part.acquisition_id))
    field_count = max(len(f) for f in acq.wells().values())
    write_plate(root, acq, p.ngff_version, images, field_count, parts, offsets)


def _finish_fields(p: Params, acq: Acquisition, missing: set[str], offsets: dict[str, list[float]]) -> list[str]:
    """Metadata of one plate acquisition's field images (windows from its own channels); their
    paths. Each field's translation in its well goes into ``offsets``."""
    root = p.output_path()
    origins = well_origins(acq)
    fields = acq.fields()
    paths = [field_path(r, c, f, acq) for (r, c, f) in fields]
    arrays = [zarr.open_array(zarr_url(root / path / "0"), mode="r") for path in paths]
    windows = channel_windows(arrays, field_axes(acq), acq.dtype)
    pp = _pyramid_params(p) if p.pyramid else None
    for ((row, col, fld), planes), path in zip(fields.items(), paths):
        first = planes[0]
        extra = {"source": acq.source, "stage_position_um": {"x": first.x_um, "y": first.y_um, "z": first.z_um},
                 "instrument_well": first.well_name, "field_index": fld, "acquired": first.time,
                 "missing_planes": [Path(path).name for *_, path in planes.files() if path in missing]}
        levels = field_levels(acq, first, origins[(row, col)])
        offsets[path] = list(levels[0].translation or [])
        if p.pyramid:
            meta = _field_meta(p, acq, root / path, levels)
            levels = pyramid.pyramid_levels(pp, meta, field_shape(acq))
        write_field_image(root / path, acq, p.ngff_version, levels, windows, extra)
    return paths


# -- single image files ----------------------------------------------------------------------------
def _image_spec(p: Params) -> tuple[ArraySpec, dict[str, float], str]:
    vol = open_volume(p.input, p.axes)
    try:
        axes, shape, dtype, sizes = vol.axes, vol.shape, str(vol.dtype), dict(vol.pixel_size)
    finally:
        vol.close()
    if p.pixel_size:
        spatial = [a for a in axes if a in "zyx"]
        if len(p.pixel_size) != len(spatial):
            raise ConfigError(f"pixel_size has {len(p.pixel_size)} entries; {p.input} has spatial axes {''.join(spatial)}")
        sizes = dict(zip(spatial, p.pixel_size))
    chunks = tuple(1 if a in "tc" else (min(s, 64) if a == "z" else min(s, 256)) for a, s in zip(axes, shape))
    if "z" not in axes:
        chunks = tuple(min(s, 1024) if a in "yx" else c for a, s, c in zip(axes, shape, chunks))
    return ArraySpec(shape, dtype, chunks, None, p.chosen_codec(), NGFF_FORMATS[p.ngff_version], tuple(axes)), sizes, axes


def _plan_image(p: Params, ctx: PlanContext) -> list[IngestUnit]:
    spec, sizes, axes = _image_spec(p)
    ctx.nodes.append(GroupNode(p.output_path(), spec.zarr_format))
    ctx.nodes.append(ArrayNode(p.output_path(), "0", spec))
    if p.pyramid:
        return _region_units(p, _pyramid_params(p), ctx, "", _image_meta(p, axes, sizes), spec, IMAGE_UNIT_MB * 2**20)
    regions = group_regions(spec.shape, spec.chunks, spec.itemsize, IMAGE_UNIT_MB * 2**20)
    return [ImageRegionUnit(id=f"r{i}", region=[list(r) for r in reg], memory=holds(reg, spec.itemsize))
            for i, reg in enumerate(regions)]


def _run_image_unit(p: Params, unit: ImageRegionUnit) -> int:
    vol = open_volume(p.input, p.axes)
    try:
        data = vol.read([(a, b) for a, b in unit.region])
    finally:
        vol.close()
    start = [a for a, _ in unit.region]
    write_region(open_for_write(p.output_path() / "0"), start, data)
    return data.nbytes + pyramid.write_levels_from(data, start, p.output_path(), unit.levels)


# -- the pyramid in the same pass (pyramid: true) ----------------------------------------------------
def _pyramid_params(p: Params) -> pyramid.Params:
    """Lower levels unsharded, as level 0 of an image is (a field's level-0 shard is one plane):
    their chunks grow to at least level 0's, so each level is a few files, and a level's chunk
    needs a small level-0 region, so most levels are built in memory."""
    return pyramid.Params(input=str(p.output_path()), method="mean", z_factor="auto", min_size=p.min_size,
                          shard_mb=None, codec=p.chosen_codec())


def _image_meta(p: Params, axes: str, sizes: dict[str, float]) -> ImageMeta:
    """Level 0's metadata as ``finish`` writes it, for planning the levels below it."""
    level0 = Level("0", [sizes.get(a, 1.0) for a in axes], None)
    return ImageMeta(p.output_path(), p.ngff_version, make_axes(axes), [level0], {"multiscales": [{}]})


def _field_meta(p: Params, acq: Acquisition, root: Path, levels: list[Level]) -> ImageMeta:
    return ImageMeta(root, p.ngff_version, make_axes(field_axes(acq)), levels, {"multiscales": [{}]})


def _region_units(p: Params, pp: pyramid.Params, ctx: PlanContext, image: str, meta: ImageMeta, spec: ArraySpec,
                  unit_bytes: int, fov_planes: list | None = None) -> list[IngestUnit]:
    """Units writing level 0 of ``image`` (a field, or "" for a single image) in regions, with the
    levels (by ``pp``) they can build from them in memory; then the units reading back the levels below."""
    itemsize = spec.itemsize
    block = tuple(spec.write_block)
    if fov_planes is not None:  # a field's units read whole plane files: whole planes each
        block = block[:-2] + tuple(spec.shape[-2:])
    # a volume's lower levels get smaller chunks where that builds them in memory (pyramid_regions.py);
    # a plate's keep theirs (its fields' levels are small and its file count is compared with peers')
    regions, levels, rest = pyramid_regions.plan_levels_with_regions(
        pp, p.output_path(), image, meta, spec, ctx, block, unit_bytes, int(p.volume_mb * 2**20),
        fit_chunks=fov_planes is None)
    units: list[IngestUnit] = []
    for i, reg in enumerate(regions):
        uid, region, memory = f"{image}/r{i}" if image else f"r{i}", [list(r) for r in reg], holds(reg, itemsize)
        if fov_planes is None:  # a volume's regions: a few large buffers, reused (runtime/core/malloc.py)
            units.append(ImageRegionUnit(id=uid, region=region, levels=levels, memory=memory, allocator="speed"))
        else:
            units.append(FieldRegionUnit(id=uid, region=region, levels=levels, memory=memory, field=image,
                                         missing_ok=p.missing == "zeros",
                                         planes=[f for f in fov_planes.files() if _inside(reg, f, meta)]))
    return units + rest


def _inside(region: tuple[tuple[int, int], ...], plane: list, meta: ImageMeta) -> bool:
    """Whether a [t, c, z, path] plane lies in a field region (axes (t)czyx)."""
    index = dict(zip(meta.axis_names, region))
    return all(a <= plane["tcz".index(name)] < b for name, (a, b) in index.items() if name in "tcz")


def _run_field_region(p: Params, unit: FieldRegionUnit) -> int:
    """One region of a field, (t) c z y x, assembled from its plane files, then its lower levels."""
    root = p.output_path() / unit.field
    arr = open_for_write(root / "0")
    region = [(a, b) for a, b in unit.region]
    planes = [pl for pl in unit.planes if not (unit.missing_ok and not plane_exists(pl[3]))]
    if not planes:
        return 0  # every plane missing: its chunks and levels stay unwritten, reading as zero
    data = np.zeros(tuple(b - a for a, b in region), dtype=arr.dtype)
    n_lead = arr.ndim - 3  # (t) c
    for t, c, z, path in planes:
        index = ((t,) if n_lead == 2 else ()) + (c, z)
        read_plane_into(path, data[tuple(i - a for i, (a, _) in zip(index, region))])
    start = [a for a, _ in region]
    write_region(arr, start, data)
    return data.nbytes + pyramid.write_levels_from(data, start, root, unit.levels)


def _finish_image(p: Params) -> None:
    from .io.ngff.acquisition import Channel
    from .io.ngff.hcs import omero

    spec, sizes, axes = _image_spec(p)
    meta = _image_meta(p, axes, sizes)
    levels = pyramid.pyramid_levels(_pyramid_params(p), meta, spec.shape) if p.pyramid else meta.levels
    arr = zarr.open_array(zarr_url(p.output_path() / "0"), mode="r")
    n_c = spec.shape[axes.index("c")] if "c" in axes else 1
    extra = {}
    if "c" in axes:
        windows = channel_windows([arr], axes, spec.dtype)
        names = p.channel_names or [f"C{c}" for c in range(n_c)]
        extra["omero"] = omero([Channel(label=n) for n in names], windows)
    write_image_metadata(p.output_path(), p.ngff_version, make_axes(axes), levels, name=Path(p.input).name,
                         extra=extra)


def describe_unit(unit: IngestUnit) -> str:
    match unit:
        case FieldRegionUnit():
            return f"field {unit.field} region {describe_region(unit.region)}"
        case ImageRegionUnit():
            return f"region {describe_region(unit.region)}"
        case FieldUnit():
            return f"field {unit.field} t={unit.t} ({len(unit.planes)} planes)"
    return reshard.describe_unit(unit)
