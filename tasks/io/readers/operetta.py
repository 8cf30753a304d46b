"""Revvity (PerkinElmer) Opera Phenix / Operetta CLS measurements as Harmony exports them:
``Images/Index.idx.xml`` (Harmony 4-5) or ``Images/Index.xml`` (Harmony 6-7) beside one TIFF per
plane. The namespace differs by version (``.../PEHH/HarmonyV5``, ``HarmonyV6``, Harmony 7's
GUID-prefixed one), so elements are matched by local name. Per ``<Image>``: URL, Row, Col,
FieldID, PlaneID (1-based), TimepointID (0-based), ChannelID, ChannelName,
MainEmissionWavelength, ImageResolutionX/Y, ImageSizeX/Y, MaxIntensity and PositionX/Y/Z, each with
its unit (usually metre); channel fields missing on an image come from ``<Maps>`` entries of its
ChannelID (Harmony 6+). The plate format is ``Plates/Plate/PlateRows, PlateColumns``.

Positions are offsets from the well centre with y pointing up the plate, so y is flipped (as
Fractal's converter does); fields keep their positions relative to each other."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from ...errors import InputError, InputNotFoundError
from ..ngff.acquisition import Acquisition, Channel
from .folder_scan import FolderScan
from .records import Record, finite, relative_file, to_acquisition, unlisted_files

INDEX_NAMES = ("Index.idx.xml", "Index.xml")
IMAGE_NAME = re.compile(r"^r\d+c\d+f\d+p\d+-ch\d+.*\.tiff?$", re.I)
TO_UM = {"m": 1e6, "mm": 1e3, "um": 1.0, "µm": 1.0, "μm": 1.0, "micron": 1.0, "nm": 1e-3}


def claims(found: FolderScan) -> bool:
    return bool(found.named(lambda n: n in INDEX_NAMES))


def find_index(folder: Path) -> Path:
    folder = Path(folder)
    if not folder.is_dir():
        raise InputNotFoundError(f"{folder}: Harmony export folder does not exist")
    for depth in range(4):
        found = sorted(f for name in INDEX_NAMES for f in folder.glob("/".join(["*"] * depth + [name])))
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise InputError(f"{folder}: {len(found)} Harmony index files ({', '.join(str(f.relative_to(folder)) for f in found[:5])}); "
                             "give the folder of one measurement")
    raise InputNotFoundError(f"{folder}: no Harmony Index.idx.xml or Index.xml here or 3 levels below")


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _children(el: ET.Element) -> dict[str, ET.Element]:
    return {_local(c.tag): c for c in el}


def _text(fields: dict[str, ET.Element], name: str, where: str) -> str:
    el = fields.get(name)
    if el is None or not (el.text or "").strip():
        raise InputError(f"{where}: <{name}> is missing")
    return el.text.strip()


def _int(fields: dict[str, ET.Element], name: str, where: str, low: int) -> int:
    text = _text(fields, name, where)
    try:
        value = int(text)
    except ValueError:
        raise InputError(f"{where}: <{name}>{text}</{name}> is not a whole number") from None
    if value < low:
        raise InputError(f"{where}: <{name}>{value}</{name}> must be at least {low}")
    return value


def _um(fields: dict[str, ET.Element], name: str, where: str, positive: bool = False) -> float:
    el = fields.get(name)
    unit = (el.get("Unit") if el is not None else None) or ""
    if unit not in TO_UM:
        raise InputError(f"{where}: <{name}> unit {unit!r} is not one of {', '.join(TO_UM)}")
    return finite(_text(fields, name, where), name, where, positive) * TO_UM[unit]


def read_operetta(folder: Path, pixel_size_yx: tuple[float, float] | None = None) -> Acquisition:
    index = find_index(folder)
    try:
        root = ET.fromstring(index.read_bytes())
    except ET.ParseError as err:
        raise InputError(f"{index}: not valid XML ({err})") from err
    top = _children(root)
    images = [el for el in (top["Images"] if "Images" in top else []) if _local(el.tag) == "Image"]
    if not images:
        raise InputError(f"{index}: no <Images><Image> entries")
    maps: dict[str, dict[str, ET.Element]] = {}  # ChannelID -> fields (Harmony 6+ keeps them here)
    for entry in (e for m in root.iter() if _local(m.tag) == "Map" for e in m):
        if entry.get("ChannelID"):
            maps.setdefault(entry.get("ChannelID"), {}).update(_children(entry))
    plate_el = next((p for p in root.iter() if _local(p.tag) == "Plate"), None)
    if plate_el is None:
        raise InputError(f"{index}: no <Plates><Plate> with PlateRows and PlateColumns")
    plate = _children(plate_el)
    shape = (_int(plate, "PlateRows", f"{index}: <Plate>", 1), _int(plate, "PlateColumns", f"{index}: <Plate>", 1))
    records, channels, first = [], {}, None
    for el in images:
        fields = _children(el)
        where = f"{index}: <Image> {(fields['id'].text or '').strip() if 'id' in fields else '?'}"
        ch = _text(fields, "ChannelID", where)
        fields = {**maps.get(ch, {}), **fields}
        first = first or (fields, where)
        if ch not in channels:
            emission = fields.get("MainEmissionWavelength")
            channels[ch] = Channel(label=_text(fields, "ChannelName", where),
                                   wavelength_id=str(int(float(emission.text))) if emission is not None and emission.text else None)
        path = relative_file(index.parent, _text(fields, "URL", where), where, "URL")
        records.append(Record(row=_int(fields, "Row", where, 1), col=_int(fields, "Col", where, 1),
                              field=_int(fields, "FieldID", where, 1), t=_int(fields, "TimepointID", where, 0),
                              channel=ch, z=_int(fields, "PlaneID", where, 1), path=path,
                              x_um=_um(fields, "PositionX", where), y_um=-_um(fields, "PositionY", where),
                              z_um=_um(fields, "PositionZ", where) if "PositionZ" in fields else None,
                              time=(fields["AbsTime"].text or "").strip() or None if "AbsTime" in fields else None))
    fields, where = first
    px = pixel_size_yx or (_um(fields, "ImageResolutionY", where, True), _um(fields, "ImageResolutionX", where, True))
    size = (_int(fields, "ImageSizeY", where, 1), _int(fields, "ImageSizeX", where, 1))
    max_intensity = _int(fields, "MaxIntensity", where, 1) if "MaxIntensity" in fields else 65535
    ordered = {k: channels[k] for k in sorted(channels, key=lambda c: int(c) if c.isdigit() else c)}
    return to_acquisition(records, ordered, name=index.parent.parent.name if index.parent.name == "Images" else index.parent.name,
                          source=index, pixel_size_yx=px, image_shape_yx=size,
                          dtype="uint8" if max_intensity <= 256 else "uint16", plate=shape,
                          unlisted=unlisted_files(index.parent, [r.path for r in records], IMAGE_NAME, depth=0))
