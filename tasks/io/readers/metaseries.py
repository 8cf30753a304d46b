"""The one parser for Molecular Devices MetaXpress folders, shared by the plate export with an
``.HTD`` (imagexpress.py) and the folders the instrument writes as it acquires (metaxpress.py):

    [TimePoint_<t>/][ZStep_<z>/]<name>_<well>[_s<site>][_w<wave>]<UUID>.tif
    files beside ZStep_ folders are z projections; ..._thumb<UUID>.tif are previews (skipped)

Every TIFF carries MetaMorph (MetaSeries) tags: pixel size (``spatial-calibration-x/y``), stage
position (``stage-position-x/y`` or ``ImageXpress Micro X/Y``, and ``z-position`` or
``ImageXpress Micro Z``, micrometer) and the illumination setting (a channel's name). Stage y is
image y (MetaXpress stages count y down the plate, as image rows do)."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from ...errors import InputError, warn
from ..ngff.acquisition import Acquisition, Channel, row_index
from .planes import plane_header
from .records import Record, keep_stacks, plate_shape_for, to_acquisition

UUID = r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"
# wave is one digit: the UUID that may follow starts with hex digits too
NAME = re.compile(rf"^(?P<plate>.+?)_(?P<well>[A-Za-z]{{1,2}}\d{{2,3}})(?:_s(?P<site>\d+))?(?:_w(?P<wave>\d))?"
                  rf"(?P<thumb>_thumb)?(?P<uuid>{UUID})?\.tiff?$", re.IGNORECASE)
TIMEPOINT = re.compile(r"^TimePoint_(\d+)$", re.IGNORECASE)
ZSTEP = re.compile(r"^ZStep_(\d+)$", re.IGNORECASE)
STAGE = {"x": ("stage-position-x", "ImageXpress Micro X"), "y": ("stage-position-y", "ImageXpress Micro Y"),
         "z": ("z-position", "ImageXpress Micro Z")}


@dataclass(frozen=True)
class File:
    path: Path
    well: str
    site: int
    wave: int
    t: int
    z: int
    projection: bool  # written beside ZStep_ folders


def list_files(plate: Path) -> list[File]:
    """Every image file of the plate folder (thumbnails are never images)."""
    files = []
    has_zsteps: dict[Path, bool] = {}  # per folder, not per file: a TimePoint folder holds thousands
    for f in sorted(plate.rglob("*")):
        m = NAME.match(f.name)
        if not m or m["thumb"] or not f.is_file():
            continue
        parts = f.relative_to(plate).parts[:-1]
        t = next((int(TIMEPOINT.match(p).group(1)) for p in parts if TIMEPOINT.match(p)), 1)
        zs = [int(ZSTEP.match(p).group(1)) for p in parts if ZSTEP.match(p)]
        if f.parent not in has_zsteps:
            has_zsteps[f.parent] = any(ZSTEP.match(d.name) and d.is_dir() for d in f.parent.iterdir())
        files.append(File(f, m["well"].upper(), int(m["site"] or 1), int(m["wave"] or 1), t, zs[0] if zs else 1,
                          not zs and has_zsteps[f.parent]))
    return files


def plane_tags(path: Path) -> dict[str, Any]:
    """The MetaSeries PlaneInfo of a TIFF ({} when it has none)."""
    import tifffile

    try:
        with tifffile.TiffFile(path) as tif:
            meta = tif.metaseries_metadata
    except Exception as err:  # noqa: BLE001 - a damaged TIFF
        raise InputError(f"{path}: cannot read TIFF tags ({type(err).__name__}: {err})") from None
    return (meta or {}).get("PlaneInfo", {}) if isinstance(meta, dict) else {}


def tag_number(tags: dict[str, Any], keys: Iterable[str], path: Path) -> float | None:
    """The first of ``keys`` present, as a finite number; None when none is."""
    for key in keys:
        if key in tags:
            try:
                number = float(tags[key])
            except (TypeError, ValueError):
                raise InputError(f"{path}: MetaSeries tag {key}={tags[key]!r} is not a number") from None
            if not math.isfinite(number):
                raise InputError(f"{path}: MetaSeries tag {key}={tags[key]!r} is not a finite number")
            return number
    return None


def well_rc(well: str) -> tuple[int, int]:
    letters = "".join(c for c in well if c.isalpha())
    return row_index(letters), int(well[len(letters):])


def read_files(files: list[File], *, name: str, source: Path, plate_shape: tuple[int, int] | None,
               wave_names: dict[int, str], projections: bool,
               pixel_size_yx: tuple[float, float] | None) -> Acquisition:
    """Records from file names and tags (each field's position from its first plane; stage z from
    the planes of each field's first stack), then the shared step (records.py)."""
    if not files:
        raise InputError(f"{source}: no MetaXpress images (<name>_<well>[_s<site>][_w<wave>]<UUID>.tif)")
    first: dict[tuple[str, int], File] = {}
    for f in files:
        key = (f.well, f.site)
        if key not in first or (f.projection, f.t, f.wave, f.z) < (first[key].projection, first[key].t, first[key].wave,
                                                                    first[key].z):
            first[key] = f
    tags = {key: plane_tags(f.path) for key, f in first.items()}
    no_stage = [f.path.name for key, f in first.items() if tag_number(tags[key], STAGE["x"], f.path) is None]
    if no_stage:
        warn(source, f"{len(no_stage)} fields have no MetaSeries stage position (e.g. {no_stage[0]}); placed at "
                     "x = y = 0, so a well layout stacks them")
    z_um = {f.path: tag_number(plane_tags(f.path), STAGE["z"], f.path) for f in files
            if not f.projection and (f.t, f.wave) == (first[(f.well, f.site)].t, first[(f.well, f.site)].wave)}
    records = []
    for f in files:
        row, col = well_rc(f.well)
        t = tags[(f.well, f.site)]
        records.append(Record(row=row, col=col, field=f.site, t=f.t, channel=f.wave, z=f.z,
                              path=f.path.resolve(), x_um=tag_number(t, STAGE["x"], f.path) or 0.0,
                              y_um=tag_number(t, STAGE["y"], f.path) or 0.0, z_um=z_um.get(f.path), well_name=f.well))
    by_path = {r.path: f for r, f in zip(records, files)}
    records = keep_stacks(records, lambda r: by_path[r.path].projection, projections, source)
    sample = by_path[records[0].path]
    if pixel_size_yx is None:
        sample_tags = plane_tags(sample.path)
        px = (tag_number(sample_tags, ("spatial-calibration-y",), sample.path),
              tag_number(sample_tags, ("spatial-calibration-x",), sample.path))
        if px[0] is None or px[1] is None:
            warn(sample.path, "no MetaSeries spatial-calibration-x/y tags; pixel size assumed 1.0 micrometer "
                              "(set pixel_size to the real one)")
            px = (px[0] or 1.0, px[1] or 1.0)
        pixel_size_yx = (px[0], px[1])
    waves = sorted({r.channel for r in records})
    channels = {w: Channel(label=wave_names.get(w) or _illumination(files, w) or f"w{w}") for w in waves}
    shape, dtype = plane_header(sample.path)
    return to_acquisition(records, channels, name=name, source=source, pixel_size_yx=pixel_size_yx,
                          image_shape_yx=shape, dtype=dtype,
                          plate=plate_shape_for(records, source, plate_shape))


def _illumination(files: list[File], wave: int) -> str | None:
    f = next(f for f in files if f.wave == wave)
    illum = plane_tags(f.path).get("_IllumSetting_")
    return str(illum) if illum else None
