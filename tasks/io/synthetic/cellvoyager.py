"""Write synthetic Yokogawa CellVoyager measurement folders (mlf + mrf + one TIFF per plane), for
demos, tests and benchmarks. Each well is one continuous field of blobs; every field of view is
the window of it at its stage position, so neighbouring fields agree where they overlap."""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

import numpy as np

from ..ngff.acquisition import row_index
from .blobs import Blobs, render, to_dtype

BTS = "http://www.yokogawa.co.jp/BTS/BTSSchema/1.0"


@dataclass(frozen=True)
class FieldSpec:
    well: str  # e.g. B03
    index: int  # 1-based field index
    x_um: float  # stage X (top-left corner)
    y_um: float  # image-oriented y (top-left corner); the mlf stores -y
    origin_px: tuple[int, int]  # (y, x) of the field in its well canvas


def well_rc(well: str) -> tuple[int, int]:
    letters = "".join(c for c in well if c.isalpha())
    return row_index(letters), int(well[len(letters):])


def layout(wells: list[str], grid: tuple[int, int], shape: tuple[int, int], pixel_um: float,
           overlap: float, jitter_um: float, seed: int) -> list[FieldSpec]:
    """Fields on a grid per well, stepped by (1 - overlap) of a field, plus seeded stage jitter."""
    rng = np.random.default_rng(seed)
    step_y, step_x = (int(round(s * (1 - overlap))) for s in shape)
    out = []
    for well in wells:
        for i in range(grid[0] * grid[1]):
            r, c = divmod(i, grid[1])
            jy, jx = (rng.integers(-1, 2, size=2) * int(round(jitter_um / pixel_um))) if jitter_um else (0, 0)
            oy, ox = r * step_y + int(jy) + 50, c * step_x + int(jx) + 50
            out.append(FieldSpec(well, i + 1, round(-1000.0 + ox * pixel_um, 4), round(-1500.0 + oy * pixel_um, 4), (oy, ox)))
    return out


def tiff_name(plate: str, well: str, t: int, field: int, z: int, ch: int) -> str:
    return f"{plate}_{well}_T{t:04d}F{field:03d}L01A01Z{z:02d}C{ch:02d}.tif"


def render_field(fs: FieldSpec, well_shape: tuple[int, int, int], shape: tuple[int, int], n_z: int,
                 channel: int, dtype: str, seed: int, n_blobs: int, radius: float) -> np.ndarray:
    """(z, y, x) pixels of one field and channel."""
    blobs = Blobs.make(well_shape, n_blobs, radius, seed + zlib.crc32(fs.well.encode()) + 7919 * channel)
    oy, ox = fs.origin_px
    region = ((0, n_z), (oy, oy + shape[0]), (ox, ox + shape[1]))
    noise = zlib.crc32(repr((seed, fs.well, fs.index, channel)).encode())
    return to_dtype(render(blobs, region, labels=False, noise_seed=noise), np.dtype(dtype))


def mlf_record(fs: FieldSpec, plate: str, t: int, z: int, ch: int, z_step: float) -> str:
    r, c = well_rc(fs.well)
    return (f'<bts:MeasurementRecord bts:Type="IMG" bts:Time="2024-05-01T10:{fs.index % 60:02d}:{z:02d}.000+00:00" '
            f'bts:Column="{c}" bts:Row="{r}" bts:TimePoint="{t}" bts:FieldIndex="{fs.index}" bts:ZIndex="{z}" '
            f'bts:TimelineIndex="1" bts:ActionIndex="1" bts:Action="3D" bts:X="{fs.x_um}" bts:Y="{-fs.y_um}" '
            f'bts:Z="{(z - 1) * z_step}" bts:Ch="{ch}">{escape(tiff_name(plate, fs.well, t, fs.index, z, ch))}'
            f'</bts:MeasurementRecord>')


def err_record(fs: FieldSpec, t: int) -> str:
    """What a CellVoyager writes for a field it could not image: an ERR record with its message
    (no FieldIndex, no Ch, no file)."""
    r, c = well_rc(fs.well)
    return (f'<bts:MeasurementRecord bts:Type="ERR" bts:Time="2024-05-01T10:{fs.index % 60:02d}:00.000+00:00" '
            f'bts:Column="{c}" bts:Row="{r}" bts:TimePoint="{t}" bts:TimelineIndex="1" bts:X="{fs.x_um}" '
            f'bts:Y="{-fs.y_um}">Autofocus failed (no focus found)</bts:MeasurementRecord>')


def mlf_text(fields: list[FieldSpec], plate: str, n_z: int, n_c: int, z_step: float, n_t: int = 1,
             spec: Any = None) -> str:
    """Records for every plane; with ``spec`` (a PlateSpec), only the channels and time points each well was imaged
    with, and an ERR record instead of the planes of a field the instrument failed."""
    records = []
    for t in range(1, n_t + 1):
        for fs in fields:
            if spec is not None and spec.failed(fs.well, fs.index):
                if t - 1 in spec.times_of(fs.well):
                    records.append(err_record(fs, t))
                continue
            records += [mlf_record(fs, plate, t, z, ch, z_step) for z in range(1, n_z + 1) for ch in range(1, n_c + 1)
                        if spec is None or spec.acquired(fs.well, t - 1, ch - 1)]
    return (f'<?xml version="1.0" encoding="utf-8"?>\n<bts:MeasurementData bts:Version="1.0" xmlns:bts="{BTS}">\n'
            + "\n".join(records) + "\n</bts:MeasurementData>\n")


def mrf_text(plate: str, n_rows: int, n_cols: int, n_c: int, shape: tuple[int, int], pixel_um: float,
             bit_depth: int, n_fields: int = 1, n_z: int = 1, n_t: int = 1) -> str:
    """Every attribute a CV7000 (R1.17) writes, so instrument parsers (Fractal's among them)
    accept the folder; ``settings_files`` writes the files it names (.mes, .wpi, .wpp)."""
    channels = "\n".join(
        f'  <bts:MeasurementChannel bts:Ch="{ch}" bts:HorizontalPixelDimension="{pixel_um}" '
        f'bts:VerticalPixelDimension="{pixel_um}" bts:CameraNumber="{ch}" bts:InputBitDepth="{bit_depth}" '
        f'bts:InputLevel="1000" bts:HorizontalPixels="{shape[1]}" bts:VerticalPixels="{shape[0]}" '
        f'bts:FilterWheelPosition="{ch}" bts:FilterPosition="1" bts:ShadingCorrectionSource="SC_CH{ch:02d}.tif" />'
        for ch in range(1, n_c + 1))
    name = escape(plate, {'"': "&quot;"})
    return (f'<?xml version="1.0" encoding="utf-8"?>\n<bts:MeasurementDetail bts:Version="1.0" '
            f'bts:OperatorName="zarrmill" bts:Title="{name}" bts:Application="" '
            f'bts:BeginTime="2024-05-01T10:00:00.000000+00:00" bts:EndTime="2024-05-01T11:00:00.000000+00:00" '
            f'bts:MeasurementSettingFileName="{name}.mes" bts:ColumnCount="{n_cols}" bts:RowCount="{n_rows}" '
            f'bts:TimePointCount="{n_t}" bts:FieldCount="{n_fields}" bts:ZCount="{n_z}" '
            f'bts:TargetSystem="CV7000 FD" bts:ReleaseNumber="R1.17.05" xmlns:bts="{BTS}">\n'
            f'  <bts:MeasurementSamplePlate bts:Name="{name}" bts:WellPlateFileName="{name}.wpi" '
            f'bts:WellPlateProductFileName="synthetic_{n_rows * n_cols}well.wpp" />\n{channels}\n</bts:MeasurementDetail>\n')


def write_field_tiffs(folder: Path, plate: str, pixels_czyx: list[np.ndarray], fs: FieldSpec, t: int = 0) -> int:
    import tifffile

    nbytes = 0
    for ch, zyx in enumerate(pixels_czyx, start=1):
        for z, plane in enumerate(zyx if zyx is not None else (), start=1):  # None: channel not imaged here
            tifffile.imwrite(folder / tiff_name(plate, fs.well, t + 1, fs.index, z, ch), plane)
            nbytes += plane.nbytes
    return nbytes


def write_field(out: Path, spec, fs: FieldSpec, pixels_czyx: list[np.ndarray], t: int = 0) -> int:
    return write_field_tiffs(out, spec.plate, pixels_czyx, fs, t)


def finish(out: Path, spec, fields: list[FieldSpec]) -> None:
    from ..storage.atomic import atomic_write_bytes

    atomic_write_bytes(out / "MeasurementDetail.mrf", mrf_text(
        spec.plate, spec.plate_shape[0], spec.plate_shape[1], spec.n_c, spec.shape, spec.pixel_size, spec.bit_depth,
        n_fields=len({f.index for f in fields}), n_z=spec.n_z, n_t=spec.n_t).encode())
    for name, text in settings_files(spec).items():
        atomic_write_bytes(out / name, text.encode())
    atomic_write_bytes(out / "MeasurementData.mlf",
                       mlf_text(fields, spec.plate, spec.n_z, spec.n_c, spec.z_step, spec.n_t, spec).encode())


def settings_files(spec: Any) -> dict[str, str]:
    """The measurement settings (.mes: channels with target, fluorophore, filter, exposure, colour),
    the plate (.wpi) and the plate product (.wpp) the mrf names, as a CV7000 writes them beside it."""
    name = escape(spec.plate, {'"': "&quot;"})
    rows, cols = spec.plate_shape
    channels = "\n".join(
        f'    <bts:Channel bts:Ch="{ch}" bts:Target="{escape(spec.channel(ch - 1)[0])}" bts:Fluorophore="" '
        f'bts:Objective="20x" bts:Magnification="20" bts:Method="Confocal" '
        f'bts:Acquisition="BP{spec.channel(ch - 1)[1] or 525}/50" bts:ExposureTime="100" bts:Binning="1" '
        f'bts:Color="{CHANNEL_COLORS[(ch - 1) % len(CHANNEL_COLORS)]}" bts:CameraNumber="{ch}" '
        f'bts:ZOffset="0" bts:ShadingCorrectionSource="SC_CH{ch:02d}.tif" />'
        for ch in range(1, spec.n_c + 1))
    mes = (f'<?xml version="1.0" encoding="utf-8"?>\n<bts:MeasurementSetting bts:Version="1.0" bts:ProductID="CV7000" '
           f'bts:Name="{name}" xmlns:bts="{BTS}">\n  <bts:ChannelList>\n{channels}\n  </bts:ChannelList>\n'
           f'</bts:MeasurementSetting>\n')
    wpi = (f'<?xml version="1.0" encoding="utf-8"?>\n<bts:WellPlate bts:Version="1.0" bts:Name="{name}" '
           f'bts:ProductFileName="synthetic_{rows * cols}well.wpp" xmlns:bts="{BTS}" />\n')
    wpp = (f'<?xml version="1.0" encoding="utf-8"?>\n<bts:WellPlateProduct bts:Version="1.0" '
           f'bts:Name="synthetic {rows * cols} well" bts:RowCount="{rows}" bts:ColumnCount="{cols}" '
           f'bts:WellShape="Square" xmlns:bts="{BTS}" />\n')
    return {f"{spec.plate}.mes": mes, f"{spec.plate}.wpi": wpi, f"synthetic_{rows * cols}well.wpp": wpp}


CHANNEL_COLORS = ("#FF0000FF", "#FF00FF00", "#FFFF0000", "#FFFF00FF", "#FFFFFFFF", "#FF00FFFF", "#FFFFFF00", "#FFFF8000")
