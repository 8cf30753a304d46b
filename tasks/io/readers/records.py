"""The one step every plate reader takes from its instrument's plane records to an ``Acquisition``.

A reader parses what its instrument wrote into ``Record``s (one per image plane, ids as the
instrument numbers them, stage positions already in image orientation and micrometer); this module
checks them the same way for every instrument:

- a record outside the plate, or two records for one plane, is refused naming both files;
- the z step comes from the instrument when it records one, else from each field's own stage z
  (fields focus at their own heights, so the gap between the lowest z of all records is no step);
- planes a field lacks (a channel without some z or t) are listed in one warning line;
- image files in the folder that no record names are listed (``Acquisition.unlisted``; ingest
  refuses them unless ``allow_extra_files``);
- every value it has to assume is a warning line."""
from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Hashable, Iterable

import numpy as np

from ...errors import InputError, warn
from ..ngff.acquisition import Acquisition, Channel, Plane, row_name

MAX_LISTED = 5
# standard plate formats (rows, columns): the smallest that holds every well when none is recorded
PLATE_FORMATS = ((2, 3), (3, 4), (4, 6), (6, 8), (8, 12), (16, 24), (32, 48))


@dataclass(frozen=True, slots=True)
class Record:
    """One image plane as an instrument's metadata lists it."""
    row: int  # 1-based
    col: int  # 1-based
    field: int  # the instrument's field id
    t: int  # the instrument's time point id
    channel: Hashable  # the instrument's channel key (number or name)
    z: int  # the instrument's z index
    path: Path  # absolute, already checked to stay inside the acquisition folder
    x_um: float  # field's top-left corner, image x
    y_um: float  # same, image y (already flipped where the stage counts the other way)
    z_um: float | None = None  # stage z, micrometer, when recorded
    time: str | None = None
    well_name: str | None = None


def listed(names: Iterable[str]) -> str:
    names = list(names)
    shown = ", ".join(names[:MAX_LISTED])
    return shown + (f" and {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else "")


def finite(value: object, what: str, source: object, positive: bool = False) -> float:
    """A finite number (> 0 where ``positive``), else one line naming the file and the field."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or (positive and number <= 0):
        raise InputError(f"{source}: {what}={value!r} must be {'a number > 0' if positive else 'a finite number'}")
    return number


def whole(value: object, what: str, source: object, low: int = 0) -> int:
    """A whole number of at least ``low`` (``"3"``, ``3``, ``3.0``), else one line naming the file and
    the field."""
    try:
        number = float(str(value).strip())
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or number != int(number) or number < low:
        raise InputError(f"{source}: {what}={value!r} must be a whole number of at least {low}")
    return int(number)


def relative_file(folder: Path, name: str, source: object, what: str) -> Path:
    """A file a record names, relative to ``folder``: sub-folders are fine (instruments write
    ``Projection/...`` or ``timepoint1/...``), a path that leaves the folder is refused."""
    parts = [p for p in str(name).replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts or str(name).startswith(("/", "\\")) or ".." in parts or re.match(r"^[A-Za-z]:", str(name)):
        raise InputError(f"{source}: {what} {name!r} must be a path inside {folder} (no '..', no absolute path)")
    return Path(folder).resolve().joinpath(*parts)


def plate_shape_for(records: list[Record], source: object, given: tuple[int, int] | None) -> tuple[int, int]:
    """The plate format when the instrument does not record one: ``given``, else the smallest
    standard plate that holds every well, with a warning line."""
    if given:
        return given
    rows, cols = max(r.row for r in records), max(r.col for r in records)
    shape = next(((r, c) for r, c in PLATE_FORMATS if r >= rows and c >= cols), (max(rows, 32), max(cols, 48)))
    warn(source, f"no plate format recorded; assumed {shape[0] * shape[1]} wells ({shape[0]} x {shape[1]}), the "
                 "smallest that holds every well (set plate_shape to say otherwise)")
    return shape


def z_step_from_stage(records: list[Record], source: object) -> float:
    """The median step of each field's own stack (stage z by z index); 1.0 with a warning when no
    field has two planes with stage z; the median, with a warning, when fields disagree."""
    stacks: dict[tuple, dict[int, float]] = defaultdict(dict)
    for r in records:
        if r.z_um is not None:
            stacks[(r.row, r.col, r.field, r.t, r.channel)][r.z] = r.z_um
    steps = [float(np.median(np.abs(np.diff([p[z] for z in sorted(p)])))) for p in stacks.values() if len(p) > 1]
    n_z = len({r.z for r in records})
    if not steps:
        if n_z > 1:
            warn(source, "no field has two z planes with stage z; z step assumed 1.0 micrometer")
        return 1.0
    steps.sort()
    step = steps[len(steps) // 2]
    if step <= 0:
        warn(source, "fields' stage z does not change between planes; z step assumed 1.0 micrometer")
        return 1.0
    if steps[-1] - steps[0] > 0.01 * step:
        warn(source, f"fields' z steps differ ({steps[0]:g}..{steps[-1]:g} micrometer); using the median {step:g}")
    return round(step, 6)


def keep_stacks(records: list[Record], is_projection: Callable[[Record], bool], only: bool,
                source: object) -> list[Record]:
    """Projections beside stacks: ``only`` keeps the projections alone (a plate of its own); else a
    channel with a stack keeps the stack and drops its projection, and a channel acquired as a
    projection only keeps that (one plane)."""
    projections = [r for r in records if is_projection(r)]
    if only:
        if not projections:
            raise InputError(f"{source}: no z projections here; leave projections at skip")
        return projections
    stacked = {r.channel for r in records if not is_projection(r)}
    kept = [r for r in records if not is_projection(r) or r.channel not in stacked]
    if len(kept) < len(records):
        warn(source, f"{len(records) - len(kept)} z projections left out (their channels have the stack; "
                     "projections: only ingests them as a plate of their own)")
    return kept


def to_acquisition(records: list[Record], channels: dict[Hashable, Channel], *, name: str, source: Path,
                   pixel_size_yx: tuple[float, float], image_shape_yx: tuple[int, int], dtype: str,
                   plate: tuple[int, int], z_step: float | None = None, bit_depth: int | None = None,
                   unlisted: list[str] | None = None) -> Acquisition:
    """The shared checks (module doc) and the ``Acquisition`` ingest writes; ``channels`` maps each
    instrument channel key to its description, in output order."""
    if not records:
        raise InputError(f"{source}: no image records")
    n_rows, n_cols = plate
    for what, value in (("pixel size y", pixel_size_yx[0]), ("pixel size x", pixel_size_yx[1])):
        finite(value, what, source, positive=True)
    outside = next((r for r in records if not (1 <= r.row <= n_rows and 1 <= r.col <= n_cols)), None)
    if outside:
        raise InputError(f"{source}: {outside.path.name} is in well {row_name(max(outside.row, 1))}{outside.col:02d} "
                         f"(row {outside.row}, column {outside.col}), outside the {n_rows} x {n_cols} plate")
    unknown = sorted({str(r.channel) for r in records if r.channel not in channels})
    if unknown:
        raise InputError(f"{source}: records name channels {listed(unknown)} that the metadata does not describe")
    seen: dict[tuple, Path] = {}
    for r in records:
        key = (r.row, r.col, r.field, r.t, r.channel, r.z)
        if key in seen:
            raise InputError(f"{source}: {seen[key].name} and {r.path.name} are both well "
                             f"{row_name(r.row)}{r.col:02d}, field {r.field}, time point {r.t}, channel {r.channel}, "
                             f"z {r.z}: one plane, two files")
        seen[key] = r.path
    if z_step is None:
        z_step = z_step_from_stage(records, source)
    else:
        z_step = finite(z_step, "z step", source, positive=True)
    ts, zs = sorted({r.t for r in records}), sorted({r.z for r in records})
    keys = [k for k in channels if any(r.channel == k for r in records)]
    _warn_absent(records, source)
    planes = [Plane(row=r.row, col=r.col, field=r.field, t=ts.index(r.t), c=keys.index(r.channel), z=zs.index(r.z),
                    path=str(r.path), x_um=r.x_um, y_um=r.y_um, z_um=r.z_um or 0.0, time=r.time,
                    well_name=r.well_name) for r in records]
    acq = Acquisition(name=name, planes=planes, channels=[channels[k] for k in keys], pixel_size_yx=pixel_size_yx,
                      z_step=z_step, image_shape_yx=image_shape_yx, dtype=dtype, n_rows=n_rows, n_cols=n_cols,
                      bit_depth=bit_depth, source=str(source))
    acq.unlisted = sorted(unlisted or [])
    return acq


def _warn_absent(records: list[Record], source: object) -> None:
    """Fields with fewer planes than their well's own (t x c x z) grid: those planes are written as
    zeros. A well imaged with other channels or time points than its neighbours is not short: it
    is its own plate acquisition (``Acquisition.parts``)."""
    counts: dict[tuple, int] = defaultdict(int)
    grids: dict[tuple, tuple[set, set, set]] = defaultdict(lambda: (set(), set(), set()))
    for r in records:
        counts[(r.row, r.col, r.field)] += 1
        ts, cs, zs = grids[(r.row, r.col)]
        ts.add(r.t), cs.add(r.channel), zs.add(r.z)
    per_well = {well: len(ts) * len(cs) * len(zs) for well, (ts, cs, zs) in grids.items()}
    short = [f"{row_name(k[0])}{k[1]:02d} field {k[2]} ({per_well[k[:2]] - n} of {per_well[k[:2]]})"
             for k, n in sorted(counts.items()) if n < per_well[k[:2]]]
    if short:
        warn(source, f"{len(short)} fields lack planes the others have, written as zeros: {listed(short)}")


def unlisted_files(folder: Path, named: Iterable[Path], image_name: re.Pattern[str], depth: int = 2) -> list[str]:
    """Instrument-named image files in ``folder`` (and ``depth`` levels below) that no record names."""
    named = {Path(p).resolve() for p in named}
    found = []
    level = [Path(folder)]
    for _ in range(depth + 1):
        nxt = []
        for d in level:
            for entry in sorted(d.iterdir()):
                if entry.is_dir():
                    nxt.append(entry)
                elif image_name.search(entry.name) and entry.resolve() not in named:
                    found.append(str(entry.relative_to(folder)))
        level = nxt
    return found
