"""Open one n-D image file lazily, with its axes in NGFF order (a subsequence of 'tczyx') and the
physical pixel sizes it declares: TIFF / OME-TIFF (tifffile) and .npy (memory-mapped)."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import InputError, InputNotFoundError
from ..ngff.foreign import warn_once
from ..ngff.units import ome_length_to_micrometer

TIFF_AXES = {"T": "t", "C": "c", "S": "c", "Z": "z", "Y": "y", "X": "x", "Q": "z", "I": "z"}
ORDER = "tczyx"


@dataclass
class Volume:
    path: Path
    source: Any  # array-like supporting numpy slicing (np.memmap or zarr view of the TIFF)
    src_axes: str  # axes of ``source``, e.g. 'zcyx'
    pixel_size: dict[str, float] = field(default_factory=dict)  # per spatial axis, micrometer
    _closer: Any = None

    @property
    def axes(self) -> str:
        return "".join(a for a in ORDER if a in self.src_axes)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.source.shape[self.src_axes.index(a)] for a in self.axes)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.source.dtype)

    def read(self, region: list[tuple[int, int]] | None = None) -> np.ndarray:
        """Region in NGFF axis order -> numpy array in NGFF axis order."""
        region = region or [(0, s) for s in self.shape]
        by_axis = dict(zip(self.axes, region))
        src_slices = tuple(slice(*by_axis[a]) for a in self.src_axes)
        data = np.asarray(self.source[src_slices])
        return np.transpose(data, [self.src_axes.index(a) for a in self.axes])

    def close(self) -> None:
        if self._closer is not None:
            self._closer.close()


def open_volume(path: str | Path, axes: str | None = None) -> Volume:
    """``axes`` overrides what the file says (required for .npy of more than 3 dimensions)."""
    path = Path(path)
    if not path.exists():
        raise InputNotFoundError(f"{path}: file not found")
    suffix = "".join(path.suffixes[-2:]).lower() if path.suffix.lower() in {".tif", ".tiff"} else path.suffix.lower()
    if not path.is_file():
        raise InputError(f"{path}: not a regular file (a folder, pipe or device); give an image file")
    if path.suffix.lower() == ".npy":
        return _checked(_open_npy(path, axes))
    if path.suffix.lower() in {".tif", ".tiff", ".btf"}:
        return _checked(_open_tiff(path, axes))
    raise InputError(f"{path}: unsupported file type {suffix!r} (use .tif/.tiff/.ome.tif or .npy)")


def _checked(vol: Volume) -> Volume:
    """Pixels OME-Zarr readers understand: numbers (bool, integers, floats), no empty axis."""
    if vol.dtype.kind not in "biuf":
        raise InputError(f"{vol.path}: pixel type {vol.dtype} is not bool, integer or float; convert the file")
    if 0 in vol.shape:
        raise InputError(f"{vol.path}: shape {list(vol.shape)} has an empty axis; the file holds no pixels")
    return vol


def _open_npy(path: Path, axes: str | None) -> Volume:
    try:
        arr = np.load(path, mmap_mode="r")
    except Exception as err:  # noqa: BLE001 - truncated or foreign file
        raise InputError(f"{path}: not a readable .npy file ({type(err).__name__}: {err})") from err
    default = {2: "yx", 3: "zyx", 4: "czyx", 5: "tczyx"}.get(arr.ndim)
    if axes is None and arr.ndim == 3 and arr.shape[-1] in (3, 4) and min(arr.shape[:2]) > 4:
        default = "yxc"  # an RGB(A) picture (height, width, 3|4), as imageio and PIL hand them over
        warn_once(path, f"shape {list(arr.shape)} read as an RGB{'A' if arr.shape[-1] == 4 else ''} image "
                        "(axes yxc, channels first in the output); pass axes=zyx if it is a volume")
    axes = axes or default
    if axes is None or len(axes) != arr.ndim:
        raise InputError(f"{path}: array has {arr.ndim} dimensions; give axes (e.g. 'czyx') with one letter each")
    _check_axes(path, axes)
    return Volume(path, arr, axes)


def _open_tiff(path: Path, axes: str | None) -> Volume:
    import tifffile
    import zarr

    try:
        tf = tifffile.TiffFile(path)
        series = tf.series[0]
        source = zarr.open(series.aszarr(), mode="r")
    except Exception as err:  # noqa: BLE001 - corrupt TIFF
        raise InputError(f"{path}: cannot read TIFF ({type(err).__name__}: {err})") from err
    src_axes = axes or _tiff_axes(path, series.axes, series.shape)
    _check_axes(path, src_axes)
    sizes = _ome_pixel_sizes(tf.ome_metadata, path) if tf.is_ome else _imagej_pixel_sizes(tf)
    return Volume(path, source, src_axes, sizes, tf)


def _tiff_axes(path: Path, tiff_axes: str, shape: tuple[int, ...]) -> str:
    out = []
    for a, n in zip(tiff_axes, shape):
        mapped = TIFF_AXES.get(a)
        if mapped is None:
            raise InputError(f"{path}: TIFF axis {a!r} (size {n}) has no NGFF meaning; pass axes explicitly")
        out.append(mapped)
    return "".join(out)


def _check_axes(path: Path, axes: str) -> None:
    if len(set(axes)) != len(axes) or any(a not in ORDER for a in axes) or not {"y", "x"} <= set(axes):
        raise InputError(f"{path}: axes {axes!r} must be distinct letters from 'tczyx' including y and x")


def _ome_pixel_sizes(ome_xml: str | None, path: Path) -> dict[str, float]:
    if not ome_xml:
        return {}
    pixels = ET.fromstring(ome_xml).find(".//{*}Pixels")
    if pixels is None:
        return {}
    sizes = {}
    for ax in "zyx":
        value = pixels.get(f"PhysicalSize{ax.upper()}")
        unit = pixels.get(f"PhysicalSize{ax.upper()}Unit", "µm")
        if value is not None:
            size = ome_length_to_micrometer(float(value), unit)
            if size is None:
                warn_once(path, f"OME-XML PhysicalSize{ax.upper()}Unit {unit!r} is not a length; the {ax} pixel "
                                "size is left at 1 (pass pixel_size, micrometer)")
            else:
                sizes[ax] = size
    return sizes


def _imagej_pixel_sizes(tf: Any) -> dict[str, float]:
    sizes = {}
    page = tf.pages[0]
    try:
        num, den = page.tags["XResolution"].value
        if num:
            sizes["x"] = sizes["y"] = den / num
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        pass
    meta = tf.imagej_metadata or {}
    if "spacing" in meta:
        sizes["z"] = float(meta["spacing"])
    return sizes if meta else {}
