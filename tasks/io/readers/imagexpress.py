"""Molecular Devices ImageXpress / MetaXpress plate folders as MetaXpress exports them:

    <plate>.HTD                              plate size, sites, wavelengths and their names
    TimePoint_<t>/<plate>_<well>_s<site>_w<wave><UUID>.tif
    TimePoint_<t>/ZStep_<z>/...              z planes; files beside ZStep_ folders are projections
    ..._thumb<UUID>.tif                      thumbnails (skipped)

``_s<site>`` and ``_w<wave>`` are left out when there is one site or one wavelength. Every TIFF
carries MetaMorph (MetaSeries) tags: pixel size (``spatial-calibration-x/y``) and stage position
(``stage-position-x/y``, ``z-position``, micrometer), read with tifffile from the first plane of
each field; channel names come from the HTD (``WaveName<n>``), else from ``_IllumSetting_``.
Stage y is taken as image y (MetaXpress stages count y down the plate, as image rows do)."""
from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import InputError, InputNotFoundError
from ..ngff.acquisition import Acquisition, Channel, Plane, row_index
from .planes import plane_header

UUID = r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"
# wave is one digit: the UUID that may follow starts with hex digits too
NAME = re.compile(rf"^(?P<plate>.+?)_(?P<well>[A-Za-z]{{1,2}}\d{{2,3}})(?:_s(?P<site>\d+))?(?:_w(?P<wave>\d))?"
                  rf"(?P<thumb>_thumb)?(?:{UUID})?\.tiff?$", re.IGNORECASE)
TIMEPOINT = re.compile(r"^TimePoint_(\d+)$", re.IGNORECASE)
ZSTEP = re.compile(r"^ZStep_(\d+)$", re.IGNORECASE)
MAX_DEPTH = 3  # MetaXpress nests plates: <experiment>/<date>/<plate id>/<plate>.HTD


@dataclass(frozen=True)
class File:
    path: Path
    well: str
    site: int
    wave: int
    t: int
    z: int


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


def has_htd(folder: Path) -> bool:
    return any(f.suffix.lower() == ".htd" for d in range(MAX_DEPTH + 1)
               for f in Path(folder).glob("/".join(["*"] * d + ["*"])))


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


def _htd_int(htd: dict[str, list[str]], key: str, path: Path, default: int | None = None) -> int:
    values = htd.get(key)
    if not values:
        if default is None:
            raise InputError(f"{path}: no {key} line")
        return default
    try:
        value = int(values[0])
    except ValueError:
        raise InputError(f"{path}: {key} {values[0]!r} is not a whole number") from None
    if value < 1:
        raise InputError(f"{path}: {key} {value} must be at least 1")
    return value


def list_files(plate: Path, projections: bool = False) -> tuple[list[File], int]:
    """(image files, number of projections skipped); thumbnails are never images. With
    ``projections``: the z projections only (one plane per field, wavelength and time point)."""
    files, skipped = [], 0
    has_zsteps: dict[Path, bool] = {}  # per folder, not per file: a TimePoint folder holds thousands
    for f in sorted(plate.rglob("*")):
        m = NAME.match(f.name)
        if not f.is_file() or not m or m["thumb"]:
            continue
        parts = f.relative_to(plate).parts[:-1]
        t = next((int(TIMEPOINT.match(p).group(1)) for p in parts if TIMEPOINT.match(p)), 1)
        zs = [int(ZSTEP.match(p).group(1)) for p in parts if ZSTEP.match(p)]
        if f.parent not in has_zsteps:
            has_zsteps[f.parent] = any(ZSTEP.match(d.name) and d.is_dir() for d in f.parent.iterdir())
        is_projection = not zs and has_zsteps[f.parent]  # MetaXpress writes it beside the ZStep_ folders
        if is_projection != projections:
            skipped += is_projection
            continue
        files.append(File(f, m["well"].upper(), int(m["site"] or 1), int(m["wave"] or 1), t, zs[0] if zs else 1))
    return files, skipped


def plane_tags(path: Path) -> dict[str, Any]:
    """The MetaSeries PlaneInfo of a TIFF ({} when it has none)."""
    import tifffile

    try:
        with tifffile.TiffFile(path) as tif:
            meta = tif.metaseries_metadata
    except Exception as err:  # noqa: BLE001 - a damaged TIFF
        raise InputError(f"{path}: cannot read TIFF tags ({type(err).__name__}: {err})") from None
    return (meta or {}).get("PlaneInfo", {}) if isinstance(meta, dict) else {}


def _number(tags: dict[str, Any], key: str, path: Path, default: float | None = None) -> float:
    import math

    value = tags.get(key, default)
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError(f"{path}: MetaSeries tag {key}={value!r} is not a number") from None
    if not math.isfinite(number):
        raise InputError(f"{path}: MetaSeries tag {key}={value!r} is not a finite number")
    return number


def read_imagexpress(folder: Path, pixel_size_yx: tuple[float, float] | None, z_step: float | None,
                     projections: bool = False) -> Acquisition:
    """The plate's z planes; with ``projections``, its z projections instead (2D, one per field)."""
    htd_path = find_htd(folder)
    plate = htd_path.parent
    htd = parse_htd(htd_path)
    n_cols, n_rows = _htd_int(htd, "XWells", htd_path), _htd_int(htd, "YWells", htd_path)
    files, _ = list_files(plate, projections)
    if projections and not files:
        raise InputError(f"{plate}: no z projections (files beside TimePoint_N/ZStep_N folders); "
                         f"leave projections at skip")
    if not files:
        raise InputError(f"{plate}: no ImageXpress images (<plate>_<well>[_s<site>][_w<wave>]<UUID>.tif)")
    image_shape_yx, dtype = plane_header(files[0].path)
    waves = sorted({f.wave for f in files})
    ts, zs = sorted({f.t for f in files}), sorted({f.z for f in files})
    first = {}
    for f in files:
        key = (f.well, f.site)
        if key not in first or (f.t, f.z, f.wave) < (first[key].t, first[key].z, first[key].wave):
            first[key] = f
    tags = {key: plane_tags(f.path) for key, f in first.items()}
    sample_path, sample = next(iter(first.values())).path, next(iter(tags.values()))
    if pixel_size_yx is None:
        px = (_number(sample, "spatial-calibration-y", sample_path, 1.0),
              _number(sample, "spatial-calibration-x", sample_path, 1.0))
        if px[0] <= 0 or px[1] <= 0:
            raise InputError(f"{sample_path}: MetaSeries pixel size {px} must be positive")
        pixel_size_yx = px
    if z_step is None:
        z_step = _z_step(files, sample_path)
    planes = []
    seen: dict[tuple, Path] = {}
    for f in files:
        row, col = _well_rc(f.well, n_rows, n_cols, f.path)
        key = (row, col, f.site, f.t, f.wave, f.z)
        if key in seen:
            raise InputError(f"{plate}: {seen[key].name} and {f.path.name} are the same plane (well {f.well}, "
                             f"site {f.site}, wavelength {f.wave}, z {f.z}, time point {f.t})")
        seen[key] = f.path
        t = tags[(f.well, f.site)]
        x, y = _number(t, "stage-position-x", f.path, 0.0), _number(t, "stage-position-y", f.path, 0.0)
        planes.append(Plane(row, col, f.site, ts.index(f.t), waves.index(f.wave), zs.index(f.z), str(f.path.resolve()),
                            x, y, _number(t, "z-position", f.path, 0.0), well_name=f.well))
    names = [_wave_name(htd, w, files) for w in waves]
    return Acquisition(name=htd_path.stem, planes=planes, channels=[Channel(label=n) for n in names],
                       pixel_size_yx=pixel_size_yx, z_step=z_step, image_shape_yx=image_shape_yx, dtype=dtype,
                       n_rows=n_rows, n_cols=n_cols, source=str(htd_path))


def _well_rc(well: str, n_rows: int, n_cols: int, path: Path) -> tuple[int, int]:
    letters = "".join(c for c in well if c.isalpha())
    row, col = row_index(letters), int(well[len(letters):])
    if row > n_rows or col > n_cols:
        raise InputError(f"{path}: well {well} is outside the {n_rows} x {n_cols} plate the HTD describes")
    return row, col


def _z_step(files: list[File], path: Path) -> float:
    """From the z-position tags of two neighbouring planes of one field, else 1."""
    f0 = min(files, key=lambda f: (f.well, f.site, f.t, f.wave, f.z))
    stack = sorted((f for f in files if (f.well, f.site, f.t, f.wave) == (f0.well, f0.site, f0.t, f0.wave)),
                   key=lambda f: f.z)
    if len(stack) < 2:
        return 1.0
    step = abs(_number(plane_tags(stack[1].path), "z-position", stack[1].path, 0.0)
               - _number(plane_tags(stack[0].path), "z-position", stack[0].path, 0.0))
    return round(step, 6) if step > 0 else 1.0


def _wave_name(htd: dict[str, list[str]], wave: int, files: list[File]) -> str:
    name = (htd.get(f"WaveName{wave}") or [""])[0].strip('"')
    if name:
        return name
    f = next(f for f in files if f.wave == wave)
    illum = plane_tags(f.path).get("_IllumSetting_")
    return str(illum) if illum else f"w{wave}"
