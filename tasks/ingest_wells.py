"""``ingest`` with ``layout: well``: each field of view (FOV) goes from its source files straight
into a well-level image, placed by its stage position, in one pass.

The output is the plate ``ingest`` + ``reshard`` would make (same pixels, pyramid, FOV and well ROI
tables, overlap policy and plate overview; each well lists one image, ``image_name``), without
writing a per-FOV plate and reading it back. The placement, chunking, pyramid and metadata are
reshard's own code (tasks/reshard.py); only where a FOV's pixels come from differs: here the
instrument's files, read whole planes at a time. On a regular grid a level-0 shard is one FOV
plane, so each file is read once."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from . import reshard
from .ingest_params import Params
from .io.ngff.acquisition import Acquisition, FieldPlanes, PlaneTable
from .io.ngff.hcs import (
    MAX_WINDOW_FIELDS,
    WINDOW_STRIDE,
    field_axes,
    field_levels,
    field_path,
    field_shape,
    omero,
    plate_acquisitions,
    well_origins,
    windows_from_samples,
)
from .io.ngff.metadata import ImageMeta, make_axes
from .io.ngff.placement import Fov
from .io.readers.planes import plane_exists, planes_present, read_plane_into
from .io.storage.guard import OutputGuard
from .runtime.core.contract import PlanContext
from .runtime.core.unit_stream import UnitStream
from .well_units import ComposeUnit



def reshard_params(p: Params) -> reshard.Params:
    """The reshard settings an ingest ``layout: well`` stands for (same names, same meaning)."""
    return reshard.Params(input=p.input, output=p.output, image_name=p.image_name, overlap=p.overlap,
                          chunk_yx=p.chunk_yx, shard_mb=p.shard_mb, min_size=p.min_size, overview=p.overview,
                          overview_size=p.overview_size, codec=p.chosen_codec(), volume_mb=p.volume_mb)


Presence = Callable[[PlaneTable], np.ndarray]  # whether each plane's file is there


def acquisition_wells(p: Params, acq: Acquisition, presence: Presence | None = None
                      ) -> tuple[dict[str, Any], list[reshard.Well], str]:
    """(plate dict as the NGFF plate metadata has it, wells with their FOVs, NGFF version): what
    reshard would read back from the per-FOV plate ingest writes with ``layout: fov``. Each plate
    acquisition (``Acquisition.parts``) keeps its own channels; with ``presence`` given (finish), each
    well carries its omero windows, sampled from the source files."""
    parts = acq.parts()
    wells: list[reshard.Well] = []
    entries = []
    for part in parts:
        windows = source_windows(part, presence(part.table)) if presence is not None else None
        for (row, col), well in _part_wells(p, part, windows).items():
            wells.append(well)
            entries.append({"path": well.path, "rowIndex": row - 1, "columnIndex": col - 1})
    plate = {"name": acq.name, "acquisitions": plate_acquisitions(parts),
             "rows": [{"name": acq.row_label(r)} for r in range(1, acq.n_rows + 1)],
             "columns": [{"name": acq.col_label(c)} for c in range(1, acq.n_cols + 1)],
             "wells": entries}
    return plate, reshard.one_canvas(wells), p.ngff_version


def _part_wells(p: Params, acq: Acquisition, windows: list[tuple[float, float, float, float]] | None
                ) -> dict[tuple[int, int], reshard.Well]:
    """The wells of one plate acquisition, their FOVs placed by stage position."""
    axes = field_axes(acq)
    lead_shape = field_shape(acq)[:len(axes) - 3]
    origins = well_origins(acq)
    attrs: dict[str, Any] = {"omero": omero(acq.channels, windows)} if windows else {}
    by_well: dict[tuple[int, int], list[Fov]] = {}
    scale: list[float] = []
    for (row, col, fld), planes in acq.fields().items():
        level = field_levels(acq, planes[0], origins[(row, col)])[0]
        scale = level.scale
        fovs = by_well.setdefault((row, col), [])
        fovs.append(Fov(f"FOV_{len(fovs) + 1}", field_path(row, col, fld, acq), tuple(level.translation[-3:]),
                        (acq.n_z,) + tuple(acq.image_shape_yx),
                        extra={"dtype": acq.dtype, "planes": planes}))  # the unit's own: plan()
    wells = {}
    for (row, col), fovs in by_well.items():
        path = f"{acq.row_label(row)}/{acq.col_label(col)}"
        meta = ImageMeta(p.output_path() / path / p.image_name, p.ngff_version, make_axes(axes), [], attrs)
        wells[(row, col)] = reshard.Well(path, meta, scale, fovs, np.dtype(acq.dtype), lead_shape, p.overlap,
                                         acquisition=acq.acquisition_id)
    return wells


def plan(p: Params, acq: Acquisition, ctx: PlanContext) -> UnitStream:
    missing_ok = p.missing == "zeros" or bool(ctx.problems)  # a dry run sizes a plate short of files
    keys: dict[int, dict[tuple[int, int, int], int]] = {}  # one well's FOVs at a time
    well = [""]

    def complete(unit: ComposeUnit) -> ComposeUnit:
        if unit.well != well[0]:
            well[0] = unit.well
            keys.clear()
        fovs = [{**fov, "planes": _region_files(fov["planes"], unit.region, keys)} for fov in unit.fovs]
        return replace(unit, fovs=fovs, missing_ok=missing_ok)

    plate, wells, version = acquisition_wells(p, acq)
    return reshard.plan_wells(reshard_params(p), plate, wells, version, ctx, complete)


def _region_files(planes: FieldPlanes, region: list[list[int]], keys: dict[int, dict]) -> list[list]:
    """[t, c, z, path] of the FOV's planes inside a unit's region ((t) c z y x): what the unit
    reads, and no more (a unit listing its FOVs' every plane made plans quadratic in size)."""
    by_key = keys.get(id(planes))
    if by_key is None:
        by_key = keys[id(planes)] = planes.by_key()
    lead = region[:-3]
    ts = range(*lead[0]) if len(lead) == 2 else range(1)
    found = [(t, c, z) for t in ts for c in range(*lead[-1]) for z in range(*region[-3]) if (t, c, z) in by_key]
    rows = [by_key[k] for k in found]
    return [[t, c, z, path] for (t, c, z), path in zip(found, planes.table.paths(np.array(rows, dtype=np.int64)))]


def run_unit(p: Params, unit: reshard.ReshardUnit) -> int:
    rp = reshard_params(p)
    if not isinstance(unit, ComposeUnit):
        return reshard.run_unit(rp, unit)  # the overview: from the well images
    dst = rp.output_path() / unit.well / rp.image_name / "0"
    return reshard.paint(unit, dst, rp.overlap, _file_reader(unit.missing_ok))


def _file_reader(missing_ok: bool) -> reshard.FovReader:
    def read(fov: Fov, lead: tuple[slice, ...], spatial: tuple[slice, ...], into: np.ndarray | None) -> np.ndarray:
        """lead: (t,) c; spatial: z, y, x. Each file is one (t, c, z) plane, read whole: into its
        place in the canvas when the FOV's whole plane is asked for, else through a plane buffer."""
        files = {(t, c, z): path for t, c, z, path in fov.extra["planes"]}
        zs, ys, xs = spatial
        ranges = [range(s.start, s.stop) for s in lead]
        dtype = np.dtype(fov.extra["dtype"])
        shape = tuple(map(len, ranges)) + (zs.stop - zs.start, ys.stop - ys.start, xs.stop - xs.start)
        out = into if into is not None and into.dtype == dtype else np.empty(shape, dtype)
        whole = shape[-2:] == tuple(fov.size[-2:])
        plane = None if whole else np.empty(fov.size[-2:], dtype)
        for index in np.ndindex(*shape[:len(ranges)]):
            t, c = ((0,) + (ranges[0][index[0]],)) if len(ranges) == 1 else tuple(r[i] for r, i in zip(ranges, index))
            for k, z in enumerate(range(zs.start, zs.stop)):
                path = files.get((t, c, z))
                if path is None or (missing_ok and not plane_exists(path)):
                    out[index + (k,)] = 0  # a missing plane is zeros: recorded in finish
                elif plane is None:
                    read_plane_into(path, out[index + (k,)])
                else:
                    read_plane_into(path, plane)
                    out[index + (k,)] = plane[ys, xs]
        return out

    return read


def finish(p: Params, acq: Acquisition, guard: OutputGuard) -> None:
    found: dict[int, np.ndarray] = {}

    def presence(table: PlaneTable) -> np.ndarray:  # one listing per table (the plate, or a part)
        if id(table) not in found:
            found[id(table)] = planes_present(table)
        return found[id(table)]

    plate, wells, version = acquisition_wells(p, acq, presence)
    rp = reshard_params(p)
    planes_of = {field_path(row, col, fld, part): planes
                 for part in acq.parts() for (row, col, fld), planes in part.fields().items()}
    # provenance, in each well image's metadata (written before the well and plate list it)
    attrs: dict[str, dict] = {}
    for well in wells:
        info = []
        for fov in well.fovs:
            planes = planes_of[fov.path]
            first = planes[0]
            absent = planes.start + np.flatnonzero(~presence(planes.table)[planes.start:planes.stop])
            info.append({"fov": fov.name, "instrument_well": first.well_name, "field_index": first.field,
                         "stage_position_um": {"x": first.x_um, "y": first.y_um, "z": first.z_um},
                         "acquired": first.time,
                         "missing_planes": [Path(path).name for path in planes.table.paths(absent)]})
        attrs[well.path] = {"zarrmill": {"source": acq.source, "fields": info}}
    reshard.finish_wells(rp, plate, wells, version, guard, attrs)


def source_windows(acq: Acquisition, present: np.ndarray) -> list[tuple[float, float, float, float]]:
    """Display windows from the source files, sampled exactly as ``channel_windows`` samples the
    per-FOV images (the middle t and z plane of the first fields, every 4th pixel), so both
    layouts get the same omero windows. ``present``: whether each plane of ``acq.table`` has its file."""
    fields = [planes.by_key() for planes in list(acq.fields().values())[:MAX_WINDOW_FIELDS]]
    t, z = acq.n_t // 2, acq.n_z // 2
    plane = np.empty(acq.image_shape_yx, dtype=acq.dtype)
    samples = []
    for c in range(acq.n_c):
        per_field = []
        for by_key in fields:
            row = by_key.get((t, c, z))
            if row is None or not present[row]:
                per_field.append(np.zeros(plane[WINDOW_STRIDE, WINDOW_STRIDE].shape, plane.dtype))
                continue
            read_plane_into(acq.table.path(row), plane)
            per_field.append(plane[WINDOW_STRIDE, WINDOW_STRIDE].copy())
        samples.append(per_field)
    return windows_from_samples(samples, acq.dtype)
