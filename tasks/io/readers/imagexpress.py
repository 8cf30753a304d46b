"""Molecular Devices ImageXpress / MetaXpress plate exports with an ``.HTD`` plate file (plate
size, sites, wavelength names), laid out as MetaXpress writes them (metaseries.py):

    <plate>.HTD
    TimePoint_<t>/[ZStep_<z>/]<plate>_<well>[_s<site>][_w<wave>]<UUID>.tif

The HTD gives the plate format and channel names (``WaveName<n>``); everything else comes from
file names and MetaSeries tags, as for folders without one (metaxpress.py)."""
from __future__ import annotations

import csv
from pathlib import Path

from ...errors import InputError, InputNotFoundError
from ..ngff.acquisition import Acquisition
from .folder_scan import FolderScan
from .metaseries import list_files, read_files

MAX_DEPTH = 3  # MetaXpress nests plates: <experiment>/<date>/<plate id>/<plate>.HTD


def claims(found: FolderScan) -> bool:
    return bool(found.named(lambda n: n.lower().endswith(".htd")))


def find_htd(folder: Path) -> Path:
    folder = Path(folder)
    if not folder.is_dir():
        raise InputNotFoundError(f"{folder}: ImageXpress plate folder does not exist")
    for depth in range(MAX_DEPTH + 1):
        found = sorted(f for f in folder.glob("/".join(["*"] * depth + ["*"])) if f.suffix.lower() == ".htd")
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise InputError(f"{folder}: {len(found)} .HTD plate files ({', '.join(f.name for f in found[:5])}); "
                             "give the folder of one plate")
    raise InputNotFoundError(f"{folder}: no ImageXpress .HTD plate file here or {MAX_DEPTH} levels below")


def parse_htd(path: Path) -> dict[str, list[str]]:
    """``"Key", value, value`` lines -> {key: [values]} (quotes removed)."""
    out: dict[str, list[str]] = {}
    try:
        text = path.read_text(encoding="latin-1")
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from None
    for row in csv.reader(text.splitlines(), skipinitialspace=True):
        if row:
            out[row[0].strip()] = [v.strip() for v in row[1:]]
    if "XWells" not in out or "YWells" not in out:
        raise InputError(f"{path}: not an ImageXpress HTD file (no XWells/YWells lines)")
    return out


def _htd_int(htd: dict[str, list[str]], key: str, path: Path) -> int:
    values = htd.get(key)
    if not values:
        raise InputError(f"{path}: no {key} line")
    try:
        value = int(values[0])
    except ValueError:
        raise InputError(f"{path}: {key} {values[0]!r} is not a whole number") from None
    if value < 1:
        raise InputError(f"{path}: {key} {value} must be at least 1")
    return value


def read_imagexpress(folder: Path, pixel_size_yx: tuple[float, float] | None = None,
                     projections: bool = False) -> Acquisition:
    """The plate's z planes; with ``projections``, its z projections instead (2D, one per field)."""
    htd_path = find_htd(folder)
    htd = parse_htd(htd_path)
    plate = (_htd_int(htd, "YWells", htd_path), _htd_int(htd, "XWells", htd_path))
    names = {int(k[len("WaveName"):]): v[0].strip('"') for k, v in htd.items()
             if k.startswith("WaveName") and k[len("WaveName"):].isdigit() and v and v[0].strip('"')}
    return read_files(list_files(htd_path.parent), name=htd_path.stem, source=htd_path, plate_shape=plate,
                      wave_names=names, projections=projections, pixel_size_yx=pixel_size_yx)
