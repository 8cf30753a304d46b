"""Yokogawa BTS measurement folders, the one parser for CellVoyager (CV7000 / CV8000) and CQ (CQ1 /
CQ3000): ``MeasurementData.mlf`` lists every image with its well, field, time point, z, channel and stage X/Y/Z; ``MeasurementDetail.mrf`` holds
the plate size, channels, pixel size, image size and bit depth.

Stage Y points the other way from image rows, so y is flipped (y_um = -Y), as fractal-tasks-core
does; positions are the field's top-left corner."""
from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

from ...errors import InputError, InputNotFoundError, warn
from ..ngff.acquisition import Acquisition, Channel, row_name
from ..storage.guard import inside
from .folder_scan import FolderScan
from .records import Record, keep_stacks, listed, relative_file, to_acquisition, unlisted_files

NS = "{http://www.yokogawa.co.jp/BTS/BTSSchema/1.0}"
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


def _attr(el: ET.Element, name: str, path: Path) -> str:
    value = el.get(NS + name)
    if value is None:
        raise InputError(f"{path}: <{el.tag.replace(NS, 'bts:')}> lacks bts:{name}")
    return value


def _int(el: ET.Element, name: str, path: Path, low: int = 0) -> int:
    """A whole-number attribute, at least ``low``; anything else names the file, element and value."""
    text = _attr(el, name, path)
    try:
        value = int(text.strip())
    except ValueError:
        raise InputError(f"{path}: bts:{name}={text!r} in <{el.tag.replace(NS, 'bts:')}> is not a whole number") from None
    if value < low:
        raise InputError(f"{path}: bts:{name}={value} in <{el.tag.replace(NS, 'bts:')}> must be at least {low}")
    return value


def _float(el: ET.Element, name: str, path: Path, positive: bool = False) -> float:
    """A finite number (stage positions, pixel sizes); NaN or infinity would be written into metadata."""
    text = _attr(el, name, path)
    try:
        value = float(text.strip())
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or (positive and value <= 0):
        need = "a number > 0" if positive else "a finite number"
        raise InputError(f"{path}: bts:{name}={text!r} in <{el.tag.replace(NS, 'bts:')}> must be {need}")
    return value


def _parse_xml(path: Path) -> ET.Element:
    try:
        return ET.fromstring(path.read_bytes())
    except ET.ParseError as err:
        raise InputError(f"{path}: not valid XML ({err})") from err


def _utc(text: str, path: Path) -> str:
    try:
        return datetime.fromisoformat(text).astimezone(timezone.utc).isoformat(timespec="milliseconds")
    except ValueError:
        raise InputError(f"{path}: bts:Time={text!r} is not an ISO date and time") from None


def parse_mrf(path: Path) -> dict:
    root = _parse_xml(path)
    channels = root.findall(NS + "MeasurementChannel")
    if not channels:
        raise InputError(f"{path}: no bts:MeasurementChannel entries")
    first = channels[0]
    ch = {}
    for el in channels:
        idx = _int(el, "Ch", path, 1)
        ch[idx] = {k: el.get(NS + k) for k in ("CameraNumber", "FilterWheelPosition", "FilterPosition",
                                              "ShadingCorrectionSource", "InputLevel")}
    return {
        "settings": root.get(NS + "MeasurementSettingFileName"),
        "title": root.get(NS + "Title") or path.parent.name,
        "n_rows": _int(root, "RowCount", path, 1),
        "n_cols": _int(root, "ColumnCount", path, 1),
        "pixel_size_x": _float(first, "HorizontalPixelDimension", path, positive=True),
        "pixel_size_y": _float(first, "VerticalPixelDimension", path, positive=True),
        "width": _int(first, "HorizontalPixels", path, 1),
        "height": _int(first, "VerticalPixels", path, 1),
        "bit_depth": _int(first, "InputBitDepth", path, 1),
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


def parse_mlf(path: Path, errors: list[str] | None = None) -> list[dict]:
    """The image records, streamed: a 1536-well plate's mlf holds millions of records (hundreds of
    MB), whose whole element tree would take several times the file's size in memory. ERR records
    (a field the instrument could not image, e.g. autofocus failed) are described in ``errors``."""
    records = []
    for el in _root_children(path, NS + "MeasurementRecord"):
        kind = el.get(NS + "Type")
        if kind == "ERR" and errors is not None:
            errors.append(_error_record(el, path))
        if kind != "IMG":
            continue  # ERR/other records carry no image
        records.append({
            "file": (el.text or "").strip(),
            "row": _int(el, "Row", path, 1), "col": _int(el, "Column", path, 1),
            "field": _int(el, "FieldIndex", path, 1), "t": _time_key(el, path),
            "z": _int(el, "ZIndex", path), "ch": _int(el, "Ch", path, 1),
            "x": _float(el, "X", path), "y": _float(el, "Y", path),
            "z_um": _float(el, "Z", path), "time": _utc(_attr(el, "Time", path), path),
            "projection": bool((el.get(NS + "ZImageProcessing") or "").strip()),  # CQ: MIP, SUM, ...
        })
    if not records:
        raise InputError(f"{path}: no image records (bts:MeasurementRecord with bts:Type=IMG)")
    return records


TIMELINE_STEP = 1_000_000  # time points of one timeline sort before the next timeline's


def _time_key(el: ET.Element, path: Path) -> int:
    """Timeline, then time point: a well imaged by two timelines (each counting its time points
    from 1) has both, in timeline order, never two files for one plane."""
    timeline = _int(el, "TimelineIndex", path) if el.get(NS + "TimelineIndex") is not None else 0
    point = _int(el, "TimePoint", path)
    if point >= TIMELINE_STEP:
        raise InputError(f"{path}: bts:TimePoint={point} must be below {TIMELINE_STEP}")
    return timeline * TIMELINE_STEP + point


def _error_record(el: ET.Element, path: Path) -> str:
    """'B03 field 4 time point 1: "Autofocus failed"': where, as far as the record says (an
    autofocus failure names no field, only the stage position), and the instrument's own message."""
    row, col = _int(el, "Row", path, 1), _int(el, "Column", path, 1)
    where = f"{row_name(row)}{col:02d}"
    if el.get(NS + "FieldIndex") is not None:
        where += f" field {_int(el, 'FieldIndex', path, 1)}"
    elif el.get(NS + "X") is not None and el.get(NS + "Y") is not None:
        where += f" at stage x={_float(el, 'X', path):g}, y={_float(el, 'Y', path):g}"
    if el.get(NS + "TimePoint") is not None:
        where += f" time point {_int(el, 'TimePoint', path)}"
    message = " ".join((el.text or "").split()) or "no message"
    return f'{where}: "{message}"'


def _root_children(path: Path, tag: str) -> Iterator[ET.Element]:
    """The root element's children named ``tag``, one at a time, each cleared once used."""
    depth = 0
    try:
        for event, el in ET.iterparse(path, events=("start", "end")):
            depth += 1 if event == "start" else -1
            if event == "end" and depth == 1:
                if el.tag == tag:
                    yield el
                el.clear()
    except ET.ParseError as err:
        raise InputError(f"{path}: not valid XML ({err})") from err


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
                     pixel_size_yx: tuple[float, float] | None = None) -> Acquisition:
    """A CellVoyager or CQ measurement: records from the mlf, plate, channels and pixel size from
    the mrf, names and colours from the .mes it names; CQ projections (records with
    bts:ZImageProcessing) are kept apart from stacks (records.keep_stacks)."""
    mlf_path, mrf_path = find_metadata(Path(folder), mlf, mrf)
    folder = mlf_path.parent  # images sit beside the mlf
    detail = parse_mrf(mrf_path)
    errors: list[str] = []
    parsed = parse_mlf(mlf_path, errors)
    if errors:
        warn(mlf_path, f"{len(errors)} fields the instrument could not image (ERR records), left out: "
                       f"{listed(errors)}")
    records = [Record(row=r["row"], col=r["col"], field=r["field"], t=r["t"], channel=r["ch"], z=r["z"],
                      path=_image_file(folder, r["file"], mlf_path), x_um=r["x"], y_um=-r["y"], z_um=r["z_um"],
                      time=r["time"], well_name=_well_name(r["file"])) for r in parsed]
    projected = {rec.path for rec, r in zip(records, parsed) if r["projection"]}
    every_file = [r.path for r in records]
    if projected or projections:
        records = keep_stacks(records, lambda r: r.path in projected, projections, mlf_path)
    settings = parse_mes(_settings_file(folder, detail["settings"], mrf_path)) if detail["settings"] else {}
    channels = {c: Channel(label=settings.get(c, {}).get("name") or f"CH{c:02d}", wavelength_id=f"A01_C{c:02d}",
                           color=settings.get(c, {}).get("color", "FFFFFF"), extra=extra)
                for c, extra in detail["channels"].items()}
    return to_acquisition(
        records, channels, name=detail["title"], source=mlf_path,
        pixel_size_yx=pixel_size_yx or (detail["pixel_size_y"], detail["pixel_size_x"]),
        image_shape_yx=(detail["height"], detail["width"]), dtype="uint8" if detail["bit_depth"] <= 8 else "uint16",
        plate=(detail["n_rows"], detail["n_cols"]), bit_depth=detail["bit_depth"],
        unlisted=unlisted_files(folder, every_file, IMAGE_NAME))


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


