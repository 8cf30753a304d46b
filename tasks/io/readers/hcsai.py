"""Molecular Devices ImageXpress HCS.ai acquisitions: ``experiment/`` (or ``experiment_z_stack/``)
holding one ``*.jdce`` (JSON: ``ImageStack.AutoLeadAcquisitionProtocol`` with
``ObjectiveCalibration.PixelWidth/PixelHeight``, ``Camera.Size``, ``Wavelengths`` (Index,
EmissionFilter Name and Wavelength) and ``PlateMap.ZDimensionParameters.Step``), one
``image_metadata_*.csv`` (a row per image: Row, Column, Field, Wavelength, Timepoint, ZIndex,
ImageSubFolderPath, ImageFileName, FieldOffsetPointX/Y, PositionZUm, ...) and the TIFFs in
``timepoint<N>/``. The plate format is not recorded: ``plate_shape``, else the smallest standard
plate holding every well (a warning line). ``experiment/`` alone holds projections when a
``experiment_z_stack/`` holds the stacks: ``projections: only`` reads it."""
from __future__ import annotations

import csv
import json
import re
from pathlib import Path

from ...errors import InputError, InputNotFoundError
from ..ngff.acquisition import Acquisition, Channel
from .folder_scan import FolderScan
from .planes import plane_header
from .records import Record, finite, plate_shape_for, relative_file, to_acquisition, unlisted_files, whole

IMAGE_NAME = re.compile(r"\.tiff?$", re.I)
COLUMNS = ("Row", "Column", "Field", "Wavelength", "Timepoint", "ZIndex", "ImageSubFolderPath", "ImageFileName",
           "FieldOffsetPointX", "FieldOffsetPointY")


def claims(found: FolderScan) -> bool:
    return any(f.suffix.lower() == ".jdce" and f.parent.name.startswith("experiment") for f in found.files)


def experiment_folder(folder: Path, projections: bool) -> Path:
    folder = Path(folder)
    if not folder.is_dir():
        raise InputNotFoundError(f"{folder}: HCS.ai folder does not exist")
    if folder.name.startswith("experiment") and any(folder.glob("*.jdce")):
        return folder
    levels = [[folder], sorted(d for d in folder.iterdir() if d.is_dir()), sorted(d for d in folder.glob("*/*") if d.is_dir())]
    for level in levels:
        found = [b for b in level if (b / "experiment_z_stack").is_dir() or (b / "experiment").is_dir()]
        if len(found) > 1:  # several acquisitions (plates or reruns): which one is the user's to say
            listed = ", ".join(str(b.relative_to(folder)) for b in found[:5])
            raise InputError(f"{folder}: {len(found)} HCS.ai acquisitions here ({listed}); give one of them as input")
        if not found:
            continue
        base = found[0]
        stack, plain = base / "experiment_z_stack", base / "experiment"
        if projections:
            if plain.is_dir() and stack.is_dir():
                return plain
            raise InputError(f"{base}: no projections (an experiment/ beside an experiment_z_stack/); "
                             "leave projections at skip")
        return stack if stack.is_dir() else plain
    raise InputNotFoundError(f"{folder}: no HCS.ai experiment/ folder with a .jdce here or 2 levels below")


def _one(folder: Path, pattern: str, what: str) -> Path:
    found = sorted(folder.glob(pattern))
    if len(found) != 1:
        raise InputError(f"{folder}: {len(found)} {what} files ({pattern}); HCS.ai writes exactly one")
    return found[0]


def _get(doc: dict, path: str, where: Path) -> object:
    value: object = doc
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            raise InputError(f"{where}: no {path} in the experiment description")
        value = value[key]
    return value


def read_hcsai(folder: Path, pixel_size_yx: tuple[float, float] | None = None, projections: bool = False,
               plate_shape: tuple[int, int] | None = None) -> Acquisition:
    exp = experiment_folder(folder, projections)
    jdce, table = _one(exp, "*.jdce", "experiment description (.jdce)"), _one(exp, "*.csv", "image metadata (.csv)")
    try:
        doc = json.loads(jdce.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise InputError(f"{jdce}: not valid JSON ({err})") from None
    protocol = "ImageStack.AutoLeadAcquisitionProtocol"
    px = pixel_size_yx or (finite(_get(doc, f"{protocol}.ObjectiveCalibration.PixelHeight", jdce), "PixelHeight", jdce, True),
                           finite(_get(doc, f"{protocol}.ObjectiveCalibration.PixelWidth", jdce), "PixelWidth", jdce, True))
    size = _get(doc, f"{protocol}.Camera.Size", jdce)
    channels = {}
    for wl in _get(doc, f"{protocol}.Wavelengths", jdce) or []:
        emission = wl.get("EmissionFilter") or {}
        channels[whole(wl.get("Index", len(channels)), "Wavelengths.Index", jdce)] = Channel(
            label=str(emission.get("Name") or f"w{len(channels)}"),
            wavelength_id=str(int(finite(emission["Wavelength"], "EmissionFilter.Wavelength", jdce)))
            if isinstance(emission.get("Wavelength"), (int, float)) else None)
    step = finite(_get(doc, f"{protocol}.PlateMap.ZDimensionParameters.Step", jdce), "ZDimensionParameters.Step", jdce)
    with table.open(newline="", encoding="utf-8-sig") as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        raise InputError(f"{table}: no image rows")
    lacking = [c for c in COLUMNS if c not in rows[0]]
    if lacking:
        raise InputError(f"{table}: no column {', '.join(lacking)}")
    records = []
    for i, r in enumerate(rows, start=2):
        where = f"{table}: line {i}"
        ints = {}
        for key, low in (("Row", 1), ("Column", 1), ("Field", 0), ("Wavelength", 0), ("Timepoint", 0), ("ZIndex", 0)):
            text = (r[key] or "").strip()
            if not text.isdigit() or int(text) < low:
                raise InputError(f"{where}: {key}={text!r} must be a whole number of at least {low}")
            ints[key] = int(text)
        z_um = (r.get("PositionZUm") or "").strip()
        records.append(Record(row=ints["Row"], col=ints["Column"], field=ints["Field"], t=ints["Timepoint"],
                              channel=ints["Wavelength"], z=ints["ZIndex"],
                              path=relative_file(exp, f"{r['ImageSubFolderPath']}/{r['ImageFileName']}", where, "image path"),
                              x_um=finite(r["FieldOffsetPointX"], "FieldOffsetPointX", where),
                              y_um=finite(r["FieldOffsetPointY"], "FieldOffsetPointY", where),
                              z_um=finite(z_um, "PositionZUm", where) if z_um else None, well_name=r.get("Well") or None))
    shape_yx = (whole(size.get("Height", 0), "Camera.Size.Height", jdce),
                whole(size.get("Width", 0), "Camera.Size.Width", jdce)) if isinstance(size, dict) else (0, 0)
    header_shape, dtype = plane_header(records[0].path) if records[0].path.is_file() else (shape_yx, "uint16")
    return to_acquisition(records, channels, name=exp.parent.name, source=jdce, pixel_size_yx=px,
                          image_shape_yx=tuple(header_shape), dtype=dtype, z_step=step if step > 0 else None,
                          plate=plate_shape_for(records, jdce, plate_shape),
                          unlisted=unlisted_files(exp, [r.path for r in records], IMAGE_NAME, depth=1))
