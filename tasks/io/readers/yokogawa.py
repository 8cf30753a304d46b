"""Yokogawa BTS measurement folders, the one parser for CellVoyager (CV7000 / CV8000) and CQ (CQ1 /
CQ3000): ``MeasurementData.mlf`` lists every image with its well, field, time point, z, channel and stage X/Y/Z; ``MeasurementDetail.mrf`` holds
the plate size, channels, pixel size, image size and bit depth.

Stage Y points the other way from image rows, so y is flipped (y_um = -Y), as fractal-tasks-core
does; positions are the field's top-left corner."""
from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Callable

import numpy as np

from ...errors import InputError, InputNotFoundError, warn
from ..ngff.acquisition import Acquisition, Channel, PlaneTable
from ..storage.guard import inside
from .folder_scan import FolderScan
from .mlf import NS, MlfColumns, number_attr, read_mlf, utc, whole_attr
from .records import Record, keep_stacks, listed, relative_file, table_acquisition, to_acquisition, unlisted_names

# CellVoyager: <plate>_<well>_T0001F001L01A01Z01C01.tif; CQ: W0001F0001T0001Z001C1.tif
IMAGE_NAME = re.compile(r"(_T\d{4}F\d{3}L\d{2}A\d{2}Z\d{2}C\d{2}|^W\d{4}F\d{4}T\d{4}Z\d{3}C\d+)\.(tif|tiff|png)$", re.I)
WELL_IN_NAME = re.compile(r"_([A-Z]{1,2}\d{2,3}(?:\.[a-z]\d)?)_T\d{4}F\d{3}L\d{2}A\d{2}Z\d{2}C\d{2}\.", re.I)


MLF, MRF = "MeasurementData.mlf", "MeasurementDetail.mrf"
MAX_DEPTH = 3  # CV8000 and exports put the measurement folder a level or two below what users point at


def measurement_folder(folder: Path) -> Path:
    """The folder holding MeasurementData.mlf: ``folder`` itself, or the one folder below it (at
    most MAX_DEPTH levels) that has one; several are an error listing them."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputNotFoundError(f"{folder}: CellVoyager folder does not exist")
    for depth in range(MAX_DEPTH + 1):
        found = sorted({f.parent for f in folder.glob("/".join(["*"] * depth + [MLF])) if f.is_file()})
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            listed = ", ".join(str(f.relative_to(folder)) for f in found[:5])
            raise InputError(f"{folder}: {len(found)} measurement folders hold {MLF} ({listed}); give one of them "
                             "as input")
    raise InputNotFoundError(f"{folder / MLF}: CellVoyager mlf file not found here or {MAX_DEPTH} levels below "
                             "(set params.mlf to its name if it is called otherwise)")


def measurement_files(found: FolderScan) -> list[Path]:
    """The mrf beside each mlf of a scanned folder (its path even when it is missing: the reader
    then says so), which names the instrument."""
    folders = sorted({f.parent for f in found.named(lambda n: n.lower().endswith(".mlf"))})
    return [found.root / d / MRF for d in folders]


def find_metadata(folder: Path, mlf: str | None, mrf: str | None) -> tuple[Path, Path]:
    """(mlf, mrf): named ones relative to ``folder``; otherwise the measurement folder's, found
    at any level below ``folder``."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputNotFoundError(f"{folder}: CellVoyager folder does not exist")
    mlf_path = folder / mlf if mlf else measurement_folder(folder) / MLF
    mrf_path = folder / mrf if mrf else mlf_path.parent / MRF
    for path, what in ((mlf_path, "mlf"), (mrf_path, "mrf")):
        if not path.exists():
            raise InputNotFoundError(f"{path}: CellVoyager {what} file not found (set params.{what} "
                                     f"to its name if it is called otherwise)")
    return mlf_path, mrf_path


def _parse_xml(path: Path) -> ET.Element:
    try:
        return ET.fromstring(path.read_bytes())
    except ET.ParseError as err:
        raise InputError(f"{path}: not valid XML ({err})") from err


def parse_mrf(path: Path) -> dict:
    root = _parse_xml(path)
    channels = root.findall(NS + "MeasurementChannel")
    if not channels:
        raise InputError(f"{path}: no bts:MeasurementChannel entries")
    first = channels[0]
    ch = {}
    for el in channels:
        idx = whole_attr(el, "Ch", path, 1)
        ch[idx] = {k: el.get(NS + k) for k in ("CameraNumber", "FilterWheelPosition", "FilterPosition",
                                              "ShadingCorrectionSource", "InputLevel")}
    return {
        "settings": root.get(NS + "MeasurementSettingFileName"),
        "title": root.get(NS + "Title") or path.parent.name,
        "n_rows": whole_attr(root, "RowCount", path, 1),
        "n_cols": whole_attr(root, "ColumnCount", path, 1),
        "pixel_size_x": number_attr(first, "HorizontalPixelDimension", path, positive=True),
        "pixel_size_y": number_attr(first, "VerticalPixelDimension", path, positive=True),
        "width": whole_attr(first, "HorizontalPixels", path, 1),
        "height": whole_attr(first, "VerticalPixels", path, 1),
        "bit_depth": whole_attr(first, "InputBitDepth", path, 1),
        "channels": dict(sorted(ch.items())),
    }


def parse_mes(path: Path) -> dict[int, dict[str, str]]:
    """Channel names and colours from the measurement settings (.mes) the mrf names:
    ``<bts:ChannelList><bts:Channel bts:Ch bts:Target bts:Fluorophore bts:Color>``; {} without one."""
    if not path.is_file():
        return {}
    root = _parse_xml(path)
    out = {}
    listed = [ch for lst in root.iter(NS + "ChannelList") for ch in lst.findall(NS + "Channel")]
    for el in listed:  # only the channel list: timelines carry colours of their own
        ch = el.get(NS + "Ch")
        if ch is None or not ch.strip().isdigit():
            continue
        name = " ".join(v.strip() for v in (el.get(NS + "Target"), el.get(NS + "Fluorophore")) if v and v.strip())
        out[int(ch)] = {"name": name, "color": _rgb(el.get(NS + "Color"))}
    return out


def _rgb(color: str | None) -> str:
    """CellVoyager colours are #AARRGGBB (or #RRGGBB); omero wants RRGGBB. Anything else: white."""
    digits = (color or "").strip().lstrip("#")
    if len(digits) == 8 and all(c in "0123456789abcdefABCDEF" for c in digits):
        return digits[2:].upper()
    if len(digits) == 6 and all(c in "0123456789abcdefABCDEF" for c in digits):
        return digits.upper()
    return "FFFFFF"


def target_system(mrf: Path) -> str:
    """The instrument the mrf says wrote the measurement (``CV7000 FD``, ``CV8000``, ``CQ3000``, ``CQ1``);
    read from the root element's attributes alone, '' when it cannot be read."""
    try:
        for _, el in ET.iterparse(mrf, events=("start",)):
            return el.get(NS + "TargetSystem") or ""
    except (ET.ParseError, OSError):
        return ""
    return ""


def read_measurement(folder: Path, mlf: str | None, mrf: str | None, projections: bool,
                     pixel_size_yx: tuple[float, float] | None = None,
                     records: Callable[[Path, Path], MlfColumns] = read_mlf) -> Acquisition:
    """A CellVoyager or CQ measurement: records from the mlf, plate, channels and pixel size from
    the mrf, names and colours from the .mes it names; CQ projections (records with
    bts:ZImageProcessing) are kept apart from stacks (records.keep_stacks). ``records(mlf, folder)``
    reads the mlf's records (a measurement still being written: the ones complete so far)."""
    mlf_path, mrf_path = find_metadata(Path(folder), mlf, mrf)
    folder = mlf_path.parent  # images sit beside the mlf
    detail = parse_mrf(mrf_path)
    cols = records(mlf_path, folder)
    if cols.errors:
        warn(mlf_path, f"{len(cols.errors)} fields the instrument could not image (ERR records), left out: "
                       f"{listed(cols.errors)}")
    settings = parse_mes(_settings_file(folder, detail["settings"], mrf_path)) if detail["settings"] else {}
    channels = {c: Channel(label=settings.get(c, {}).get("name") or f"CH{c:02d}", wavelength_id=f"A01_C{c:02d}",
                           color=settings.get(c, {}).get("color", "FFFFFF"), extra=extra)
                for c, extra in detail["channels"].items()}
    common = dict(name=detail["title"], source=mlf_path,
                  pixel_size_yx=pixel_size_yx or (detail["pixel_size_y"], detail["pixel_size_x"]),
                  image_shape_yx=(detail["height"], detail["width"]),
                  dtype="uint8" if detail["bit_depth"] <= 8 else "uint16",
                  plate=(detail["n_rows"], detail["n_cols"]), bit_depth=detail["bit_depth"],
                  unlisted=unlisted_names(folder, cols.names, IMAGE_NAME))
    resolved = folder.resolve()
    if projections or cols.projection.any():  # CQ projections beside stacks: record by record
        records = [Record(row=int(cols.row[i]), col=int(cols.col[i]), field=int(cols.field[i]), t=int(cols.t[i]),
                          channel=int(cols.ch[i]), z=int(cols.z[i]), path=resolved / os.fsdecode(cols.names[i]),
                          x_um=float(cols.x[i]), y_um=-float(cols.y[i]), z_um=float(cols.z_um[i]),
                          time=utc(cols.times[i].decode(), mlf_path), well_name=_well_name(os.fsdecode(cols.names[i])))
                   for i in range(len(cols))]
        projected = {rec.path for rec, flag in zip(records, cols.projection.tolist()) if flag}
        records = keep_stacks(records, lambda r: r.path in projected, projections, mlf_path)
        return to_acquisition(records, channels, **common)
    keys = np.array(list(channels))
    code = np.searchsorted(keys, cols.ch).clip(max=len(keys) - 1)
    unknown = cols.ch[keys[code] != cols.ch]
    if len(unknown):
        raise InputError(f"{mlf_path}: records name channels {listed(map(str, np.unique(unknown).tolist()))} that the "
                         "metadata does not describe")
    table = PlaneTable(cols.row, cols.col, cols.field, cols.t, code, cols.z, cols.x, -cols.y, cols.z_um,
                       names=cols.names, folder=str(resolved), times=cols.times,
                       time_text=lambda text: utc(text, mlf_path), well_of_name=_well_name)
    del cols, code  # the table is the only holder now: it is sorted in place, column by column
    return table_acquisition(table, channels, **common)


def _image_file(folder: Path, name: str, mlf: Path) -> Path:
    """An mlf record's file: a path relative to the measurement folder that stays inside it (a
    CQ3000 names ``Projection/W0029F0001T0001Z000C1.tif``), never one that leaves it."""
    return relative_file(folder, name, mlf, "MeasurementRecord file")


def _settings_file(folder: Path, name: str, mrf: Path) -> Path:
    """The .mes the mrf names, beside the mlf (a plain file name: the mrf is metadata, not a path)."""
    if not name or "/" in name or "\\" in name or name in (".", ".."):
        raise InputError(f"{mrf}: bts:MeasurementSettingFileName {name!r} must be a plain file name")
    return inside(folder.resolve(), name, what="measurement settings file", resolve=False)


def _well_name(filename: str) -> str | None:
    """The instrument's well id from the file name: the last ``_<well>_T....`` group, so a plate
    name that itself looks like a well id (``myplate_B03_C03_...``) is not mistaken for it."""
    match = WELL_IN_NAME.search(filename)
    return match.group(1) if match else None




def saved_converters(mlf: str) -> tuple[Callable[[str], str], Callable[[str], str | None]]:
    """The converters ``read_measurement`` attaches to its plane table, for one saved (saved.py)."""
    return (lambda text: utc(text, Path(mlf))), _well_name
