"""Generate a synthetic instrument folder, in the layout and with the metadata the instrument
writes (``format``: CellVoyager, CQ3000, MetaXpress as acquired or exported with an .HTD,
ImageXpress HCS.ai, Operetta / Opera Phenix, scanR), with realistic blobs that continue across
neighbouring fields (so a resharded well looks like a stitched one).

For demos, tests and benchmarks of ``ingest`` and ``reshard``, and to try each reader without an
instrument. Fields sit on a grid per well, optionally overlapping and with seeded stage jitter
(irregular positions). One unit per field; metadata files are written last, like an acquisition
that has finished."""
from __future__ import annotations

from dataclasses import dataclass

from pathlib import Path
from types import ModuleType
from typing import Annotated, Literal

import numpy as np
from pydantic import Field, StringConstraints, model_validator

from .io.synthetic import cellvoyager, cq, hcsai, metaxpress, operetta, scanr
from .io.synthetic.cellvoyager import FieldSpec, layout, render_field
from .io.synthetic.plate_spec import PlateSpec
from .runtime.core.regions import holds
from .runtime.core.contract import MAX_COUNT, MAX_INDEX, MAX_UM, PlanContext, PlateShape, PositiveInt, Seed, TaskParams
from .runtime.core.units import TypedUnit


@dataclass(frozen=True, kw_only=True)
class FieldIndexUnit(TypedUnit):
    """One field of view of the generated plate: the ``field``-th of ``Params.fields()``."""

    field: int


class _HtdExport:
    """MetaXpress's plate export: the as-acquired files plus an .HTD."""
    write_field = staticmethod(metaxpress.write_field)
    finish = staticmethod(metaxpress.finish_htd)


SPARSE_FORMATS = ("cellvoyager", "operetta", "metaxpress", "imagexpress")
WRITERS: dict[str, ModuleType | type] = {"cellvoyager": cellvoyager, "cq": cq, "metaxpress": metaxpress,
                                         "imagexpress": _HtdExport, "hcsai": hcsai, "operetta": operetta,
                                         "scanr": scanr}


# the manual's example for this task (its reference page; tests/test_reference.py runs it)
EXAMPLE = {"params": {"output": "raw", "format": "cellvoyager", "wells": ["B03", "C05"], "grid": [2, 2],
                      "shape": [270, 320], "channels": 2, "z_planes": 3}}


class Params(TaskParams):
    output: str = Field(description="folder to write the measurement into (created)")
    format: Literal["cellvoyager", "cq", "metaxpress", "imagexpress", "hcsai", "operetta", "scanr"] = Field(
        "cellvoyager", description="instrument layout: cellvoyager (CV7000/CV8000), cq (CQ3000), metaxpress (as "
        "acquired, no .HTD), imagexpress (MetaXpress export with .HTD), hcsai (ImageXpress HCS.ai), operetta "
        "(Harmony export), scanr")
    projections: bool = Field(False, description="cq, metaxpress: also write the z projections the instrument "
                              "writes beside each stack (needs z_planes > 1)")
    plate: str = Field("synthetic-plate", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$",
                       description="plate name (file name prefix): letters, digits, '.', '_', '-'")
    wells: list[Annotated[str, StringConstraints(pattern=r"^[A-Z]{1,2}[0-9]{2}$")]] = Field(
        ["B03", "B04"], min_length=1, description="well ids, e.g. [B03, C05]")
    grid: list[PositiveInt] = Field([2, 2], min_length=2, max_length=2, description="fields per well: rows, columns")
    shape: list[PositiveInt] = Field([540, 640], min_length=2, max_length=2, description="field image size y, x")
    channels: int = Field(2, ge=1, le=8, description="channels per field (one image file per channel, as the "
                                                     "instruments write)")
    z_planes: int = Field(1, ge=1, le=MAX_INDEX, description="z planes per field and channel")
    timepoints: int = Field(1, ge=1, le=MAX_INDEX, description="time points (each field imaged again; blobs move)")
    z_step: float = Field(1.0, gt=0, le=MAX_UM, description="distance between z planes, micrometer")
    pixel_size: float = Field(0.325, gt=0, le=MAX_UM, description="micrometer per pixel")
    overlap: float = Field(0.0, ge=0, lt=0.5, description="fraction of a field shared with its neighbour")
    jitter_um: float = Field(0.0, ge=0, le=MAX_UM, description="random stage jitter, micrometer (irregular positions)")
    plate_shape: PlateShape = Field([8, 12], description="plate rows, columns (each at most 72; a 3456-well plate is 48 x 72)")
    dtype: Literal["uint8", "uint16"] = Field("uint16", description="pixel type of the image files")
    blobs_per_field: int = Field(60, ge=0, le=MAX_COUNT, description="blobs (cells) per field on average, scattered "
                                                                     "over the whole well so they continue across "
                                                                     "neighbouring fields")
    blob_radius: float = Field(12.0, gt=0, le=MAX_INDEX, description="mean blob radius in pixels")
    seed: Seed = 0
    sparse: Literal["none", "mixed", "qc"] = Field(
        "none", description="cellvoyager, operetta, metaxpress, imagexpress: which channels and time points each well "
        "is imaged with. none: all; mixed: every other well one channel of its own, every third well one time point; "
        "qc: each well one channel at its own time point (an illumination or QC plate)")
    failed_fields: int = Field(0, ge=0, le=MAX_COUNT, description="cellvoyager, operetta, metaxpress, imagexpress: "
                               "the last field of this many wells was not imaged (cellvoyager: an ERR record, "
                               "autofocus failed)")

    def fields(self) -> list[FieldSpec]:
        return layout(self.wells, (self.grid[0], self.grid[1]), (self.shape[0], self.shape[1]),
                      self.pixel_size, self.overlap, self.jitter_um, self.seed)

    @model_validator(mode="after")
    def _check(self) -> "Params":
        if self.projections and (self.format not in ("cq", "metaxpress", "imagexpress") or self.z_planes < 2):
            raise ValueError("projections is for cq, metaxpress and imagexpress stacks (z_planes > 1)")
        if (self.sparse != "none" or self.failed_fields) and self.format not in SPARSE_FORMATS:
            raise ValueError(f"sparse and failed_fields are for {', '.join(SPARSE_FORMATS)}")
        return self

    def spec(self) -> PlateSpec:
        return PlateSpec(self.plate, (self.plate_shape[0], self.plate_shape[1]), self.channels, self.z_planes,
                         self.z_step, self.pixel_size, (self.shape[0], self.shape[1]), self.dtype, self.projections,
                         self.seed, self.timepoints, tuple(self.wells), self.sparse, self.failed_fields,
                         self.grid[0] * self.grid[1])

    def well_canvas(self) -> tuple[int, int, int]:
        return (self.z_planes, self.grid[0] * self.shape[0] + 100, self.grid[1] * self.shape[1] + 100)


def plan(p: Params, ctx: PlanContext) -> list[FieldIndexUnit]:
    Path(p.output).mkdir(parents=True, exist_ok=True)
    # a unit holds one plane at a time, with the noise and blobs it is made of
    plane = holds([[0, p.shape[0]], [0, p.shape[1]]], np.dtype(p.dtype).itemsize, copies=4)
    return [FieldIndexUnit(id=f"{fs.well}/{fs.index}", field=i, memory=plane) for i, fs in enumerate(p.fields())]


def run_unit(p: Params, unit: FieldIndexUnit) -> int:
    fs = p.fields()[unit.field]
    spec = p.spec()
    if spec.failed(fs.well, fs.index):
        return 0  # the instrument wrote no image of it
    n_blobs = p.blobs_per_field * p.grid[0] * p.grid[1]
    written = 0
    for t in spec.times_of(fs.well):  # time point 0 keeps the seed: a single time point is what it always was
        # a channel the well was not imaged with has no pixels (None): writers skip it
        pixels = [render_field(fs, p.well_canvas(), (p.shape[0], p.shape[1]), p.z_planes, c, p.dtype,
                               p.seed + 104_729 * t, n_blobs, p.blob_radius) if spec.acquired(fs.well, t, c) else None
                  for c in range(p.channels)]
        written += WRITERS[p.format].write_field(Path(p.output), spec, fs, pixels, t)
    return written


def finish(p: Params, ctx: PlanContext) -> None:
    WRITERS[p.format].finish(Path(p.output), p.spec(), p.fields())


def describe_unit(unit: FieldIndexUnit) -> str:
    return f"field {unit.id}"


