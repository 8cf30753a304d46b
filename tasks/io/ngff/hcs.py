"""Write HCS plates: plate/row/column/field layout, plate and well metadata,
per-field images with scale + translation from stage positions, and channel (omero) metadata with
display windows computed from the data."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from .acquisition import Acquisition, Channel, Plane
from .metadata import NGFF_FORMATS, Level, make_axes, write_image_metadata, write_plate_metadata, write_well_metadata
from ..storage.location import zarr_url
from ..storage.handles import writable_url

MAX_CHUNK_SIDE = 1280
MAX_WINDOW_FIELDS = 8
WINDOW_STRIDE = slice(None, None, 4)


def split_side(size: int, max_side: int = MAX_CHUNK_SIDE) -> int:
    """Chunk side = size / n for the smallest n that fits max_side: even chunks, no sliver at the
    edge (2160 -> 1080, 2560 -> 1280, 1000 -> 1000)."""
    n = math.ceil(size / max_side)
    return math.ceil(size / n)


def field_axes(acq: Acquisition) -> str:
    return ("t" if acq.has_t else "") + "czyx"


def field_shape(acq: Acquisition) -> tuple[int, ...]:
    lead = (acq.n_t,) if acq.has_t else ()
    return lead + (acq.n_c, acq.n_z) + tuple(acq.image_shape_yx)


def field_path(row: int, col: int, fld: int, acq: Acquisition) -> str:
    """Path of a field image inside the plate; fields are numbered from 0 in each well."""
    fields = acq.wells()[(row, col)]
    return f"{acq.row_label(row)}/{acq.col_label(col)}/{fields.index(fld)}"


def well_origins(acq: Acquisition) -> dict[tuple[int, int], tuple[float, float]]:
    """(row, col) -> (min y, min x) stage position over the well's fields."""
    return acq.well_origins()


def field_levels(acq: Acquisition, first: Plane, origin: tuple[float, float]) -> list[Level]:
    """Level 0 transforms: pixel sizes, and the field's top-left corner relative to its well."""
    py, px = acq.pixel_size_yx
    lead = [1.0] if acq.has_t else []
    scale = lead + [1.0, acq.z_step, py, px]
    translation = [0.0] * len(lead) + [0.0, 0.0, round(first.y_um - origin[0], 6),
                                         round(first.x_um - origin[1], 6)]
    return [Level("0", scale, translation)]


def omero(channels: list[Channel], windows: list[tuple[float, float, float, float]]) -> dict[str, Any]:
    return {"channels": [{
        "label": ch.label, "color": ch.color, "active": True, "coefficient": 1.0, "family": "linear",
        "inverted": False, **({"wavelength_id": ch.wavelength_id} if ch.wavelength_id else {}),
        "window": {"min": w[0], "max": w[1], "start": w[2], "end": w[3]},
    } for ch, w in zip(channels, windows)]}


def channel_windows(arrays: list[zarr.Array], axes: str, dtype: str, max_arrays: int = MAX_WINDOW_FIELDS
                    ) -> list[tuple[float, float, float, float]]:
    """(min, max, start, end) per channel: the dtype range, and the 0.1-99.9 percentiles of a
    strided sample of the middle plane of up to ``max_arrays`` fields (never the whole image)."""
    n_c = arrays[0].shape[axes.index("c")] if "c" in axes else 1
    samples = []
    for c in range(n_c):
        samples.append([np.asarray(arr[tuple(c if a == "c" else (s // 2 if a in "tz" else WINDOW_STRIDE)
                                             for a, s in zip(axes, arr.shape))])
                        for arr in arrays[:max_arrays]])
    return windows_from_samples(samples, dtype)


def windows_from_samples(samples: list[list[np.ndarray]], dtype: str) -> list[tuple[float, float, float, float]]:
    """Display windows from per-channel samples (each the middle plane of a field, every 4th pixel)."""
    info = np.iinfo(dtype) if np.dtype(dtype).kind in "ui" else np.finfo(dtype)
    out = []
    for per_field in samples:
        lo, hi = np.percentile(np.concatenate([s.ravel() for s in per_field]), [0.1, 99.9])
        out.append((float(info.min), float(info.max), float(lo), float(max(hi, lo + 1))))
    return out


def write_plate(root: Path, acq: Acquisition, version: str, images: dict[str, int], field_count: int,
                parts: list[Acquisition], offsets: dict[str, list[float]]) -> None:
    """Well metadata for every well, then the plate metadata last (it is what makes the store a
    plate). ``images``: field path -> the plate acquisition (``parts``) it belongs to; ``offsets``:
    field path -> its translation in the well (written as the well's scene in 0.6)."""
    wells: dict[str, list[tuple[str, int]]] = {}
    for path, acquisition in images.items():
        well, _, image = path.rpartition("/")
        wells.setdefault(well, []).append((image, acquisition))
    axes = make_axes(field_axes(acq))
    for well, listed in wells.items():
        placed = (axes, {im: offsets[f"{well}/{im}"] for im, _ in listed}) if version == "0.6" else None
        write_well_metadata(root / well, version, [im for im, _ in listed], listed[0][1], placed)
    # The whole plate grid, so viewers place each well at its true plate position.
    rows = [acq.row_label(r) for r in range(1, acq.n_rows + 1)]
    cols = [acq.col_label(c) for c in range(1, acq.n_cols + 1)]
    write_plate_metadata(root, version, rows, cols, list(wells), name=acq.name, field_count=field_count,
                         acquisitions=plate_acquisitions(parts))


def plate_acquisitions(parts: list[Acquisition]) -> list[dict[str, Any]]:
    """NGFF plate acquisitions: one per part of the plate imaged alike."""
    return [{"id": part.acquisition_id, "name": part.acquisition_name or part.name} for part in parts]


def write_field_image(path: Path, acq: Acquisition, version: str, levels: list[Level],
                      windows: list[tuple[float, float, float, float]], extra: dict[str, Any]) -> None:
    write_image_metadata(path, version, make_axes(field_axes(acq)), levels, name=path.name,
                         extra={"omero": omero(acq.channels, windows)}, placed=True)
    group = zarr.open_group(writable_url(path), mode="a", zarr_format=NGFF_FORMATS[version])
    group.attrs["zarrmill"] = extra
