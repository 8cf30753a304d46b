"""Generate a synthetic Yokogawa CellVoyager measurement folder: MeasurementData.mlf,
MeasurementDetail.mrf and one TIFF per plane, with realistic blobs that continue across
neighbouring fields (so a resharded well looks like a stitched one).

For demos, tests and benchmarks of ``ingest`` and ``reshard``. Fields sit on a grid per well,
optionally overlapping and with seeded stage jitter (irregular positions). One unit per field; the
mlf and mrf are written last, like an acquisition that has finished."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from .io.storage.atomic import atomic_write_bytes
from .io.synthetic.cellvoyager import (
    FieldSpec,
    layout,
    mlf_text,
    mrf_text,
    render_field,
    write_field_tiffs,
)
from .runtime.contract import MAX_COUNT, MAX_INDEX, MAX_UM, PlanContext, PlateShape, PositiveInt, Seed, TaskParams, Unit


class Params(TaskParams):
    output: str = Field(description="folder to write the measurement into (created)")
    plate: str = Field("synthetic-plate", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$",
                       description="plate name (file name prefix): letters, digits, '.', '_', '-'")
    wells: list[Annotated[str, StringConstraints(pattern=r"^[A-Z]{1,2}[0-9]{2}$")]] = Field(
        ["B03", "B04"], min_length=1, description="well ids, e.g. [B03, C05]")
    grid: list[PositiveInt] = Field([2, 2], min_length=2, max_length=2, description="fields per well: rows, columns")
    shape: list[PositiveInt] = Field([540, 640], min_length=2, max_length=2, description="field image size y, x")
    channels: int = Field(2, ge=1, le=8)
    z_planes: int = Field(1, ge=1, le=MAX_INDEX)
    z_step: float = Field(1.0, gt=0, le=MAX_UM)
    pixel_size: float = Field(0.325, gt=0, le=MAX_UM, description="micrometer per pixel")
    overlap: float = Field(0.0, ge=0, lt=0.5, description="fraction of a field shared with its neighbour")
    jitter_um: float = Field(0.0, ge=0, le=MAX_UM, description="random stage jitter, micrometer (irregular positions)")
    plate_shape: PlateShape = Field([8, 12], description="plate rows, columns (each at most 72; a 3456-well plate is 48 x 72)")
    dtype: Literal["uint8", "uint16"] = "uint16"
    blobs_per_field: int = Field(60, ge=0, le=MAX_COUNT)
    blob_radius: float = Field(12.0, gt=0, le=MAX_INDEX)
    seed: Seed = 0

    def fields(self) -> list[FieldSpec]:
        return layout(self.wells, (self.grid[0], self.grid[1]), (self.shape[0], self.shape[1]),
                      self.pixel_size, self.overlap, self.jitter_um, self.seed)

    def well_canvas(self) -> tuple[int, int, int]:
        return (self.z_planes, self.grid[0] * self.shape[0] + 100, self.grid[1] * self.shape[1] + 100)


def plan(p: Params, ctx: PlanContext) -> list[Unit]:
    Path(p.output).mkdir(parents=True, exist_ok=True)
    return [{"id": f"{fs.well}/{fs.index}", "field": i} for i, fs in enumerate(p.fields())]


def run_unit(p: Params, unit: Unit) -> int:
    fs = p.fields()[unit["field"]]
    n_blobs = p.blobs_per_field * p.grid[0] * p.grid[1]
    pixels = [render_field(fs, p.well_canvas(), (p.shape[0], p.shape[1]), p.z_planes, c, p.dtype, p.seed,
                           n_blobs, p.blob_radius) for c in range(p.channels)]
    return write_field_tiffs(Path(p.output), p.plate, pixels, fs)


def finish(p: Params, ctx: PlanContext) -> None:
    out = Path(p.output)
    bit_depth = 8 if p.dtype == "uint8" else 16
    atomic_write_bytes(out / "MeasurementDetail.mrf", mrf_text(
        p.plate, p.plate_shape[0], p.plate_shape[1], p.channels, (p.shape[0], p.shape[1]), p.pixel_size,
        bit_depth, n_fields=p.grid[0] * p.grid[1], n_z=p.z_planes).encode())
    atomic_write_bytes(out / "MeasurementData.mlf", mlf_text(p.fields(), p.plate, p.z_planes, p.channels,
                                                             p.z_step).encode())


def describe_unit(unit: Unit) -> str:
    return f"field {unit['id']}"


