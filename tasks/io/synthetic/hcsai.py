"""Write synthetic ImageXpress HCS.ai acquisitions: ``experiment/<plate>.jdce`` (the acquisition
protocol as JSON: camera size, objective calibration, wavelengths with emission filters, z and
time schedule), ``experiment/image_metadata_<plate>.csv`` (a row per image with its well, field,
wavelength, time point, z index, file and stage offsets) and the TIFFs in ``experiment/timepoint0/``."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np

from ..storage.atomic import atomic_write_bytes
from .cellvoyager import FieldSpec, well_rc
from .plate_spec import PlateSpec

COLUMNS = ("Row", "Column", "Well", "Field", "Wavelength", "Timepoint", "ZIndex", "ImageSizeXPx", "ImageSizeYPx",
           "ImageSubFolderPath", "ImageFileName", "FieldOffsetPointX", "FieldOffsetPointY", "PositionXUm",
           "PositionYUm", "PositionZUm", "TimeStampSec", "ExposureTimeMs")


def name(spec: PlateSpec, fs: FieldSpec, w: int, z: int, t: int = 0) -> str:
    return f"{spec.plate}_{fs.well}_f{fs.index}_w{w}_z{z}_t{t}.tif"


def write_field(out: Path, spec: PlateSpec, fs: FieldSpec, pixels_czyx: list[np.ndarray], t: int = 0) -> int:
    import tifffile

    folder = out / "experiment" / f"timepoint{t}"
    folder.mkdir(parents=True, exist_ok=True)
    for w, zyx in enumerate(pixels_czyx):
        for z, plane in enumerate(zyx):
            tifffile.imwrite(folder / name(spec, fs, w, z, t), plane)
    return sum(p.nbytes for p in pixels_czyx)


def finish(out: Path, spec: PlateSpec, fields: list[FieldSpec]) -> None:
    wavelengths = [{"Index": w, "ImagingMode": "Widefield", "ZSlice": 0, "ZStep": spec.z_step,
                    "EmissionFilter": {"Name": spec.channel(w)[0], "Wavelength": spec.channel(w)[1] or 500, "Unit": "nm"},
                    "ExcitationFilter": {"Name": f"Ex{w}", "Wavelength": max((spec.channel(w)[1] or 500) - 50, 350),
                                         "Unit": "nm"}} for w in range(spec.n_c)]
    doc = {"Version": "1.0", "ImageStack": {
        "PlateId": spec.plate, "Uuid": spec.uuid("hcsai").lower(), "ImageFormat": "tif", "LargeImage": False,
        "AutoLeadAcquisitionProtocol": {
            "Camera": {"Size": {"Width": spec.shape[1], "Height": spec.shape[0]}, "Binning": "1x1"},
            "ObjectiveCalibration": {"Unit": "um", "ObjectiveName": "20X Plan Apo", "PixelWidth": spec.pixel_size,
                                     "PixelHeight": spec.pixel_size},
            "Wavelengths": wavelengths,
            "PlateMap": {"ZDimensionParameters": {"Enabled": spec.n_z > 1, "Step": spec.z_step if spec.n_z > 1 else 0.0,
                                                  "NumberOfSlices": spec.n_z, "Variable": False},
                         "TimeSchedule": {"Enabled": spec.n_t > 1, "NumberOfTimepoints": spec.n_t,
                                          "Times": [{"Ms": 600_000 * t} for t in range(spec.n_t)],
                                          "Variable": False}}}}}
    table = io.StringIO()
    writer = csv.writer(table, lineterminator="\n")
    writer.writerow(COLUMNS)
    for t in range(spec.n_t):
        for fs in fields:
            r, c = well_rc(fs.well)
            for w in range(spec.n_c):
                for z in range(spec.n_z):
                    writer.writerow([r, c, fs.well, fs.index, w, t, z, spec.shape[1], spec.shape[0], f"timepoint{t}",
                                     name(spec, fs, w, z, t), fs.x_um, fs.y_um, fs.x_um, fs.y_um, spec.z_um(z),
                                     600.0 * t, 100.0])
    folder = out / "experiment"
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(folder / f"image_metadata_{spec.plate}.csv", table.getvalue().encode())
    atomic_write_bytes(folder / f"{spec.plate}.jdce", json.dumps(doc, indent=1).encode())
