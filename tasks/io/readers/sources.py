"""Array sources for tasks that read whole images or cases: .npy, TIFF / OME-TIFF, zarr arrays and
OME-Zarr images (one level). Each gives shape, dtype and ``read(slices)``; axes stay as the input
has them (nnU-Net keeps channels first)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ...errors import InputError, InputNotFoundError
from ..storage.arrays import open_input_array
from ..storage.location import Location, as_location, on_disk

SUPPORTED_KINDS = "biuf"


@dataclass
class Source:
    name: str  # case name, e.g. file stem
    path: Location  # a local Path, or a UPath for a zarr input in a bucket or on a web server
    shape: tuple[int, ...]
    dtype: np.dtype
    read: Callable[[tuple[slice, ...]], np.ndarray]
    pixel_size: dict[str, float]
    axes: str  # NGFF axis names in order, e.g. 'czyx'


def _zarr_source(path: Location, level: int) -> Source:
    from ..ngff.metadata import check_dimensions, level_index, read_attrs, read_image
    from ..ngff.units import ngff_to_micrometer

    attrs, _ = read_attrs(path)
    if "multiscales" in attrs:
        meta = read_image(path)
        lv = meta.levels[level_index(meta, level)]
        arr = open_input_array(path / lv.path)
        check_dimensions(meta, lv, tuple(arr.shape))
        sizes = {ax["name"]: ngff_to_micrometer(s, ax.get("unit"), str(path))  # outputs say micrometer
                 for ax, s in zip(meta.axes, lv.scale) if ax["name"] in "zyx"}
        axes = "".join(meta.axis_names)
    else:
        arr = open_input_array(path)
        sizes, axes = {}, default_axes(arr.ndim)
    name = path.name.split(".")[0]
    return Source(name, path, tuple(arr.shape), np.dtype(arr.dtype), lambda sl: np.asarray(arr[sl]), sizes, axes)


def default_axes(ndim: int) -> str:
    return {2: "yx", 3: "zyx", 4: "czyx", 5: "tczyx"}.get(ndim, "tczyx"[-ndim:])


def open_source(path: str | Location, level: int = 0, axes: str | None = None) -> Source:
    path = as_location(path)
    if on_disk(path) is None:  # a bucket or web server: zarr only
        src = _zarr_source(_remote_zarr(path), level)
    elif not path.exists():
        raise InputNotFoundError(f"{path}: input does not exist")
    elif path.is_dir():
        src = _zarr_source(path, level)
    else:
        from .volume import open_volume

        vol = open_volume(path, axes)
        src = Source(path.name.split(".")[0], path, vol.shape, vol.dtype,
                     lambda sl, vol=vol: vol.read([(s.start, s.stop) for s in sl]), dict(vol.pixel_size), vol.axes)
    if src.dtype.kind not in SUPPORTED_KINDS:
        raise InputError(f"{path}: unsupported dtype {src.dtype} (integers, unsigned, floats or bool)")
    return src


def _remote_zarr(path: Location) -> Location:
    """A URL input must be a zarr array or group: files (.npy, TIFF) and folders of cases are read
    from local paths."""
    if not any((path / name).exists() for name in ("zarr.json", ".zarray", ".zgroup")):
        raise InputNotFoundError(f"{path}: no zarr array or OME-Zarr image there (a URL input must be zarr; "
                                 ".npy and TIFF files and folders of cases are read from local paths)")
    return path


def case_paths(path: str | Location) -> list[Location]:
    """A folder of cases (.npy / .tif files, nnU-Net style) or one input (file, zarr, OME-Zarr)."""
    path = as_location(path)
    if on_disk(path) is None:
        return [_remote_zarr(path)]
    if path.is_dir() and not ((path / "zarr.json").exists() or (path / ".zarray").exists()
                              or (path / ".zgroup").exists()):
        found = sorted(p for p in path.iterdir() if p.suffix.lower() in {".npy", ".tif", ".tiff"})
        if not found:
            raise InputError(f"{path}: no .npy or .tif cases in this folder")
        return found
    if not path.exists():
        raise InputNotFoundError(f"{path}: input does not exist")
    return [path]


def describe(src: Source) -> dict[str, Any]:
    return {"name": src.name, "path": str(src.path), "shape": list(src.shape), "dtype": str(src.dtype)}


def refuse_name_collisions(sources: list[Source]) -> list[Source]:
    """Each case becomes ``<name>.b2nd`` (or ``<name>/``): two files whose names differ only in the
    extension (``case.tif`` and ``case.npy``) would write one output; refused naming both."""
    seen: dict[str, Location] = {}
    for src in sources:
        if src.name in seen:
            raise InputError(f"{seen[src.name]} and {src.path}: both become case {src.name!r} once the "
                             "extension is removed; rename or move one of them")
        seen[src.name] = src.path
    return sources
