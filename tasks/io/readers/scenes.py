"""Microscope formats through bioio (the optional extra ``pip install 'zarrmill[formats]'``):
multi-series OME-TIFF, and CZI, ND2, LIF and the rest wherever their bioio plugin is installed.

Each scene is a field of view. Its well comes first from the file's own well naming: the scene
name (``D6``, ``D06``, ``WellB02``, ``B2-1`` for the first position in B2, ``A/1``); else from the
OME Plate (row and column of the well sample that names the scene's image); else from the carrier
row and column bioio's standard metadata gives, in the base the plugin states (CZI's Shape
RowIndex/ColumnIndex count from 1). A derived well that disagrees with the scene's name is one
warning line naming both (the name wins). Scenes without any are the fields of one well, A01,
placed by their stage positions (a multi-position or tile scan).
Positions: OME ``Plane PositionX/Y`` of the scene's first plane, taken as its top-left corner,
else bioio's ``stage_position_x/y`` (the scene centre, so half a field is subtracted).
Planes are read one at a time (``<file>::<scene>/<t>/<c>/<z>`` references), so memory is one
plane whatever the file's size; each worker thread keeps its own open reader."""
from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import ConfigError, InputError
from ..ngff.acquisition import Acquisition, Channel, Plane, row_index, row_name
from ..ngff.foreign import warn_once
from ..ngff.units import ome_length_to_micrometer

REF = "::"  # <file>::<scene>/<t>/<c>/<z>: one plane of a multi-dimensional file
SUFFIXES = {".czi", ".nd2", ".lif", ".lsm", ".oib", ".oir", ".vsi", ".ims", ".dv", ".sldy", ".lof"}
_local = threading.local()


def bioimage(path: str | Path) -> Any:
    """An open BioImage for this thread (bioio readers keep a current scene: not shareable)."""
    try:
        from bioio import BioImage
    except ImportError:
        raise ConfigError(f"{path}: reading this format needs bioio: pip install 'zarrmill[formats]' "
                          "(and the bioio plugin of the format, e.g. bioio-czi)") from None
    cache = getattr(_local, "images", None)
    if cache is None:
        cache = _local.images = {}
    key = str(Path(path).resolve())
    if key not in cache:
        try:
            cache[key] = BioImage(key)
        except Exception as err:  # noqa: BLE001 - no plugin, damaged file: one line naming it
            raise InputError(f"{path}: bioio cannot read it ({type(err).__name__}: {err}); install the format's "
                             "bioio plugin, or check the file") from None
    return cache[key]


def plane_ref(path: Path, scene: int, t: int, c: int, z: int) -> str:
    return f"{path}{REF}{scene}/{t}/{c}/{z}"


def split_ref(ref: str) -> tuple[Path, tuple[int, int, int, int] | None]:
    if REF not in ref:
        return Path(ref), None
    path, _, index = ref.rpartition(REF)
    s, t, c, z = (int(v) for v in index.split("/"))
    return Path(path), (s, t, c, z)


def read_scene_plane(path: Path, index: tuple[int, int, int, int]) -> np.ndarray:
    s, t, c, z = index
    img = bioimage(path)
    img.set_scene(s)
    return np.asarray(img.get_image_dask_data("YX", T=t, C=c, Z=z))


def is_multi_scene(path: Path) -> bool:
    """A file bioio should read: a format tifffile does not, or an OME-TIFF of several series. A
    TIFF whose structure tifffile cannot read whole (a truncated OME-TIFF loses the OME-XML at its
    end and would pass for one plain image) is refused naming the file."""
    if path.suffix.lower() in SUFFIXES:
        return True
    if path.suffix.lower() in (".tif", ".tiff"):
        import logging

        import tifffile

        problems: list[str] = []

        class _Collect(logging.Handler):  # tifffile logs what it skips instead of raising
            def emit(self, record: logging.LogRecord) -> None:
                problems.append(record.getMessage())

        log, handler = logging.getLogger("tifffile"), _Collect(logging.WARNING)
        level = log.level
        log.setLevel(logging.WARNING)  # the CLI quiets tifffile to ERROR; what it skips is what we need
        log.addHandler(handler)
        try:
            with tifffile.TiffFile(path) as tf:
                n_pages = len(tf.pages)
                multi = bool(tf.is_ome) and len(tf.series) > 1
        except Exception as err:  # noqa: BLE001 - a damaged file is not "a single image"
            problems.append(f"{type(err).__name__}: {err}")
        finally:
            log.removeHandler(handler)
            log.setLevel(level)
        if problems:
            raise InputError(f"{path}: damaged TIFF ({problems[0]}); is the file complete?")
        return multi and n_pages > 0
    return False


def read_scenes(path: Path, pixel_size_yx: tuple[float, float] | None, z_step: float | None) -> Acquisition:
    img = bioimage(path)
    ome = _ome(img)
    wells = _ome_wells(ome)
    first_dims = None
    scenes = []  # (index, derived well, x, y)
    for s, _scene in enumerate(img.scenes):
        img.set_scene(s)
        dims = img.dims
        shape = (dims.T, dims.C, dims.Z, dims.Y, dims.X)
        if first_dims is None:
            first_dims, dtype, sizes = shape, np.dtype(img.dtype), img.physical_pixel_sizes
        elif shape != first_dims or np.dtype(img.dtype) != dtype:
            raise InputError(f"{path}: scene {s} is {list(shape)} {img.dtype} (t, c, z, y, x) but scene 0 is "
                             f"{list(first_dims)} {dtype}; zarrmill writes scenes of one shape as one plate")
        scenes.append((s, wells.get(s) or _standard_well(img, path), *_position(img, ome, s, path, shape, sizes)))
    assert first_dims is not None
    named = _named_wells(path, [str(n) for n in img.scenes], [d for _, d, _, _ in scenes])
    planes: list[Plane] = []
    per_well: dict[tuple[int, int], int] = {}
    for (s, derived, x, y), name in zip(scenes, named):
        row, col = _scene_well(path, img.scenes[s], s, name, derived) or (1, 1)
        per_well[(row, col)] = per_well.get((row, col), 0) + 1
        for t in range(first_dims[0]):
            for c in range(first_dims[1]):
                for z in range(first_dims[2]):
                    planes.append(Plane(row, col, per_well[(row, col)], t, c, z, plane_ref(path, s, t, c, z), x, y,
                                        z * (sizes.Z or 1.0)))
    assert first_dims is not None
    if pixel_size_yx is None:
        if not sizes.Y or not sizes.X:
            warn_once(path, "no physical pixel size in the file; scale is 1 (pass pixel_size, micrometer)")
        pixel_size_yx = (float(sizes.Y or 1.0), float(sizes.X or 1.0))
    img.set_scene(0)
    names = [str(n) for n in (img.channel_names or [])] or [f"C{c}" for c in range(first_dims[1])]
    return Acquisition(name=path.name.split(".")[0], planes=planes, channels=[Channel(label=n) for n in names],
                       pixel_size_yx=pixel_size_yx, z_step=z_step or float(sizes.Z or 1.0),
                       image_shape_yx=(first_dims[3], first_dims[4]), dtype=str(dtype),
                       n_rows=max(8, max(p.row for p in planes)), n_cols=max(12, max(p.col for p in planes)),
                       source=str(path))


def _ome(img: Any) -> Any:
    try:
        return img.ome_metadata
    except Exception:  # noqa: BLE001 - not every plugin can give OME metadata
        return None


def _ome_wells(ome: Any) -> dict[int, tuple[int, int]]:
    """scene index -> (row, column), 1-based, from the OME Plate's well samples."""
    if ome is None or not getattr(ome, "plates", None):
        return {}
    index = {im.id: i for i, im in enumerate(ome.images)}
    out = {}
    for plate in ome.plates:
        for well in plate.wells:
            for sample in well.well_samples:
                if sample.image_ref is not None and sample.image_ref.id in index:
                    out[index[sample.image_ref.id]] = (int(well.row) + 1, int(well.column) + 1)
    return out


# a well name in a scene name: D6, D06, WellB02, Well B2, B2-1 (position 1 of B2), A/1
WELL_NAME = re.compile(r"^\s*(?:well[\s_-]*)?([A-Z]{1,2})[\s_/-]*0*([1-9][0-9]{0,2})(?![0-9])(?:$|[\s_#.:/-])", re.I)
POSITION_NAME = re.compile(r"^P\d+(?:-P\d+)?$")
# the first carrier row/column each plugin gives (bioio standard metadata); CZI: Shape RowIndex and
# ColumnIndex, 1-based (ZEN names the scene of row 4, column 6 "D6"); others are assumed 1-based
CARRIER_BASE = {".czi": 1}


def well_of_name(name: str) -> tuple[int, int] | None:
    """(row, column), 1-based, of a well name inside a scene name, or None."""
    match = WELL_NAME.match(str(name or ""))
    if not match:
        return None
    return row_index(match.group(1)), int(match.group(2))


def _named_wells(path: Path, names: list[str], derived: list[tuple[int, int] | None]) -> list[tuple[int, int] | None]:
    """Each scene's well by its name. ZEN's position names (``P1``, ``P2``; bioio may join the
    shape's name: ``P1-P1``) are positions, not wells of row P, unless the carrier agrees."""
    out = []
    for name, carrier in zip(names, derived):
        well = well_of_name(name)
        if well and POSITION_NAME.match(name.strip()) and well != carrier:
            well = None
        out.append(well)
    return out


def _scene_well(path: Path, scene: Any, s: int, named: tuple[int, int] | None,
                derived: tuple[int, int] | None) -> tuple[int, int] | None:
    if named and derived and named != derived:
        warn_once(path, f"scene {s} is named {str(scene)!r} (well {_label(named)}) but its derived plate position "
                        f"says well {_label(derived)}; using the scene's own name")
    return named or derived


def _label(well: tuple[int, int]) -> str:
    return f"{row_name(well[0])}{well[1]:02d}"


def _standard_well(img: Any, path: Path) -> tuple[int, int] | None:
    """The carrier row and column bioio gives: a row letter, or a number in the plugin's base."""
    md = getattr(img, "standard_metadata", None)
    row, col = getattr(md, "row", None), getattr(md, "column", None)
    if row is None or col is None:
        return None
    row, col = str(row).strip(), str(col).strip()
    base = CARRIER_BASE.get(path.suffix.lower(), 1)
    if not (row.isalpha() or row.isdigit()) or not col.isdigit():
        return None
    r = row_index(row) if row.isalpha() else int(row) + 1 - base
    return (r, int(col) + 1 - base) if r >= 1 and int(col) + 1 - base >= 1 else None


def _position(img: Any, ome: Any, s: int, path: Path, shape: tuple[int, ...], sizes: Any) -> tuple[float, float]:
    if ome is not None and s < len(ome.images):
        planes = ome.images[s].pixels.planes
        if planes and planes[0].position_x is not None and planes[0].position_y is not None:
            p = planes[0]
            x = ome_length_to_micrometer(float(p.position_x), _unit(p.position_x_unit))
            y = ome_length_to_micrometer(float(p.position_y), _unit(p.position_y_unit))
            if x is not None and y is not None:
                return x, y
    md = getattr(img, "standard_metadata", None)
    cx, cy = getattr(md, "stage_position_x", None), getattr(md, "stage_position_y", None)
    if cx is not None and cy is not None:  # the scene's centre
        return float(cx) - shape[4] * float(sizes.X or 1.0) / 2, float(cy) - shape[3] * float(sizes.Y or 1.0) / 2
    return 0.0, 0.0


def _unit(unit: Any) -> str:
    return str(getattr(unit, "value", unit) or "µm")
