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
from typing import Callable

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


class _Field:
    """One leaf of an index entry, kept as its text and unit (not the element: a 1536-well index
    holds millions of them)."""
    __slots__ = ("text", "unit")

    def __init__(self, el: ET.Element) -> None:
        self.text, self.unit = el.text, el.get("Unit")

    def get(self, key: str) -> str | None:
        return self.unit if key == "Unit" else None


# what an <Image> is read for: the rest of its fields are not kept
IMAGE_FIELDS = frozenset({"id", "ChannelID", "ChannelName", "MainEmissionWavelength", "URL", "Row", "Col", "FieldID",
                          "TimepointID", "PlaneID", "PositionX", "PositionY", "PositionZ", "AbsTime", "ImageResolutionX",
                          "ImageResolutionY", "ImageSizeX", "ImageSizeY", "MaxIntensity"})


def _children(el: ET.Element, keep: frozenset[str] | None = None) -> dict[str, _Field]:
    fields = ((_local(c.tag), c) for c in el)
    return {name: _Field(c) for name, c in fields if keep is None or name in keep}


def stream_index(index: Path, on_image: Callable[[dict[str, _Field]], None],
                 maps: dict[str, dict[str, _Field]]) -> dict[str, _Field] | None:
    """The plate: the index read element by element; each <Image>'s fields go to ``on_image``,
    each channel <Map> entry into ``maps`` (by ChannelID) as it comes, and the element is cleared,
    so memory follows what the caller keeps, not the XML tree."""
    plate = None
    path: list[str] = []
    try:
        for event, el in ET.iterparse(index, events=("start", "end")):
            name = _local(el.tag)
            if event == "start":
                path.append(name)
                continue
            path.pop()
            parent = path[-1] if path else ""
            if name == "Image" and parent == "Images":
                on_image(_children(el, IMAGE_FIELDS))
            elif name == "Entry" and parent == "Map" and el.get("ChannelID"):
                maps.setdefault(el.get("ChannelID"), {}).update(_children(el))
            elif name == "Plate" and plate is None:
                plate = _children(el)
            else:
                continue
            el.clear()
    except ET.ParseError as err:
        raise InputError(f"{index}: not valid XML ({err})") from err
    return plate


def _text(fields: dict[str, _Field], name: str, where: str) -> str:
    el = fields.get(name)
    if el is None or not (el.text or "").strip():
        raise InputError(f"{where}: <{name}> is missing")
    return el.text.strip()


def _int(fields: dict[str, _Field], name: str, where: str, low: int) -> int:
    text = _text(fields, name, where)
    try:
        value = int(text)
    except ValueError:
        raise InputError(f"{where}: <{name}>{text}</{name}> is not a whole number") from None
    if value < low:
        raise InputError(f"{where}: <{name}>{value}</{name}> must be at least {low}")
    return value


def _um(fields: dict[str, _Field], name: str, where: str, positive: bool = False) -> float:
    el = fields.get(name)
    unit = (el.get("Unit") if el is not None else None) or ""
    if unit not in TO_UM:
        raise InputError(f"{where}: <{name}> unit {unit!r} is not one of {', '.join(TO_UM)}")
    return finite(_text(fields, name, where), name, where, positive) * TO_UM[unit]


class _Records:
    """Each <Image> becomes its Record as it is read; one whose channel fields are in a <Map> not
    read yet waits for the end of the index."""

    def __init__(self, index: Path) -> None:
        self.index = index
        self.maps: dict[str, dict[str, _Field]] = {}  # filled while streaming (Harmony 6+: <Maps> come first)
        self.records: list[Record] = []
        self.channels: dict[str, Channel] = {}
        self.first: tuple[dict[str, _Field], str] | None = None
        self.waiting: list[dict[str, _Field]] = []

    def add(self, fields: dict[str, _Field]) -> None:
        where = f"{self.index}: <Image> {(fields['id'].text or '').strip() if 'id' in fields else '?'}"
        ch = _text(fields, "ChannelID", where)
        if ch not in self.maps and "ChannelName" not in fields and self.waiting is not None:
            self.waiting.append(fields)
            return
        fields = {**self.maps.get(ch, {}), **fields}
        self.first = self.first or (fields, where)
        if ch not in self.channels:
            emission = fields.get("MainEmissionWavelength")
            self.channels[ch] = Channel(label=_text(fields, "ChannelName", where), wavelength_id=str(int(finite(
                emission.text, "MainEmissionWavelength", where))) if emission is not None and emission.text else None)
        path = relative_file(self.index.parent, _text(fields, "URL", where), where, "URL")
        self.records.append(Record(
            row=_int(fields, "Row", where, 1), col=_int(fields, "Col", where, 1), field=_int(fields, "FieldID", where, 1),
            t=_int(fields, "TimepointID", where, 0), channel=ch, z=_int(fields, "PlaneID", where, 1), path=path,
            x_um=_um(fields, "PositionX", where), y_um=-_um(fields, "PositionY", where),
            z_um=_um(fields, "PositionZ", where) if "PositionZ" in fields else None,
            time=(fields["AbsTime"].text or "").strip() or None if "AbsTime" in fields else None))

    def finish(self) -> None:
        waiting, self.waiting = self.waiting, None
        for fields in waiting or []:
            self.add(fields)


def read_operetta(folder: Path, pixel_size_yx: tuple[float, float] | None = None) -> Acquisition:
    index = find_index(folder)
    read = _Records(index)
    plate = stream_index(index, read.add, read.maps)
    read.finish()
    if not read.records:
        raise InputError(f"{index}: no <Images><Image> entries")
    if plate is None:
        raise InputError(f"{index}: no <Plates><Plate> with PlateRows and PlateColumns")
    shape = (_int(plate, "PlateRows", f"{index}: <Plate>", 1), _int(plate, "PlateColumns", f"{index}: <Plate>", 1))
    records, channels = read.records, read.channels
    assert read.first is not None
    fields, where = read.first
    px = pixel_size_yx or (_um(fields, "ImageResolutionY", where, True), _um(fields, "ImageResolutionX", where, True))
    size = (_int(fields, "ImageSizeY", where, 1), _int(fields, "ImageSizeX", where, 1))
    max_intensity = _int(fields, "MaxIntensity", where, 1) if "MaxIntensity" in fields else 65535
    ordered = {k: channels[k] for k in sorted(channels, key=lambda c: int(c) if c.isdigit() else c)}
    return to_acquisition(records, ordered, name=index.parent.parent.name if index.parent.name == "Images" else index.parent.name,
                          source=index, pixel_size_yx=px, image_shape_yx=size,
                          dtype="uint8" if max_intensity <= 256 else "uint16", plate=shape,
                          unlisted=unlisted_files(index.parent, [r.path for r in records], IMAGE_NAME, depth=0))
