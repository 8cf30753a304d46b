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


def read_scanr(folder: Path, pixel_size_yx: tuple[float, float] | None = None,
               plate_shape: tuple[int, int] | None = None) -> Acquisition:
    meta = find_metadata(folder)
    try:
        root = ET.fromstring(meta.read_bytes())
    except ET.ParseError as err:
        raise InputError(f"{meta}: not valid XML ({err})") from err
    ns = root.tag[:root.tag.index("}") + 1] if root.tag.startswith("{") else ""
    plate_el = root.find(ns + "Plate")
    if plate_el is not None and plate_el.get("Rows") and plate_el.get("Columns"):
        shape = (_int(plate_el, "Rows", f"{meta}: <Plate>", 1), _int(plate_el, "Columns", f"{meta}: <Plate>", 1))
    elif plate_shape:
        shape = plate_shape
    else:
        shape = (8, 12)
        warn(meta, "no <Plate Rows Columns>; assumed a 96-well plate (8 x 12) to number wells (set plate_shape)")
    images = root.findall(ns + "Image")
    if not images:
        raise InputError(f"{meta}: no <Image> entries")
    records, channels, px, size, dtype = [], {}, None, None, None
    unplaced: list[str] = []
    for image in images:
        where = f"{meta}: <Image ID={image.get('ID')!r}>"
        match = WELL_POSITION.search(image.get("ID", "") + " " + image.get("Name", ""))
        if not match:
            raise InputError(f"{where}: no W<well>P<position> in its ID or Name")
        well, position = int(match.group(1)), int(match.group(2))
        row, col = divmod(well - 1, shape[1])
        pixels = image.find(ns + "Pixels")
        if pixels is None:
            raise InputError(f"{where}: no <Pixels>")
        if px is None:
            if pixels.get("PhysicalSizeX") is None or pixels.get("PhysicalSizeY") is None:
                warn(meta, "no PhysicalSizeX/Y; pixel size assumed 1.0 micrometer (set pixel_size to the real one)")
                px = (1.0, 1.0)
            else:
                px = (_um(pixels, "PhysicalSizeY", where, True), _um(pixels, "PhysicalSizeX", where, True))
            size = (_int(pixels, "SizeY", where, 1), _int(pixels, "SizeX", where, 1))
            dtype = {"uint8": "uint8", "uint16": "uint16"}.get(pixels.get("Type", ""), None)
            if dtype is None:
                raise InputError(f"{where}: Pixels Type {pixels.get('Type')!r} is not uint8 or uint16")
        for i, ch in enumerate(pixels.findall(ns + "Channel")):
            channels.setdefault(i, Channel(label=ch.get("Name") or f"C{i}",
                                           wavelength_id=ch.get("EmissionWavelength")))
        files = {}
        for td in pixels.findall(ns + "TiffData"):
            uuid = td.find(ns + "UUID")
            if uuid is None or not uuid.get("FileName"):
                raise InputError(f"{where}: <TiffData> without <UUID FileName>")
            files[(_int(td, "FirstT", where), _int(td, "FirstC", where), _int(td, "FirstZ", where))] = uuid.get("FileName")
        planes = pixels.findall(ns + "Plane")
        if any(p.get("PositionX") is None or p.get("PositionY") is None for p in planes):
            unplaced.append(image.get("ID", "?"))
        for plane in planes:
            key = (_int(plane, "TheT", where), _int(plane, "TheC", where), _int(plane, "TheZ", where))
            if key not in files:
                raise InputError(f"{where}: <Plane TheT={key[0]} TheC={key[1]} TheZ={key[2]}> has no <TiffData> file")
            records.append(Record(row=row + 1, col=col + 1, field=position, t=key[0], channel=key[1], z=key[2],
                                  path=relative_file(meta.parent, files[key], where, "TiffData file"),
                                  x_um=_um(plane, "PositionX", where) if plane.get("PositionX") else 0.0,
                                  y_um=-_um(plane, "PositionY", where) if plane.get("PositionY") else 0.0,
                                  z_um=_um(plane, "PositionZ", where) if plane.get("PositionZ") else None))
    if unplaced:
        warn(meta, f"{len(unplaced)} images have planes without PositionX/Y (e.g. {unplaced[0]}); placed at x = y = 0")
    return to_acquisition(records, channels, name=meta.parent.parent.name, source=meta,
                          pixel_size_yx=pixel_size_yx or px, image_shape_yx=size, dtype=dtype, plate=shape,
                          unlisted=unlisted_files(meta.parent, [r.path for r in records], IMAGE_NAME, depth=0))
