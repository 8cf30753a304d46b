"""Write synthetic Yokogawa CQ3000 measurement folders: the BTS mlf/mrf with every attribute a
CQ3000 writes (records ``W<well>F<field>T<t>Z<z>C<ch>.tif``, wells numbered row by row), and with
``projections`` a maximum projection per field and channel in ``Projection/``, recorded with
``bts:ZImageProcessing="MIP"``."""
from __future__ import annotations

from pathlib import Path
from xml.sax.saxutils import escape

import numpy as np

from ..storage.atomic import atomic_write_bytes
from .cellvoyager import BTS, FieldSpec, well_rc
from .plate_spec import PlateSpec


def name(spec: PlateSpec, fs: FieldSpec, z: int, ch: int, t: int = 0) -> str:
    return f"W{spec.well_index(fs.well):04d}F{fs.index:04d}T{t + 1:04d}Z{z:03d}C{ch}.tif"


def write_field(out: Path, spec: PlateSpec, fs: FieldSpec, pixels_czyx: list[np.ndarray], t: int = 0) -> int:
    import tifffile

    nbytes = 0
    for ch, zyx in enumerate(pixels_czyx, start=1):
        for z, plane in enumerate(zyx, start=1):
            tifffile.imwrite(out / name(spec, fs, z, ch, t), plane)
            nbytes += plane.nbytes
        if spec.projections:
            (out / "Projection").mkdir(exist_ok=True)
            tifffile.imwrite(out / "Projection" / name(spec, fs, 0, ch, t), zyx.max(axis=0))
    return nbytes


def _record(spec: PlateSpec, fs: FieldSpec, z: int, ch: int, projection: bool, t: int) -> str:
    r, c = well_rc(fs.well)
    extra = (f'bts:ZImageProcessing="MIP" bts:ZTop="{spec.z_um(spec.n_z - 1)}" bts:ZBottom="{spec.z_um(0)}" '
             if projection else "")
    file = ("Projection/" if projection else "") + name(spec, fs, z, ch, t)
    return (f'<bts:MeasurementRecord bts:Type="IMG" bts:Time="2024-05-01T10:{fs.index % 60:02d}:{z:02d}.000+00:00" '
            f'bts:Column="{c}" bts:Row="{r}" bts:FieldIndex="{fs.index}" bts:TimePoint="{t + 1}" bts:TimelineIndex="0" '
            f'bts:X="{fs.x_um}" bts:Y="{-fs.y_um}" bts:ZIndex="{max(z, 1)}" {extra}bts:ActionIndex="1" bts:Action="3D" '
            f'bts:Z="{spec.z_um(max(z, 1) - 1)}" bts:Ch="{ch}">{escape(file)}</bts:MeasurementRecord>')


def finish(out: Path, spec: PlateSpec, fields: list[FieldSpec]) -> None:
    records = [_record(spec, fs, z, ch, False, t) for t in range(spec.n_t) for fs in fields
               for z in range(1, spec.n_z + 1) for ch in range(1, spec.n_c + 1)]
    if spec.projections:
        records += [_record(spec, fs, 0, ch, True, t) for t in range(spec.n_t) for fs in fields
                    for ch in range(1, spec.n_c + 1)]
    title = escape(spec.plate, {'"': "&quot;"})
    channels = "\n".join(
        f'  <bts:MeasurementChannel bts:Ch="{ch}" bts:HorizontalPixelDimension="{spec.pixel_size}" '
        f'bts:VerticalPixelDimension="{spec.pixel_size}" bts:CameraNumber="1" bts:InputBitDepth="{spec.bit_depth}" '
        f'bts:InputLevel="1000" bts:HorizontalPixels="{spec.shape[1]}" bts:VerticalPixels="{spec.shape[0]}" '
        f'bts:FilterWheelPosition="{ch}" bts:FilterPosition="1" bts:ShadingCorrectionSource="Background" '
        f'bts:ObjectiveMagnificationRatio="1" bts:OriginalHorizontalPixels="{spec.shape[1]}" '
        f'bts:OriginalVerticalPixels="{spec.shape[0]}" />' for ch in range(1, spec.n_c + 1))
    atomic_write_bytes(out / "MeasurementDetail.mrf", (
        f'<?xml version="1.0" encoding="utf-8"?>\n<bts:MeasurementDetail bts:Version="1.0" bts:OperatorName="zarrmill" '
        f'bts:Title="{title}" bts:Application="" bts:BeginTime="2024-05-01T10:00:00.000000+00:00" '
        f'bts:EndTime="2024-05-01T11:00:00.000000+00:00" bts:MeasurementSettingFileName="{title}.mes" '
        f'bts:ColumnCount="{spec.plate_shape[1]}" bts:RowCount="{spec.plate_shape[0]}" bts:TimePointCount="{spec.n_t}" '
        f'bts:FieldCount="{len({f.index for f in fields})}" bts:ZCount="{spec.n_z}" bts:TargetSystem="CQ3000" '
        f'bts:ReleaseNumber="1.05.01.05" bts:Status="Completed" xmlns:bts="{BTS}">\n'
        f'  <bts:MeasurementSamplePlate bts:Name="{title}" bts:WellPlateFileName="{title}.wpi" '
        f'bts:WellPlateProductFileName="synthetic_{spec.plate_shape[0] * spec.plate_shape[1]}well.wpp" />\n'
        f'{channels}\n</bts:MeasurementDetail>\n').encode())
    atomic_write_bytes(out / "MeasurementData.mlf", (
        f'<?xml version="1.0" encoding="utf-8"?>\n<bts:MeasurementData bts:Version="1.0" xmlns:bts="{BTS}">\n'
        + "\n".join(records) + "\n</bts:MeasurementData>\n").encode())
