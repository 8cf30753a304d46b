"""Ingest's driver side for plates: the acquisition read from an instrument folder or a filename
pattern, its files checked, and kept for the run (read once; saved with the ledger for a resume)."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

from .errors import ConfigError, InputError
from .ingest_params import PATTERN_OPTIONS, Params, refuse_foreign_options
from .io.ngff.acquisition import Acquisition
from .io.readers import saved as saved_acquisition
from .io.readers.pattern import MISSING_PREFIX, pattern_files, read_pattern_series
from .io.readers.planes import plane_header, planes_present
from .io.readers.registry import ReadOptions, reader
from .runtime.core.contract import PlanContext

MAX_LISTED = 5


def read_acquisition(p: Params) -> Acquisition:
    fmt = p.resolved_format()
    plate_reader = reader(fmt)
    refuse_foreign_options(p, fmt, plate_reader.options if plate_reader else PATTERN_OPTIONS.get(fmt, frozenset()))
    if plate_reader is not None:
        shape = tuple(p.plate_shape) if "plate_shape" in p.model_fields_set else None
        acq = plate_reader.read(Path(p.input), ReadOptions(*p.pixel_size_override(), mlf=p.mlf, mrf=p.mrf,
                                                           projections=p.projections == "only", plate_shape=shape))
    else:
        first = next((f for f in sorted(Path(p.input).iterdir()) if f.is_file()), None) if Path(p.input).is_dir() else None
        acq = _read_pattern(p, first)
    return named_acquisition(p, acq)


def named_acquisition(p: Params, acq: Acquisition) -> Acquisition:
    """The well and channel names the parameters ask for."""
    acq.well_names = p.well_names
    if p.channel_names:
        if len(p.channel_names) != acq.n_c:
            raise ConfigError(f"channel_names has {len(p.channel_names)} names but the data has {acq.n_c} channels")
        for ch, name in zip(acq.channels, p.channel_names):
            ch.label = name
    return acq


def _read_pattern(p: Params, first: Path | None) -> Acquisition:
    sample = next((f for f, _ in pattern_files(Path(p.input), p.pattern or "")), first)
    if sample is None:
        raise InputError(f"{p.input}: empty folder")
    shape, dtype = plane_header(sample)
    px = p.pixel_size or [1.0, 1.0]
    z_step = px[0] if len(px) == 3 else 1.0
    acq = read_pattern_series(Path(p.input), p.pattern or "", (px[-2], px[-1]), z_step,
                              Path(p.positions) if p.positions else None, 1, shape, dtype,
                              p.plate_shape[0], p.plate_shape[1], None)
    if not p.positions:  # lay fields out on a grid (documented fallback without positions)
        n_fields = max(len(f) for f in acq.wells().values())
        cols = p.grid_columns or math.ceil(math.sqrt(n_fields))
        acq = read_pattern_series(Path(p.input), p.pattern or "", (px[-2], px[-1]), z_step, None, cols,
                                  shape, dtype, p.plate_shape[0], p.plate_shape[1], None)
    return acq


def validate_files(p: Params, acq: Acquisition, problems: list[str] | None = None) -> np.ndarray:
    """Missing files (error unless missing=zeros), unlisted instrument images, mixed shapes/dtypes;
    whether each plane's file is there (one listing per folder, planes.planes_present). With
    ``problems`` (a dry run), missing files are said there and the plan goes on as with zeros."""
    present = planes_present(acq.table)
    if not present.all() and p.missing == "error":
        absent = np.flatnonzero(~present)  # a plane per file: counted without sorting millions of names
        shown = list(dict.fromkeys(acq.table.paths(absent[:MAX_LISTED * 10])))[:MAX_LISTED]
        missing = absent if len(set(acq.table.paths(absent[:1000]))) == min(len(absent), 1000) else \
            np.unique(acq.table.names[absent])
        what = ("planes are missing from the series" if Path(shown[0]).name.startswith(MISSING_PREFIX)
                else "listed files are missing")
        error = InputError(f"{len(missing)} {what}, e.g. {_names(shown, len(missing))} "
                           f"(set missing: zeros to fill them with zeros, recorded in the metadata)")
        if problems is None:
            raise error
        problems.append(str(error))
    if acq.unlisted and not p.allow_extra_files:
        raise InputError(f"{acq.source}: {len(acq.unlisted)} image files are not listed in this metadata, e.g. "
                         f"{_names(acq.unlisted)} (wrong metadata file? set allow_extra_files: true to ignore them)")
    if p.check_headers:
        expected = (tuple(acq.image_shape_yx), acq.dtype)
        bad = []
        for path in sorted(set(acq.table.paths(np.flatnonzero(present)))):
            found = plane_header(path)
            if (tuple(found[0]), found[1]) != expected:
                bad.append(f"{Path(path).name} {found[0][0]}x{found[0][1]} {found[1]}")
        if bad:
            raise InputError(f"{len(bad)} files differ from the expected {expected[0][0]}x{expected[0][1]} "
                             f"{expected[1]}: {', '.join(bad[:MAX_LISTED])}")
    return present


def _names(paths: list[str], total: int | None = None) -> str:
    total = len(paths) if total is None else total
    shown = ", ".join(Path(x).name for x in paths[:MAX_LISTED])
    return shown + (f" and {total - MAX_LISTED} more" if total > MAX_LISTED else "")


def planned_acquisition(p: Params, ctx: PlanContext) -> Acquisition:
    """The acquisition, read and checked; on a resume with unchanged inputs and parameters, the one
    the first run saved (runtime/core/saved_plan.py), without reading the metadata again."""
    data = ctx.saved.load() if ctx.saved is not None else None
    acq = saved_acquisition.load(data, ctx.saved.key) if data is not None else None
    if acq is not None:
        print(f"[{ctx.step}] plan read from the ledger: inputs and parameters are unchanged", file=sys.stderr)
        return acq
    acq = read_acquisition(p)
    validate_files(p, acq, ctx.problems)
    if ctx.saved is not None:
        ctx.saved.save(saved_acquisition.dump(acq, ctx.saved.key))
    return acq
