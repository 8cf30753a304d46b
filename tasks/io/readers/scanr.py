"""Evident (Olympus) scanR acquisitions: ``data/metadata.ome.xml`` (OME-XML: one ``<Image>`` per
well position, id ``...W<well>P<position>``, its ``<Pixels>`` with physical sizes, ``<Channel
Name>``s, ``<Plane TheZ TheC TheT PositionX/Y/Z>`` and ``<TiffData FirstZ FirstC FirstT>`` naming
each plane's file ``<well>--W<n>--P<n>--Z<n>--T<n>--<channel>.tif``). ``W`` numbers wells row by
row over the plate: its format comes from the XML's ``<Plate Rows Columns>``, else from
``plate_shape`` or 96 wells with a warning line.

Stage y points up the plate, so y is flipped (as Fractal's converter does)."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from ...errors import InputError, InputNotFoundError, warn
from ..ngff.acquisition import Acquisition, Channel
from .folder_scan import FolderScan
from .records import Record, finite, relative_file, to_acquisition, unlisted_files

METADATA = "metadata.ome.xml"
IMAGE_NAME = re.compile(r"--W\d+--P\d+--Z\d+--T\d+--.+\.tiff?$", re.I)
WELL_POSITION = re.compile(r"W(\d+)P(\d+)")
TO_UM = {"m": 1e6, "mm": 1e3, "µm": 1.0, "um": 1.0, "μm": 1.0, "nm": 1e-3}


def claims(found: FolderScan) -> bool:
    return any(f.name == METADATA and f.parent.name == "data" for f in found.files) or bool(
        found.named(lambda n: bool(IMAGE_NAME.search(n))) and found.named(lambda n: n == METADATA))


def find_metadata(folder: Path) -> Path:
    folder = Path(folder)
    if not folder.is_dir():
        raise InputNotFoundError(f"{folder}: scanR folder does not exist")
    for candidate in (folder / "data" / METADATA, folder / METADATA):
        if candidate.is_file():
            return candidate
    found = sorted(folder.glob(f"*/data/{METADATA}")) + sorted(folder.glob(f"*/*/data/{METADATA}"))
    if len(found) == 1:
        return found[0]
    if found:
        raise InputError(f"{folder}: {len(found)} scanR acquisitions; give the folder of one")
    raise InputNotFoundError(f"{folder}: no scanR data/{METADATA} here or below")


def _um(el: ET.Element, name: str, where: str, positive: bool = False) -> float:
    unit = el.get(name + "Unit", "µm")
    if unit == "reference frame":  # the stage's own units: scanR's are micrometer
        unit = "µm"
    if unit not in TO_UM:
        raise InputError(f"{where}: {name}Unit {unit!r} is not one of {', '.join(TO_UM)}")
    return finite(el.get(name), name, where, positive) * TO_UM[unit]


def _int(el: ET.Element, name: str, where: str, low: int = 0) -> int:
    text = el.get(name, "0")
    if not text.strip().isdigit() or int(text) < low:
        raise InputError(f"{where}: {name}={text!r} must be a whole number of at least {low}")
    return int(text)


class _Images:
    """What the <Image> entries say, gathered one image at a time."""

    def __init__(self, meta: Path) -> None:
        self.meta = meta
        self.planes: list[tuple] = []  # (well, position, t, c, z, file, x, y, z_um) per plane
        self.channels: dict[int, Channel] = {}
        self.px: tuple[float, float] | None = None
        self.size: tuple[int, int] | None = None
        self.dtype: str | None = None
        self.unplaced: list[str] = []
        self.count = 0

    def add(self, image: ET.Element, ns: str) -> None:
        meta, self.count = self.meta, self.count + 1
        where = f"{meta}: <Image ID={image.get('ID')!r}>"
        match = WELL_POSITION.search(image.get("ID", "") + " " + image.get("Name", ""))
        if not match:
            raise InputError(f"{where}: no W<well>P<position> in its ID or Name")
        well, position = int(match.group(1)), int(match.group(2))
        pixels = image.find(ns + "Pixels")
        if pixels is None:
            raise InputError(f"{where}: no <Pixels>")
        if self.px is None:
            if pixels.get("PhysicalSizeX") is None or pixels.get("PhysicalSizeY") is None:
                warn(meta, "no PhysicalSizeX/Y; pixel size assumed 1.0 micrometer (set pixel_size to the real one)")
                self.px = (1.0, 1.0)
            else:
                self.px = (_um(pixels, "PhysicalSizeY", where, True), _um(pixels, "PhysicalSizeX", where, True))
            self.size = (_int(pixels, "SizeY", where, 1), _int(pixels, "SizeX", where, 1))
            self.dtype = {"uint8": "uint8", "uint16": "uint16"}.get(pixels.get("Type", ""), None)
            if self.dtype is None:
                raise InputError(f"{where}: Pixels Type {pixels.get('Type')!r} is not uint8 or uint16")
        for i, ch in enumerate(pixels.findall(ns + "Channel")):
            self.channels.setdefault(i, Channel(label=ch.get("Name") or f"C{i}",
                                                wavelength_id=ch.get("EmissionWavelength")))
        files = {}
        for td in pixels.findall(ns + "TiffData"):
            uuid = td.find(ns + "UUID")
            if uuid is None or not uuid.get("FileName"):
                raise InputError(f"{where}: <TiffData> without <UUID FileName>")
            files[(_int(td, "FirstT", where), _int(td, "FirstC", where), _int(td, "FirstZ", where))] = uuid.get("FileName")
        planes = pixels.findall(ns + "Plane")
        if any(p.get("PositionX") is None or p.get("PositionY") is None for p in planes):
            self.unplaced.append(image.get("ID", "?"))
        for plane in planes:
            key = (_int(plane, "TheT", where), _int(plane, "TheC", where), _int(plane, "TheZ", where))
            if key not in files:
                raise InputError(f"{where}: <Plane TheT={key[0]} TheC={key[1]} TheZ={key[2]}> has no <TiffData> file")
            self.planes.append((well, position, *key, relative_file(meta.parent, files[key], where, "TiffData file"),
                                _um(plane, "PositionX", where) if plane.get("PositionX") else 0.0,
                                -_um(plane, "PositionY", where) if plane.get("PositionY") else 0.0,
                                _um(plane, "PositionZ", where) if plane.get("PositionZ") else None))


def _stream(meta: Path) -> tuple[dict[str, str] | None, _Images]:
    """(plate attributes, images): the OME-XML read element by element, each <Image> read and
    cleared at its end, so memory follows the planes kept, not the XML tree of a whole plate."""
    plate: dict[str, str] | None = None
    images = _Images(meta)
    depth = 0
    try:
        for event, el in ET.iterparse(meta, events=("start", "end")):
            depth += 1 if event == "start" else -1
            if event != "end" or depth != 1:
                continue
            ns, name = (el.tag[:el.tag.index("}") + 1], el.tag.rsplit("}", 1)[-1]) if el.tag.startswith("{") else ("", el.tag)
            if name == "Plate" and plate is None:
                plate = dict(el.attrib)
            elif name == "Image":
                images.add(el, ns)
            el.clear()
    except ET.ParseError as err:
        raise InputError(f"{meta}: not valid XML ({err})") from err
    return plate, images


def read_scanr(folder: Path, pixel_size_yx: tuple[float, float] | None = None,
               plate_shape: tuple[int, int] | None = None) -> Acquisition:
    meta = find_metadata(folder)
    plate, images = _stream(meta)
    if plate is not None and plate.get("Rows") and plate.get("Columns"):
        shape = (_int(plate, "Rows", f"{meta}: <Plate>", 1), _int(plate, "Columns", f"{meta}: <Plate>", 1))
    elif plate_shape:
        shape = plate_shape
    else:
        shape = (8, 12)
        warn(meta, "no <Plate Rows Columns>; assumed a 96-well plate (8 x 12) to number wells (set plate_shape)")
    if not images.count:
        raise InputError(f"{meta}: no <Image> entries")
    records = []
    for well, position, t, c, z, path, x, y, z_um in images.planes:
        row, col = divmod(well - 1, shape[1])
        records.append(Record(row=row + 1, col=col + 1, field=position, t=t, channel=c, z=z, path=path,
                              x_um=x, y_um=y, z_um=z_um))
    if images.unplaced:
        warn(meta, f"{len(images.unplaced)} images have planes without PositionX/Y (e.g. {images.unplaced[0]}); "
                   "placed at x = y = 0")
    return to_acquisition(records, images.channels, name=meta.parent.parent.name, source=meta,
                          pixel_size_yx=pixel_size_yx or images.px, image_shape_yx=images.size, dtype=images.dtype,
                          plate=shape, unlisted=unlisted_files(meta.parent, [r.path for r in records], IMAGE_NAME, depth=0))
