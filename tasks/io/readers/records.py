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
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Hashable, Iterable

import numpy as np

from ...errors import InputError, warn
from ..ngff.acquisition import Acquisition, Channel, PlaneTable, row_name
from ..ngff.plane_table import text_column

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


def z_step_from_stage(tb: PlaneTable, source: object) -> float:
    """The median step of each field's own stack (stage z by z index); 1.0 with a warning when no
    field has two planes with stage z; the median, with a warning, when fields disagree. Planes
    without a stage z have NaN in ``tb.z_um``."""
    tb = tb.sorted()  # stacks are runs, in z order
    n_z = len(np.unique(tb.z))
    has = ~np.isnan(tb.z_um)
    if has.any():
        same = np.ones(len(tb) - 1, bool)
        for name in ("row", "col", "field", "t", "c"):
            a = getattr(tb, name)
            same &= a[1:] == a[:-1]
        same &= has[1:] & has[:-1]  # a plane without stage z is no step
        stack = np.r_[0, np.cumsum(~same)]
        diffs = np.abs(np.diff(tb.z_um))[same]
        groups = stack[1:][same]
    else:
        diffs = groups = np.zeros(0)
    steps = _group_medians(diffs, groups)
    if not len(steps):
        if n_z > 1:
            warn(source, "no field has two z planes with stage z; z step assumed 1.0 micrometer")
        return 1.0
    steps.sort()
    step = float(steps[len(steps) // 2])
    if step <= 0:
        warn(source, "fields' stage z does not change between planes; z step assumed 1.0 micrometer")
        return 1.0
    if steps[-1] - steps[0] > 0.01 * step:
        warn(source, f"fields' z steps differ ({steps[0]:g}..{steps[-1]:g} micrometer); using the median {step:g}")
    return round(step, 6)


def _group_medians(values: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """The median of ``values`` within each group (``groups`` sorted), as np.median takes it."""
    if not len(values):
        return np.zeros(0)
    order = np.lexsort((values, groups))
    values, groups = values[order], groups[order]
    starts = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])
    counts = np.diff(np.r_[starts, len(values)])
    low, high = starts + (counts - 1) // 2, starts + counts // 2
    return (values[low] + values[high]) / 2

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
    unknown = sorted({str(r.channel) for r in records if r.channel not in channels})
    if unknown:
        raise InputError(f"{source}: records name channels {listed(unknown)} that the metadata does not describe")
    code = {k: i for i, k in enumerate(channels)}
    n = len(records)

    def column(get: Callable[[Record], object], dtype: type) -> np.ndarray:
        return np.fromiter((get(r) for r in records), dtype, n)

    table = PlaneTable(column(lambda r: r.row, np.int64), column(lambda r: r.col, np.int64),
                       column(lambda r: r.field, np.int64), column(lambda r: r.t, np.int64),
                       column(lambda r: code[r.channel], np.int64), column(lambda r: r.z, np.int64),
                       column(lambda r: r.x_um, np.float64), column(lambda r: r.y_um, np.float64),
                       column(lambda r: np.nan if r.z_um is None else r.z_um, np.float64),
                       names=np.array([os.fsencode(r.path) for r in records], dtype=bytes),
                       times=text_column([r.time for r in records]), wells=text_column([r.well_name for r in records]))
    return table_acquisition(table, channels, name=name, source=source, pixel_size_yx=pixel_size_yx,
                             image_shape_yx=image_shape_yx, dtype=dtype, plate=plate, z_step=z_step,
                             bit_depth=bit_depth, unlisted=unlisted)


def table_acquisition(tb: PlaneTable, channels: dict[Hashable, Channel], *, name: str, source: Path,
                      pixel_size_yx: tuple[float, float], image_shape_yx: tuple[int, int], dtype: str,
                      plate: tuple[int, int], z_step: float | None = None, bit_depth: int | None = None,
                      unlisted: list[str] | None = None) -> Acquisition:
    """``to_acquisition`` for planes already in columns: t and z as the instrument numbers them, c
    the position of the plane's channel in ``channels``, z_um NaN where not recorded."""
    if not len(tb):
        raise InputError(f"{source}: no image records")
    tb = tb.sort()  # plate order once, in place (the reader's own table): every check walks runs of it
    n_rows, n_cols = plate
    for what, value in (("pixel size y", pixel_size_yx[0]), ("pixel size x", pixel_size_yx[1])):
        finite(value, what, source, positive=True)
    outside = np.flatnonzero((tb.row < 1) | (tb.row > n_rows) | (tb.col < 1) | (tb.col > n_cols))
    if len(outside):
        i = int(outside[0])
        row, col = int(tb.row[i]), int(tb.col[i])
        raise InputError(f"{source}: {Path(tb.path(i)).name} is in well {row_name(max(row, 1))}{col:02d} "
                         f"(row {row}, column {col}), outside the {n_rows} x {n_cols} plate")
    _refuse_duplicates(tb, channels, source)
    if z_step is None:
        z_step = z_step_from_stage(tb, source)
    else:
        z_step = finite(z_step, "z step", source, positive=True)
    keys = list(channels)
    present = np.unique(tb.c)
    ts, zs = np.unique(tb.t), np.unique(tb.z)
    _warn_absent(tb, source)
    tb = tb.with_columns(t=np.searchsorted(ts, tb.t), c=np.searchsorted(present, tb.c),  # order kept
                         z=np.searchsorted(zs, tb.z), z_um=np.nan_to_num(tb.z_um, nan=0.0), ordered=True)
    acq = Acquisition(name=name, planes=tb, channels=[channels[keys[k]] for k in present.tolist()],
                      pixel_size_yx=pixel_size_yx, z_step=z_step, image_shape_yx=image_shape_yx, dtype=dtype,
                      n_rows=n_rows, n_cols=n_cols, bit_depth=bit_depth, source=str(source))
    acq.unlisted = sorted(unlisted or [])
    return acq


def _refuse_duplicates(tb: PlaneTable, channels: dict[Hashable, Channel], source: object) -> None:
    """Two records for one (well, field, t, channel, z): one line naming both files, the earlier
    record first (``tb`` in plate order, equal keys in record order)."""
    same = np.ones(max(len(tb) - 1, 0), bool)
    for name in ("row", "col", "field", "t", "c", "z"):
        a = getattr(tb, name)
        same &= a[1:] == a[:-1]
    dup = np.flatnonzero(same)
    if len(dup):
        i, j = int(dup[0]), int(dup[0]) + 1
        channel = list(channels)[int(tb.c[i])]
        raise InputError(f"{source}: {Path(tb.path(i)).name} and {Path(tb.path(j)).name} are both well "
                         f"{row_name(int(tb.row[i]))}{int(tb.col[i]):02d}, field {int(tb.field[i])}, time point "
                         f"{int(tb.t[i])}, channel {channel}, z {int(tb.z[i])}: one plane, two files")


def _warn_absent(tb: PlaneTable, source: object) -> None:
    """Fields with fewer planes than their well's own (t x c x z) grid: those planes are written as
    zeros. A well imaged with other channels or time points than its neighbours is not short: it
    is its own plate acquisition (``Acquisition.parts``)."""
    tb = tb.sorted()
    wells = tb.boundaries("row", "col")
    fields = tb.boundaries("row", "col", "field")
    counts = np.diff(fields)
    # the planes of the well's own (t x c x z) grid, for each well
    grids = np.array([math.prod(len(np.unique(getattr(tb, n)[a:b])) for n in ("t", "c", "z"))
                      for a, b in zip(wells[:-1].tolist(), wells[1:].tolist())], dtype=np.int64)
    grid_of_field = grids[np.searchsorted(wells, fields[:-1], side="right") - 1]
    short = [f"{row_name(int(tb.row[a]))}{int(tb.col[a]):02d} field {int(tb.field[a])} ({g - n} of {g})"
             for a, n, g in zip(fields[:-1].tolist(), counts.tolist(), grid_of_field.tolist()) if n < g]
    if short:
        warn(source, f"{len(short)} fields lack planes the others have, written as zeros: {listed(short)}")

def unlisted_files(folder: Path, named: Iterable[Path], image_name: re.Pattern[str], depth: int = 2) -> list[str]:
    """Instrument-named image files in ``folder`` (and ``depth`` levels below) that no record names."""
    base = Path(folder).resolve()
    names = [os.fsencode(os.path.relpath(Path(p).resolve(), base)) for p in named]
    return unlisted_names(folder, np.array(names or [b""], dtype=bytes)[:len(names)], image_name, depth)


def unlisted_names(folder: Path, names: np.ndarray, image_name: re.Pattern[str], depth: int = 2) -> list[str]:
    """``unlisted_files`` for names relative to ``folder`` (bytes, a column of a ``PlaneTable``):
    one listing and one sorted comparison, never a path object per listed file."""
    found = []
    level = [Path(folder)]
    for _ in range(depth + 1):
        nxt = []
        for d in level:
            with os.scandir(d) as entries:
                for entry in entries:
                    if entry.is_dir():
                        nxt.append(Path(entry.path))
                    elif image_name.search(entry.name):
                        found.append(os.path.relpath(entry.path, folder))
        level = nxt
    if not found:
        return []
    listed_here = np.isin(np.array([os.fsencode(f) for f in found], dtype=bytes), names)
    return sorted(f for f, ok in zip(found, listed_here.tolist()) if not ok)
